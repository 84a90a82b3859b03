"""The command line, `python -m gpulab ...`, on a machine without CUDA."""

import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402 - after choosing the headless backend
import pytest  # noqa: E402
import torch  # noqa: E402

import gpulab  # noqa: E402
import gpulab.__main__ as cli  # noqa: E402
from gpulab import bench, lessons  # noqa: E402
from gpulab.bench import Result  # noqa: E402

ROOT = Path(gpulab.__file__).resolve().parent.parent


def _gpulab(*args, **env):
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_info(capsys):
    """`python -m gpulab info` in process (the entry point itself runs as a subprocess below)."""
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "interpreter" in out
    assert "reference GPU (no CUDA device here): NVIDIA H100 SXM5 80GB" in out
    assert "Ceilings of the" in out and "lesson 0 measurements" in out


def test_info_without_stored_results(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPULAB_BENCHMARKS", str(tmp_path))
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "mode            interpreter" in out
    assert "none: no stored results" in out and "python -m gpulab bench 00" in out


def test_info_shows_stored_h100_results(tmp_path, monkeypatch, capsys):
    common = dict(lesson="00", device="NVIDIA H100 80GB HBM3", date="2026-01-02", mode="cuda")
    results = [
        Result(case="working-set sweep", ms=1.0, bytes=4e9, params={"working_set_bytes": 16384}, **common),
        Result(case="working-set sweep", ms=1.0, bytes=2e9, params={"working_set_bytes": 1 << 30}, **common),
        Result(case="copy kernel (gpulab)", ms=1.0, bytes=3e9, **common),
    ]
    bench.save(results, "00", root=tmp_path)
    monkeypatch.setenv("GPULAB_BENCHMARKS", str(tmp_path))
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "copy kernel (gpulab): 3,000 GB/s on NVIDIA H100 80GB HBM3 (2026-01-02)" in out
    assert "peak cached read bandwidth (sweep): 4,000 GB/s at a 16,384-byte working set" in out


def test_bench_unknown_lesson_subprocess():
    proc = _gpulab("bench", "99")
    assert proc.returncode == 2
    assert "unknown lesson '99'" in proc.stderr
    assert "00 (00_memory_hierarchy)" in proc.stderr
    assert proc.stdout == ""


def _tiny_benchmark(progress=None):
    """A lesson-shaped benchmark on the harness: two providers of one case, both clocks."""
    b = bench.Benchmark(
        lesson="00",
        name="copy",
        cases=[{"n": 64}],
        inputs=lambda n: (torch.arange(n, dtype=torch.float32),),
        providers={"clone": torch.clone, "fa2": bench.unavailable("not installed")},
        reference=lambda x: x.double(),
        bytes=lambda n: 8.0 * n,
    )
    results = bench.run([b], progress=progress)
    fig = plt.figure()
    bench.plot(results, x="n", ax=fig.gca())
    return results, fig


def test_bench_runs_the_registered_callable_and_prints_both_clocks(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(lessons, "benchmark", lambda lesson_id, part=None: _tiny_benchmark)
    assert cli.main(["bench", "00", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "CPU-interpreter version" in captured.err
    folder = tmp_path / "00_memory_hierarchy"
    jsonl, png = sorted(folder.glob("*.jsonl")), sorted(folder.glob("*.png"))
    assert len(jsonl) == 1 and len(png) == 1 and png[0].stem == jsonl[0].stem
    assert jsonl[0].name.startswith("cpu-triton-interpreter-")
    assert png[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    header = captured.out.splitlines()[0].split()
    assert header[:6] == ["case", "provider", "ms", "wall", "ms", "GB/s"] and header[-1] == "status"
    assert "wall ms: eager wall time per call" in captured.out and "ms: device time" in captured.out
    assert f"wrote {jsonl[0]}" in captured.out and f"wrote {png[0]}" in captured.out
    by = {r.provider: r for r in bench.load("00", root=tmp_path)}
    assert by["clone"].status == "ok" and by["clone"].wall_ms > 0 and by["clone"].gbps > 0
    assert by["fa2"].status == "unavailable: not installed"


def test_bench_of_a_lesson_without_a_benchmark(capsys, monkeypatch):
    monkeypatch.setattr(lessons, "benchmark", lambda lesson_id, part=None: None)
    assert cli.main(["bench", "02"]) == 2
    assert "lesson 02 has no benchmark yet" in capsys.readouterr().err


def test_bench_part_writes_where_its_readers_look(tmp_path, capsys, monkeypatch):
    """`bench 05 cs336`: the named part runs (here a stand-in: the registration is tested in test_lessons) and its
    records go to the part's folder under the lesson's results, not the lesson's own."""
    asked = []
    monkeypatch.setattr(
        lessons, "benchmark", lambda lesson_id, part=None: asked.append((lesson_id, part)) or _tiny_benchmark
    )
    assert cli.main(["bench", "05", "cs336", "--out", str(tmp_path)]) == 0
    assert asked == [("05", "cs336")]
    jsonl = sorted((tmp_path / "05_attention_hopper" / "hopper" / "cs336").glob("*.jsonl"))
    out = capsys.readouterr().out
    assert len(jsonl) == 1 and f"wrote {jsonl[0]}" in out and jsonl[0].stem.endswith("-cs336") and "is now" not in out
    assert not list((tmp_path / "05_attention_hopper").glob("*.jsonl"))
    assert {r.provider for r in bench.load("05", path=jsonl[0])} == {"clone", "fa2"}
    assert bench.current("05", "hopper/cs336", gpu=None, root=tmp_path) == jsonl[0]  # the index names the new run


@pytest.mark.parametrize(
    ("old", "part", "new", "folder"),
    [("04", "hopper", "05", "05_attention_hopper/hopper"), ("05", "split", "07", "07_rnn_split/split"),
     ("05", "versions", "06", "06_fused_rnn/versions"), ("06", "lm-search", "08", "08_state_tracking/lm"),
     ("04_attention", "v3-tune", "05", "05_attention_hopper/v3")],
)  # fmt: skip
def test_bench_of_a_part_that_moved_runs_it_in_its_new_lesson(old, part, new, folder, tmp_path, capsys, monkeypatch):
    asked = []
    monkeypatch.setattr(
        lessons, "benchmark", lambda lesson_id, part=None: asked.append((lesson_id, part)) or _tiny_benchmark
    )
    assert cli.main(["bench", old, part, "--out", str(tmp_path)]) == 0
    entry = lessons.find(new)
    assert asked == [(new, part)]
    captured = capsys.readouterr()
    old_id = old[:2]
    assert (
        f"lesson {old_id}'s part {part} is now lesson {new} ({entry.slug}): running bench {new} {part}" in captured.out
    )
    assert len(list((tmp_path / folder).glob(f"*-{part}.jsonl"))) == 1


def test_bench_unknown_part_lists_the_parts(capsys):
    assert cli.main(["bench", "05", "hoper"]) == 2
    err = capsys.readouterr().err
    assert "part='hoper'" in err and "hopper, cs336, fused" in err
    assert cli.main(["bench", "04", "hoper"]) == 2  # not a part that moved: lesson 04's own (it has none)
    assert "part='hoper'" in capsys.readouterr().err


def test_bench_of_an_old_slug_says_what_it_became(capsys, monkeypatch):
    monkeypatch.setattr(lessons, "benchmark", lambda lesson_id, part=None: None)
    assert cli.main(["bench", "07_distributed"]) == 2
    err = capsys.readouterr().err
    assert "lesson 07_distributed is now lesson 09 (09_distributed)" in err and "lesson 09 has no benchmark yet" in err


@pytest.mark.skipif(lessons.benchmark("00") is None, reason="lesson 00's package registers no benchmark")
def test_bench_00_on_cpu(tmp_path, capsys):
    assert cli.main(["bench", "00", "--out", str(tmp_path)]) == 0
    results = bench.load("00", root=tmp_path)
    assert {"working-set sweep", "copy kernel (gpulab)", "torch copy_ (peer)"} <= {r.case for r in results}
    assert all(r.mode == "interpreter" and r.gbps > 0 for r in results)


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([])
    assert e.value.code == 2
    assert "usage" in capsys.readouterr().err


def test_importing_the_cli_imports_no_lesson():
    code = "import sys, gpulab.__main__; print(sorted(m for m in sys.modules if m.startswith('gpulab.roofline')))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_one_version():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'version = {attr = "gpulab.__version__"}' in pyproject
    assert "\nversion = " not in pyproject.split("[project]", 1)[1].split("\n[", 1)[0]
    assert gpulab.__version__.count(".") == 2


def test_grade_of_an_old_exercise_grades_what_it_became(tmp_path, capsys, monkeypatch):
    import gpulab.course as course

    graded = []
    monkeypatch.setattr(course, "grade_notebook", lambda path: graded.append(Path(path).name) or [("t", True, "")])
    (tmp_path / "09_distributed.ipynb").write_text("{}")
    assert cli.main(["grade", str(tmp_path / "07_distributed.ipynb")]) == 0
    assert graded == ["09_distributed.ipynb"]
    assert "07_distributed.ipynb is now 09_distributed.ipynb: grading" in capsys.readouterr().out
    assert cli.main(["grade", str(tmp_path / "05_fused_rnn.ipynb")]) == 2  # neither 06 nor 07 is there
    assert (
        "05_fused_rnn.ipynb is now 06_fused_rnn.ipynb and 07_rnn_split.ipynb: grading none" in capsys.readouterr().out
    )
