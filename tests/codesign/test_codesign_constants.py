"""Lesson 2's measured constants (gpulab.codesign.model_constants): read from the newest stored K sweep, never typed,
with a documented fallback where no run is stored. Planted records change them; no records give the fallback."""

import math

import pytest

from gpulab import bench, codesign, hardware

EFF = 2048 / (16 * 132)  # 8192 x 8192 in 128 x 256 tiles: 2048 tiles, 16 waves on 132 SMs


def _k_case(k, tflops, status="ok", n=8192, dtype="bfloat16"):
    flops = 2.0 * 8192 * n * k
    r = bench.record(lesson="02", case="K sweep, torch.matmul (cuBLAS)", ms=flops / (tflops * 1e9), flops=flops,
                     dtype=dtype, shape=[8192, n, k], sweep="K", x=k, impl="torch.matmul (cuBLAS)")  # fmt: skip
    r.status = status
    return r


def _plant(root, rows, date="2030-01-01"):
    folder = root / "02_codesign"
    folder.mkdir(exist_ok=True)
    bench.save(rows, "02", path=folder / f"nvidia-h100-80gb-hbm3-{date}.jsonl")


def test_planted_sweep_gives_the_constants_by_hand(tmp_path):
    # aligned rates per unit efficiency 700, 760, 800 -> median 760; 4095 at a fifth of it, 4094 at 0.4
    rows = [_k_case(k, rate * EFF) for k, rate in ((4032, 700), (4096, 760), (4160, 800))]
    rows += [_k_case(4095, 760 * EFF / 5), _k_case(4094, 760 * EFF / 2.5)]
    rows += [_k_case(4104, 100.0), _k_case(4097, 1.0, status="failed")]  # a partial K-step and a failed check: unused
    _plant(tmp_path, rows)
    c = codesign.model_constants(root=tmp_path)
    assert c.peak_fraction == pytest.approx(760 / hardware.spec("H100").tensor_tflops["bfloat16"])
    assert c.misaligned_penalty == pytest.approx(5 * (4095 / 4096))  # the model charges the K-step fill apart
    assert c.partially_aligned_penalty == pytest.approx(2.5 * (4094 / 4096))
    assert "nvidia-h100-80gb-hbm3-2030-01-01.jsonl" in c.source and "device time" in c.source
    assert "4032, 4096, 4160" in c.describe() and "4095" in c.describe() and "4097" not in c.describe()


def test_a_newer_run_changes_the_constants(tmp_path):
    _plant(tmp_path, [_k_case(4096, 700 * EFF), _k_case(4095, 100 * EFF), _k_case(4092, 350 * EFF)], "2030-01-01")
    old = codesign.model_constants(root=tmp_path)
    _plant(tmp_path, [_k_case(4096, 600 * EFF), _k_case(4095, 200 * EFF), _k_case(4092, 200 * EFF)], "2030-02-01")
    new = codesign.model_constants(root=tmp_path)
    assert (old.misaligned_penalty, old.partially_aligned_penalty) == pytest.approx(
        (7.0 * 4095 / 4096, 2.0 * 4092 / 4096)
    )
    assert (new.misaligned_penalty, new.partially_aligned_penalty) == pytest.approx(
        (3.0 * 4095 / 4096, 3.0 * 4092 / 4096)
    )
    assert new.peak_fraction < old.peak_fraction and "2030-02-01" in new.source


def test_no_record_gives_the_documented_fallback(tmp_path):
    assert codesign.model_constants(root=tmp_path) is codesign.FALLBACK
    assert codesign.FALLBACK.source == "typed fallback" and all("no stored" in h for h in codesign.FALLBACK.how)
    _plant(tmp_path, [_k_case(4095, 100.0)])  # a run without an aligned reference cannot give any constant
    assert codesign.model_constants(root=tmp_path) is codesign.FALLBACK


def test_a_run_without_one_kind_of_case_falls_back_for_that_constant_only(tmp_path):
    _plant(tmp_path, [_k_case(4096, 700 * EFF), _k_case(4095, 100 * EFF)])
    c = codesign.model_constants(root=tmp_path)
    assert c.misaligned_penalty == pytest.approx(7.0 * 4095 / 4096)
    assert c.partially_aligned_penalty == codesign.FALLBACK.partially_aligned_penalty
    assert any("PARTIALLY_ALIGNED_PENALTY" in h and "fallback" in h for h in c.how)


def test_the_model_uses_the_stored_constants():
    c = codesign.model_constants()
    assert (codesign.PEAK_FRACTION, codesign.MISALIGNED_PENALTY, codesign.PARTIALLY_ALIGNED_PENALTY) == (
        c.peak_fraction, c.misaligned_penalty, c.partially_aligned_penalty)  # fmt: skip
    assert c.source.startswith("02_codesign/") or c is codesign.FALLBACK
    assert codesign.alignment_penalty(4095, 8192) == c.misaligned_penalty
    assert codesign.alignment_penalty(4094, 8192) == c.partially_aligned_penalty
    p = codesign.gemm_time(8192, 8192, 4096, tile=None)
    assert p.tflops == pytest.approx(hardware.spec("H100").tensor_tflops["bfloat16"] * c.peak_fraction * EFF)
    assert 1 < c.partially_aligned_penalty < c.misaligned_penalty and 0 < c.peak_fraction <= 1


def test_the_model_reproduces_the_stored_odd_k_it_was_read_from():
    try:
        stored = {r.params["x"]: r for r in bench.load("02", gpu="h100") if r.params.get("sweep") == "K"}
    except FileNotFoundError:
        pytest.skip("no stored lesson-2 run")
    measured = math.sqrt(stored[4095].ms * stored[4097].ms)  # the penalty is their mean: each within a few percent
    predicted = math.sqrt(
        codesign.gemm_time(8192, 8192, 4095, tile=None).ms * codesign.gemm_time(8192, 8192, 4097, tile=None).ms
    )
    assert predicted == pytest.approx(measured, rel=0.05)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, True, 1.5])
def test_constants_are_checked(bad):
    with pytest.raises(ValueError, match="GemmConstants"):
        codesign.GemmConstants(bad, 2.0, 1.5, "x", ())
