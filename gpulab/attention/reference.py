"""Lesson 4, steps 1 and 3 in plain PyTorch: naive attention and tiled attention; the float64 reference.

What you will learn:
- naive attention materializes the N x N score matrix ``S = scale * Q K^T`` and its softmax ``P``: O(N^2) memory
  traffic for an operation whose inputs and output are O(N d);
- the online softmax of step 2 (:mod:`gpulab.attention.softmax`: a running max ``m`` and a running sum ``l``,
  rescaled by ``exp(m - m')`` when the max grows) makes attention *tiled*: for a block of queries, walk over blocks
  of keys/values keeping ``m``, ``l`` and an unnormalised output accumulator ``acc``; a new key block rescales
  ``acc`` by ``exp(m - m')`` too. At the end ``O = acc / l`` and the log-sum-exp ``L = m + log(l)`` is all the
  backward needs to rebuild ``P = exp(S - L)``. No N x N tensor is ever formed (:func:`tiled_attention`), which is
  exactly what the Triton kernel does.

Semantics are those of ``torch.nn.functional.scaled_dot_product_attention``: q ``[B, H, Nq, D]``, k and v ``[B, H,
Nk, D]``, default scale ``1 / sqrt(D)``; ``is_causal`` is SDPA's *top-left* mask, query i sees keys ``j <= i`` also
when ``Nq != Nk``. A row that sees no key (only possible with ``Nk = 0``) gives 0, not NaN, as SDPA's math backend
returns; the scale may be any finite number, as SDPA's.
"""

from __future__ import annotations

import math
import numbers

import torch

from gpulab import runtime
from gpulab.attention.softmax import softmax_safe

__all__ = [
    "default_scale",
    "causal_mask",
    "naive_attention",
    "tiled_attention",
    "attention_reference",
    "logsumexp_reference",
]


def default_scale(head_dim: int, scale: float | None = None) -> float:
    """SDPA's default softmax scale ``1 / sqrt(head_dim)`` unless ``scale`` is given: any finite number, as SDPA
    takes (0 gives every visible key the same weight, so each output row is the mean of the values it sees; a
    negative scale favours the keys least like the query). An infinite or NaN scale is refused: SDPA returns NaN for
    it (an infinite scale makes the scores +-inf or NaN, and their softmax NaN)."""
    head_dim = runtime.positive_int("head_dim", head_dim)
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, numbers.Real) and not isinstance(scale, bool) and not runtime.is_finite(scale):
        raise ValueError(
            f"scale must be a finite number, got {scale!r}; SDPA returns NaN for an infinite or NaN scale (the "
            "scores become +-inf or NaN). Pass None for 1 / sqrt(head_dim), or any finite scale (0 and negative "
            "scales included)."
        )
    return runtime.finite_float("scale", scale)


def causal_mask(seq_q: int, seq_k: int, device=None) -> torch.Tensor:
    """SDPA's causal mask, aligned top-left: ``mask[i, j]`` is True where query i may see key j, i.e. ``j <= i``."""
    seq_q, seq_k = runtime.nonnegative_int("seq_q", seq_q), runtime.nonnegative_int("seq_k", seq_k)
    return torch.ones(seq_q, seq_k, dtype=torch.bool, device=device).tril()


def _check_reference_inputs(q, k, v, is_causal=False, need_v=True, one_device=True) -> None:
    """Tensors of one floating dtype (any device; one device unless ``one_device=False``, for the references that copy
    their inputs to q's) whose shapes multiply as attention's: q [..., Nq, D], k [..., Nk, D] and v [..., Nk, Dv]
    with the same leading dims (nothing is broadcast); v a tensor unless ``need_v=False`` (then v is not read);
    ``is_causal`` a bool."""
    runtime.strict_bool("is_causal", is_causal)
    tensors = (("q", q), ("k", k), ("v", v)) if need_v else (("q", q), ("k", k))
    for name, t in tensors:
        runtime.require_tensor(name, t, device_check=False)
        if t.dim() < 2 or not t.is_floating_point():
            raise ValueError(
                f"{name} must be a floating-point tensor [..., seq, head_dim], got {t.dtype} of shape {list(t.shape)}."
            )
    for name, t in tensors[1:]:
        if t.dtype != q.dtype:
            raise ValueError(
                f"{name} is {t.dtype} but q is {q.dtype}; q, k{' and v' if need_v else ''} must share one dtype: "
                f"convert it, e.g. `{name}.to(q.dtype)`."
            )
        if one_device and t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; put them on one device.")
        if t.shape[:-2] != q.shape[:-2]:
            raise ValueError(
                f"q has leading (batch, heads) dims {list(q.shape[:-2])} but {name} has {list(t.shape[:-2])} (shapes "
                f"{list(q.shape)} and {list(t.shape)}); they must be equal, nothing is broadcast: expand or repeat "
                f"{name} explicitly."
            )
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"q has head_dim {q.shape[-1]} but k has {k.shape[-1]}; they must match.")
    if need_v and v.shape[-2] != k.shape[-2]:
        raise ValueError(f"k has {k.shape[-2]} keys but v has {v.shape[-2]} values; they must match.")


# ----------------------------------------------------------------------------------------------------------------
# step 1: naive attention


def naive_attention(q, k, v, is_causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """``softmax(scale * Q K^T) V`` with the full [Nq, Nk] score matrix in memory. Differentiable by autograd."""
    _check_reference_inputs(q, k, v, is_causal)
    scale = default_scale(q.shape[-1], scale)
    s = torch.matmul(q, k.transpose(-2, -1)) * scale  # [B, H, Nq, Nk]: the N x N matrix FlashAttention avoids
    if is_causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    p = softmax_safe(s) if s.shape[-1] else s  # no keys (Nk = 0): no softmax, and P V is 0 as in SDPA
    return torch.matmul(p, v)


# ----------------------------------------------------------------------------------------------------------------
# step 3: tiled attention in PyTorch, the algorithm of the Triton kernel


def tiled_attention(q, k, v, is_causal: bool = False, scale: float | None = None, block_q: int = 16, block_k: int = 16):
    """Attention one [block_q x block_k] tile at a time with online-softmax rescaling; returns ``(O, LSE)``.

    ``LSE[b, h, i] = log(sum_j exp(S_ij))`` over the keys query i sees (natural log), the statistic the backward
    uses to rebuild P. Never forms more than a [block_q, block_k] piece of S.
    """
    _check_reference_inputs(q, k, v, is_causal)
    block_q, block_k = runtime.positive_int("block_q", block_q), runtime.positive_int("block_k", block_k)
    scale = default_scale(q.shape[-1], scale)
    nq, nk = q.shape[-2], k.shape[-2]
    out = torch.zeros_like(q)
    lse = torch.zeros(q.shape[:-1], dtype=q.dtype, device=q.device)
    for qs in range(0, nq, block_q):
        qb = q[..., qs : qs + block_q, :]
        rows = torch.arange(qs, qs + qb.shape[-2], device=q.device)
        m = torch.full(qb.shape[:-1] + (1,), float("-inf"), dtype=q.dtype, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros_like(qb)
        k_end = min(nk, qs + block_q) if is_causal else nk  # causal: keys past the block's last query are unseen
        for ks in range(0, k_end, block_k):
            kb, vb = k[..., ks : ks + block_k, :], v[..., ks : ks + block_k, :]
            s = torch.matmul(qb, kb.transpose(-2, -1)) * scale
            if is_causal:
                cols = torch.arange(ks, ks + kb.shape[-2], device=q.device)
                s = s.masked_fill(cols[None, :] > rows[:, None], float("-inf"))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            alpha = torch.exp(m - m_safe)  # how much the old max overestimated: rescale what we have so far
            p = torch.exp(s - m_safe)
            l = l * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + torch.matmul(p, vb)
            m = m_new
        out[..., qs : qs + block_q, :] = acc / torch.where(l > 0, l, torch.ones_like(l))
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        lse[..., qs : qs + block_q] = (m + torch.log(torch.where(l > 0, l, torch.ones_like(l)))).squeeze(-1)
    return out, lse


# ----------------------------------------------------------------------------------------------------------------
# the float64 reference every check compares against


def logsumexp_reference(q, k, is_causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """float64 ``log(sum_j exp(S_ij))`` over visible keys, [B, H, Nq] (0 for a row that sees no key)."""
    _check_reference_inputs(q, k, None, is_causal, need_v=False, one_device=False)
    q64, k64 = (t.detach().to("cpu", torch.float64) for t in (q, k))
    s = torch.matmul(q64, k64.transpose(-2, -1)) * default_scale(q.shape[-1], scale)
    if is_causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2]), float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))


def attention_reference(q, k, v, is_causal: bool = False, scale: float | None = None, do=None):
    """float64 attention on float64 copies of the inputs; with ``do`` (the output's gradient) also dQ, dK, dV.

    Returns ``O`` or ``(O, dQ, dK, dV)``, all float64 on the inputs' device (a GPU computes the reference in its
    float64 units, far faster than the CPU at long sequences). Gradients come from autograd through
    :func:`naive_attention`, computed in float64, so they are exact to ~1e-15 and independent of the kernels.
    """
    _check_reference_inputs(q, k, v, is_causal, one_device=False)
    if do is not None:
        runtime.require_tensor("do", do, device_check=False)
        o_shape = list(q.shape[:-1]) + [v.shape[-1]]
        if list(do.shape) != o_shape:
            raise ValueError(
                f"do must have exactly the output's shape {o_shape} (q's leading dims and query count, v's head_dim; "
                f"nothing is broadcast), got {list(do.shape)}."
            )
    dev = q.device
    q64, k64, v64 = (t.detach().to(dev, torch.float64).requires_grad_(do is not None) for t in (q, k, v))
    with torch.enable_grad():
        o = naive_attention(q64, k64, v64, is_causal=is_causal, scale=scale)
        if do is None:
            return o.detach()
        dq, dk, dv = torch.autograd.grad(o, (q64, k64, v64), do.detach().to(dev, torch.float64))
    return o.detach(), dq, dk, dv
