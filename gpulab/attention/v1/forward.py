"""Lesson 4, step 4: the FlashAttention forward kernel in Triton.

What you will learn: how :func:`gpulab.attention.reference.tiled_attention` becomes one GPU kernel.

- **One program per (Q block, batch*head).** It loads its ``[BLOCK_M, D]`` block of queries once and keeps it, the
  running max ``m``, the running sum ``l`` and the output accumulator ``acc`` in registers, while an inner loop
  streams ``[BLOCK_N, D]`` blocks of K and V from memory. Q, K and V are each read once per Q block; O is written
  once. Nothing N x N ever reaches memory.
- **The scale folded into exp2.** ``exp(x) = 2^(x * log2(e))``, and ``exp2`` is the hardware instruction. So the
  scores are computed as ``S2 = (Q K^T) * (scale * log2 e)`` and everything (max, rescaling, sums) runs in base 2;
  one multiply per score does both the softmax scale and the change of base.
- **Causal masking that skips work.** With SDPA's top-left mask, query i sees keys ``j <= i``. A Q block starting
  at ``start_m`` needs no key at or past ``start_m + BLOCK_M``: those key blocks are never loaded (about half the
  work of a causal forward).
- **Masks only where a block is ragged.** The key loop runs in three parts
  (:func:`gpulab.attention.windows.kv_ranges`): key blocks that every query of the block sees completely (no bounds
  check, no mask) between the few that need a mask: the blocks cut by the causal diagonal or a window's edges, and
  the last block when ``Nk`` is not a multiple of ``BLOCK_N``. Masked scores are ``-inf``.
- **Sliding windows skip work like the causal mask.** A window ``(left, right)`` (bottom-right aligned) bounds the
  keys a Q block can see on both sides: blocks outside ``[lo, hi)`` are never loaded, so a window of W keys costs
  O(N W), not O(N^2).
- **Grouped-query heads without a copy.** Query head h reads KV head ``h // group``: the programs of one group read
  the same K/V rows (and find them in L2), nothing is repeated in memory.
- **Variable lengths in one launch.** With packed ``[T, H, D]`` tensors the grid's third axis is the sequence; each
  program reads its sequence's offsets from ``cu_seq`` itself, so the host never reads them (the launch can be
  captured in a CUDA graph) and the longest sequence sizes the grid.
- **The log-sum-exp is saved** (``LSE = (m + log2 l) * ln 2``, natural log, fp32, [B, H, Nq]): with it the backward
  rebuilds ``P = exp(S - LSE)`` without storing P.

A row that sees no key at all (a window's rows above the diagonal when Nq > Nk, an empty key sequence) gives
``O = 0`` and ``LSE = 0``: the max is replaced by 0 where it is still ``-inf`` before any ``exp2``, so no NaN appears.
:func:`gpulab.attention.schedule.block_schedule` draws which (Q block, K block) pairs run with and without a mask.
"""

from __future__ import annotations

import triton
import triton.language as tl

from gpulab import triton_ops
from gpulab.attention.configs import AttentionConfig
from gpulab.attention.windows import kv_ranges, mask_flags, visible
from gpulab.launch import Launch
from gpulab.triton_ops import dot

__all__ = ["attention_forward_kernel", "forward_launch"]


@triton.jit
def _fwd_inner(
    acc,
    l_i,
    m_i,
    q,
    k_ptrs,  # [BLOCK_N, BLOCK_D] pointers to the first key block's rows
    v_ptrs,
    lo,
    hi,
    n_k,
    stride_kv,  # elements between consecutive key rows
    qk_scale,
    offs_m,
    offs_n,
    d_mask,
    off,
    left,
    right,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_LEFT: tl.constexpr,
    HAS_RIGHT: tl.constexpr,
    MASKED: tl.constexpr,
    IS_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Key blocks [lo, hi) for one Q block: update (acc, l, m). MASKED: bounds and visibility masks on each block."""
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        if MASKED:
            kv_mask = (cols < n_k)[:, None]
            if BLOCK_D != HEAD_DIM:
                kv_mask = kv_mask & d_mask[None, :]
            k = tl.load(k_ptrs + start_n * stride_kv, mask=kv_mask, other=0.0)
            v = tl.load(v_ptrs + start_n * stride_kv, mask=kv_mask, other=0.0)
        elif BLOCK_D != HEAD_DIM:  # full key block, but the head dim is padded: mask the columns only
            k = tl.load(k_ptrs + start_n * stride_kv, mask=d_mask[None, :], other=0.0)
            v = tl.load(v_ptrs + start_n * stride_kv, mask=d_mask[None, :], other=0.0)
        else:
            k = tl.load(k_ptrs + start_n * stride_kv)
            v = tl.load(v_ptrs + start_n * stride_kv)
        # S2 = Q K^T * scale * log2(e): the scores in base 2, [BLOCK_M, BLOCK_N]
        s = dot(q, tl.trans(k), IS_FP32, PRECISION) * qk_scale
        if MASKED:
            s = tl.where(visible(offs_m, cols, n_k, off, left, right, HAS_LEFT, HAS_RIGHT), s, float("-inf"))
        # the online-softmax update: new max, rescale what was accumulated, add this block
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet: avoid -inf - -inf
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, IS_FP32, PRECISION)  # P in the operands' dtype
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def query_head_rows(cu_q_ptr, cu_k_ptr, n_q, n_k, n_heads, group, HEAD_DIM: tl.constexpr, VARLEN: tl.constexpr,
                    BH_AXIS: tl.constexpr = 1):  # fmt: skip
    """Where the rows of this program's query head (grid axis ``BH_AXIS``, 1 or 0; VARLEN: axis 1, and axis 2 is the
    sequence) and of the KV head
    it reads start: ``(n_q, n_k, stride_q, stride_kv, q_base, kv_base, lse_base)``, the lengths this program sees,
    the elements between two rows of Q (and O) and of K (and V), the offsets of its first Q and K rows, of its LSE
    row. VARLEN: [T, H, D] packed, a row H * D elements apart, sequence ``seq``'s rows from its offset in
    ``cu_q_ptr`` / ``cu_k_ptr``; LSE [H, Tq] (``n_q`` in: the total Tq). Else [B*H, N, D] contiguous: query head
    b*Hq + h reads KV head b*Hkv + h // group = (b*Hq + h) // group."""
    if VARLEN:
        h = tl.program_id(1)
        seq = tl.program_id(2)
        q_start = tl.load(cu_q_ptr + seq)
        k_start = tl.load(cu_k_ptr + seq)
        lse_base = h.to(tl.int64) * n_q + q_start
        n_q = tl.load(cu_q_ptr + seq + 1) - q_start
        n_k = tl.load(cu_k_ptr + seq + 1) - k_start
        stride_q = n_heads * HEAD_DIM
        stride_kv = (n_heads // group) * HEAD_DIM
        q_base = q_start.to(tl.int64) * stride_q + h * HEAD_DIM
        kv_base = k_start.to(tl.int64) * stride_kv + (h // group) * HEAD_DIM
    else:
        bh = tl.program_id(BH_AXIS).to(tl.int64)
        stride_q = HEAD_DIM
        stride_kv = HEAD_DIM
        q_base = bh * n_q * HEAD_DIM
        kv_base = (bh // group) * n_k * HEAD_DIM
        lse_base = bh * n_q
    return n_q, n_k, stride_q, stride_kv, q_base, kv_base, lse_base


@triton.jit
def attention_forward_kernel(
    q_ptr,  # [B, Hq, Nq, HEAD_DIM] queries, contiguous; VARLEN: packed [Tq, Hq, HEAD_DIM]
    k_ptr,  # [B, Hkv, Nk, HEAD_DIM] keys; VARLEN: [Tk, Hkv, HEAD_DIM]
    v_ptr,  # values, like k
    o_ptr,  # output O, like q
    lse_ptr,  # fp32 log-sum-exp of each score row (natural log): [B, Hq, Nq]; VARLEN: [Hq, Tq]
    cu_q_ptr,  # VARLEN: [S + 1] int32 offsets of each sequence's query rows (else not read)
    cu_k_ptr,  # VARLEN: [S + 1] int32 offsets of each sequence's key rows (else not read)
    n_q,  # Nq: query rows per head; VARLEN: Tq, the packed total
    n_k,  # Nk: key rows per head (VARLEN: not read)
    n_heads,  # Hq
    group,  # Hq // Hkv: query heads per KV head (grouped-query attention; 1 without)
    qk_scale,  # scale * log2(e): the scores in base 2
    left,  # window: keys before the (bottom-right) diagonal a query sees (HAS_LEFT)
    right,  # keys after the diagonal a query sees (HAS_RIGHT; 0 with the causal mask)
    HEAD_DIM: tl.constexpr,  # D
    BLOCK_M: tl.constexpr,  # query rows per tile
    BLOCK_N: tl.constexpr,  # key rows per tile
    BLOCK_D: tl.constexpr,  # D padded to a power of two >= 16 (the tl.dot tile)
    IS_CAUSAL: tl.constexpr,  # SDPA's top-left causal mask (a window with off = 0, right = 0)
    HAS_LEFT: tl.constexpr,  # the window bounds keys on the left
    HAS_RIGHT: tl.constexpr,  # the window (or the causal mask) bounds keys on the right
    VARLEN: tl.constexpr,  # packed sequences, offsets in cu_q_ptr / cu_k_ptr; grid axis 2 is the sequence
    IS_FP32: tl.constexpr,  # fp32 inputs (products at PRECISION)
    PRECISION: tl.constexpr,  # tl.dot input precision: 'ieee' or 'tf32'
):
    """O and LSE for one (Q block, batch*head) (VARLEN: one (Q block, head, sequence)). Query head h reads KV head
    ``h // group``: with grouped-query heads nothing is copied, the programs of one group read the same K/V rows."""
    # Q blocks of one head are neighbours in the launch order: the programs running at once share K/V in L2.
    pid_m = tl.program_id(0)
    if IS_CAUSAL:  # the longest programs (last Q blocks, most keys) first: the final wave is made of short ones
        pid_m = tl.num_programs(0) - 1 - pid_m
    n_q, n_k, stride_q, stride_kv, q_base, kv_base, lse_base = query_head_rows(
        cu_q_ptr, cu_k_ptr, n_q, n_k, n_heads, group, HEAD_DIM, VARLEN
    )
    off = 0
    if not IS_CAUSAL:
        off = n_k - n_q  # a window's diagonal is aligned bottom-right
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    row_mask = offs_m < n_q

    q_ptrs = q_ptr + q_base + offs_m[:, None] * stride_q + offs_d[None, :]
    k_ptrs = k_ptr + kv_base + offs_n[:, None] * stride_kv + offs_d[None, :]
    v_ptrs = v_ptr + kv_base + offs_n[:, None] * stride_kv + offs_d[None, :]
    q = tl.load(q_ptrs, mask=row_mask[:, None] & d_mask[None, :], other=0.0)  # loaded once, kept in registers

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Key blocks cut by the window, the causal diagonal or the sequence's end are masked; the others are not.
    lo, a, b, hi = kv_ranges(start_m, n_q, n_k, off, left, right, BLOCK_M, BLOCK_N, HAS_LEFT, HAS_RIGHT)
    acc, l_i, m_i = _fwd_inner(
        acc, l_i, m_i, q, k_ptrs, v_ptrs, lo, a, n_k, stride_kv, qk_scale, offs_m, offs_n, d_mask, off, left, right,
        HEAD_DIM, BLOCK_N, BLOCK_D, HAS_LEFT, HAS_RIGHT, True, IS_FP32, PRECISION,
    )  # fmt: skip
    acc, l_i, m_i = _fwd_inner(
        acc, l_i, m_i, q, k_ptrs, v_ptrs, a, b, n_k, stride_kv, qk_scale, offs_m, offs_n, d_mask, off, left, right,
        HEAD_DIM, BLOCK_N, BLOCK_D, HAS_LEFT, HAS_RIGHT, False, IS_FP32, PRECISION,
    )  # fmt: skip
    acc, l_i, m_i = _fwd_inner(
        acc, l_i, m_i, q, k_ptrs, v_ptrs, b, hi, n_k, stride_kv, qk_scale, offs_m, offs_n, d_mask, off, left, right,
        HEAD_DIM, BLOCK_N, BLOCK_D, HAS_LEFT, HAS_RIGHT, True, IS_FP32, PRECISION,
    )  # fmt: skip

    l_safe = tl.where(l_i > 0.0, l_i, 1.0)  # a row that saw no key: O = 0, not 0/0
    m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
    o = acc / l_safe[:, None]
    lse = (m_safe + tl.log2(l_safe)) * triton_ops.LN2  # base 2 back to natural log
    o_ptrs = o_ptr + q_base + offs_m[:, None] * stride_q + offs_d[None, :]
    tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=row_mask[:, None] & d_mask[None, :])
    tl.store(lse_ptr + lse_base + offs_m, lse, mask=row_mask)


# ----------------------------------------------------------------------------------------------------------------
# wrappers


def forward_launch(plan, cfg: AttentionConfig) -> Launch:
    """The :class:`Launch` of :func:`attention_forward_kernel` for ``plan`` (a :class:`gpulab.attention.plan.Plan`, or
    :class:`gpulab.attention.varlen.VarlenPlan` with ``plan.varlen``) with tiles ``cfg``."""
    if plan.varlen:  # max_q sizes the grid; a program past its sequence's end stores nothing
        grid = (-(-plan.n_q // cfg.block_m), plan.h, plan.b)
    else:
        grid = (-(-plan.n_q // cfg.block_m), plan.b * plan.h)  # Q blocks fastest: neighbours share K/V
    constexprs = dict(HEAD_DIM=plan.d, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_D=cfg.block_d,
                      **mask_flags(plan), VARLEN=plan.varlen, IS_FP32=plan.is_fp32, PRECISION=plan.precision,
                      num_warps=cfg.num_warps, num_stages=cfg.num_stages)  # fmt: skip
    return Launch(attention_forward_kernel, grid, constexprs)
