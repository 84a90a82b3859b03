"""Which key blocks a query block sees, and which query blocks a key block is seen by: the loop bounds of every
attention kernel with SDPA's causal mask, a sliding window or neither.

One rule covers all three: query i sees key j iff ``j <= i + off + right`` (when the right side is bounded) and
``j >= i + off - left`` (when the left side is). SDPA's causal mask is ``off = 0, right = 0`` (top-left); a window
``(left, right)`` is aligned bottom-right, ``off = Nk - Nq`` (FlashAttention's). From it each program derives three
ranges of blocks: masked at the leading edge, whole (no mask: every pair of the two blocks is visible and in bounds),
masked at the trailing edge. Blocks outside them are never loaded, so a window of W keys costs O(N W).
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["kv_ranges", "q_ranges", "visible", "mask_flags"]


@triton.jit
def kv_ranges(start_m, n_q, n_k, off, left, right, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):  # fmt: skip
    """The key blocks a Q block starting at ``start_m`` visits, as [lo, a) masked, [a, b) whole (every query of the
    block sees every key of the block: no mask), [b, hi) masked. Query i sees key j iff ``j <= i + off + right``
    (HAS_RIGHT) and ``j >= i + off - left`` (HAS_LEFT): SDPA's causal mask is ``off = 0, right = 0``; a window is
    aligned bottom-right, ``off = Nk - Nq``. Blocks outside [lo, hi) are never loaded."""
    lo = 0
    hi = n_k
    a = 0
    b = (n_k // BLOCK_N) * BLOCK_N
    if HAS_LEFT:
        lo = (tl.maximum(start_m + off - left, 0) // BLOCK_N) * BLOCK_N
        a = tl.cdiv(tl.maximum(start_m + BLOCK_M - 1 + off - left, 0), BLOCK_N) * BLOCK_N
    if HAS_RIGHT:
        hi = tl.minimum(n_k, tl.maximum(start_m + BLOCK_M + off + right, 0))
        b = tl.minimum(b, (tl.maximum(start_m + off + right + 1, 0) // BLOCK_N) * BLOCK_N)
    hi = tl.where(start_m < n_q, hi, 0)  # a Q block past this sequence's end (varlen): nothing to visit
    lo = tl.minimum(lo, hi)
    a = tl.minimum(tl.maximum(a, lo), hi)
    b = tl.minimum(tl.maximum(b, a), hi)
    return lo, a, b, hi


@triton.jit
def visible(rows, cols, n_k, off, left, right, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):
    """[len(rows), len(cols)]: key ``cols[j]`` exists and query ``rows[i]`` sees it (the rule of :func:`kv_ranges`)."""
    ok = (cols < n_k)[None, :]
    if HAS_RIGHT:
        ok = ok & (cols[None, :] <= rows[:, None] + off + right)
    if HAS_LEFT:
        ok = ok & (cols[None, :] >= rows[:, None] + off - left)
    return ok


@triton.jit
def q_ranges(start_n, n_q, n_k, off, left, right, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):  # fmt: skip
    """The Q blocks that see the key block starting at ``start_n`` (the dK/dV loop), as [lo, a) masked, [a, b)
    whole, [b, hi) masked, by the rule of :func:`kv_ranges` solved for i: ``i >= j - off - right`` and
    ``i <= j - off + left``."""
    lo = 0
    hi = n_q
    a = 0
    b = (n_q // BLOCK_M) * BLOCK_M
    if HAS_RIGHT:
        lo = (tl.maximum(start_n - off - right, 0) // BLOCK_M) * BLOCK_M
        a = tl.cdiv(tl.maximum(start_n + BLOCK_N - 1 - off - right, 0), BLOCK_M) * BLOCK_M
    if HAS_LEFT:
        hi = tl.minimum(n_q, tl.maximum(start_n + BLOCK_N - off + left, 0))
        b = tl.minimum(b, (tl.maximum(start_n - off + left + 1, 0) // BLOCK_M) * BLOCK_M)
    hi = tl.where(start_n < n_k, hi, 0)  # a K block past this sequence's end (varlen): nothing to visit
    lo = tl.minimum(lo, hi)
    a = tl.minimum(tl.maximum(a, lo), hi)
    b = tl.minimum(tl.maximum(b, a), hi)
    return lo, a, b, hi


def mask_flags(plan) -> dict:
    """The masking constexprs of ``plan``: SDPA's causal mask bounds the right side (``right = 0``); a window either
    side it bounds."""
    left, right = plan.window
    return dict(IS_CAUSAL=plan.is_causal, HAS_LEFT=left >= 0, HAS_RIGHT=plan.is_causal or right >= 0)
