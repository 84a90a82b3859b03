"""The one-pass attention backward (gpulab.attention.experiments.v1_backward_fused: five products, dQ through fp32
atomic adds) against the float64 reference in Triton's interpreter, at odd sizes; when it is chosen. Full sizes:
`pytest -m gpu`."""

import pytest
import torch

from gpulab import attention as A
from gpulab import check, runtime
from gpulab.attention import plan as attention_plan
from gpulab.attention.configs import AttentionConfig
from gpulab.attention.experiments import v1_backward_fused as backward_fused
from gpulab.attention.plan import backward_plan


def _inputs(b, h, nq, nk, d, dtype, device="cpu"):
    q = check.random_tensor(b, h, nq, d, dtype=dtype, device=device)
    k = check.random_tensor(b, h, nk, d, dtype=dtype, device=device)
    v = check.random_tensor(b, h, nk, d, dtype=dtype, device=device)
    return q, k, v


SMALL = ((16, AttentionConfig(16, 32, 16, 4, 1)), (32, AttentionConfig(16, 16, 32, 4, 1)),
         (64, AttentionConfig(32, 16, 64, 4, 1)))  # fmt: skip
FORCED = backward_fused.FusedBackwardConfig(min_work=0, tiles=SMALL, any_device=True)
"""The one-pass kernel wherever its tiles hold the head dim: on the interpreter, at tiny sizes (a GPU only, else)."""


@pytest.mark.parametrize(
    "b, h, nq, nk, d, causal, dtype",
    [
        (1, 2, 17, 40, 16, True, torch.float16),  # Nq < Nk, ragged blocks, causal top-left: keys past Nq see no one
        (2, 1, 45, 17, 24, True, torch.float16),  # Nq > Nk: rows past Nk see every key
        (1, 1, 33, 33, 40, False, torch.float16),
        (1, 1, 1, 19, 8, False, torch.float32),
    ],
)
def test_fused_backward_matches_float64(b, h, nq, nk, d, causal, dtype):
    q, k, v = _inputs(b, h, nq, nk, d, dtype)
    do = check.random_tensor(b, h, nq, d, dtype=dtype)
    o, lse = A.attention_forward(q, k, v, is_causal=causal)
    plan = backward_plan(do, q, k, v, o, lse, causal, None, False, None)
    assert backward_fused.use_fused(plan, FORCED)
    before = plan.backward
    with runtime.poisoning(True):
        dq, dk, dv = backward_fused.attention_backward(do, q, k, v, o, lse, is_causal=causal, config=FORCED)
    assert plan.backward is before  # the cached plan is not changed by the experiment
    _, rq, rk, rv = A.attention_reference(q, k, v, is_causal=causal, do=do)
    for name, g, ref in (("dQ", dq, rq), ("dK", dk, rk), ("dV", dv, rv)):
        assert g.dtype == dtype
        check.assert_close(g, ref, dtype=dtype, rtol=1e-2 if dtype != torch.float32 else None, name=name)


class _MustNotRun:
    """An atomic experiment's launches that fail if run: where determinism is asked for, the plan takes the two
    kernels instead."""

    kind, atomic = "must not run", True

    def run(self, *args):
        raise AssertionError("an atomic backward ran although determinism was asked for")


def test_fused_backward_is_chosen_only_where_it_pays():
    q, k, v = _inputs(1, 1, 8, 8, 16, torch.float16)
    do = check.random_tensor(1, 1, 8, 16, dtype=torch.float16)
    o, lse = A.attention_forward(q, k, v)
    plan = backward_plan(do, q, k, v, o, lse, False, None, False, None)
    assert not backward_fused.use_fused(plan)  # on the CPU, and far below FUSED_MIN_WORK
    anywhere = backward_fused.FusedBackwardConfig(min_work=0, any_device=True)
    assert not backward_fused.use_fused(plan, anywhere)  # no tiles for d=16 in FUSED_CONFIGS
    A.attention_backward(do, q, k, v, o, lse)
    assert plan.backward.__class__ is tuple  # the two kernels
    with pytest.raises(AssertionError, match="determinism"):
        attention_plan.run_backward(plan, do, q, k, v, o, lse, launches=_MustNotRun())
    # determinism asked for: the two kernels, even where the one-pass kernel was handed in
    with torch.inference_mode(False):
        torch.use_deterministic_algorithms(True)
        try:
            assert not backward_fused.use_fused(plan, FORCED)
            dq, dk, dv = attention_plan.run_backward(plan, do, q, k, v, o, lse, launches=_MustNotRun())
        finally:
            torch.use_deterministic_algorithms(False)
    _, rq, _, _ = A.attention_reference(q, k, v, do=do)
    check.assert_close(dq, rq, dtype=torch.float16, rtol=1e-2, name="dQ (deterministic)")
    with pytest.raises(TypeError, match="FusedBackwardConfig"):
        backward_fused.attention_backward(do, q, k, v, o, lse, config={"min_work": 0})
    with pytest.raises(TypeError, match="min_work"):
        backward_fused.FusedBackwardConfig(min_work=-1)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "nq, nk, d, causal", [(4096, 4096, 128, True), (3001, 1200, 80, True), (2000, 4097, 64, False)]
)
def test_fused_backward_full_size_on_gpu(nq, nk, d, causal):
    q, k, v = _inputs(2, 4, nq, nk, d, torch.bfloat16, device="cuda")
    do = check.random_tensor(2, 4, nq, d, dtype=torch.bfloat16, device="cuda")
    o, lse = A.attention_forward(q, k, v, is_causal=causal)
    plan = backward_plan(do, q, k, v, o, lse, causal, None, False, None)
    # each problem is past FUSED_MIN_WORK (B*H*Nq*Nk*d; 3001 x 1000 x 80 was not, once the threshold rose)
    assert backward_fused.use_fused(plan), (2 * 4 * nq * nk * d, backward_fused.FUSED_MIN_WORK)
    grads = {}
    for fused in (True, False):  # version 1's backwards here, not the plan's choice (version 3's at these lengths)
        launches = backward_fused.fused_backward(plan) if fused else attention_plan.two_kernel_backward(plan)
        with runtime.poisoning(True):
            grads[fused] = attention_plan.run_backward(plan, do, q, k, v, o, lse, launches=launches)
    qr, kr, vr = (t.float().requires_grad_(True) for t in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=causal).backward(do.float())
    for name, g1, g2, ref in zip(("dQ", "dK", "dV"), grads[True], grads[False], (qr.grad, kr.grad, vr.grad)):
        assert torch.isfinite(g1).all(), f"{name}: NaN or inf (an element never written?)"
        # compared as a whole: a few early causal rows lose digits in dP - D in bf16, for every kernel (see
        # test_attention_hopper.test_version2_gradients_full_size_on_gpu), and dQ's atomic sums change order
        e_two, e_ref = float(check.relative_error(g1, g2)), float(check.relative_error(g1, ref))
        assert e_two < 1e-2 and e_ref < check.tolerance(torch.bfloat16), f"{name}: {e_two:.3g} / {e_ref:.3g}"
