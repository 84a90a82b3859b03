"""gpulab.bench: CPU timing, result records, storage, tables and charts, FLOP conventions."""

import datetime as dt
import json
import math
import os
import time

import matplotlib

matplotlib.use("Agg")

import matplotlib.axes  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

from gpulab import bench, memory  # noqa: E402
from gpulab.bench import Result  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _result(case="c", device="NVIDIA H100 80GB HBM3", date="2025-03-04", **kw):
    fields = dict(
        lesson="00",
        case=case,
        ms=2.0,
        ms_q25=1.5,
        ms_q75=2.5,
        reps=7,
        flops=1e9,
        bytes=4e6,
        dtype="float32",
        shape=[1000],
        device=device,
        sm_count=132,
        torch="2.11.0",
        triton="3.6.0",
        mode="cuda",
        date=date,
        registers=32,
        spills=0,
        params={"block": 1024},
    )
    fields.update(kw)
    return Result(**fields)


# ----------------------------------------------------------------------------------------------------------------
# timing


def test_time_callable_on_cpu():
    t = bench.time_callable(lambda: time.sleep(0.002), rep_ms=30)
    assert t.reps >= 3
    assert t.q25_ms <= t.median_ms <= t.q75_ms
    assert t.median_ms >= 2.0  # it timed the call
    assert t.median_ms < 200


def test_time_callable_takes_at_least_three_reps_even_with_no_time():
    calls = []
    t = bench.time_callable(lambda: calls.append(1), rep_ms=0)
    assert t.reps >= 3
    assert len(calls) == t.reps + 1  # one warm-up call, untimed
    assert t.q25_ms <= t.median_ms <= t.q75_ms


def test_rotate_cycles_through_argument_sets():
    seen = []
    sets = [(0, "a"), (1, "b"), [2, "c"]]
    t = bench.time_callable(lambda i, tag: seen.append((i, tag)), rotate=sets, rep_ms=5)
    assert len(seen) == t.reps + 1 >= 4
    assert seen == [(k % 3, "abc"[k % 3]) for k in range(len(seen))]
    counts = [sum(1 for i, _ in seen if i == k) for k in range(3)]
    assert max(counts) - min(counts) <= 1 and min(counts) >= 1


def test_rotate_wraps_single_arguments():
    x, y = torch.ones(3), torch.zeros(3)
    seen = []
    bench.time_callable(lambda a: seen.append(a), rotate=[x, y], rep_ms=0)
    assert seen[0] is x and seen[1] is y and seen[2] is x


def test_empty_rotate_is_an_error():
    with pytest.raises(ValueError, match="rotate"):
        bench.time_callable(lambda: None, rotate=[])


# ----------------------------------------------------------------------------------------------------------------
# measure and Result


def test_measure_fills_the_record():
    before = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    r = bench.measure(
        lambda: time.sleep(0.001),
        lesson="00",
        case="sleep",
        bytes=2_000_000,
        flops=3_000_000_000,
        dtype=torch.float16,
        shape=(2, 3),
        warmup_ms=0,
        rep_ms=10,
        working_set_bytes=123,
    )
    after = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    assert r.lesson == "00" and r.case == "sleep"
    assert r.device == "CPU (Triton interpreter)" and r.sm_count == 0
    assert r.torch == torch.__version__ and r.triton == triton.__version__
    assert r.mode == "interpreter"
    assert r.date in (before, after)
    assert r.dtype == "float16" and r.shape == [2, 3]
    assert r.params == {"working_set_bytes": 123}
    assert r.registers is None and r.spills is None
    assert r.reps >= 3 and r.ms_q25 <= r.ms <= r.ms_q75
    assert r.ms >= 1.0
    assert r.gbps == pytest.approx(2e6 / (r.ms * 1e-3) / 1e9)
    assert r.tflops == pytest.approx(3e9 / (r.ms * 1e-3) / 1e12)
    assert r.intensity == pytest.approx(1500.0)


def test_measure_with_a_kernel_on_cpu_has_no_resources():
    x = torch.randn(100)
    y = torch.empty_like(x)
    r = bench.measure(lambda: memory.copy(x, y), lesson="00", case="copy", bytes=800, kernel=memory.copy_kernel)
    assert torch.equal(x, y)
    assert r.registers is None and r.spills is None and r.params == {}
    assert bench.kernel_resources(memory.copy_kernel) == {}


def test_rates_are_derived():
    r = _result(ms=4.0, flops=8e12, bytes=2e9)
    assert r.tflops == pytest.approx(2000.0)
    assert r.gbps == pytest.approx(500.0)
    assert r.intensity == pytest.approx(4000.0)
    empty = _result(flops=None, bytes=None)
    assert empty.tflops is None and empty.gbps is None and empty.intensity is None
    assert _result(flops=0.0).tflops is None


def test_result_dict_round_trip():
    r = _result()
    d = r.to_dict()
    assert d["tflops"] == pytest.approx(r.tflops) and d["gbps"] == pytest.approx(r.gbps)
    back = Result.from_dict(json.loads(json.dumps(d)))
    assert back == r
    assert "tflops" not in back.params and "gbps" not in back.params


def test_result_from_dict_unknown_keys_go_to_params():
    d = _result().to_dict()
    d["notes"] = "warm L2"
    d["working_set_bytes"] = 4096
    r = Result.from_dict(d)
    assert r.params == {"block": 1024, "notes": "warm L2", "working_set_bytes": 4096}
    assert not hasattr(r, "notes")
    minimal = Result.from_dict({"lesson": "00", "case": "x", "ms": 1.0, "extra": 1})
    assert minimal.params == {"extra": 1} and math.isnan(minimal.ms_q25)


def test_result_from_dict_does_not_change_its_argument():
    d = {"lesson": "00", "case": "x", "ms": 1.0, "params": {"block": 16}, "extra": 1}
    Result.from_dict(d)
    assert d["params"] == {"block": 16}


def test_attention_flops():
    base = 4 * 2 * 3 * 128 * 256 * 64
    assert bench.attention_flops(2, 3, 128, 256, 64) == base
    assert bench.attention_flops(2, 3, 128, 256, 64, causal=True) == base / 2
    assert bench.attention_flops(2, 3, 128, 256, 64, backward=True) == base * 3.5
    assert bench.attention_flops(2, 3, 128, 256, 64, causal=True, backward=True) == base / 2 * 3.5
    assert bench.attention_flops(1, 1, 1, 1, 1) == 4


# ----------------------------------------------------------------------------------------------------------------
# save and load


def test_save_load_round_trip(tmp_path):
    results = [_result("a"), _result("b", ms=3.0, params={"working_set_bytes": 1 << 20})]
    path = bench.save(results, "00", root=tmp_path)
    assert path == tmp_path / "00_memory_hierarchy" / "nvidia-h100-80gb-hbm3-2025-03-04.jsonl"
    assert len(path.read_text().splitlines()) == 2
    assert bench.load("00", root=tmp_path) == results
    assert bench.load("00_memory_hierarchy", root=tmp_path) == results
    assert bench.load("00", path=path) == results


def test_save_to_an_explicit_path(tmp_path):
    path = bench.save([_result()], "00", path=tmp_path / "x" / "mine.jsonl")
    assert path == tmp_path / "x" / "mine.jsonl" and path.exists()


def test_results_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GPULAB_BENCHMARKS", str(tmp_path))
    assert bench.results_dir() == tmp_path
    path = bench.save([_result()], "00")
    assert path.parent == tmp_path / "00_memory_hierarchy"
    assert bench.results_dir(tmp_path / "other") == tmp_path / "other"


def test_load_picks_the_newest_date_and_filters_by_gpu(tmp_path):
    old_h100 = [_result("old", date="2024-12-31")]
    new_h100 = [_result("new", date="2025-01-01")]
    rtx = [_result("rtx", device="NVIDIA GeForce RTX 4090", date="2025-06-01")]
    for rs in (new_h100, rtx, old_h100):
        p = bench.save(rs, "00", root=tmp_path)
    now = time.time()
    os.utime(p, (now + 100, now + 100))  # the oldest result file was modified last: the date in the name wins
    assert [r.case for r in bench.load("00", root=tmp_path)] == ["rtx"]
    assert [r.case for r in bench.load("00", gpu="h100", root=tmp_path)] == ["new"]
    assert [r.case for r in bench.load("00", gpu="H100", root=tmp_path)] == ["new"]
    assert [r.case for r in bench.load("00", gpu="RTX 4090", root=tmp_path)] == ["rtx"]
    with pytest.raises(FileNotFoundError) as e:
        bench.load("00", gpu="t4", root=tmp_path)
    assert "on t4" in str(e.value) and "python -m gpulab bench 00" in str(e.value)


def test_load_without_results_says_how_to_make_them(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        bench.load("00", root=tmp_path)
    msg = str(e.value)
    assert "python -m gpulab bench 00" in msg
    assert str(tmp_path / "00_memory_hierarchy") in msg


def test_save_nothing_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        bench.save([], "00", root=tmp_path)
    with pytest.raises(ValueError, match="empty"):
        bench.save(iter([]), "00", root=tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("lesson", ["99", "memory", "42", "00_memory"])
def test_unknown_lesson(tmp_path, lesson):
    with pytest.raises(ValueError) as e:
        bench.save([_result()], lesson, root=tmp_path)
    assert repr(lesson) in str(e.value) and "00 (00_memory_hierarchy)" in str(e.value)
    with pytest.raises(ValueError):
        bench.load(lesson, root=tmp_path)


def test_a_lesson_folder_not_in_the_table_is_found_by_prefix(tmp_path):
    (tmp_path / "42_custom").mkdir()
    path = bench.save([_result()], "42", root=tmp_path)
    assert path.parent == tmp_path / "42_custom"
    assert bench.load("42", root=tmp_path) == [_result()]


def test_empty_lesson_id_is_unknown(tmp_path):
    with pytest.raises(ValueError, match="known"):
        bench.save([_result()], "", root=tmp_path)


@pytest.mark.parametrize("lesson", ["0", "000"])
def test_lesson_number_without_padding(tmp_path, lesson):
    path = bench.save([_result()], lesson, root=tmp_path)
    assert path.parent == tmp_path / "00_memory_hierarchy"


# ----------------------------------------------------------------------------------------------------------------
# tables and charts


def test_table_has_a_header_and_one_row_per_result():
    results = [_result("first"), _result("no-bytes", bytes=None), _result("third", flops=None)]
    text = bench.table(results, title="Lesson 0")
    lines = text.splitlines()
    assert lines[0] == "Lesson 0"
    assert lines[1].split() == ["case", "ms", "TFLOP/s", "GB/s"]
    assert set(lines[2].replace(" ", "")) == {"-"}
    assert len(lines) == 3 + len(results)
    assert lines[3].split() == ["first", "2", "0.5", "2"]
    assert lines[4].split() == ["no-bytes", "2", "0.5", "-"]
    assert lines[5].split() == ["third", "2", "-", "2"]


def test_table_columns_from_params_and_missing_values():
    results = [_result("a", params={"working_set_bytes": 16384}), _result("b", params={}, ms_q25=math.nan)]
    lines = bench.table(results, columns=("case", "working_set_bytes", "ms_q25", "registers")).splitlines()
    assert lines[0].split() == ["case", "working_set_bytes", "ms_q25", "registers"]
    assert lines[2].split() == ["a", "16384", "1.5", "32"]
    assert lines[3].split() == ["b", "-", "-", "32"]
    assert len(bench.table([]).splitlines()) == 2  # header and rule only


def test_table_formats_big_numbers():
    lines = bench.table([_result(ms=1e-3, bytes=4e9)], columns=("gbps",)).splitlines()
    assert lines[2].strip() == "4,000,000"


def test_bar_returns_axes():
    results = [_result("x", ms=1.0), _result("baseline", ms=2.0), _result("z", flops=None)]
    ax = bench.bar(results, metric="tflops", reference="baseline", title="t")
    assert isinstance(ax, matplotlib.axes.Axes)
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([1.0, 0.5, 0.0])
    assert ax.get_ylabel() == "TFLOP/s" and ax.get_title() == "t"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x", "baseline", "z"]
    assert ax.patches[1].get_facecolor() != ax.patches[0].get_facecolor()  # the reference is drawn apart


def test_bar_on_given_axes():
    _, ax = plt.subplots()
    assert bench.bar([_result()], metric="gbps", ax=ax) is ax
    assert ax.get_ylabel() == "GB/s"


def test_line_returns_axes_with_one_line_per_group():
    results = [
        _result("a", ms=1.0, params={"w": 4096}),
        _result("a", ms=2.0, params={"w": 1024}),
        _result("b", ms=4.0, params={"w": 2048}),
    ]
    ax = bench.line(results, x="w", y="gbps", title="sweep")
    assert isinstance(ax, matplotlib.axes.Axes)
    lines = ax.get_lines()
    assert len(lines) == 2
    assert list(lines[0].get_xdata()) == [1024, 4096]  # sorted by x
    assert list(lines[0].get_ydata()) == pytest.approx([2.0, 4.0])
    assert ax.get_xscale() == "log" and ax.get_ylabel() == "GB/s" and ax.get_xlabel() == "w"
    assert ax.get_legend() is not None


def test_record_fills_the_environment_without_timing():
    r = bench.record(lesson="04", case="peak memory", dtype=torch.bfloat16, shape=(1, 2), peak_extra_bytes=123)
    assert math.isnan(r.ms) and r.reps == 0 and r.dtype == "bfloat16" and r.shape == [1, 2]
    assert r.device and r.date and r.torch == torch.__version__
    assert r.params == {"peak_extra_bytes": 123}
    assert bench.Result.from_dict(r.to_dict()).params["peak_extra_bytes"] == 123
