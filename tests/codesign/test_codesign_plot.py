"""Lesson 2's figures (gpulab.codesign.plot), drawn headless. Bad input: test_codesign_bad_input.py."""

import matplotlib.axes
import matplotlib.figure
import pytest

from gpulab import codesign
from gpulab.bench import Result


def test_plots_headless(sweep_result):
    rs = [sweep_result("K", "a", x, 1.0 + x, 1.0 + 2 * x) for x in range(4)]
    rs.append(sweep_result("N (waves)", "b", 1, 1.0, 1.0))
    for r in rs:
        r.flops, r.params["predicted_tflops"], r.params["x_name"] = 1e9, 1.0, "x"
    ax = codesign.plot_sweep(rs, "K")
    assert isinstance(ax, matplotlib.axes.Axes) and len(ax.lines) == 2
    assert isinstance(codesign.plot_sweep(rs, "K", metric="relative"), matplotlib.axes.Axes)
    assert isinstance(codesign.plot_sweep(rs, "K", metric="ms"), matplotlib.axes.Axes)
    with pytest.raises(ValueError, match="sweep must name"):
        codesign.plot_sweep(rs)
    with pytest.raises(ValueError, match="sweep='Q'"):
        codesign.plot_sweep(rs, "Q")
    with pytest.raises(ValueError, match="metric"):
        codesign.plot_sweep(rs, "K", metric="gbps")
    fig = codesign.plot_benchmark(rs)
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) == 2
    with pytest.raises(ValueError, match="no sweep"):
        codesign.plot_benchmark([Result(lesson="02", case="x", ms=1.0)])
    assert isinstance(codesign.plot_tiles(1536, 1472, (128, 128), gpu="H100"), matplotlib.axes.Axes)
    assert isinstance(codesign.plot_tiles(200, 300, (128, 128)), matplotlib.axes.Axes)
    ax = codesign.plot_wave_staircase(1536, 4096, range(1024, 4097, 128), tile=(128, 256), metric="ms")
    assert len(ax.lines) == 1 + 1  # the model line and one wave boundary (2816 -> 2944)
    with pytest.raises(ValueError, match="metric"):
        codesign.plot_prediction([1], [codesign.gemm_time(8, 8, 8)], metric="speed")
