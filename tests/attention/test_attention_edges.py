"""flash_attention at SDPA's edges: empty sequences and any finite scale, forward and backward, against
``scaled_dot_product_attention``'s math backend on the same device (in float64), eagerly (the autograd Function),
through the custom ops and compiled with ``fullgraph=True``.

What SDPA's math backend does there (torch 2.13): Nq = 0 gives an empty output; Nk = 0 gives an output of zeros
(causal or not, and with an empty ``attn_mask``), and every gradient is 0; ``scale=0`` averages the values a query
sees; a negative scale is a softmax of negated scores; an infinite or NaN scale gives NaN.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpulab import attention as A
from gpulab import check, runtime
from gpulab.attention import ops
from gpulab.attention.plan import check_version


def _sdpa(q, k, v, do, is_causal, scale):
    """SDPA's math backend in float64 on the inputs' device: O and (dQ, dK, dV) for the output gradient ``do``."""
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH), torch.enable_grad():
        o = F.scaled_dot_product_attention(q64, k64, v64, is_causal=is_causal, scale=scale)
        grads = torch.autograd.grad(o, (q64, k64, v64), do.double(), allow_unused=True)
    return o.detach(), [torch.zeros_like(t) if g is None else g for t, g in zip((q64, k64, v64), grads)]


def _flash(q, k, v, do, is_causal, scale):
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = A.flash_attention(qg, kg, vg, is_causal=is_causal, scale=scale)
    o.backward(do)
    return o.detach(), [qg.grad, kg.grad, vg.grad]


def _inputs(nq, nk, d=16, b=1, h=2):
    q, k, v = (check.random_tensor(b, h, n, d) for n in (nq, nk, nk))
    return q, k, v, check.random_tensor(b, h, nq, d)


def _compare(got, want, close, context):
    (o, grads), (o_ref, grads_ref) = got, want
    assert o.shape == o_ref.shape, f"O shape {tuple(o.shape)} != SDPA's {tuple(o_ref.shape)} ({context})"
    for name, x, ref in zip(("O", "dQ", "dK", "dV"), (o, *grads), (o_ref, *grads_ref)):
        assert x.shape == ref.shape, f"{name} shape {tuple(x.shape)} != SDPA's {tuple(ref.shape)} ({context})"
        if ref.numel() and ref.abs().max() > 0:
            # norm-wise at the dtype's tolerance; each element within it relative to the tensor's largest (a gradient
            # element summed from terms of both signs cancels, and fp32 rounding of its terms is not small against it)
            tol = check.tolerance(x.dtype)
            check.assert_close(x, ref, dtype=x.dtype, atol=tol * ref.abs().max().item(), name=name, context=context)
        elif ref.numel():
            close(x, ref.to(x.dtype), x.dtype, name, context=context)


EMPTY = [(0, 5), (5, 0), (0, 0)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("nq, nk", EMPTY, ids=[f"nq{a}-nk{b}" for a, b in EMPTY])
def test_empty_sequences_match_sdpa(nq, nk, causal, close):
    q, k, v, do = _inputs(nq, nk)
    got, want = _flash(q, k, v, do, causal, None), _sdpa(q, k, v, do, causal, None)
    _compare(got, want, close, f"Nq={nq} Nk={nk} causal={causal}")
    o, grads = got
    assert all((t == 0).all() for t in (o, *grads)), "an empty sequence gives zeros everywhere (no poison left)"


def test_empty_sequences_through_forward_and_backward_wrappers():
    q, k, v, do = _inputs(3, 0)
    o, lse = A.attention_forward(q, k, v, is_causal=True)
    assert (o == 0).all() and (lse == 0).all() and lse.shape == (1, 2, 3)  # a row with no keys: LSE 0, as the reference
    assert torch.equal(lse, A.logsumexp_reference(q, k, is_causal=True).float())
    dq, dk, dv = A.attention_backward(do, q, k, v, o, lse, True)
    assert (dq == 0).all() and dk.shape == k.shape and dv.shape == v.shape


SCALES = [0.0, -0.6, 1.2, -1.2]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("scale", SCALES, ids=[f"scale{s}" for s in SCALES])
def test_any_finite_scale_matches_sdpa(scale, causal, close):
    q, k, v, do = _inputs(13, 21, d=24)  # ragged blocks, Nq < Nk; causal: keys past Nq are seen by no query
    _compare(_flash(q, k, v, do, causal, scale), _sdpa(q, k, v, do, causal, scale), close, f"scale={scale}")


def test_scale_zero_averages_the_values_a_query_sees():
    q, k, v, _ = _inputs(6, 6)
    o = A.flash_attention(q, k, v, is_causal=True, scale=0.0)
    want = v.cumsum(2) / torch.arange(1, 7, dtype=v.dtype).view(1, 1, 6, 1)  # row i: the mean of values 0..i
    check.assert_close(o, want, name="O at scale 0")


@pytest.mark.parametrize("scale", [math.inf, -math.inf, math.nan], ids=["inf", "-inf", "nan"])
def test_non_finite_scale_is_refused_saying_what_sdpa_does(scale):
    q, k, v, do = _inputs(3, 5)
    o_ref, _ = _sdpa(q, k, v, do, False, scale)
    assert o_ref.isnan().all()  # what the message claims
    with pytest.raises(ValueError, match="SDPA returns NaN"):
        A.flash_attention(q, k, v, scale=scale)


def test_negative_scale_never_picks_version_2():
    """Version 2 takes the row max as max(S) * scale (one FMA per score), true for scale >= 0 only."""
    gpu = torch.device("cuda", 0)
    assert check_version(None, None, torch.float16, 64, gpu, 2**40, -0.5) == 1  # before any look at the device
    with pytest.raises(ValueError, match="scales >= 0"):
        check_version(2, None, torch.float16, 64, runtime.device, None, -0.5)


@pytest.mark.parametrize("nq, nk, scale", [(0, 5, None), (5, 0, None), (7, 9, -0.5), (7, 9, 0.0)])
def test_custom_ops_at_the_edges(nq, nk, scale):
    q, k, v, do = _inputs(nq, nk)
    s = A.default_scale(16, scale)
    torch.library.opcheck(ops.forward_op, (q, k, v, True, s, False, False))
    o, lse = ops.forward_op(q, k, v, True, s, False, False)
    torch.library.opcheck(ops.backward_op, (do, q, k, v, o, lse, True, s, False, False))


@pytest.mark.parametrize("nq, nk, scale", [(5, 0, None), (7, 9, -0.5)], ids=["nk0", "negative-scale"])
def test_compiled_fullgraph_at_the_edges_matches_sdpa(nq, nk, scale, close):
    def f(q, k, v):
        return A.flash_attention(q, k, v, is_causal=True, scale=scale)

    q, k, v, do = _inputs(nq, nk)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = torch.compile(f, fullgraph=True, backend="aot_eager")(qg, kg, vg)
    o.backward(do)
    _compare((o.detach(), [qg.grad, kg.grad, vg.grad]), _sdpa(q, k, v, do, True, scale), close, "compiled")


@pytest.mark.parametrize("leading", [(), (2, 3)], ids=["3-d", "5-d"])
def test_sdpa_layouts_with_other_leading_dims_match_sdpa(leading):
    """SDPA takes [..., H, N, D] with any leading batch dims; so does flash_attention (grouped heads and SDPA's
    positional order too: attn_mask=None, dropout_p=0.0, is_causal), output and gradients."""
    gen = torch.Generator(device=runtime.device).manual_seed(len(leading))
    q = torch.randn(*leading, 4, 9, 16, generator=gen, device=runtime.device)
    k, v = (torch.randn(*leading, 2, 5, 16, generator=gen, device=runtime.device) for _ in "kv")
    do = torch.randn_like(q)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = A.flash_attention(qg, kg, vg, None, 0.0, True, None, True)
    assert o.shape == q.shape
    grads = torch.autograd.grad(o, (qg, kg, vg), do)
    q64, k64, v64 = (t.double().requires_grad_(True) for t in (q, k, v))
    ref = F.scaled_dot_product_attention(q64, k64, v64, is_causal=True, enable_gqa=True)
    refs = torch.autograd.grad(ref, (q64, k64, v64), do.double())
    for name, a, r in zip(("O", "dQ", "dK", "dV"), (o, *grads), (ref, *refs)):
        assert check.relative_error(a, r) < 1e-5, name


def _grads_match_sdpa(args, kw, do=None):
    """flash_attention's O, dQ, dK, dV on ``args`` against SDPA's math in float64, relative errors under 1e-5."""
    qg, kg, vg = (t.clone().requires_grad_(True) for t in args)
    o = A.flash_attention(qg, kg, vg, **kw)
    do = torch.randn_like(o) if do is None else do
    grads = torch.autograd.grad(o, (qg, kg, vg), do)
    a64 = [t.double().requires_grad_(True) for t in args]
    ref = F.scaled_dot_product_attention(*a64, **kw)
    refs = torch.autograd.grad(ref, a64, do.double())
    assert o.shape == ref.shape and o.dtype == args[0].dtype
    for name, a, r in zip(("O", "dQ", "dK", "dV"), (o, *grads), (ref, *refs)):
        assert a.shape == r.shape and check.relative_error(a, r) < 1e-5, name


@pytest.mark.parametrize("ev", [3, 24], ids=["ev-narrower", "ev-wider"])
@pytest.mark.parametrize(
    "kw", [{}, {"is_causal": True, "enable_gqa": True}, {"scale": -0.4}], ids=["full", "causal-gqa", "scale"]
)
def test_value_head_dim_of_its_own_matches_sdpa(ev, kw):
    """SDPA takes v [..., Nk, Ev] with Ev != D (output [..., Nq, Ev]); flash_attention refused it ("k and v must have
    the same shape") and now pads the narrower side, the scale kept at 1 / sqrt(D)."""
    gen = torch.Generator(device=runtime.device).manual_seed(ev)
    q = torch.randn(1, 4, 6, 16, generator=gen, device=runtime.device)
    hkv = 2 if kw.get("enable_gqa") else 4
    k = torch.randn(1, hkv, 5, 16, generator=gen, device=runtime.device)
    v = torch.randn(1, hkv, 5, ev, generator=gen, device=runtime.device)
    _grads_match_sdpa((q, k, v), kw)


def test_two_dim_inputs_match_sdpa():
    """SDPA takes [N, D] (no heads); flash_attention refused it as not 4-dimensional."""
    gen = torch.Generator(device=runtime.device).manual_seed(3)
    q, k, v = (torch.randn(n, 16, generator=gen, device=runtime.device) for n in (7, 5, 5))
    _grads_match_sdpa((q, k, v), {"is_causal": True})


def test_autocast_casts_the_inputs_as_sdpa():
    """Under torch.autocast SDPA computes in the autocast dtype, mixed q, k, v dtypes included (a projection's fp16
    output beside fp32 keys); flash_attention refused the mix ("k is torch.float32 but q is torch.float16")."""
    where = runtime.device.type
    gen = torch.Generator(device=runtime.device).manual_seed(4)
    q, k, v = (torch.randn(1, 2, 6, 16, generator=gen, device=runtime.device) for _ in "qkv")
    with torch.autocast(where, dtype=torch.float16):
        o = A.flash_attention(q.half(), k, v, is_causal=True)
        ref = F.scaled_dot_product_attention(q.half(), k, v, is_causal=True)
    assert o.dtype == ref.dtype == torch.float16
    want = F.scaled_dot_product_attention(*(t.half().double() for t in (q, k, v)), is_causal=True)
    assert check.relative_error(o, want) < 3e-3
