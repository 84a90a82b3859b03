"""gpulab.bench.plots: tables and charts of results."""

import math

import matplotlib.axes
import matplotlib.pyplot as plt
import pytest

from gpulab import bench


def test_table_has_a_header_and_one_row_permake_result(make_result):
    results = [make_result("first"), make_result("no-bytes", bytes=None), make_result("third", flops=None)]
    text = bench.table(results, title="Lesson 0")
    lines = text.splitlines()
    assert lines[0] == "Lesson 0"
    assert lines[1].split() == ["case", "ms", "TFLOP/s", "GB/s"]
    assert set(lines[2].replace(" ", "")) == {"-"}
    assert len(lines) == 3 + len(results)
    assert lines[3].split() == ["first", "2", "0.5", "2"]
    assert lines[4].split() == ["no-bytes", "2", "0.5", "-"]
    assert lines[5].split() == ["third", "2", "-", "2"]


def test_table_columns_from_params_and_missing_values(make_result):
    results = [make_result("a", params={"working_set_bytes": 16384}), make_result("b", params={}, ms_q25=math.nan)]
    lines = bench.table(results, columns=("case", "working_set_bytes", "ms_q25", "registers")).splitlines()
    assert lines[0].split() == ["case", "working_set_bytes", "ms_q25", "registers"]
    assert lines[2].split() == ["a", "16384", "1.5", "32"]
    assert lines[3].split() == ["b", "-", "-", "32"]
    assert len(bench.table([]).splitlines()) == 2  # header and rule only


def test_table_formats_big_numbers(make_result):
    lines = bench.table([make_result(ms=1e-3, bytes=4e9)], columns=("gbps",)).splitlines()
    assert lines[2].strip() == "4,000,000"


def test_bar_returns_axes(make_result):
    results = [make_result("x", ms=1.0), make_result("baseline", ms=2.0), make_result("z", flops=None)]
    ax = bench.bar(results, metric="tflops", reference="baseline", title="t")
    assert isinstance(ax, matplotlib.axes.Axes)
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([1.0, 0.5, 0.0])
    assert ax.get_ylabel() == "TFLOP/s" and ax.get_title() == "t"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "baseline", "z"]
    assert ax.patches[1].get_facecolor() != ax.patches[0].get_facecolor()  # the reference is drawn apart


def test_bar_on_given_axes(make_result):
    _, ax = plt.subplots()
    assert bench.bar([make_result()], metric="gbps", ax=ax) is ax
    assert ax.get_ylabel() == "GB/s"


def test_line_returns_axes_with_one_line_per_group(make_result):
    results = [
        make_result("a", ms=1.0, params={"w": 4096}),
        make_result("a", ms=2.0, params={"w": 1024}),
        make_result("b", ms=4.0, params={"w": 2048}),
    ]
    ax = bench.line(results, x="w", y="gbps", title="sweep")
    assert isinstance(ax, matplotlib.axes.Axes)
    lines = ax.get_lines()
    assert len(lines) == 2
    assert list(lines[0].get_xdata()) == [1024, 4096]  # sorted by x
    assert list(lines[0].get_ydata()) == pytest.approx([2.0, 4.0])
    assert ax.get_xscale() == "log" and ax.get_ylabel() == "GB/s" and ax.get_xlabel() == "w"
    assert ax.get_legend() is not None


def test_table_shows_both_clocks_with_their_headings(make_result):
    lines = bench.table([make_result(wall_ms=3.0)], columns=("case", "ms", "wall_ms", "wall_tflops")).splitlines()
    assert lines[0].split() == ["case", "ms", "wall", "ms", "wall", "TFLOP/s"]
    assert lines[2].split() == ["c", "2", "3", "0.333"]


def test_table_headings_can_be_renamed(make_result):
    lines = bench.table([make_result()], columns=("ms",), headings={"ms": "device_ms"}).splitlines()
    assert lines[0] == "device_ms"


def test_line_leaves_out_points_without_a_value(make_result):
    results = [make_result("a", params={"w": 1}), make_result("a", ms=None, params={"w": 2})]
    ax = bench.line(results, x="w", y="gbps")
    assert list(ax.get_lines()[0].get_xdata()) == [1]
