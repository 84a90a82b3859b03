"""Lesson 4, steps 1-3 in plain PyTorch: naive attention, softmax three ways, tiled attention; the float64 reference.

What you will learn:
- naive attention materializes the N x N score matrix ``S = scale * Q K^T`` and its softmax ``P``: O(N^2) memory
  traffic for an operation whose inputs and output are O(N d);
- softmax three ways. *Naive*: ``exp(x) / sum(exp(x))`` overflows as soon as a logit passes ~88 (fp32). *Safe*:
  subtract the row max first, ``exp(x - m) / sum(exp(x - m))``: same result, never overflows, but needs the max
  before the sum (three passes over the row). *Online* (Milakov & Gimelshein, 2018): one pass keeps a running max
  ``m`` and a running sum ``l`` of ``exp(x - m)``; when a new block raises the max from ``m`` to ``m'``, the old sum
  is rescaled by ``exp(m - m')``:

      m' = max(m, max_j x_j)        l' = l * exp(m - m') + sum_j exp(x_j - m')

  and a second pass writes ``exp(x - m) / l``;
- the same rescaling makes attention *tiled*: for a block of queries, walk over blocks of keys/values keeping ``m``,
  ``l`` and an unnormalised output accumulator ``acc``; a new key block rescales ``acc`` by ``exp(m - m')`` too. At
  the end ``O = acc / l`` and the log-sum-exp ``L = m + log(l)`` is all the backward needs to rebuild ``P = exp(S -
  L)``. No N x N tensor is ever formed (:func:`tiled_attention`), which is exactly what the Triton kernel does.

Semantics are those of ``torch.nn.functional.scaled_dot_product_attention``: q ``[B, H, Nq, D]``, k and v ``[B, H,
Nk, D]``, default scale ``1 / sqrt(D)``; ``is_causal`` is SDPA's *top-left* mask, query i sees keys ``j <= i`` also
when ``Nq != Nk``. A row that sees no key (only possible with ``Nk = 0``) gives 0, not NaN.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "default_scale",
    "causal_mask",
    "naive_attention",
    "softmax_naive",
    "softmax_safe",
    "softmax_online",
    "tiled_attention",
    "attention_reference",
    "logsumexp_reference",
]


def default_scale(head_dim: int, scale: float | None = None) -> float:
    """SDPA's default softmax scale ``1 / sqrt(head_dim)`` unless ``scale`` is given."""
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


def causal_mask(seq_q: int, seq_k: int, device=None) -> torch.Tensor:
    """SDPA's causal mask, aligned top-left: ``mask[i, j]`` is True where query i may see key j, i.e. ``j <= i``."""
    return torch.ones(seq_q, seq_k, dtype=torch.bool, device=device).tril()


# ----------------------------------------------------------------------------------------------------------------
# step 1: naive attention


def naive_attention(q, k, v, is_causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """``softmax(scale * Q K^T) V`` with the full [Nq, Nk] score matrix in memory. Differentiable by autograd."""
    scale = default_scale(q.shape[-1], scale)
    s = torch.matmul(q, k.transpose(-2, -1)) * scale  # [B, H, Nq, Nk]: the N x N matrix FlashAttention avoids
    if is_causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
    p = softmax_safe(s)
    return torch.matmul(p, v)


# ----------------------------------------------------------------------------------------------------------------
# step 2: softmax three ways (over the last dimension)


def softmax_naive(x: torch.Tensor) -> torch.Tensor:
    """``exp(x) / sum(exp(x))``: the textbook formula. Overflows to inf/NaN for logits above ~88 in fp32."""
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


def softmax_safe(x: torch.Tensor) -> torch.Tensor:
    """Subtract the row max first: pass 1 the max, pass 2 the sum, pass 3 the output. A row of all -inf gives 0."""
    m = x.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # an all -inf row: exp(-inf) = 0, not NaN
    e = torch.exp(x - m)
    l = e.sum(-1, keepdim=True)
    return e / torch.where(l > 0, l, torch.ones_like(l))


def _online_stats(x: torch.Tensor, block: int):
    """Running max and sum over blocks of the last dimension (the online algorithm's single pass)."""
    m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype, device=x.device)
    l = torch.zeros_like(m)
    for start in range(0, x.shape[-1], block):
        xb = x[..., start : start + block]
        m_new = torch.maximum(m, xb.amax(-1, keepdim=True))
        m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        l = l * torch.exp(m - m_safe) + torch.exp(xb - m_safe).sum(-1, keepdim=True)  # rescale the old sum
        m = m_new
    return m, l


def softmax_online(x: torch.Tensor, block: int = 1) -> torch.Tensor:
    """Online softmax: one pass for the running max and sum (``block`` elements at a time), one to write the output.

    ``block=1`` is the algorithm exactly as Milakov & Gimelshein write it, one element at a time.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}.")
    m, l = _online_stats(x, block)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    return torch.exp(x - m) / torch.where(l > 0, l, torch.ones_like(l))


# ----------------------------------------------------------------------------------------------------------------
# step 3: tiled attention in PyTorch, the algorithm of the Triton kernel


def tiled_attention(q, k, v, is_causal: bool = False, scale: float | None = None, block_q: int = 16, block_k: int = 16):
    """Attention one [block_q x block_k] tile at a time with online-softmax rescaling; returns ``(O, LSE)``.

    ``LSE[b, h, i] = log(sum_j exp(S_ij))`` over the keys query i sees (natural log), the statistic the backward
    uses to rebuild P. Never forms more than a [block_q, block_k] piece of S.
    """
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
    dev = q.device
    q64, k64, v64 = (t.detach().to(dev, torch.float64).requires_grad_(do is not None) for t in (q, k, v))
    with torch.enable_grad():
        o = naive_attention(q64, k64, v64, is_causal=is_causal, scale=scale)
        if do is None:
            return o.detach()
        dq, dk, dv = torch.autograd.grad(o, (q64, k64, v64), do.detach().to(dev, torch.float64))
    return o.detach(), dq, dk, dv
