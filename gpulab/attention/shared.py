"""The two pieces every version's backward shares (versions import these; none imports another version).

- :func:`attention_preprocess_kernel`: ``D = rowsum(dO * O)`` (fp32, [B*H, Nq]) in its own launch, for backwards
  whose main kernel loops over key blocks and so cannot compute it for its rows on the way (version 1's one-pass
  backward; version 1's and 2's two-kernel backwards compute it inside their dQ kernel instead);
- :func:`attention_preprocess_zero_kernel`: the same D, and the fp32 dQ accumulator's rows zeroed in the same launch;
- :func:`dkdv_q_ranges`: which Q blocks a dK/dV program visits, split into the masked, whole and ragged ranges.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["attention_preprocess_kernel", "attention_preprocess_zero_kernel", "dkdv_q_ranges"]


@triton.jit
def attention_preprocess_kernel(
    o_ptr,  # [B*H, Nq, HEAD_DIM] output O
    do_ptr,  # [B*H, Nq, HEAD_DIM] dO, the output's gradient
    delta_ptr,  # [B*H, Nq] fp32 D = rowsum(dO * O)
    n_q,  # Nq: query rows per head
    HEAD_DIM: tl.constexpr,  # D
    BLOCK_M: tl.constexpr,  # query rows per tile
    BLOCK_D: tl.constexpr,  # D padded to a power of two >= 16 (the tl.dot tile)
):
    """delta[bh, i] = sum_d dO[bh, i, d] * O[bh, i, d] in fp32, for one (batch*head, block of rows)."""
    _delta_rows(o_ptr, do_ptr, delta_ptr, n_q, HEAD_DIM, BLOCK_M, BLOCK_D)


@triton.jit
def _delta_rows(o_ptr, do_ptr, delta_ptr, n_q, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_D: tl.constexpr):  # fmt: skip
    """D of this program's (batch*head, block of rows), stored; returns the rows' offsets [BLOCK_M, BLOCK_D] into
    [B*H, Nq, HEAD_DIM] tensors and their mask (64-bit: B*H*Nq*D may pass 2^31)."""
    bh = tl.program_id(1).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_m < n_q)[:, None] & (offs_d < HEAD_DIM)[None, :]
    offs = bh * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    o = tl.load(o_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(delta_ptr + bh * n_q + offs_m, tl.sum(o * do, 1), mask=offs_m < n_q)
    return offs, mask


@triton.jit
def attention_preprocess_zero_kernel(
    o_ptr,  # [B*H, Nq, HEAD_DIM] output O
    do_ptr,  # [B*H, Nq, HEAD_DIM] dO, the output's gradient
    delta_ptr,  # [B*H, Nq] fp32 D = rowsum(dO * O)
    dq_ptr,  # [B*H, Nq, HEAD_DIM] fp32 dQ accumulator, zeroed here
    n_q,  # Nq: query rows per head
    HEAD_DIM: tl.constexpr,  # D
    BLOCK_M: tl.constexpr,  # query rows per tile
    BLOCK_D: tl.constexpr,  # D padded to a power of two >= 16
):
    """:func:`attention_preprocess_kernel`'s D for one (batch*head, block of rows), and the same rows of the fp32 dQ
    accumulator set to zero: one launch where a backward that adds dQ atomically needs both (version 3's step 9)."""
    offs, mask = _delta_rows(o_ptr, do_ptr, delta_ptr, n_q, HEAD_DIM, BLOCK_M, BLOCK_D)
    tl.store(dq_ptr + offs, tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32), mask=mask)


@triton.jit
def dkdv_q_ranges(start_n, n_q, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """The Q blocks a dK/dV program of K block ``start_n`` visits, as three ranges (every backward uses it):
    [lo, a) cut by the causal diagonal (masked), [a, b) whole, seeing the whole K block (no mask), [b, n_q) the ragged
    last Q block (masked). Causal: queries before ``start_n`` see none of these keys, so ``lo`` skips them."""
    lo = 0
    full_lo = 0
    if IS_CAUSAL:
        lo = (start_n // BLOCK_M) * BLOCK_M
        full_lo = tl.cdiv(start_n + BLOCK_N - 1, BLOCK_M) * BLOCK_M
    full_hi = (n_q // BLOCK_M) * BLOCK_M
    a = tl.maximum(lo, tl.minimum(full_lo, full_hi))
    b = tl.maximum(a, full_hi)
    return lo, a, b
