"""The plan and version 3's backward: chosen only at head dims where the records show it taking less time than the
shipped backward, and never where it cannot run (here: no sm_90 GPU)."""

import torch

from gpulab import runtime
from gpulab.attention import plan
from gpulab.attention import v3_backward_report as report
from gpulab.attention.function import flash_attention


def test_gate_matches_the_records():
    """Every head dim in V3_BACKWARD_HEAD_DIMS has a record run where version 3's best step took less time than the
    shipped backward (forward+backward) on every problem at that head dim."""
    runs = [r for r in report.runs() if r >= "b"]
    assert runs, "no records of version 3's backward"
    for d in plan.V3_BACKWARD_HEAD_DIMS:
        ok = False
        for run in runs:
            best = report.best(report.stored(run, "time"))
            steps = {i for row in best.values() for i in row if i.startswith("gpulab v3 bwd")}
            ok |= any(min(report.ratios(best, s, peer=report.SHIPPED, head_dim=d), default=0) > 1 for s in steps)
        assert ok, f"head dim {d} is in V3_BACKWARD_HEAD_DIMS but no record shows version 3's backward ahead there"


def test_switch_on_without_sm90_takes_the_two_kernels(monkeypatch):
    monkeypatch.setattr(plan, "V3_BACKWARD_HEAD_DIMS", (64,))
    plan.clear_plan_cache()
    gen = torch.Generator(device=runtime.device).manual_seed(0)
    q, k, v = (torch.randn(1, 1, 20, 64, device=runtime.device, generator=gen, requires_grad=True) for _ in "qkv")
    o = flash_attention(q, k, v, is_causal=True)
    o.sum().backward()
    p = plan.forward_plan(q, k, v, is_causal=True)
    assert plan.backward_kind(p) == "two kernels"
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    plan.clear_plan_cache()
