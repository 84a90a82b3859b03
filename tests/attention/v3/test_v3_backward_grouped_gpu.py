"""Version 3's backward with grouped-query heads and sliding windows on a Hopper GPU (``pytest -m gpu``): dQ, dK, dV
against float64 autograd (:func:`gpulab.attention.reference.attention_reference`), dK and dV bit for bit the same
over repeated runs (the group's sum in one program's registers, no atomics), and flash_attention's backward taking
version 3 for them. Skipped without CUDA (tests/conftest.py) and where
:func:`gpulab.attention.v3.backward.backward_supported` says no."""

import pytest
import torch

from gpulab import check
from gpulab.attention import plan, reference
from gpulab.attention.function import flash_attention
from gpulab.attention.plan import attention_forward
from gpulab.attention.v3 import backward as v3b

pytestmark = pytest.mark.gpu

WINDOWS = [(-1, -1), (0, 0), (5, 0), (3, 7), (-1, 4), (256, 0)]
SHAPES = [(1, 1000, 1000), (2, 517, 300), (1, 300, 517), (2, 17, 17), (1, 1, 1)]  # (B, Nq, Nk)
CONFIGS = {
    "default": None,
    "step 2": v3b.V3BackwardConfig(step=2),
    "step 3": v3b.V3BackwardConfig(step=3),
    "step 5": v3b.V3BackwardConfig(step=5),
    "step 5+11": v3b.V3BackwardConfig(step=5, stats_smem=True),
    "step 6": v3b.V3BackwardConfig(step=6),
    "step 7": v3b.V3BackwardConfig(step=7),
    "step 7+kv+11": v3b.V3BackwardConfig(step=7, kv_regs="kv", stats_smem=True),
}


def _inputs(b, h, h_kv, n_q, n_k, d, dtype, causal, window, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, do = (torch.randn(b, h, n_q, d, device="cuda", dtype=dtype, generator=gen) for _ in "qd")
    k, v = (torch.randn(b, h_kv, n_k, d, device="cuda", dtype=dtype, generator=gen) for _ in "kv")
    ok, why = v3b.backward_supported(q, k, v, causal)
    if not ok:
        pytest.skip(why)
    o, lse = attention_forward(q, k, v, is_causal=causal, enable_gqa=h != h_kv, window_size=window)
    return q, k, v, o, do, lse


def _check(got, q, k, v, do, causal, window, dtype, what):
    _, *ref = reference.attention_reference(q, k, v, causal, do=do, enable_gqa=q.shape[1] != k.shape[1],
                                            window_size=window)  # fmt: skip
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        assert g.shape == r.shape and torch.isfinite(g).all(), f"{name} {what}: shape or NaN"
        if r.abs().max() == 0:  # one visible key per query: dQ = dK = 0 up to the rounding of dP - D
            bound = check.tolerance(dtype) * ref[2].abs().max()
            assert g.double().abs().max() <= bound, f"{name} {what}: {g.abs().max():.3g} where 0"
            continue
        err = check.relative_error(g, r)
        assert err <= check.tolerance(dtype), f"{name} {what}: rel err {err:.3g}"


def _grads(dtype, d, heads, window, cfg):
    for b, n_q, n_k in SHAPES:
        q, k, v, o, do, lse = _inputs(b, *heads, n_q, n_k, d, dtype, False, window)
        torch.full((3 * (q.numel() + k.numel()),), float("nan"), device="cuda")  # freed: unwritten outputs show
        got = v3b.attention_backward(do, q, k, v, o, lse, False, cfg=CONFIGS[cfg], window=window)
        _check(got, q, k, v, do, False, window, dtype, (b, n_q, n_k))


@pytest.mark.parametrize("cfg", ["default", "step 7+kv+11"])
@pytest.mark.parametrize("window", WINDOWS, ids=str)
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (8, 1)], ids=lambda h: f"{h[0]}q{h[1]}kv")
@pytest.mark.parametrize("d", [64, 128])
def test_gradients_against_float64(d, heads, window, cfg):
    """Every gradient, bf16, the defaults (head dim 64 at these lengths: step 7 with K, V in registers; 128: step 5)
    and step 7 with every option, at N 1000, 1, 17 and Nq != Nk both ways."""
    if heads[0] == heads[1] and window == (-1, -1):
        pytest.skip("the plain problem: test_v3_backward_gpu.py")
    _grads(torch.bfloat16, d, heads, window, cfg)


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c != "default"])
def test_every_grouped_step(cfg):
    """Steps 2, 3, 5 (with and without step 11), 6 and 7 with grouped heads and a two-sided window, head dim 128."""
    _grads(torch.bfloat16, 128, (4, 2), (3, 7), cfg)


@pytest.mark.parametrize("d", [64, 128])
def test_float16(d):
    _grads(torch.float16, d, (4, 2), (5, 0), "default")


@pytest.mark.parametrize("cfg", ["default", "step 5", "step 7", "step 7+kv+11", "dq_cast"])
@pytest.mark.parametrize("heads", [(4, 2), (8, 1)], ids=lambda h: f"{h[0]}q{h[1]}kv")
@pytest.mark.parametrize("d", [64, 128])
def test_causal_with_grouped_heads(d, heads, cfg):
    c = v3b.V3BackwardConfig(step=5, dq_cast=True, writer_regs=32) if cfg == "dq_cast" else CONFIGS[cfg]
    for b, n_q, n_k in SHAPES:
        q, k, v, o, do, lse = _inputs(b, *heads, n_q, n_k, d, torch.bfloat16, True, (-1, -1), seed=1)
        torch.full((3 * (q.numel() + k.numel()),), float("nan"), device="cuda")
        got = v3b.attention_backward(do, q, k, v, o, lse, True, cfg=c)
        _check(got, q, k, v, do, True, (-1, -1), torch.bfloat16, (b, n_q, n_k))


@pytest.mark.parametrize("window", [(-1, -1), (300, 0), (64, 64)], ids=str)
@pytest.mark.parametrize("cfg", ["default", "step 7+kv+11"])
@pytest.mark.parametrize("d", [64, 128])
def test_race(d, cfg, window, runs=20):
    """dK and dV: the group's heads summed by one program in a fixed order, bit for bit the same every run."""
    q, k, v, o, do, lse = _inputs(2, 8, 2, 2000, 2000, d, torch.bfloat16, False, window, seed=7)
    dq0, dk0, dv0 = v3b.attention_backward(do, q, k, v, o, lse, False, cfg=CONFIGS[cfg], window=window)
    for _ in range(runs):
        dq, dk, dv = v3b.attention_backward(do, q, k, v, o, lse, False, cfg=CONFIGS[cfg], window=window)
        assert torch.equal(dk, dk0) and torch.equal(dv, dv0), "dK or dV differ between runs: a race"
        assert check.relative_error(dq, dq0) < 1e-4


@pytest.mark.parametrize("causal, window", [(False, (-1, -1)), (True, (-1, -1)), (False, (512, 0)),
                                            (False, (200, 300))], ids=str)  # fmt: skip
@pytest.mark.parametrize("d", [64, 128])
def test_flash_attention_takes_version_3(d, causal, window):
    """flash_attention's backward with 8 query heads on 2 KV heads (and a window) at N = 4096, where the gate takes
    the plain problem: version 3's one-pass kernel, the gradients right."""
    n = 4096
    q, k, v, o, do, lse = _inputs(1, 8, 2, n, n, d, torch.bfloat16, causal, window, seed=3)
    assert plan.V3_BACKWARD.takes_v3(d, causal, n, n)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    out = flash_attention(qg, kg, vg, is_causal=causal, enable_gqa=True, window_size=window)
    got = torch.autograd.grad(out, (qg, kg, vg), do)
    fp = plan.forward_plan(qg, kg, vg, is_causal=causal, enable_gqa=True, window_size=window)
    assert plan.backward_kind(fp) == "one pass, Gluon"
    _check(got, q, k, v, do, causal, window, torch.bfloat16, "flash_attention")
