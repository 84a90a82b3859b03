"""Placing results on the roofline and the figure (gpulab.roofline.plotting), headless."""

import matplotlib.axes
import matplotlib.pyplot as plt
import pytest

from gpulab import bench, roofline
from gpulab.bench import Result


def test_placement_by_hand(fake_ceilings):
    c = fake_ceilings
    recs = [
        Result(lesson="x", case="half the HBM roof", ms=1.0, flops=1e9, bytes=2e9, dtype="float32"),  # I = 0.5
        Result(lesson="x", case="bf16 at the roof", ms=1.0, flops=4e11, bytes=1e6, dtype="bfloat16"),
        Result(lesson="x", case="from L2", ms=1.0, flops=1e9, bytes=2e9, params={"level": "L2"}),
        Result(lesson="x", case="copy", ms=1.0, flops=0, bytes=5e8),
        Result(lesson="x", case="no counts", ms=1.0),
    ]
    p = roofline.placement(recs + [roofline.gemm(16, 4096, 4096, "fp16")], c)
    assert p[0].intensity == 0.5 and p[0].roof_tflops == pytest.approx(0.5) and p[0].achieved_tflops == 1.0
    assert p[0].fraction == pytest.approx(2.0) and p[0].bound == "memory"  # above its roof: served by a cache
    assert p[1].compute == "bf16" and p[1].fraction == pytest.approx(1.0) and p[1].bound == "compute"
    assert p[2].level == "L2" and p[2].roof_tflops == pytest.approx(2.0) and p[2].fraction == pytest.approx(0.5)
    assert p[3].intensity == 0 and p[3].fraction == pytest.approx(0.5) and p[3].bound == "memory"  # 500 of 1000 GB/s
    assert p[4].intensity is None and p[4].fraction is None
    assert p[5].achieved_tflops is None and p[5].roof_tflops == pytest.approx(2 * 16 * 4096 / (2 * (16 + 4096 + 16)))
    table = roofline.placement_table(recs, c)
    assert "half the HBM roof" in table and "200%" in table
    sweep = Result(lesson="00", case="sweep", ms=1.0, flops=1e9, bytes=4e9, params={"working_set_bytes": 16384})
    assert "sweep, W = 16 KB" in roofline.placement_table([sweep], c)
    with pytest.raises(ValueError, match="results must hold"):
        roofline.placement([1.0], c)
    with pytest.raises(ValueError, match="ceilings must be"):
        roofline.placement(recs, ceilings="H100")


def test_plot_headless_with_every_roof(fake_ceilings, h100_records):
    c = fake_ceilings
    recs = h100_records()[2:] + [Result(lesson="x", case="copy", ms=1.0, flops=0, bytes=1e9)]
    ax = roofline.plot(recs + roofline.course_operations(), c)
    assert isinstance(ax, matplotlib.axes.Axes)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "made up for a test" in ax.get_title()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sum("roof" in lab and "GB/s" in lab for lab in labels) == 3  # HBM, L2, L1
    assert "fp16 / bf16 tensor cores roof, 400 TFLOP/s" in labels  # equal roofs share one line
    assert any(lab.startswith("L2 a:") and "of its roof" in lab for lab in labels)
    assert any(lab.startswith("vector add") and "memory-bound" in lab for lab in labels)
    assert not any(lab.startswith("copy") for lab in labels)  # no FLOPs: no place on a FLOP/s axis


def test_plot_says_the_source_and_uses_the_default_ceilings(tmp_path, monkeypatch):
    lesson0 = bench.load("00", gpu="h100")  # the stored H100 sweep of lesson 0
    monkeypatch.setenv("GPULAB_BENCHMARKS", str(tmp_path))  # no lesson-1 results there: the spec table
    ax = roofline.plot(lesson0)
    assert "spec table" in ax.get_title()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sum("GB/s" in lab for lab in labels) == 1  # only HBM: the spec table has no cache bandwidths
    # the sweep ran at three levels: one entry each; only the HBM-level points have a roof to compare with
    sweep = [lab for lab in labels if lab.startswith("working-set sweep")]
    assert sweep[:2] == ["working-set sweep (L1)", "working-set sweep (L2)"] and len(sweep) == 3
    assert sweep[2].startswith("working-set sweep (HBM): ") and sweep[2].endswith(" of its roof")
    fig, ax2 = plt.subplots()
    assert roofline.plot([], roofline.Ceilings.from_spec("T4"), ax=ax2) is ax2
