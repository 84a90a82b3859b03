"""Lesson 0's measurements and figures (gpulab.memory.measure, gpulab.memory.plots) on CPU, headless."""

import math

import matplotlib.axes
import pytest

from gpulab import bench, hardware, memory
from gpulab.bench import report as bench_report

# ----------------------------------------------------------------------------------------------------------------
# measuring and plotting


def test_working_set_sizes_on_cpu():
    sizes = memory.working_set_sizes()
    assert sizes == [2**k for k in range(14, 21)]
    assert sizes[0] == 16 * 1024 and sizes[-1] == 1024 * 1024
    assert memory.working_set_sizes(cpu_max=1 << 16, smallest=1 << 12) == [4096, 8192, 16384, 32768, 65536]


def test_measure_sweep_and_plot():
    sizes = [16384, 65536]
    results = memory.measure_sweep(sizes=sizes)
    assert [r.params["working_set_bytes"] for r in results] == sizes
    for r, w in zip(results, sizes):
        assert r.lesson == "00" and r.case == "working-set sweep" and r.mode == "interpreter"
        assert r.gbps is not None and math.isfinite(r.gbps) and r.gbps > 0
        assert r.bytes >= 2 * w  # at least two passes over the working set
        n_chunks = math.ceil(w // 4 / r.params["block"])
        assert math.gcd(r.params["programs"], n_chunks) == 1
        assert r.params["level"] == hardware.cache_level(w)
        assert r.flops == r.bytes / 4
    ax = memory.plot_sweep(results, title="sweep")
    assert isinstance(ax, matplotlib.axes.Axes)
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == sizes
    assert list(line.get_ydata()) == pytest.approx([r.gbps for r in results])
    assert ax.get_title() == "sweep"


def test_plot_hierarchy_and_ridge_points_headless():
    ax = memory.plot_hierarchy("H100")
    labels = [t.get_text().split(":")[0] for t in ax.get_yticklabels()]
    assert labels == ["HBM", "L2", "L1 / shared", "registers"] and "80 GB" in ax.get_yticklabels()[0].get_text()
    assert ax.get_xlim()[1] < 1e12  # the axis ends near the largest bar, not decades past it
    ax = memory.plot_ridge_points(["H100", "T4"], dtype="float16")
    heights = [bar.get_height() for bar in ax.patches]
    assert heights == pytest.approx([hardware.ridge_point("H100", "float16"), hardware.ridge_point("T4", "float16")])


@pytest.mark.parametrize(
    ("b", "text"), [(0, "0 B"), (1000, "1e+03 B"), (16384, "16 KB"), (3 << 30, "3 GB"), (1.5 * 2**20, "1.5 MB")]
)
def test_human_bytes(b, text):
    assert memory.human_bytes(b) == text


# ----------------------------------------------------------------------------------------------------------------
# on the harness: every provider checked before anything is timed, the records the readers use


@pytest.fixture
def no_timing(monkeypatch):
    """The harness's clock replaced by one that fails the test: a run that reaches it timed something."""

    def clock(*args, **kwargs):
        raise AssertionError("the harness timed a provider")

    monkeypatch.setattr(bench_report, "time_callable", clock)


def test_a_wrong_sweep_kernel_stops_the_run_before_timing(monkeypatch, no_timing):
    def one_percent_off(x, n, programs, iters, block):
        return memory.working_set_sweep(x, n, programs, iters, block) * 1.01  # 1% off

    monkeypatch.setattr(memory.measure, "working_set_sweep", one_percent_off)
    with pytest.raises(bench.CheckFailed, match="sweep kernel.*nothing was timed"):
        memory.measure_sweep(sizes=[16384, 65536])


def test_each_copy_writes_its_own_output(monkeypatch, no_timing):
    """A copy kernel that writes nothing is caught, though torch's copy beside it fills its own output."""
    monkeypatch.setattr(memory.measure, "copy", lambda src, out: out)
    with pytest.raises(bench.CheckFailed, match=r"copy kernel \(gpulab\)"):
        memory.benchmark()


def test_benchmark_records_keep_the_readers_fields():
    results, fig = memory.benchmark()
    sweep = [r for r in results if r.case == "working-set sweep"]
    assert [r.params["working_set_bytes"] for r in sweep] == memory.working_set_sizes()
    for r in sweep:
        assert r.provider == "sweep kernel" and r.status == "ok" and r.params["check"] == "ok"
        assert {"programs", "iters", "block", "level"} <= set(r.params)
        assert r.shape == [r.params["working_set_bytes"] // 4] and r.dtype == "float32"
        assert r.wall_ms == r.ms  # one clock in the interpreter, both recorded
    copies = [r for r in results if r.case != "working-set sweep"]
    assert [r.case for r in copies] == [r.provider for r in copies] == ["copy kernel (gpulab)", "torch copy_ (peer)"]
    for r in copies:
        assert r.params["check"] == "ok" and r.params["working_set_bytes"] == r.bytes == 2 * 4 * r.shape[0]
    assert fig.axes and len(fig.axes[0].collections) == 2  # the two copies beside the sweep line


def test_check_false_is_recorded():
    (r,) = memory.measure_sweep(sizes=[16384], check=False)
    assert r.params["check"] == "not checked" and r.status == "ok"
