"""The command line, `python -m gpulab ...`, on a machine without CUDA."""

import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import gpulab  # noqa: E402
import gpulab.__main__ as cli  # noqa: E402
from gpulab import bench  # noqa: E402
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


def test_info_subprocess():
    proc = _gpulab("info")
    assert proc.returncode == 0, proc.stderr
    assert "interpreter" in proc.stdout
    assert "reference GPU (no CUDA device here): NVIDIA H100 SXM5 80GB" in proc.stdout
    assert "Ceilings of the" in proc.stdout and "lesson 0 measurements" in proc.stdout


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


def test_bench_00_on_cpu(tmp_path, capsys):
    assert cli.main(["bench", "00", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "CPU-interpreter version" in captured.err
    folder = tmp_path / "00_memory_hierarchy"
    jsonl, png = sorted(folder.glob("*.jsonl")), sorted(folder.glob("*.png"))
    assert len(jsonl) == 1 and len(png) == 1
    assert jsonl[0].name.startswith("cpu-triton-interpreter-") and png[0].stem == jsonl[0].stem
    assert png[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {jsonl[0]}" in captured.out and f"wrote {png[0]}" in captured.out
    results = bench.load("00", root=tmp_path)
    cases = {r.case for r in results}
    assert {"working-set sweep", "copy kernel (gpulab)", "torch copy_ (peer)"} <= cases
    sweep = [r for r in results if r.case == "working-set sweep"]
    assert [r.params["working_set_bytes"] for r in sweep] == [2**k for k in range(14, 21)]
    assert all(r.mode == "interpreter" and r.gbps > 0 for r in results)


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([])
    assert e.value.code == 2
    assert "usage" in capsys.readouterr().err
