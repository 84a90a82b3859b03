"""Lesson 4's benchmark (gpulab.attention.measure.benchmark): a CPU smoke run of the whole report, and its
registration."""

import torch

from gpulab import lessons


def test_benchmark_runs_on_cpu_and_reports():
    from gpulab.attention.measure import benchmark as ab
    from gpulab.attention.measure import report as ar

    results, fig = ab.benchmark(
        problems=[dict(dtype=torch.float32, batch=1, heads=2, seq=17, head_dim=16, causal=True)], memory_seqs=(16,)
    )
    ours = [r for r in results if r.params.get("impl") == "gpulab" and r.params.get("kind") == "throughput"]
    assert {r.params["direction"] for r in ours} == {"forward", "forward+backward"}
    assert all(r.params["check"] == "ok" and r.params["rel_err"] < 1e-5 for r in ours)
    assert all(r.params["vs_default"] > 0 for r in ours)
    kernels = {r.params["direction"]: r.params["kernels"] for r in ours}  # every record names the versions it ran
    assert kernels == {"forward": "forward v1", "forward+backward": "forward v1, backward v1"}
    assert "forward+backward" in ar.summary_table(results)
    assert any("gpulab / SDPA default" in line for line in ar.targets(results))
    assert {r.params["kind"] for r in results} == {"throughput", "memory"}
    assert fig is not None
    by = {(r.params["impl"], r.params["direction"]): r for r in results if r.params["kind"] == "throughput"}
    assert by["naive (PyTorch)", "forward+backward"].status.startswith("unavailable: the naive forward is enough")
    assert by["SDPA FlashAttention-2", "forward"].status == "unavailable: SDPA's FlashAttention backend needs a GPU"
    assert all(r.provider == r.params["impl"] and r.params["dtype"] == "float32" for r in by.values())
    assert by["naive (PyTorch)", "forward"].bytes > by["gpulab", "forward"].bytes  # the naive count, not the tiled


def test_a_wrong_implementation_is_recorded_not_hidden(monkeypatch):
    from gpulab import bench
    from gpulab.attention.measure import benchmark as ab

    wrong = dict(ab._implementations(), gpulab=lambda q, k, v, c: ab.flash_attention(q, k, v, is_causal=not c))
    monkeypatch.setattr(ab, "_implementations", lambda: wrong)
    b = ab.throughput_benchmark([dict(dtype=torch.float32, batch=1, heads=1, seq=9, head_dim=16, causal=True)])
    results = bench.run(b, timed=False)
    ours = [r for r in results if r.provider == "gpulab"]
    assert all(r.params["check"].startswith("FAILED: rel_err") for r in ours)
    assert all(r.params["check"] == "ok" for r in results if r.provider == "SDPA default")


def test_lesson_04_names_its_benchmark():
    from gpulab.attention.measure import benchmark as ab

    assert lessons.benchmark("04") is ab.benchmark
