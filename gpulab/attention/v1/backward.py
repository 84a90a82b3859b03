"""Lesson 4, step 5: the FlashAttention-2 backward in Triton.

What you will learn: the backward needs P, and P is N x N, so it is *recomputed* from Q, K and the saved
log-sum-exp instead of stored. With ``S = scale * Q K^T``, ``P = exp(S - LSE)``, ``O = P V`` and the output
gradient ``dO``:

    dV = P^T dO                    dP = dO V^T
    dS = P * (dP - D)              where D_i = sum_j P_ij dP_ij = rowsum(dO * O)_i
    dQ = scale * dS K              dK = scale * dS^T Q

``D = rowsum(dO * O)`` is an O(N d) preprocess that saves a reduction over the N x N ``dP``. On its own it is one
small kernel, :func:`attention_preprocess_kernel`; here the dQ kernel computes it for its own rows (it holds that
block of dO anyway and loads the block of O once) and writes it out for the dK/dV kernel, which runs second. One
launch fewer: at short sequences a launch costs more host time than the whole preprocess takes on the GPU.

FlashAttention-2 splits the work so that no two programs write the same output (no atomics):

- :func:`attention_dkdv_kernel`, one program per (batch*KV head, K block): keeps ``k, v`` and the ``dK, dV``
  accumulators in registers and loops over the query heads that read this KV head (grouped-query attention: their
  sum is dK, dV) and their Q blocks (causal or windowed: only those that see the block; a key that no query sees
  gets dK = dV = 0 because its loop is empty);
- :func:`attention_dq_kernel`, one program per (batch*head, Q block): keeps ``q, dO`` and ``dQ`` in registers and
  loops over K blocks, like the forward; it runs first and also writes ``D`` for its rows.

Causal (and right-bounded windowed) programs differ in work: the first K blocks and the last Q blocks see the most.
Each kernel starts a head's longest program first; ``HEADS_FIRST`` also puts batch*head on grid axis 0 and the block
on axis 1, so the GPU, which starts programs in axis-0-fastest order, starts every head's longest program before any
head's second longest (longest first over the whole grid: the last wave holds the shortest programs, not a mix),
at the cost of programs that run together sharing fewer Q or K/V rows in L2 (:data:`HEADS_FIRST_CAUSAL` says where
it is taken).

Both rebuild each ``[BLOCK_M, BLOCK_N]`` tile of P from ``exp2(S * scale * log2 e - LSE * log2 e)`` and mask only
the blocks that are ragged (past the end of a sequence) or cut by the causal diagonal or a window's edges, as the
forward does (:mod:`gpulab.attention.windows`). Variable-length batches run in the same two launches, the grid's third
axis over the sequences, each program reading its offsets from ``cu_seq``.

That costs seven products per block pair where the math needs five (S and dP are computed in both kernels). The
one-pass backward (an experiment, :mod:`gpulab.attention.experiments.v1_backward_fused`) does five, adding dQ
atomically into an fp32 buffer; it measured slower on the H100, so the plan never takes it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from gpulab.attention.configs import AttentionConfig
from gpulab.attention.v1.forward import query_head_rows
from gpulab.attention.windows import kv_ranges, mask_flags, q_ranges, visible
from gpulab.launch import Launch
from gpulab.triton_ops import LOG2E, dot

__all__ = ["attention_dkdv_kernel", "attention_dq_kernel", "backward_launches", "HEADS_FIRST_CAUSAL"]

HEADS_FIRST_CAUSAL = False
"""Whether causal-like problems (the right side bounded: SDPA's causal mask, or a window bounded on the right) take the
heads-first grid (module docstring) in :func:`backward_launches` by default. Off: on the H200 (``python -m gpulab
bench 05 short``) it took less device time on every causal problem timed, but the GPU test of every short line
(``tests/attention/test_short_sequences.py``) failed on two causal problems, the failing line not yet known."""


@triton.jit
def _dkdv_inner(
    dk,
    dv,
    k,
    v,
    q_ptrs,  # [BLOCK_M, BLOCK_D] pointers to the first Q block's rows of this query head
    do_ptrs,
    lse_ptr,  # this query head's LSE row
    delta_ptr,  # this query head's D row
    lo,
    hi,
    n_q,
    stride_q,  # elements between consecutive query rows
    qk_scale,
    offs_n,
    offs_m0,
    d_mask,
    n_k,
    off,
    left,
    right,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_LEFT: tl.constexpr,
    HAS_RIGHT: tl.constexpr,
    MASKED: tl.constexpr,
    IS_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Q blocks [lo, hi) against one K block: accumulate dK (unscaled) and dV. Works with transposed tiles."""
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_m0
        if MASKED:
            row_ok = offs_m < n_q
            ld_mask = row_ok[:, None] & d_mask[None, :]
        else:
            row_ok = offs_m >= 0  # all true
            ld_mask = row_ok[:, None] & d_mask[None, :]
        q = tl.load(q_ptrs + start_m * stride_q, mask=ld_mask, other=0.0)
        do = tl.load(do_ptrs + start_m * stride_q, mask=ld_mask, other=0.0)
        lse2 = tl.load(lse_ptr + offs_m, mask=row_ok, other=0.0) * LOG2E  # natural log -> base 2
        delta = tl.load(delta_ptr + offs_m, mask=row_ok, other=0.0)
        # P^T, [BLOCK_N, BLOCK_M], rebuilt from the saved log-sum-exp
        s_t = dot(k, tl.trans(q), IS_FP32, PRECISION) * qk_scale
        if MASKED:  # mask the scores, not P: a hidden score can exceed the row's LSE and overflow exp2
            ok = tl.trans(visible(offs_m, offs_n, n_k, off, left, right, HAS_LEFT, HAS_RIGHT)) & row_ok[None, :]
            s_t = tl.where(ok, s_t, float("-inf"))
        p_t = tl.exp2(s_t - lse2[None, :])
        dv += dot(p_t.to(do.dtype), do, IS_FP32, PRECISION)  # dV = P^T dO
        dp_t = dot(v, tl.trans(do), IS_FP32, PRECISION)  # dP^T = V dO^T
        ds_t = p_t * (dp_t - delta[None, :])  # dS^T = P^T * (dP^T - D)
        dk += dot(ds_t.to(q.dtype), q, IS_FP32, PRECISION)  # dK = dS^T Q (scaled at the end)
    return dk, dv


@triton.jit
def attention_dkdv_kernel(
    q_ptr,  # [B, Hq, Nq, HEAD_DIM] queries, contiguous; VARLEN: packed [Tq, Hq, HEAD_DIM]
    k_ptr,  # [B, Hkv, Nk, HEAD_DIM] keys; VARLEN: [Tk, Hkv, HEAD_DIM]
    v_ptr,  # values, like k
    do_ptr,  # dO, the output's gradient, like q
    lse_ptr,  # fp32 log-sum-exp of each score row (natural log): [B, Hq, Nq]; VARLEN: [Hq, Tq]
    delta_ptr,  # fp32 D = rowsum(dO * O), like lse
    dk_ptr,  # dK, like k
    dv_ptr,  # dV, like k
    cu_q_ptr,  # VARLEN: [S + 1] int32 offsets of each sequence's query rows (else not read)
    cu_k_ptr,  # VARLEN: [S + 1] int32 offsets of each sequence's key rows (else not read)
    n_q,  # Nq: query rows per head; VARLEN: Tq, the packed total
    n_k,  # Nk: key rows per head (VARLEN: not read)
    n_heads,  # Hq
    group,  # Hq // Hkv: query heads per KV head
    qk_scale,  # scale * log2(e): the scores in base 2
    scale,  # the softmax scale (dQ and dK carry it once)
    left,  # window: keys before the (bottom-right) diagonal a query sees (HAS_LEFT)
    right,  # keys after the diagonal a query sees (HAS_RIGHT; 0 with the causal mask)
    HEAD_DIM: tl.constexpr,  # D
    BLOCK_M: tl.constexpr,  # query rows per tile
    BLOCK_N: tl.constexpr,  # key rows per tile
    BLOCK_D: tl.constexpr,  # D padded to a power of two >= 16 (the tl.dot tile)
    IS_CAUSAL: tl.constexpr,  # SDPA's top-left causal mask
    HAS_LEFT: tl.constexpr,  # the window bounds keys on the left
    HAS_RIGHT: tl.constexpr,  # the window (or the causal mask) bounds keys on the right
    VARLEN: tl.constexpr,  # packed sequences; grid axis 2 is the sequence
    IS_FP32: tl.constexpr,  # fp32 inputs (products at PRECISION)
    PRECISION: tl.constexpr,  # tl.dot input precision: 'ieee' or 'tf32'
    HEADS_FIRST: tl.constexpr,  # not VARLEN: grid (batch*KV heads, K blocks) instead of (K blocks, batch*KV heads)
):
    """dK and dV of one (batch*KV head, K block) (VARLEN: one (K block, KV head, sequence)): loop over the query
    heads of its group and, for each, the Q blocks that see it. The group's sum happens here, in registers: no
    per-query-head dK/dV buffer, no atomics."""
    if HEADS_FIRST:  # causal: the first K blocks (seen by the most queries) start first
        start_n = tl.program_id(1) * BLOCK_N
    else:
        start_n = tl.program_id(0) * BLOCK_N
    n_kv_heads = n_heads // group
    if VARLEN:
        h_kv = tl.program_id(1)
        seq = tl.program_id(2)
        q_start = tl.load(cu_q_ptr + seq)
        k_start = tl.load(cu_k_ptr + seq)
        lse_base = q_start.to(tl.int64)  # query head h's row starts at h * Tq
        lse_head = n_q  # elements between two query heads' LSE rows
        n_q = tl.load(cu_q_ptr + seq + 1) - q_start
        n_k = tl.load(cu_k_ptr + seq + 1) - k_start
        stride_q = n_heads * HEAD_DIM
        stride_kv = n_kv_heads * HEAD_DIM
        kv_base = k_start.to(tl.int64) * stride_kv + h_kv * HEAD_DIM
        q_base = q_start.to(tl.int64) * stride_q + h_kv * group * HEAD_DIM
        q_head = HEAD_DIM  # elements between two query heads' first rows
    else:  # batch*KV head b*Hkv + g; its query heads are b*Hq + g*group + i = (b*Hkv + g)*group + i
        bh_kv = tl.program_id(1).to(tl.int64)
        if HEADS_FIRST:
            bh_kv = tl.program_id(0).to(tl.int64)
        stride_q = HEAD_DIM
        stride_kv = HEAD_DIM
        kv_base = bh_kv * n_k * HEAD_DIM
        q_base = bh_kv * group * n_q * HEAD_DIM
        q_head = n_q * HEAD_DIM
        lse_base = bh_kv * group * n_q
        lse_head = n_q
    off = 0
    if not IS_CAUSAL:
        off = n_k - n_q  # a window's diagonal is aligned bottom-right
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    kv_mask = (offs_n < n_k)[:, None] & d_mask[None, :]
    kv_offs = kv_base + offs_n[:, None] * stride_kv + offs_d[None, :]
    # Keys past n_k load as 0; their dK/dV rows are never stored, and dK[j] depends on key j only.
    k = tl.load(k_ptr + kv_offs, mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + kv_offs, mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

    lo, a, b, hi = q_ranges(start_n, n_q, n_k, off, left, right, BLOCK_M, BLOCK_N, HAS_LEFT, HAS_RIGHT)
    for i in range(0, group):  # the query heads that read this KV head: dK and dV are their sum
        q_ptrs = q_ptr + q_base + i * q_head + offs_m0[:, None] * stride_q + offs_d[None, :]
        do_ptrs = do_ptr + q_base + i * q_head + offs_m0[:, None] * stride_q + offs_d[None, :]
        lse_i = lse_ptr + lse_base + i * lse_head
        delta_i = delta_ptr + lse_base + i * lse_head
        if VARLEN:
            lse_i = lse_ptr + (h_kv * group + i).to(tl.int64) * lse_head + lse_base
            delta_i = delta_ptr + (h_kv * group + i).to(tl.int64) * lse_head + lse_base
        dk, dv = _dkdv_inner(
            dk, dv, k, v, q_ptrs, do_ptrs, lse_i, delta_i, lo, a, n_q, stride_q, qk_scale, offs_n, offs_m0, d_mask,
            n_k, off, left, right, HEAD_DIM, BLOCK_M, BLOCK_D, HAS_LEFT, HAS_RIGHT, True, IS_FP32, PRECISION,
        )  # fmt: skip
        dk, dv = _dkdv_inner(
            dk, dv, k, v, q_ptrs, do_ptrs, lse_i, delta_i, a, b, n_q, stride_q, qk_scale, offs_n, offs_m0, d_mask,
            n_k, off, left, right, HEAD_DIM, BLOCK_M, BLOCK_D, HAS_LEFT, HAS_RIGHT, False, IS_FP32, PRECISION,
        )  # fmt: skip
        dk, dv = _dkdv_inner(
            dk, dv, k, v, q_ptrs, do_ptrs, lse_i, delta_i, b, hi, n_q, stride_q, qk_scale, offs_n, offs_m0, d_mask,
            n_k, off, left, right, HEAD_DIM, BLOCK_M, BLOCK_D, HAS_LEFT, HAS_RIGHT, True, IS_FP32, PRECISION,
        )  # fmt: skip
    tl.store(dk_ptr + kv_offs, (dk * scale).to(dk_ptr.dtype.element_ty), mask=kv_mask)
    tl.store(dv_ptr + kv_offs, dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq_inner(
    dq,
    q,
    do,
    lse2,
    delta,
    k_ptrs,
    v_ptrs,
    lo,
    hi,
    n_k,
    stride_kv,
    qk_scale,
    offs_m,
    offs_n0,
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
    """K blocks [lo, hi) against one Q block: accumulate dQ (unscaled)."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        if MASKED:
            ld_mask = (offs_n < n_k)[:, None] & d_mask[None, :]
        else:
            ld_mask = (offs_n >= 0)[:, None] & d_mask[None, :]
        k = tl.load(k_ptrs + start_n * stride_kv, mask=ld_mask, other=0.0)
        v = tl.load(v_ptrs + start_n * stride_kv, mask=ld_mask, other=0.0)
        s = dot(q, tl.trans(k), IS_FP32, PRECISION) * qk_scale
        if MASKED:  # mask the scores, not P: a hidden score can exceed the row's LSE and overflow exp2
            s = tl.where(visible(offs_m, offs_n, n_k, off, left, right, HAS_LEFT, HAS_RIGHT), s, float("-inf"))
        p = tl.exp2(s - lse2[:, None])
        dp = dot(do, tl.trans(v), IS_FP32, PRECISION)  # dP = dO V^T
        ds = p * (dp - delta[:, None])
        dq += dot(ds.to(k.dtype), k, IS_FP32, PRECISION)  # dQ = dS K (scaled at the end)
    return dq


@triton.jit
def attention_dq_kernel(
    q_ptr,  # [B, Hq, Nq, HEAD_DIM] queries, contiguous; VARLEN: packed [Tq, Hq, HEAD_DIM]
    k_ptr,  # [B, Hkv, Nk, HEAD_DIM] keys; VARLEN: [Tk, Hkv, HEAD_DIM]
    v_ptr,  # values, like k
    o_ptr,  # output O, like q
    do_ptr,  # dO, the output's gradient, like q
    lse_ptr,  # fp32 log-sum-exp of each score row (natural log): [B, Hq, Nq]; VARLEN: [Hq, Tq]
    delta_ptr,  # fp32 D = rowsum(dO * O), like lse
    dq_ptr,  # dQ, like q
    cu_q_ptr,  # VARLEN: [S + 1] int32 offsets of each sequence's query rows (else not read)
    cu_k_ptr,  # VARLEN: [S + 1] int32 offsets of each sequence's key rows (else not read)
    n_q,  # Nq: query rows per head; VARLEN: Tq, the packed total
    n_k,  # Nk: key rows per head (VARLEN: not read)
    n_heads,  # Hq
    group,  # Hq // Hkv: query heads per KV head
    qk_scale,  # scale * log2(e): the scores in base 2
    scale,  # the softmax scale (dQ and dK carry it once)
    left,  # window: keys before the (bottom-right) diagonal a query sees (HAS_LEFT)
    right,  # keys after the diagonal a query sees (HAS_RIGHT; 0 with the causal mask)
    HEAD_DIM: tl.constexpr,  # D
    BLOCK_M: tl.constexpr,  # query rows per tile
    BLOCK_N: tl.constexpr,  # key rows per tile
    BLOCK_D: tl.constexpr,  # D padded to a power of two >= 16 (the tl.dot tile)
    IS_CAUSAL: tl.constexpr,  # SDPA's top-left causal mask
    HAS_LEFT: tl.constexpr,  # the window bounds keys on the left
    HAS_RIGHT: tl.constexpr,  # the window (or the causal mask) bounds keys on the right
    VARLEN: tl.constexpr,  # packed sequences; grid axis 2 is the sequence
    IS_FP32: tl.constexpr,  # fp32 inputs (products at PRECISION)
    PRECISION: tl.constexpr,  # tl.dot input precision: 'ieee' or 'tf32'
    HEADS_FIRST: tl.constexpr,  # not VARLEN: grid (batch*heads, Q blocks) instead of (Q blocks, batch*heads)
):
    """dQ of one (batch*head, Q block) (VARLEN: one (Q block, head, sequence)): loop over the K blocks it sees, split
    like the forward's loop. Also D = rowsum(dO * O) for its rows, stored to ``delta_ptr`` for
    :func:`attention_dkdv_kernel`."""
    if HEADS_FIRST:
        pid_m = tl.program_id(1)
        if IS_CAUSAL:  # the longest programs (last Q blocks, most keys) first, as in the forward
            pid_m = tl.num_programs(1) - 1 - pid_m
        n_q, n_k, stride_q, stride_kv, q_base, kv_base, lse_base = query_head_rows(
            cu_q_ptr, cu_k_ptr, n_q, n_k, n_heads, group, HEAD_DIM, VARLEN, 0
        )
    else:
        pid_m = tl.program_id(0)
        if IS_CAUSAL:
            pid_m = tl.num_programs(0) - 1 - pid_m
        n_q, n_k, stride_q, stride_kv, q_base, kv_base, lse_base = query_head_rows(
            cu_q_ptr, cu_k_ptr, n_q, n_k, n_heads, group, HEAD_DIM, VARLEN, 1
        )
    off = 0
    if not IS_CAUSAL:
        off = n_k - n_q  # a window's diagonal is aligned bottom-right
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    row_ok = offs_m < n_q
    q_offs = q_base + offs_m[:, None] * stride_q + offs_d[None, :]
    q_mask = row_ok[:, None] & d_mask[None, :]
    q = tl.load(q_ptr + q_offs, mask=q_mask, other=0.0)
    do = tl.load(do_ptr + q_offs, mask=q_mask, other=0.0)
    lse2 = tl.load(lse_ptr + lse_base + offs_m, mask=row_ok, other=0.0) * LOG2E
    o = tl.load(o_ptr + q_offs, mask=q_mask, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)  # D = rowsum(dO * O), [BLOCK_M], fp32
    tl.store(delta_ptr + lse_base + offs_m, delta, mask=row_ok)
    k_ptrs = k_ptr + kv_base + offs_n0[:, None] * stride_kv + offs_d[None, :]
    v_ptrs = v_ptr + kv_base + offs_n0[:, None] * stride_kv + offs_d[None, :]
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    lo, a, b, hi = kv_ranges(start_m, n_q, n_k, off, left, right, BLOCK_M, BLOCK_N, HAS_LEFT, HAS_RIGHT)
    dq = _dq_inner(
        dq, q, do, lse2, delta, k_ptrs, v_ptrs, lo, a, n_k, stride_kv, qk_scale, offs_m, offs_n0, d_mask, off, left,
        right, HEAD_DIM, BLOCK_N, BLOCK_D, HAS_LEFT, HAS_RIGHT, True, IS_FP32, PRECISION,
    )  # fmt: skip
    dq = _dq_inner(
        dq, q, do, lse2, delta, k_ptrs, v_ptrs, a, b, n_k, stride_kv, qk_scale, offs_m, offs_n0, d_mask, off, left,
        right, HEAD_DIM, BLOCK_N, BLOCK_D, HAS_LEFT, HAS_RIGHT, False, IS_FP32, PRECISION,
    )  # fmt: skip
    dq = _dq_inner(
        dq, q, do, lse2, delta, k_ptrs, v_ptrs, b, hi, n_k, stride_kv, qk_scale, offs_m, offs_n0, d_mask, off, left,
        right, HEAD_DIM, BLOCK_N, BLOCK_D, HAS_LEFT, HAS_RIGHT, True, IS_FP32, PRECISION,
    )  # fmt: skip
    tl.store(dq_ptr + q_offs, (dq * scale).to(dq_ptr.dtype.element_ty), mask=q_mask)


def backward_launches(plan, cfg_kv: AttentionConfig, cfg_q: AttentionConfig, heads_first: bool | None = None) -> tuple:
    """The two :class:`Launch` es of the backward for ``plan``: dQ (and D) with ``cfg_q``, then dK/dV with
    ``cfg_kv`` (one program per K block and KV head: it sums its group's query heads). ``heads_first``: the
    heads-first grid (module docstring; not for packed batches); None: :data:`HEADS_FIRST_CAUSAL` for causal-like
    problems, else not."""
    flags = mask_flags(plan)
    if heads_first is None:
        heads_first = HEADS_FIRST_CAUSAL and flags["HAS_RIGHT"]
    heads_first = bool(heads_first) and not plan.varlen
    common = dict(**flags, VARLEN=plan.varlen, IS_FP32=plan.is_fp32, PRECISION=plan.precision, HEAD_DIM=plan.d,
                  HEADS_FIRST=heads_first)  # fmt: skip
    if plan.varlen:
        grid_kv = (-(-plan.n_k // cfg_kv.block_n), plan.h // plan.group, plan.b)
        grid_q = (-(-plan.n_q // cfg_q.block_m), plan.h, plan.b)
    else:
        grid_kv = (-(-plan.n_k // cfg_kv.block_n), plan.b * (plan.h // plan.group))
        grid_q = (-(-plan.n_q // cfg_q.block_m), plan.b * plan.h)
        if heads_first:
            grid_kv, grid_q = grid_kv[::-1], grid_q[::-1]
    dkdv = Launch(attention_dkdv_kernel, grid_kv,
                  dict(BLOCK_M=cfg_kv.block_m, BLOCK_N=cfg_kv.block_n, BLOCK_D=cfg_kv.block_d, **common,
                       num_warps=cfg_kv.num_warps, num_stages=cfg_kv.num_stages))  # fmt: skip
    dq = Launch(attention_dq_kernel, grid_q,
                dict(BLOCK_M=cfg_q.block_m, BLOCK_N=cfg_q.block_n, BLOCK_D=cfg_q.block_d, **common,
                     num_warps=cfg_q.num_warps, num_stages=cfg_q.num_stages))  # fmt: skip
    return dq, dkdv
