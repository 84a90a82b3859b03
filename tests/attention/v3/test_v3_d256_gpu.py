"""Version 3's forward at head dim 256 on a Hopper GPU (``pytest -m gpu``): against float64 attention at N = 1, 17,
1000 and 4096 (causal and not, bf16 and fp16, the configs and the step ladder), windows and grouped heads, a race
test, and the plan's routing (``version=3`` runs it; ``version=None`` takes it only once ``plan.V3_HEAD_DIMS`` lists
256), with the backward the plan gives it (version 1's two kernels: version 3's backward refuses d=256). Outputs are
poisoned (a freed NaN buffer the allocator hands out again, and ``GPULAB_POISON`` for the plan's), so unwritten rows
show. Skipped without CUDA (tests/conftest.py) and where :func:`gpulab.attention.v3.forward.supported` says no."""

import pytest
import torch

from gpulab import check
from gpulab.attention import plan as attention_plan
from gpulab.attention import reference
from gpulab.attention.function import FlashAttentionFunction, flash_attention
from gpulab.attention.v3 import forward as v3

pytestmark = pytest.mark.gpu
D = 256


def _inputs(b, h, h_kv, n_q, n_k, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, h, n_q, D, device="cuda", dtype=dtype, generator=gen)
    k, v = (torch.randn(b, h_kv, n_k, D, device="cuda", dtype=dtype, generator=gen) for _ in "kv")
    ok, why = v3.supported(q, k, v, enable_gqa=h_kv != h)
    if not ok:
        pytest.skip(why)
    return q, k, v


def _poison(q):
    torch.full((4 * q.numel(),), float("nan"), device="cuda", dtype=torch.float32)  # freed: o and lse reuse it


def _check(q, k, v, causal, o, lse, window=(-1, -1), what=""):
    gqa = k.shape[1] != q.shape[1]
    q64, k64, v64 = (t.double() for t in (q, k, v))
    ref_o = reference.attention_reference(q64, k64, v64, causal, enable_gqa=gqa, window_size=window)
    ref_lse = reference.logsumexp_reference(q64, k64, causal, enable_gqa=gqa, window_size=window)
    assert o.shape == q.shape and o.dtype == q.dtype and lse.shape == q.shape[:3] and lse.dtype == torch.float32
    assert torch.isfinite(o).all() and torch.isfinite(lse).all(), f"{what}: NaN or inf: an unwritten or broken row"
    err_o, err_lse = check.relative_error(o, ref_o), check.relative_error(lse, ref_lse)
    assert err_o <= check.tolerance(q.dtype), f"{what} o: relative error {err_o:.3g}"
    assert err_lse <= 1e-3, f"{what} lse: relative error {err_lse:.3g}"


SHAPES = ((1, 1, 1, 1), (2, 2, 17, 17), (2, 3, 1000, 1000), (1, 4, 4096, 4096), (1, 2, 300, 517), (1, 2, 517, 129))


@pytest.mark.parametrize("step", [1, 2, 3, None, "short"], ids=["step1", "step2", "step3", "default", "short"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_d256_forward_matches_float64(dtype, causal, step):
    for b, h, n_q, n_k in SHAPES:
        q, k, v = _inputs(b, h, h, n_q, n_k, dtype, seed=n_q + 3 * n_k)
        cfg = v3.v3_config(D, causal, seq=n_q) if step == "short" else v3.v3_config(D, causal, step)
        _poison(q)
        o, lse = v3.attention_forward(q, k, v, causal, cfg=cfg)
        _check(q, k, v, causal, o, lse, what=f"{(b, h, n_q, n_k)} {cfg}")


@pytest.mark.parametrize(
    "h, h_kv, n_q, n_k, causal, window",
    [(4, 2, 1000, 1000, False, (3, 7)), (2, 2, 517, 300, False, (-1, 0)), (4, 1, 300, 517, True, (-1, -1)),
     (2, 2, 1000, 1000, False, (200, -1)), (4, 2, 17, 17, False, (0, 0))],
)  # fmt: skip
def test_d256_windows_and_grouped_heads(h, h_kv, n_q, n_k, causal, window):
    q, k, v = _inputs(2, h, h_kv, n_q, n_k, torch.bfloat16, seed=n_q + h_kv)
    _poison(q)
    o, lse = v3.attention_forward(q, k, v, causal, enable_gqa=h_kv != h, window_size=window)
    _check(q, k, v, causal, o, lse, window, what=f"{(h, h_kv, n_q, n_k)} window {window}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_d256_race_free(causal, runs=100):
    q, k, v = _inputs(4, 8, 8, 2000, 2000, torch.bfloat16, seed=7)  # 4 * 8 * 16 tiles: more than the SMs
    o0, lse0 = v3.attention_forward(q, k, v, causal)
    differing = sum(
        not (torch.equal(o, o0) and torch.equal(lse, lse0))
        for o, lse in (v3.attention_forward(q, k, v, causal) for _ in range(runs))
    )
    assert differing == 0, f"{differing}/{runs} runs differ from the first: a race"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_d256_through_the_plan_forward_and_backward(causal):
    """``version=3`` takes version 3's forward at d=256, and the plan's backward is version 1's two kernels (float64
    autograd's gradients); ``version=None`` takes version 1 while ``V3_HEAD_DIMS`` lacks 256 and version 3 with it."""
    for b, h, n in ((1, 2, 17), (2, 2, 1000), (1, 2, 4096)):
        q, k, v = _inputs(b, h, h, n, n, torch.bfloat16, seed=n)
        plan = attention_plan.forward_plan(q, k, v, causal, None, False, None, 3)
        assert plan.version == 3
        o, lse = attention_plan.run_forward(plan, q, k, v)
        _check(q, k, v, causal, o, lse, what=f"plan {(b, h, n)}")
        do = torch.randn_like(q)
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        out = FlashAttentionFunction.apply(qg, kg, vg, causal, None, False, False, plan)
        got = torch.autograd.grad(out, (qg, kg, vg), do)
        assert attention_plan.backward_kind(plan) == "two kernels", attention_plan.backward_kind(plan)
        ref = reference.attention_reference(q, k, v, causal, do=do)[1:]  # float64 dQ, dK, dV
        for name, g, r in zip(("dq", "dk", "dv"), got, ref):
            assert torch.isfinite(g).all(), f"{name} {(b, h, n)}: NaN or inf"
            err = check.relative_error(g, r)
            assert err <= check.tolerance(q.dtype), f"{name} {(b, h, n)}: relative error {err:.3g}"
    q, k, v = _inputs(1, 2, 2, 4096, 4096, torch.bfloat16, seed=1)
    routed = 3 if D in attention_plan.V3_HEAD_DIMS else 1  # the gate the lead flips after the H200 benchmark
    assert attention_plan.forward_plan(q, k, v, causal).version == routed
    o = flash_attention(q, k, v, is_causal=causal)
    _check(q, k, v, causal, o, attention_plan.attention_forward(q, k, v, causal)[1], what="version=None")
