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
when ``Nq != Nk``. A row that sees no key gives 0, not NaN, as SDPA's math backend returns; the scale may be any finite
number, as SDPA's.

Two features a model uses, in the references too (:func:`visible_mask`):

- **grouped-query heads** (``enable_gqa``, SDPA's): k and v have ``Hkv`` heads, ``Hq`` a multiple of it; query head
  h reads KV head ``h // (Hq // Hkv)``; ``Hkv = 1`` is multi-query attention;
- **sliding windows** (``window_size=(left, right)``, FlashAttention's and ``varlen_attn``'s): aligned bottom-right,
  query i sees key j iff ``j >= i + Nk - Nq - left`` (when ``left >= 0``) and ``j <= i + Nk - Nq + right`` (when
  ``right >= 0``); -1 is unbounded, so ``(-1, -1)`` is full attention, ``(-1, 0)`` bottom-right causal and ``(W, 0)``
  causal with a window of W keys before the diagonal. ``is_causal`` stays SDPA's top-left mask; the two together
  are refused.

:func:`varlen_attention_reference` is ``torch.nn.attention.varlen.varlen_attn`` in float64: packed ``[T, H, D]``
tensors and int32 cumulative offsets, one sequence at a time.
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
    "check_window",
    "visible_mask",
    "gqa_group",
    "varlen_attention_reference",
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


def check_window(window_size, is_causal: bool = False) -> tuple[int, int]:
    """``window_size`` as ``(left, right)`` ints, each -1 (unbounded) or >= 0; a ValueError for an entry below -1, a
    TypeError for a non-pair or non-int entries, a ValueError for a bounded window together with ``is_causal=True``
    (SDPA's top-left mask and a bottom-right window: say one of them)."""
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise TypeError(
            f"window_size must be a pair (left, right) of ints, got {window_size!r}; use (-1, -1) for full attention, "
            "(-1, 0) for causal, (W, 0) for a causal window of W keys."
        )
    left, right = window_size
    for name, value in (("window_size[0] (left)", left), ("window_size[1] (right)", right)):
        if value.__class__ is bool or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__}).")
        if value < -1:
            raise ValueError(
                f"{name} is {value}; each entry of window_size is -1 (unbounded) or a number of keys >= 0. Use -1 "
                "for no bound on that side."
            )
    if is_causal and (left, right) != (-1, -1):
        raise ValueError(
            f"is_causal=True together with window_size={(left, right)}: is_causal is SDPA's top-left mask, a window "
            "is aligned bottom-right. Pass one of them: is_causal=False with window_size=(left, 0) for a causal "
            "window, or is_causal=True with window_size=(-1, -1)."
        )
    return int(left), int(right)


def visible_mask(seq_q: int, seq_k: int, is_causal: bool = False, window_size=(-1, -1), device=None):
    """``mask[i, j]``: True where query i may see key j; SDPA's top-left causal mask, or the bottom-right window
    (see the module docstring)."""
    seq_q, seq_k = runtime.nonnegative_int("seq_q", seq_q), runtime.nonnegative_int("seq_k", seq_k)
    left, right = check_window(window_size, runtime.strict_bool("is_causal", is_causal))
    if is_causal:
        return causal_mask(seq_q, seq_k, device)
    i = torch.arange(seq_q, device=device)[:, None] + (seq_k - seq_q)
    j = torch.arange(seq_k, device=device)[None, :]
    mask = torch.ones(seq_q, seq_k, dtype=torch.bool, device=device)
    if left >= 0:
        mask &= j >= i - left
    if right >= 0:
        mask &= j <= i + right
    return mask


def gqa_group(h_q: int, h_kv: int, enable_gqa: bool = False) -> int:
    """``Hq // Hkv``, the query heads that share one KV head; a ValueError naming both unless ``Hkv`` divides ``Hq``
    (``enable_gqa``) or they are equal."""
    enable_gqa = runtime.strict_bool("enable_gqa", enable_gqa)
    if h_q == h_kv and h_q > 0:
        return 1
    if not enable_gqa:
        raise ValueError(
            f"q has {h_q} heads but k and v have {h_kv}; with enable_gqa=False they must be equal. Pass "
            "enable_gqa=True for grouped-query attention (query heads a multiple of the KV heads)."
        )
    if h_kv < 1 or h_q % h_kv:
        raise ValueError(
            f"enable_gqa=True needs the query heads to be a multiple of the KV heads, got Hq={h_q} and Hkv={h_kv}; "
            "choose Hkv among the divisors of Hq (Hkv = 1 is multi-query attention)."
        )
    return h_q // h_kv


def _check_reference_inputs(q, k, v, is_causal=False, need_v=True, one_device=True, enable_gqa=False) -> None:
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
        if enable_gqa and t.dim() >= 3 and t.shape[:-3] == q.shape[:-3] and t.dim() == q.dim():
            gqa_group(q.shape[-3], t.shape[-3], True)
        elif t.shape[:-2] != q.shape[:-2]:
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


def _expand_kv(q, k, enable_gqa):
    """k with its heads repeated to q's (query head h reads KV head h // group): a copy, as a reference may make."""
    if not enable_gqa or k.shape[-3] == q.shape[-3]:
        return k
    return k.repeat_interleave(gqa_group(q.shape[-3], k.shape[-3], True), dim=-3)


def naive_attention(
    q, k, v, is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False, window_size=(-1, -1)
) -> torch.Tensor:
    """``softmax(scale * Q K^T) V`` with the full [Nq, Nk] score matrix in memory. Differentiable by autograd."""
    _check_reference_inputs(q, k, v, is_causal, enable_gqa=enable_gqa)
    scale = default_scale(q.shape[-1], scale)
    k, v = _expand_kv(q, k, enable_gqa), _expand_kv(q, v, enable_gqa)
    s = torch.matmul(q, k.transpose(-2, -1)) * scale  # [B, H, Nq, Nk]: the N x N matrix FlashAttention avoids
    if is_causal or tuple(window_size) != (-1, -1):
        mask = visible_mask(q.shape[-2], k.shape[-2], is_causal, window_size, q.device)
        s = s.masked_fill(~mask, float("-inf"))
        s = s.masked_fill(~mask.any(-1, keepdim=True), 0.0)  # a row that sees nothing: P = 0 below, not NaN
    p = softmax_safe(s) if s.shape[-1] else s  # no keys (Nk = 0): no softmax, and P V is 0 as in SDPA
    if is_causal or tuple(window_size) != (-1, -1):
        p = p * mask  # rows that see nothing are 0, as SDPA's math backend returns
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


def logsumexp_reference(
    q, k, is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False, window_size=(-1, -1)
) -> torch.Tensor:
    """float64 ``log(sum_j exp(S_ij))`` over visible keys, [B, H, Nq] (0 for a row that sees no key)."""
    _check_reference_inputs(q, k, None, is_causal, need_v=False, one_device=False, enable_gqa=enable_gqa)
    q64, k64 = (t.detach().to("cpu", torch.float64) for t in (q, k))
    k64 = _expand_kv(q64, k64, enable_gqa)
    s = torch.matmul(q64, k64.transpose(-2, -1)) * default_scale(q.shape[-1], scale)
    if is_causal or tuple(window_size) != (-1, -1):
        s = s.masked_fill(~visible_mask(q.shape[-2], k.shape[-2], is_causal, window_size), float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))


def attention_reference(
    q,
    k,
    v,
    is_causal: bool = False,
    scale: float | None = None,
    do=None,
    enable_gqa: bool = False,
    window_size=(-1, -1),
):
    """float64 attention on float64 copies of the inputs; with ``do`` (the output's gradient) also dQ, dK, dV.

    Returns ``O`` or ``(O, dQ, dK, dV)``, all float64 on the inputs' device (a GPU computes the reference in its
    float64 units, far faster than the CPU at long sequences). Gradients come from autograd through
    :func:`naive_attention`, computed in float64, so they are exact to ~1e-15 and independent of the kernels.
    """
    _check_reference_inputs(q, k, v, is_causal, one_device=False, enable_gqa=enable_gqa)
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
        o = naive_attention(q64, k64, v64, is_causal, scale, enable_gqa, window_size)
        if do is None:
            return o.detach()
        dq, dk, dv = torch.autograd.grad(o, (q64, k64, v64), do.detach().to(dev, torch.float64))
    return o.detach(), dq, dk, dv


def varlen_attention_reference(
    q, k, v, cu_seq_q, cu_seq_k, scale: float | None = None, window_size=(-1, -1), enable_gqa: bool = False, do=None
):
    """float64 ``varlen_attn``: packed q ``[Tq, Hq, D]``, k and v ``[Tk, Hkv, D]``, sequence s holding the query
    rows ``cu_seq_q[s]:cu_seq_q[s+1]`` and the key rows ``cu_seq_k[s]:cu_seq_k[s+1]`` (int32 offsets); each sequence
    is attention of its own rows with the window aligned at its own bottom-right corner.

    Returns ``(O, LSE)`` (O float64 ``[Tq, Hq, D]``, LSE float64 ``[Hq, Tq]`` as torch's ``varlen_attn`` returns it,
    0 for a row that sees no key), with ``do`` ``(O, LSE, dQ, dK, dV)``, on the inputs' device.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        runtime.require_tensor(name, t, device_check=False)
        if t.dim() != 3:
            raise ValueError(f"{name} must be packed [tokens, heads, head_dim], got shape {list(t.shape)}.")
    for name, cu in (("cu_seq_q", cu_seq_q), ("cu_seq_k", cu_seq_k)):
        runtime.require_tensor(name, cu, device_check=False)
        if cu.dtype != torch.int32 or cu.dim() != 1 or cu.numel() != cu_seq_q.numel():
            raise ValueError(f"{name} must be a 1-D int32 tensor of one entry more than there are sequences.")
    gqa_group(q.shape[1], k.shape[1], enable_gqa)
    dev = q.device
    q64, k64, v64 = (t.detach().to(dev, torch.float64).requires_grad_(do is not None) for t in (q, k, v))
    cq, ck = cu_seq_q.tolist(), cu_seq_k.tolist()
    outs, lses = [], []
    with torch.enable_grad():
        for s in range(len(cq) - 1):
            qs, ks, vs = (t[a:b].transpose(0, 1)[None] for t, a, b in
                          ((q64, cq[s], cq[s + 1]), (k64, ck[s], ck[s + 1]), (v64, ck[s], ck[s + 1])))  # fmt: skip
            outs.append(naive_attention(qs, ks, vs, False, scale, enable_gqa, window_size)[0].transpose(0, 1))
            lses.append(logsumexp_reference(qs, ks, False, scale, enable_gqa, window_size)[0].to(dev))
        rest = q.shape[0] - (cq[-1] if cq else 0)  # rows past the last sequence: 0 here (the kernels leave them)
        o = torch.cat(outs + [q64.new_zeros(rest, q.shape[1], v.shape[2])])
        lse = torch.cat(lses + [q64.new_zeros(q.shape[1], rest)], 1)
        if do is None:
            return o.detach(), lse
        grads = torch.autograd.grad(o, (q64, k64, v64), do.detach().to(dev, torch.float64), allow_unused=True)
    grads = [torch.zeros_like(t) if g is None else g for g, t in zip(grads, (q64, k64, v64))]
    return (o.detach(), lse, *grads)
