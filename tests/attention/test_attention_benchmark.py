"""Lesson 4's benchmark (gpulab.attention.benchmark): a CPU smoke run of the whole report, and its registration."""

import sys

import torch

from gpulab import lessons


def test_benchmark_runs_on_cpu_and_reports():
    from gpulab.attention import benchmark as ab

    results, fig = ab.benchmark(
        problems=[dict(dtype=torch.float32, batch=1, heads=2, seq=17, head_dim=16, causal=True)], memory_seqs=(16,)
    )
    ours = [r for r in results if r.params.get("impl") == "gpulab" and r.params.get("kind") == "throughput"]
    assert {r.params["direction"] for r in ours} == {"forward", "forward+backward"}
    assert all(r.params["check"] == "ok" and r.params["rel_err"] < 1e-5 for r in ours)
    assert all(r.params["vs_default"] > 0 for r in ours)
    assert "forward+backward" in ab.summary_table(results)
    assert any("gpulab / SDPA default" in line for line in ab.targets(results))
    assert {r.params["kind"] for r in results} == {"throughput", "memory"}
    assert fig is not None


def test_lesson_04_registers_a_callable_that_runs_the_report(monkeypatch):
    import gpulab.attention  # noqa: F401 - registers lesson 04's benchmark

    fn = lessons.benchmark("04")
    assert callable(fn) and fn.__module__ == "gpulab.attention"
    calls = []
    monkeypatch.setattr("gpulab.attention.benchmark.benchmark", lambda progress=None, **kw: calls.append(kw) or "ran")
    assert fn(problems=[]) == "ran" and calls == [{"problems": []}]
    assert "gpulab.attention.benchmark" in sys.modules
