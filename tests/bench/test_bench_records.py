"""gpulab.bench.records: measure and record, Result (both clocks, rates, round trip), save and load."""

import datetime as dt
import json
import math
import os
import time

import pytest
import torch
import triton

from gpulab import bench, memory
from gpulab.bench import Result


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


def test_rates_are_derived(make_result):
    r = make_result(ms=4.0, flops=8e12, bytes=2e9)
    assert r.tflops == pytest.approx(2000.0)
    assert r.gbps == pytest.approx(500.0)
    assert r.intensity == pytest.approx(4000.0)
    empty = make_result(flops=None, bytes=None)
    assert empty.tflops is None and empty.gbps is None and empty.intensity is None
    assert make_result(flops=0.0).tflops is None


def test_result_dict_round_trip(make_result):
    r = make_result()
    d = r.to_dict()
    assert d["tflops"] == pytest.approx(r.tflops) and d["gbps"] == pytest.approx(r.gbps)
    back = Result.from_dict(json.loads(json.dumps(d)))
    assert back == r
    assert "tflops" not in back.params and "gbps" not in back.params


def test_result_from_dict_unknown_keys_go_to_params(make_result):
    d = make_result().to_dict()
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


def test_save_load_round_trip(tmp_path, make_result):
    results = [make_result("a"), make_result("b", ms=3.0, params={"working_set_bytes": 1 << 20})]
    path = bench.save(results, "00", root=tmp_path)
    assert path == tmp_path / "00_memory_hierarchy" / "nvidia-h100-80gb-hbm3-2025-03-04.jsonl"
    assert len(path.read_text().splitlines()) == 2
    assert bench.load("00", root=tmp_path) == results
    assert bench.load("00_memory_hierarchy", root=tmp_path) == results
    assert bench.load("00", path=path) == results


def test_save_to_an_explicit_path(tmp_path, make_result):
    path = bench.save([make_result()], "00", path=tmp_path / "x" / "mine.jsonl")
    assert path == tmp_path / "x" / "mine.jsonl" and path.exists()


def test_results_dir_from_environment(tmp_path, monkeypatch, make_result):
    monkeypatch.setenv("GPULAB_BENCHMARKS", str(tmp_path))
    assert bench.results_dir() == tmp_path
    path = bench.save([make_result()], "00")
    assert path.parent == tmp_path / "00_memory_hierarchy"
    assert bench.results_dir(tmp_path / "other") == tmp_path / "other"


def test_load_picks_the_newest_date_and_filters_by_gpu(tmp_path, make_result):
    old_h100 = [make_result("old", date="2024-12-31")]
    new_h100 = [make_result("new", date="2025-01-01")]
    rtx = [make_result("rtx", device="NVIDIA GeForce RTX 4090", date="2025-06-01")]
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
def test_unknown_lesson(tmp_path, lesson, make_result):
    with pytest.raises(ValueError) as e:
        bench.save([make_result()], lesson, root=tmp_path)
    assert repr(lesson) in str(e.value) and "00 (00_memory_hierarchy)" in str(e.value)
    with pytest.raises(ValueError):
        bench.load(lesson, root=tmp_path)


def test_a_lesson_folder_not_in_the_table_is_found_by_prefix(tmp_path, make_result):
    (tmp_path / "42_custom").mkdir()
    path = bench.save([make_result()], "42", root=tmp_path)
    assert path.parent == tmp_path / "42_custom"
    assert bench.load("42", root=tmp_path) == [make_result()]


def test_empty_lesson_id_is_unknown(tmp_path, make_result):
    with pytest.raises(ValueError, match="known"):
        bench.save([make_result()], "", root=tmp_path)


@pytest.mark.parametrize("lesson", ["0", "000"])
def test_lesson_number_without_padding(tmp_path, lesson, make_result):
    path = bench.save([make_result()], lesson, root=tmp_path)
    assert path.parent == tmp_path / "00_memory_hierarchy"


def test_record_fills_the_environment_without_timing():
    r = bench.record(lesson="04", case="peak memory", dtype=torch.bfloat16, shape=(1, 2), peak_extra_bytes=123)
    assert math.isnan(r.ms) and r.reps == 0 and r.dtype == "bfloat16" and r.shape == [1, 2]
    assert r.device and r.date and r.torch == torch.__version__
    assert r.params == {"peak_extra_bytes": 123}
    assert bench.Result.from_dict(r.to_dict()).params["peak_extra_bytes"] == 123


def test_measure_fills_wall_ms_with_the_same_clock_on_cpu():
    r = bench.measure(lambda: time.sleep(0.001), lesson="00", case="sleep", warmup_ms=0, rep_ms=5)
    assert r.wall_ms == r.ms >= 1.0
    assert r.interpreter and r.time("wall") == r.wall_ms and r.time("device") == r.ms


def test_rates_on_both_clocks(make_result):
    r = make_result(ms=4.0, wall_ms=8.0, flops=8e12, bytes=2e9)
    assert r.wall_tflops == pytest.approx(1000.0) and r.wall_gbps == pytest.approx(250.0)
    assert r.rate("tflops", "device") == r.tflops and r.rate("gbps", "wall") == r.wall_gbps
    d = r.to_dict()
    assert d["wall_tflops"] == pytest.approx(1000.0) and d["wall_gbps"] == pytest.approx(250.0)
    assert Result.from_dict(json.loads(json.dumps(d))) == r


@pytest.mark.parametrize("ms", [0.0, None, math.nan], ids=["zero", "none", "nan"])
def test_rates_without_a_time_are_none_not_a_division_error(make_result, ms):
    r = make_result(ms=ms, wall_ms=ms)
    assert r.tflops is None and r.gbps is None and r.wall_tflops is None and r.wall_gbps is None
    assert bench.table([r], columns=("ms", "tflops", "wall_gbps")).splitlines()[2].split()[1:] == ["-", "-"]


def test_old_records_without_wall_ms_load(tmp_path):
    old = {  # a record as written before wall_ms, provider and status existed
        "lesson": "04", "case": "flash forward", "ms": 1.5, "ms_q25": 1.4, "ms_q75": 1.6, "reps": 9,
        "flops": 3e12, "bytes": 1e9, "dtype": "bfloat16", "shape": [1, 2], "device": "NVIDIA H100 80GB HBM3",
        "sm_count": 132, "torch": "2.11.0", "triton": "3.6.0", "mode": "cuda", "date": "2026-11-22",
        "registers": 128, "spills": 0, "params": {"status": "ok", "impl": "gpulab"}, "tflops": 2.0, "gbps": 0.66,
    }  # fmt: skip
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(old) + "\n")
    (r,) = bench.load("04", path=path)
    assert r.wall_ms is None and r.provider is None and r.status == "ok"
    assert r.tflops == pytest.approx(2000.0) and r.wall_tflops is None
    assert r.params == {"status": "ok", "impl": "gpulab"}


def test_stored_benchmark_records_all_load():
    for lesson in bench.results_dir().glob("0*"):
        for path in lesson.glob("*.jsonl"):
            assert bench.load(lesson.name, path=path), path


def test_newest_reads_the_date_before_a_run_tag(tmp_path):
    # a second run of one day is saved as <gpu>-<date>-b: its date, not the name's last ten characters, is compared
    names = ["nvidia-h100-2026-11-20-b", "nvidia-h100-2026-11-25", "nvidia-h100-2026-11-24-c"]
    now = time.time()
    for i, name in enumerate(names):
        (tmp_path / f"{name}.jsonl").write_text("")
        os.utime(tmp_path / f"{name}.jsonl", (now - 100 * i, now - 100 * i))
    assert bench.newest(tmp_path).stem == "nvidia-h100-2026-11-25"
    (tmp_path / "nvidia-h100-2026-11-25-b.jsonl").write_text("")  # same day, a later run: its tag, not its mtime
    os.utime(tmp_path / "nvidia-h100-2026-11-25-b.jsonl", (now - 1000, now - 1000))
    assert bench.newest(tmp_path).stem == "nvidia-h100-2026-11-25-b"


def test_newest_part_reads_the_run_tag_before_the_part(tmp_path):
    # <gpu>-<date>-<tag>-<part>: without part=, '-i-tune' has no readable date and the pick falls to mtime (a fresh
    # clone gives every file the same one); with it, run i is newer than run h whatever the files' times
    now = time.time()
    for i, name in enumerate(["gpu-2026-11-26-i-tune", "gpu-2026-11-26-h-tune", "gpu-2026-11-25-tune"]):
        (tmp_path / f"{name}.jsonl").write_text("")
        os.utime(tmp_path / f"{name}.jsonl", (now + 100 * i, now + 100 * i))  # the oldest run touched last
    files = sorted(tmp_path.glob("*-tune.jsonl"))
    assert bench.newest(files).stem == "gpu-2026-11-25-tune"  # what the plain order picks here: the latest mtime
    assert bench.newest(files, part="tune").stem == "gpu-2026-11-26-i-tune"
    (tmp_path / "gpu-2026-11-26-tune.jsonl").write_text("")  # the day's untagged run sorts before its tagged ones
    assert bench.newest(sorted(tmp_path.glob("*-tune.jsonl")), part="tune").stem == "gpu-2026-11-26-i-tune"


def test_record_files_match_the_gpu_slug_as_whole_words(tmp_path):
    for name in ("nvidia-l4-2030-01-01.jsonl", "nvidia-l40s-2030-01-01.jsonl", "nvidia-l4-2030-01-02.json"):
        (tmp_path / name).write_text("")
    assert [f.name for f in bench.record_files(tmp_path, "l4")] == ["nvidia-l4-2030-01-01.jsonl"]
    assert [f.name for f in bench.record_files(tmp_path)] == [
        "nvidia-l4-2030-01-01.jsonl",
        "nvidia-l40s-2030-01-01.jsonl",
    ]
    assert [f.name for f in bench.record_files(tmp_path, "l4", "*.json")] == ["nvidia-l4-2030-01-02.json"]
    assert bench.record_files(tmp_path / "absent", "l4") == []
