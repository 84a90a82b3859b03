"""Lesson 4's short sequences: version 1's backward on the heads-first grid (every head's longest program first), the
short problems' own tiles, the backward's allocations, and ``bench 05 short`` on CPU."""

import pytest
import torch

from gpulab import attention as A
from gpulab import check
from gpulab.attention import configs as C
from gpulab.attention import plan as P
from gpulab.attention.measure import short_bench
from gpulab.attention.v1 import backward as B


def _two_kernels(plan, q, k, v, do, heads_first, block=16):
    """dQ, dK, dV of version 1's two kernels on ``plan`` (the forward's outputs recomputed), on the grid asked for."""
    o, lse = A.attention_forward(q, k, v, plan.is_causal, window_size=plan.window, enable_gqa=plan.group > 1)
    cfg = A.AttentionConfig(block, block, C.attention_config("dq", plan.d).block_d, 4, 1)
    launches = B.backward_launches(plan, cfg, cfg, heads_first=heads_first)
    return P.run_backward(plan, do, q, k, v, o, lse, launches=launches), launches


@pytest.mark.parametrize(
    "shape",
    [(2, 3, 37, 37, 16, True, (-1, -1), 1), (1, 4, 17, 33, 24, False, (5, 0), 2), (3, 1, 1, 5, 16, False, (-1, -1), 1)],
    ids=["causal", "window-gqa", "one-token"],
)
def test_heads_first_grid_gives_the_reference_gradients(attention_inputs, shape):
    b, h, nq, nk, d, causal, window, group = shape
    q, k, v, do = attention_inputs(b, h, nq, nk, d)
    k, v = k[:, : h // group].contiguous(), v[:, : h // group].contiguous()
    plan = P.forward_plan(q, k, v, is_causal=causal, enable_gqa=group > 1, window_size=window)
    (dq, dk, dv), launches = _two_kernels(plan, q, k, v, do, heads_first=True)
    dq_launch, dkdv_launch = launches
    assert dq_launch.grid[:2] == (b * h, -(-nq // 16)) and dkdv_launch.grid[:2] == (b * h // group, -(-nk // 16))
    _, rq, rk, rv = A.attention_reference(q, k, v, is_causal=causal, do=do, enable_gqa=group > 1,
                                          window_size=window)  # fmt: skip
    for name, got, ref in (("dQ", dq, rq), ("dK", dk, rk), ("dV", dv, rv)):
        check.assert_close(got, ref, name=name)


def test_heads_first_is_off_by_default_and_never_for_packed_batches(attention_inputs):
    q, k, v, _ = attention_inputs(2, 2, 33, 33, 16)
    plan = P.forward_plan(q, k, v, is_causal=True)
    cfg = C.attention_config("dq", 16)
    dq_launch, _ = B.backward_launches(plan, cfg, cfg)
    assert dq_launch.kwargs["HEADS_FIRST"] is B.HEADS_FIRST_CAUSAL
    packed = P.Plan(q, k, plan.scale, True, False, None, None, True)
    packed.varlen = True
    dq_launch, _ = B.backward_launches(packed, cfg, cfg, heads_first=True)
    assert dq_launch.kwargs["HEADS_FIRST"] is False


def test_short_problems_take_their_own_tiles(monkeypatch):
    """Both lengths at most SHORT_SEQ: PREFERRED_SHORT's tile (fitted); one longer: the long sequences' tile."""
    monkeypatch.setitem(C.PREFERRED_SHORT["dkdv"], 128, (64, 64, 8, 2))
    n = C.SHORT_SEQ
    short = C.attention_config("dkdv", 128, torch.bfloat16, n, n, gpu="H100", interpreter=False)
    assert (short.block_m, short.block_n, short.num_warps, short.num_stages) == (64, 64, 8, 2)
    long = C.attention_config("dkdv", 128, torch.bfloat16, n, 2 * n, gpu="H100", interpreter=False)
    assert (long.block_m, long.block_n) == (64, 128)
    unlisted = C.attention_config("forward", 128, torch.bfloat16, n, n, gpu="H100", interpreter=False)
    assert unlisted == C.attention_config("forward", 128, torch.bfloat16, None, None, gpu="H100", interpreter=False)


def test_version_3s_backward_allocates_no_gradients_of_the_plan(monkeypatch, attention_inputs):
    """Where the plan's backward is version 3's, run_backward hands it the call without allocating dQ, dK, dV first
    (version 3 allocates its own)."""
    q, k, v, do = attention_inputs(1, 2, 17, 17, 16)
    plan = P.forward_plan(q, k, v)
    o, lse = A.attention_forward(q, k, v)
    made = []
    real = check.new_output
    monkeypatch.setattr(check, "new_output", lambda *a, **kw: made.append(a) or real(*a, **kw))
    sentinel = (q, k, v)
    monkeypatch.setattr(P.v3_backward, "attention_backward", lambda *a, **kw: sentinel)
    cfg = P.v3_backward.V3BackwardConfig()
    assert P.run_backward(plan, do, q, k, v, o, lse, launches=P.V3Backward(cfg)) is sentinel
    assert made == []
    P.run_backward(plan, do, q, k, v, o, lse)  # the two kernels: dQ, dK, dV and D
    assert len(made) == 4


def test_version_3s_forward_allocates_no_outputs_of_the_plan(monkeypatch, attention_inputs):
    """Where the plan's forward is version 3's, run_forward hands it the call without allocating O and LSE first."""
    q, k, v, _ = attention_inputs(1, 2, 17, 17, 16)
    plan = P.Plan(q, k, 0.25, False, False, None, None, True)
    plan.version = 3
    made = []
    real = check.new_output
    monkeypatch.setattr(check, "new_output", lambda *a, **kw: made.append(a) or real(*a, **kw))
    monkeypatch.setattr(P.v3_forward, "attention_forward", lambda *a, **kw: (q, k))
    assert P.run_forward(plan, q, k, v) == (q, k) and made == []
    plan.version = 1
    o, lse = P.run_forward(plan, q, k, v)
    assert len(made) == 2
    check.assert_close(o, A.attention_reference(q, k, v, scale=0.25), name="O")


def test_short_bench_checks_and_times_every_line_on_cpu():
    case = dict(dtype=torch.float16, batch=1, heads=2, seq=17, head_dim=16, causal=True)
    results = short_bench.short(cases=[case])
    ran = [r for r in results if r.status == "ok"]
    assert {r.provider for r in ran} >= {"gpulab", "gpulab bwd v1 16/16/4/1 dq 16/16/4/1"}
    assert all(r.params["check"] == "ok" and r.params["rel_err"] < 1e-2 for r in ran)
    assert all(r.params["do_bench_ms"] == r.ms for r in ran)
    assert {r.params["direction"] for r in ran} == {"forward", "forward+backward"}
    assert "x cuDNN" in short_bench.table(results)
    fwd_bwd = [r for r in ran if r.params["direction"] == "forward+backward"]
    for i, r in enumerate(fwd_bwd):  # stand-in ratios (no cuDNN here): the last line the fastest on both clocks
        r.params.update(vs_cudnn=1.0 + i, wall_vs_cudnn=0.5 + i)
    summary = short_bench.best(results)
    assert fwd_bwd[-1].provider.removeprefix("gpulab ") in summary and f"{len(fwd_bwd):.3g}" in summary


@pytest.mark.gpu
@pytest.mark.parametrize(
    "problem",
    [(128, True, torch.bfloat16), (128, True, torch.float16), (128, False, torch.bfloat16), (64, True, torch.bfloat16)],
    ids=["d128-causal-bf16", "d128-causal-fp16", "d128-bf16", "d64-causal-bf16"],
)
def test_gpu_every_short_line_gives_the_reference_gradients(attention_inputs, problem):
    """Each of bench 05 short's version 1 lines for the head dim (tiles and grid order) on the GPU at N = 1,024 and a
    ragged N = 1,000 (two batch elements, two heads), against float64.

    Each element may differ by the dtype's tolerance plus twice the worst error of SDPA's own backward (the same
    inputs and dtype) against the same reference, as FlashAttention's tests bound theirs: every flash backward
    computes D = rowsum(dO * O) from the rounded O, so at a key that many queries attend with a probability near
    one (the first keys of a causal row) dS = P (dP - D) cancels and dK's error there is far above the tensor's."""
    d, causal, dtype = problem
    for n in (1024, 1000):
        q, k, v, do = attention_inputs(2, 2, n, n, d, dtype)
        plan = P.forward_plan(q, k, v, is_causal=causal)
        o, lse = A.attention_forward(q, k, v, causal)
        _, rq, rk, rv = A.attention_reference(q, k, v, is_causal=causal, do=do)
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal).backward(do)
        peer = [float((t.grad.double() - r).abs().max()) for t, r in zip(leaves, (rq, rk, rv))]
        for kv, dq_tile, heads_first in short_bench.V1_TILES[d]:
            cfg_kv, cfg_q = (A.AttentionConfig(t[0], t[1], d, t[2], t[3]) for t in (kv, dq_tile))
            launches = B.backward_launches(plan, cfg_kv, cfg_q, heads_first=heads_first)
            grads = P.run_backward(plan, do, q, k, v, o, lse, launches=launches)
            for name, got, ref, worst in zip(("dQ", "dK", "dV"), grads, (rq, rk, rv), peer):
                check.assert_close(got, ref, dtype=dtype, atol=2 * worst,
                                   name=f"{name} {kv} {dq_tile} heads_first={heads_first} N={n}")  # fmt: skip
