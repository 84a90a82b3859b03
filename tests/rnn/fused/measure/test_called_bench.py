"""``bench 07 called`` runs its torch.profiler sessions after every timing: on the H100 (2026-11-26,
``benchmarks/07_rnn_split/split/session-2026-11-26-called3.log``) one profiling session raised the host's time per
step of the main loop from 1.55 to 2.0-2.5 ms for the rest of the process, and the run whose host parts were profiled
first recorded the loop at 1.23x its CUDA graph's wall time. The recurrence is replaced by a cheap differentiable
stand-in here: what is tested is the order of the bench's parts and its records' clocks, not the kernels."""

import pytest

from gpulab.rnn.fused.measure import called_bench


def _stand_in(Wx, R, b, states, function="lstm", backend="fused"):
    out = (Wx.sum(2) + b.sum(0) + R.sum((0, 3)).unsqueeze(0).unsqueeze(0) * 0).unsqueeze(0) + states[:, :, :1] * 1
    return out, out[:, :, -1:]


@pytest.fixture
def order(monkeypatch):
    events = []
    clocks = called_bench._clocks

    def timed(fn, n, loops=3):
        events.append("time")
        return clocks(fn, n, loops)

    def profiled(fn):
        events.append("profile")
        return {"kernel": [2, 0.25], "other": [1, 0.5]}, {}

    def counted(fn):
        events.append("profile")
        return 7

    monkeypatch.setattr(called_bench, "flashrnn", _stand_in)
    monkeypatch.setattr(called_bench, "_clocks", timed)
    monkeypatch.setattr(called_bench, "_profiled", profiled)
    monkeypatch.setattr(called_bench, "_kernels_per_step", counted)
    monkeypatch.setattr(called_bench.plan, "single_sm_forward", lambda *x, **k: _stand_in(*x[:4]) + (None,))
    return events


def test_profiles_come_after_every_timing_and_records_carry_their_clocks(order):
    records = called_bench.called()
    first_profile = order.index("profile")
    assert "time" in order[:first_profile] and "time" not in order[first_profile:], order
    by_case = {r.case: r for r in records}
    main = [r for r in records if r.params.get("kind") == "called" and r.params["problem"] == "main"
            and "variant" not in r.params and r.params["mode"] != "graphed callable"]  # fmt: skip
    assert {r.params["mode"] for r in main} >= {"loop", "autograd.grad", "forward", "module loop"}
    assert all(len(r.params["wall_rounds_ms"]) == called_bench.ROUNDS for r in main)
    assert all(r.wall_ms > 0 and r.params["host_ms"] > 0 for r in records if r.params.get("kind") == "called")
    kernels = [r for r in records if r.params.get("kind") == "kernels"]
    assert len(kernels) == 1 + len(called_bench.VARIANTS) and all(r.ms == 0.75 for r in kernels)
    assert by_case["tiny breakdown"].params["kernels_per_step"] == 7
    assert by_case["tiny host parts first"].params["kernels"] == {}  # not profiled: before the timings
    assert by_case["tiny host parts last"].params["kernels_per_step"] == 3  # profiled: the last timing
