"""Version 3's backward on a Hopper GPU (``pytest -m gpu``): dQ, dK, dV at full size against float64 autograd, and the
race test (dK and dV equal bit for bit over repeated runs; dQ within its fp32 atomic additions' rounding). Skipped
without CUDA (tests/conftest.py) and where :func:`gpulab.attention.v3.backward.supported` says no. The same checks,
recorded, are ``scripts/gpu_v3_backward.py``'s check and race parts (records ``benchmarks/05_attention_hopper/v3/``)."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpulab import check
from gpulab.attention.plan import attention_forward
from gpulab.attention.v3 import backward as v3b

pytestmark = pytest.mark.gpu
DQ_RACE_BOUND = 1e-4
"""dQ's largest relative difference between runs (fp32 additions in another order; 2.8e-5 in the H100 records)."""


def _inputs(b, h, n_q, n_k, d, dtype, causal, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, do = (torch.randn(b, h, n_q, d, device="cuda", dtype=dtype, generator=gen) for _ in "qd")
    k, v = (torch.randn(b, h, n_k, d, device="cuda", dtype=dtype, generator=gen) for _ in "kv")
    ok, why = v3b.supported(q, k, v, causal)
    if not ok:
        pytest.skip(why)
    o, lse = attention_forward(q, k, v, is_causal=causal)
    return q, k, v, o, do, lse


STEPS = [1, 2, 3, 4, 5, 6, 7, "5+8", "7+8", "5+9", "7+9", "5+kv", "7+kv", "5+k", "5+11", "7+11", "5+kv+11",
         "7+kv+11", "3+11"]  # fmt: skip
"""Steps 1-7, step 8 (dq_cast) on the writer steps 5 and 7, step 9 (fused_prep), step 10 (kv_regs) and step 11
(stats_smem) on them too."""


def _cfg(step):
    if isinstance(step, str) and step.endswith("+11"):
        kv = step[2:-3] or "none"
        return v3b.V3BackwardConfig(step=int(step[0]), kv_regs=kv, stats_smem=True)
    if isinstance(step, str) and step[2:] in ("k", "v", "kv"):
        return v3b.V3BackwardConfig(step=int(step[0]), kv_regs=step[2:])
    if isinstance(step, str) and step.endswith("+8"):
        return v3b.V3BackwardConfig(step=int(step[0]), dq_cast=True, writer_regs=32)
    if isinstance(step, str):
        return v3b.V3BackwardConfig(step=int(step[0]), fused_prep=True)
    return v3b.V3BackwardConfig(step=step)


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_gradients_against_float64(dtype, d, causal, step):
    for shape in ((2, 3, 1000, 1000), (1, 2, 300, 517), (2, 2, 17, 17), (1, 2, 517, 300)):
        q, k, v, o, do, lse = _inputs(*shape, d, dtype, causal)
        torch.full((3 * (q.numel() + k.numel()),), float("nan"), device="cuda")  # freed: unwritten outputs show
        got = v3b.attention_backward(do, q, k, v, o, lse, causal, cfg=_cfg(step))
        q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
        with sdpa_kernel(SDPBackend.MATH):
            ref = torch.autograd.grad(F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal),
                                      (q64, k64, v64), do.double())  # fmt: skip
        for name, g, r in zip(("dq", "dk", "dv"), got, ref):
            err = check.relative_error(g, r)
            assert err <= check.tolerance(dtype), f"{name} {shape}: rel err {err:.3g}"


@pytest.mark.parametrize("step", [3, 4, 5, 6, 7, "5+8", "7+8", "5+9", "5+kv", "7+kv", "5+11", "7+kv+11"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_race(d, causal, step, runs=30):
    """Step 8 too: its buffer and counters, left zeroed by each call, start the next one (dQ would grow if not)."""
    q, k, v, o, do, lse = _inputs(4, 1024 // d // 2, 2000, 2000, d, torch.bfloat16, causal, seed=7)
    cfg = _cfg(step)
    dq0, dk0, dv0 = v3b.attention_backward(do, q, k, v, o, lse, causal, cfg=cfg)
    for _ in range(runs):
        dq, dk, dv = v3b.attention_backward(do, q, k, v, o, lse, causal, cfg=cfg)
        assert torch.equal(dk, dk0) and torch.equal(dv, dv0), "dK or dV differ between runs: a race"
        assert check.relative_error(dq, dq0) < DQ_RACE_BOUND


@pytest.mark.parametrize("step", [3, 5, 7])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_stats_in_shared_memory_change_no_bit_of_dk_dv(d, causal, step):
    """Step 11 moves where LSE and D are read from (the ring slot instead of global memory), not the arithmetic: not
    causal, dK and dV equal the same step's without it bit for bit (odd lengths: the rows past Nq that the producer
    zero-fills). Causal they differ in the last bits on the H100 (bwd run m: the mask is written as (key0 - start_m)
    + r <= c there and ptxas schedules the scale, mask and LSE subtraction differently), so there both are held to
    each other within the dtype's tolerance."""
    q, k, v, o, do, lse = _inputs(2, 3, 1000, 777, d, torch.bfloat16, causal, seed=3)
    base = v3b.V3BackwardConfig(step=step)
    _, dk0, dv0 = v3b.attention_backward(do, q, k, v, o, lse, causal, cfg=base)
    dq, dk, dv = v3b.attention_backward(
        do, q, k, v, o, lse, causal, cfg=v3b.V3BackwardConfig(step=step, stats_smem=True)
    )
    if causal:
        for name, g, r in (("dk", dk, dk0), ("dv", dv, dv0)):
            err = check.relative_error(g, r)
            assert err <= check.tolerance(torch.bfloat16), f"{name}: rel diff {err:.3g}"
    else:
        assert torch.equal(dk, dk0) and torch.equal(dv, dv0)
    assert torch.isfinite(dq).all()


@pytest.mark.parametrize("n, d, causal", [(1024, 64, True), (4096, 64, True), (4096, 64, False), (4096, 128, False)])
def test_plan_takes_version_3_from_its_length(n, d, causal):
    """flash_attention's backward: version 3's from plan.V3_BACKWARD_MIN_SEQ on, the two kernels before; the
    gradients right either way."""
    from gpulab.attention import plan
    from gpulab.attention.function import flash_attention

    q, k, v, o, do, lse = _inputs(1, 2, n, n, d, torch.bfloat16, causal, seed=3)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    got = torch.autograd.grad(flash_attention(qg, kg, vg, is_causal=causal), (qg, kg, vg), do)
    want = "one pass, Gluon" if n >= plan.V3_BACKWARD_MIN_SEQ.get((d, causal), 1 << 62) else "two kernels"
    assert plan.backward_kind(plan.forward_plan(qg, kg, vg, is_causal=causal)) == want
    with sdpa_kernel(SDPBackend.MATH):
        q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
        ref = torch.autograd.grad(F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal),
                                  (q64, k64, v64), do.double())  # fmt: skip
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        assert check.relative_error(g, r) <= check.tolerance(torch.bfloat16), name
