"""Lesson 1's ceilings (gpulab.roofline.roofs): the spec table, the best of measured candidates, stored results,
the targets."""

import pytest

from gpulab import bench, hardware, roofline
from gpulab.bench import Result


def test_ceilings_from_spec():
    c = roofline.Ceilings.from_spec("H100")
    assert (c.hbm_gbps, c.bf16_tflops, c.fp16_tflops, c.tf32_tflops, c.fp32_tflops) == (3350, 989.4, 989.4, 494.7, 66.9)
    assert c.l2_gbps is None and c.l1_gbps is None  # spec sheets give no cache bandwidths
    assert c.mode == "spec" and c.source.startswith("spec table")
    assert c.ridge("bf16") == pytest.approx(295.34, rel=1e-4)
    assert c.attainable(1, "fp32") == pytest.approx(3.35)
    assert c.attainable(1, "fp32", "L2") is None
    t4 = roofline.Ceilings.from_spec("T4")
    assert t4.bf16_tflops is None and t4.tf32_tflops is None and t4.fp16_tflops == 65.0


def test_ceilings_accessors_reject_unknown_keys():
    c = roofline.Ceilings.from_spec("H100")
    with pytest.raises(ValueError, match="level='L3'"):
        c.bandwidth("L3")
    with pytest.raises(ValueError, match="roof='fp64'"):
        c.compute("fp64")


def test_ceilings_from_results_takes_the_best_candidate(h100_records):
    recs = h100_records()
    c = roofline.Ceilings.from_results(recs)
    assert c.hbm_gbps == pytest.approx(2 * 2**28 * 4 / 0.72e-3 / 1e9)  # the copy kernel, not the peer
    assert c.l2_gbps == pytest.approx(9000)  # the best of two candidates
    assert c.l1_gbps == pytest.approx(25000)
    assert c.bf16_tflops == pytest.approx(780) and c.fp32_tflops == pytest.approx(60)
    assert c.fp16_tflops is None and c.tf32_tflops is None
    assert c.mode == "cuda" and c.source == "measured on NVIDIA H100 80GB HBM3, 2026-01-02"
    assert list(c.records) == recs
    assert c.to_results() == recs
    (hbm, bf16) = roofline.targets(c)
    assert hbm[0] == "HBM ceiling / HBM: torch copy_ (peer)" and hbm[1] == pytest.approx(0.714 / 0.72) and hbm[3]
    assert bf16[1] == pytest.approx(780 / 760) and bf16[3]
    text = c.summary()
    assert "measured on NVIDIA H100 80GB HBM3" in text and "89%" in text  # 2,983 of the 3,350 GB/s spec
    assert "0.99x HBM: torch copy_ (peer)" in text


def test_ceilings_targets_can_fail(h100_records):
    c = roofline.Ceilings.from_results(h100_records(hbm_ms=0.80))  # copy kernel 10% slower than torch
    (hbm, _) = roofline.targets(c)
    assert hbm[1] < 0.97 and not hbm[3]


def test_spec_ceilings_round_trip_through_results():
    c = roofline.Ceilings.from_spec("A100")
    recs = c.to_results()
    assert {r.params["ceiling"] for r in recs} == {"HBM", "fp32", "tf32", "fp16", "bf16"}
    assert all(r.params["synthetic"] for r in recs)
    back = roofline.Ceilings.from_results(recs)
    for key in roofline.MEMORY_LEVELS + roofline.COMPUTE_ROOFS:
        assert back.value(key) == pytest.approx(c.value(key)) if c.value(key) else back.value(key) is None
    assert back.source == c.source and back.mode == "spec"


def test_from_results_needs_an_hbm_ceiling_and_known_keys(h100_records):
    with pytest.raises(ValueError, match="no HBM ceiling"):
        roofline.Ceilings.from_results(h100_records()[2:])
    bad = Result(lesson="01", case="x", ms=1.0, bytes=1.0, params={"ceiling": "L3"})
    with pytest.raises(ValueError, match="'L3'"):
        roofline.Ceilings.from_results(h100_records() + [bad])


def test_ceilings_falls_back_to_the_spec_table(tmp_path):
    c = roofline.ceilings("h100", root=tmp_path)
    assert c.mode == "spec" and c.source.startswith("spec table: NVIDIA H100 SXM5 80GB")
    assert roofline.ceilings(root=tmp_path).device == "NVIDIA H100 SXM5 80GB"  # no GPU here: the H100
    assert roofline.ceilings("T4", root=tmp_path).hbm_gbps == 320
    assert roofline.ceilings(hardware.spec("L4"), root=tmp_path).device == "NVIDIA L4"


def test_ceilings_reads_the_newest_stored_measurement(h100_records, tmp_path, monkeypatch):
    bench.save(h100_records(date="2026-01-02", hbm_ms=0.80), "01", root=tmp_path)
    bench.save(h100_records(date="2026-02-03"), "01", root=tmp_path)
    bench.save(h100_records(date="2026-03-04", device="NVIDIA A100-SXM4-80GB"), "01", root=tmp_path)
    bench.save(
        h100_records(date="2026-04-05", device="CPU (Triton interpreter)", mode="interpreter"), "01", root=tmp_path
    )
    c = roofline.ceilings("h100", root=tmp_path)
    assert c.mode == "cuda" and c.date == "2026-02-03"  # newest H100 file; the A100 and CPU runs are not H100s
    assert c.source == (
        "stored measurement: NVIDIA H100 80GB HBM3, 2026-02-03 (01_roofline/nvidia-h100-80gb-hbm3-2026-02-03.jsonl)"
    )
    assert c.hbm_gbps == pytest.approx(2 * 2**28 * 4 / 0.72e-3 / 1e9)
    assert roofline.ceilings("A100", root=tmp_path).date == "2026-03-04"
    assert roofline.ceilings("H100 PCIe", root=tmp_path).mode == "spec"  # a different table entry
    monkeypatch.setenv("GPULAB_BENCHMARKS", str(tmp_path))
    assert roofline.ceilings().date == "2026-02-03"  # no GPU here: the H100's, found through the env var


def test_ceilings_rejects_unknown_gpu(tmp_path):
    with pytest.raises(ValueError, match="gpu='B9000'"):
        roofline.ceilings("B9000", root=tmp_path)


def test_stored_lesson_1_results_if_present():
    """Once the H100 benchmark is committed, it must be readable, measured, and meet the lesson's targets."""
    try:
        recs = bench.load("01", gpu="h100")
    except FileNotFoundError:
        pytest.skip("no stored lesson-1 results yet (python -m gpulab bench 01 on the H100)")
    c = roofline.ceilings("h100")
    assert c.mode == "cuda" and recs[0].device in c.source
    assert all(c.value(k) for k in roofline.MEMORY_LEVELS + roofline.COMPUTE_ROOFS)
    assert [met for _, _, _, met in roofline.targets(c)] == [True, True]
