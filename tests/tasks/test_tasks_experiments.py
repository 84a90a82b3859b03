"""Lesson 6's benchmark end to end at its tiny size (gpulab.tasks.experiments, .results), failures recorded, the
fused-to-alternating fallback, its registration as lesson 06's benchmark, and a GPU smoke run."""

import pytest
import torch

from gpulab import bench, lessons, tasks
from gpulab.tasks import experiments


def test_benchmark_tiny_end_to_end(tmp_path):
    results, fig = tasks.benchmark(size="tiny")
    errors = [f"{r.case}: {r.params['error']}" for r in results if "error" in r.params]
    assert not errors, errors
    acc, thr = tasks.accuracy_records(results), tasks.throughput_records(results)
    cfg = tasks.SIZES["tiny"]
    assert len(acc) == len(cfg["tasks"]) * 2 * len(cfg["test_lengths"])
    assert {r.params["model"] for r in acc} == {"LSTM", "Transformer"}
    assert all(0 <= r.params["accuracy"] <= 1 and r.params["parameters"] > 0 for r in acc)
    t = cfg["throughput"]
    # + the SDPA peer, with and without the RoPE kernel, torch.nn.LSTM, and the two floors
    assert len(thr) == len(t["lstm_heads"]) + len(t["transformer_heads"]) + 2 + 1 + 2
    assert set(tasks.throughput_floors(results)) == {"LSTM", "Transformer"}
    assert all(r.params["tokens_per_s"] > 0 for r in thr)
    assert "parity LSTM" in tasks.accuracy_table(results) and "tokens/s" in tasks.throughput_table(results)
    summary = tasks.throughput_summary(results, reference_heads=2)
    assert summary[0].startswith("reference: Transformer 2 heads") and len(summary) == 1 + len(t["lstm_heads"])
    assert "FlashRNN article: ~0.60x" in summary[1]
    path = bench.save(results, "08", root=tmp_path)
    assert path.parent.name == "08_state_tracking"
    loaded = bench.load("08", root=tmp_path)
    assert tasks.accuracy_table(loaded) == tasks.accuracy_table(results)
    assert len(fig.axes) == len(cfg["tasks"]) + 1


def _throughput(case, model, heads, ms, wall_ms, tokens=32768):
    params = {
        "kind": "throughput",
        "model": model,
        "num_heads": heads,
        "parameters": 10,
        "tokens_per_s": tokens / ms * 1e3,
    }
    common = dict(lesson="08", device="NVIDIA H100 80GB HBM3", date="2030-01-01", mode="cuda", shape=(32, 1024))
    return bench.Result(case=case, ms=ms, wall_ms=wall_ms, params=params, **common)


def test_throughput_on_both_clocks_and_the_stored_remeasurement(tmp_path):
    lesson = [
        _throughput("LSTM 1 head", "LSTM", 1, 200.0, 210.0),
        _throughput("Transformer 12 heads", "Transformer", 12, 10.0, 11.0),
    ]
    bench.save(lesson, "08", root=tmp_path)
    assert [r.ms for r in tasks.stored_throughput("h100", root=tmp_path)] == [200.0, 10.0]  # the lesson's own run
    again = [
        _throughput("LSTM 1 head", "LSTM", 1, 20.0, 22.0),
        _throughput("Transformer 12 heads", "Transformer", 12, 10.0, 12.0),
    ]
    folder = tmp_path / "08_state_tracking" / "throughput"
    folder.mkdir()
    bench.save(again, "08", path=folder / "nvidia-h100-80gb-hbm3-2030-01-02.jsonl")
    thr = tasks.stored_throughput("h100", root=tmp_path)
    assert [r.ms for r in thr] == [20.0, 10.0]  # the re-measurement wins
    row = tasks.throughput_table(thr).splitlines()[1].split()
    assert row[-3:] == ["0.50x", "22.00", "0.55x"]  # device 10/20; wall 12/22
    assert (
        "0.50x the Transformer's tokens/s (device time; 0.55x on the eager wall clock"
        in tasks.throughput_summary(thr)[1]
    )
    assert tasks.stored_throughput("a100", root=tmp_path) == []
    later = [
        _throughput("LSTM 1 head", "LSTM", 1, 15.0, 16.0),
        _throughput("Transformer 12 heads", "Transformer", 12, 9.0, 9.5),
    ]
    bench.save(later, "08", path=tmp_path / "08_state_tracking" / "nvidia-h100-80gb-hbm3-2030-01-03.jsonl")
    assert [r.ms for r in tasks.stored_throughput("h100", root=tmp_path)] == [15.0, 9.0]  # a newer lesson run wins


def test_throughput_checks_every_model_against_float64_before_timing(monkeypatch):
    """The harness runs every model's check before it times any; a model made wrong on purpose (the SDPA peer's
    attention not causal, its float64 copy on the correct naive attention) gets a FAILED check in its record and is
    still timed; every record carries the fields lesson 6's readers use."""
    from gpulab.bench import report
    from gpulab.tasks import models, training

    events = []
    expected, time_callable = training._TrainStep.expected, report.time_callable
    monkeypatch.setattr(training._TrainStep, "expected", lambda self: events.append("check") or expected(self))
    monkeypatch.setattr(report, "time_callable", lambda *a, **k: events.append("time") or time_callable(*a, **k))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setitem(models.ATTENTION, "sdpa", lambda q, k, v, is_causal: sdpa(q, k, v, is_causal=False))

    out = tasks.throughput("tiny")
    t = tasks.SIZES["tiny"]["throughput"]
    n = len(t["lstm_heads"]) + len(t["transformer_heads"]) + 5  # + the SDPA peer with and without the RoPE kernel,
    # torch.nn.LSTM, and the two floors
    assert events == ["check"] * n + ["time"] * n
    assert [r.case for r in out] == [
        "LSTM 1 head",
        "LSTM 2 heads",
        "Transformer 1 head (naive)",
        "Transformer 2 heads (naive)",
        "Transformer 2 heads (sdpa)",
        "Transformer 2 heads (sdpa, RoPE as PyTorch ops)",
        "LSTM 1 head (torch.nn.LSTM)",
        "Floor: LSTM without recurrence",
        "Floor: Transformer without attention",
    ]
    *right, wrong, wrong_too, torch_lstm, floor_lstm, floor_transformer = out
    right += [torch_lstm, floor_lstm, floor_transformer]
    assert all(r.params["check"] == "ok" and r.params["rel_err"] < 1e-5 for r in right)
    for w in (wrong, wrong_too):
        assert w.params["check"].startswith("FAILED: logits") and w.status == "ok"
    assert wrong_too.params["rope_kernel"] is False and "rope_kernel" not in wrong.params
    for r in out:
        p = r.params
        if p["model"] in ("floor", "torch LSTM"):
            assert (p["num_heads"], p.get("like")) in ((None, "LSTM"), (None, "Transformer"), (1, None))
            assert p["check"] == "ok" and p["tokens_per_s"] > 0 and "backend" not in p and p["attention"] is None
            continue
        assert p["kind"] == "throughput" and p["model"] in ("LSTM", "Transformer") and p["num_heads"] >= 1
        assert (p["d_model"], p["num_layers"], p["parameters"] > 0) == (t["d_model"], t["num_layers"], True)
        assert p["tokens_per_s"] == pytest.approx(t["batch_size"] * t["length"] / (r.ms * 1e-3))
        assert r.wall_ms > 0 and r.shape == [t["batch_size"], t["length"]] and r.dtype == "float32"
        assert p.get("backend") == ("vanilla" if p["model"] == "LSTM" else None)
        assert p["attention"] == (None if p["model"] == "LSTM" else r.case.split("(")[1].split(",")[0].rstrip(")"))
    assert len(tasks.throughput_records(out)) == n and "Transformer 2 heads (sdpa)" in tasks.throughput_table(out)


def test_a_model_that_cannot_be_built_is_recorded_with_its_reason(monkeypatch):
    make_model = experiments.make_model

    def refuse(kind, *args, **kwargs):
        if kind == "Transformer":
            raise RuntimeError("no Transformer here (test)")
        return make_model(kind, *args, **kwargs)

    monkeypatch.setattr(experiments, "make_model", refuse)
    out = tasks.throughput("tiny")
    failed = [r for r in out if r.params["model"] == "Transformer"]
    assert failed and all(r.params["error"] == "RuntimeError: no Transformer here (test)" for r in failed)
    assert all("tokens_per_s" not in r.params and r.ms != r.ms for r in failed)
    assert [r.case for r in tasks.throughput_records(out)] == [
        "LSTM 1 head",
        "LSTM 2 heads",
        "LSTM 1 head (torch.nn.LSTM)",
        "Floor: LSTM without recurrence",
        "Floor: Transformer without attention",
    ]


def test_train_step_throughput_checks_and_times_one_model():
    model = experiments.make_model("Transformer", "parity", d_model=16, num_heads=2, num_layers=1)
    r = tasks.train_step_throughput(model, "parity", 2, 8, case="one step", params={"kind": "throughput"})
    assert (r.case, r.provider, r.status, r.params["check"]) == ("one step", "train step", "ok", "ok")
    assert r.params["kind"] == "throughput" and r.params["tokens_per_s"] == pytest.approx(16 / (r.ms * 1e-3))


def test_lesson_08_registers_its_benchmark():
    assert lessons.benchmark("08") is tasks.benchmark


def test_a_failing_case_is_recorded_not_raised(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(experiments, "train", broken)
    out = experiments.compare("parity", "tiny", models=("Transformer",))
    assert len(out) == 1 and "kernel exploded" in out[0].params["error"]
    assert tasks.accuracy_records(out) == []


def test_lstm_falls_back_to_alternating_when_fused_does_not_fit(monkeypatch):
    from gpulab.rnn.fused import plan

    def refuse(*args, **kwargs):
        raise ValueError("the fused forward kernel cannot hold head dim 16 (test)")

    plan.clear_cache()
    monkeypatch.setattr(plan, "choose", refuse)
    model, backend, note = experiments.lstm_or_fallback(
        "parity", 0, torch.float32, backend="fused", d_model=16, num_heads=1
    )
    assert backend == "alternating" and "fused backend refused" in note and "1 head(s) of 16" in note
    assert all(block.mixer.backend == "alternating" for block in model.blocks)
    monkeypatch.undo()
    plan.clear_cache()
    model, backend, note = experiments.lstm_or_fallback(
        "parity", 0, torch.float32, backend="fused", d_model=16, num_heads=2
    )
    assert backend == "fused" and note == ""


@pytest.mark.gpu
def test_gpu_smoke_fused_lstm_and_flash_transformer():
    """A few training steps of both models with the GPU paths (fused LSTM, FlashAttention), fp32 and bf16."""
    assert tasks.default_attention() == "flash" and tasks.default_rnn_backend() == "fused"
    for dtype in (torch.float32, torch.bfloat16):
        for kind, sizes in (("LSTM", {"num_heads": 1}), ("Transformer", {"num_heads": 4})):
            model = experiments.make_model(kind, "parity", dtype=dtype, d_model=64, num_layers=2, **sizes)
            assert model.head.weight.is_cuda
            log = tasks.train(model, "parity", steps=60, batch_size=64, length=16, lr=1e-2)
            assert all(map(torch.isfinite, map(torch.tensor, log.losses)))
            assert sum(log.losses[-5:]) < sum(log.losses[:5]), f"{kind} {dtype}: the loss did not go down"
            assert 0 <= tasks.evaluate(model, "parity", 100, samples=256) <= 1
    r = tasks.train_step_throughput(
        experiments.make_model("LSTM", "parity", dtype=torch.bfloat16, d_model=768, num_heads=12), "parity", 4, 256
    )
    assert r.params["tokens_per_s"] > 0


def test_stored_rope_reads_the_newest_run(tmp_path):
    assert tasks.stored_rope("h100", root=tmp_path) == []
    folder = tmp_path / "08_state_tracking" / "rope"
    common = dict(lesson="08", device="NVIDIA H100 80GB HBM3", mode="cuda", shape=(32, 1024, 12, 64))
    for tag, ms in (("a", 3.0), ("b", 0.4)):
        run = [bench.Result(case="qkv heads + RoPE forward+backward (kernel)", ms=ms, date="2030-01-01", **common)]
        bench.save(run, "08", path=folder / f"nvidia-h100-80gb-hbm3-2030-01-01-{tag}-rope.jsonl")
    assert [r.ms for r in tasks.stored_rope("h100", root=tmp_path)] == [0.4]  # run b, the newest
    assert tasks.stored_rope("a100", root=tmp_path) == []


def test_throughput_bound_reads_the_floors_against_the_baseline():
    """The bound is the baseline's step over the LSTM floor's, each share the step less its floor; a run without the
    floors or the baseline gives None."""

    def rec(case, model, heads, wall, **extra):
        r = _throughput(case, model, heads, wall - 0.1, wall)
        r.params.update(extra)
        return r

    run = [
        rec("LSTM 1 head", "LSTM", 1, 20.0),
        rec("LSTM 12 heads", "LSTM", 12, 11.0),
        rec("Transformer 12 heads (sdpa)", "Transformer", 12, 10.0, attention="sdpa"),
        rec("LSTM 1 head (torch.nn.LSTM)", "torch LSTM", 1, 28.0, recurrence_dtype="float16"),
        rec("Floor: LSTM without recurrence", "floor", None, 8.0, like="LSTM"),
        rec("Floor: Transformer without attention", "floor", None, 8.5, like="Transformer"),
    ]
    b = tasks.throughput_bound(run)
    assert (b["T"], b["FL"], b["FT"], b["peer"], b["peer_dtype"]) == (10.0, 8.0, 8.5, 28.0, "float16")
    assert b["bound"] == pytest.approx(1.25) and b["attention"] == pytest.approx(1.5)
    assert b["rec"] == {1: pytest.approx(12.0), 12: pytest.approx(3.0)} and b["L"] == {1: 20.0, 12: 11.0}
    assert tasks.throughput_bound(run[:4]) is None  # no floors
    assert tasks.throughput_bound(run, baseline="Transformer 6 heads (sdpa)") is None
    assert tasks.throughput_bound([r for r in run if r.params["model"] != "torch LSTM"])["peer"] is None
    stored = tasks.throughput_bound(tasks.stored_throughput("h100"))
    assert stored is not None and stored["bound"] == stored["T"] / stored["FL"]
