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

- :func:`attention_dkdv_kernel`, one program per (batch*head, K block): keeps ``k, v`` and the ``dK, dV``
  accumulators in registers and loops over Q blocks (causal: only those at or below the diagonal; a key that no
  query sees gets dK = dV = 0 because its loop is empty);
- :func:`attention_dq_kernel`, one program per (batch*head, Q block): keeps ``q, dO`` and ``dQ`` in registers and
  loops over K blocks, like the forward; it runs first and also writes ``D`` for its rows.

Both rebuild each ``[BLOCK_M, BLOCK_N]`` tile of P from ``exp2(S * scale * log2 e - LSE * log2 e)`` and mask only
the blocks that are ragged (past the end of a sequence) or cut by the causal diagonal, as the forward does.

That costs seven products per block pair where the math needs five (S and dP are computed in both kernels). The
one-pass backward (an experiment, :mod:`gpulab.attention.experiments.v1_backward_fused`) does five, adding dQ
atomically into an fp32 buffer; it measured slower on the H100, so the plan never takes it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from gpulab.attention.configs import AttentionConfig
from gpulab.attention.shared import dkdv_q_ranges
from gpulab.launch import Launch
from gpulab.triton_ops import LOG2E, dot

__all__ = ["attention_dkdv_kernel", "attention_dq_kernel", "backward_launches"]


@triton.jit
def _dkdv_inner(
    dk,
    dv,
    k,
    v,
    q_ptrs,
    do_ptrs,
    lse_ptr,
    delta_ptr,
    lo,
    hi,
    n_q,
    qk_scale,
    offs_n,
    offs_m0,
    d_mask,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
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
        q = tl.load(q_ptrs + start_m * HEAD_DIM, mask=ld_mask, other=0.0)
        do = tl.load(do_ptrs + start_m * HEAD_DIM, mask=ld_mask, other=0.0)
        lse2 = tl.load(lse_ptr + offs_m, mask=row_ok, other=0.0) * LOG2E  # natural log -> base 2
        delta = tl.load(delta_ptr + offs_m, mask=row_ok, other=0.0)
        # P^T, [BLOCK_N, BLOCK_M], rebuilt from the saved log-sum-exp
        s_t = dot(k, tl.trans(q), IS_FP32, PRECISION) * qk_scale
        if MASKED:  # mask the scores, not P: a hidden score can exceed the row's LSE and overflow exp2
            visible = row_ok[None, :]
            if IS_CAUSAL:
                visible = visible & (offs_n[:, None] <= offs_m[None, :])
            s_t = tl.where(visible, s_t, float("-inf"))
        p_t = tl.exp2(s_t - lse2[None, :])
        dv += dot(p_t.to(do.dtype), do, IS_FP32, PRECISION)  # dV = P^T dO
        dp_t = dot(v, tl.trans(do), IS_FP32, PRECISION)  # dP^T = V dO^T
        ds_t = p_t * (dp_t - delta[None, :])  # dS^T = P^T * (dP^T - D)
        dk += dot(ds_t.to(q.dtype), q, IS_FP32, PRECISION)  # dK = dS^T Q (scaled at the end)
    return dk, dv


@triton.jit
def attention_dkdv_kernel(
    q_ptr,  # [B*H, Nq, HEAD_DIM] queries, contiguous
    k_ptr,  # [B*H, Nk, HEAD_DIM] keys
    v_ptr,  # [B*H, Nk, HEAD_DIM] values
    do_ptr,  # [B*H, Nq, HEAD_DIM] dO, the output's gradient
    lse_ptr,  # [B*H, Nq] fp32 log-sum-exp of each score row (natural log)
    delta_ptr,  # [B*H, Nq] fp32 D = rowsum(dO * O)
    dk_ptr,  # [B*H, Nk, HEAD_DIM] dK
    dv_ptr,  # [B*H, Nk, HEAD_DIM] dV
    n_q,  # Nq: query rows per head
    n_k,  # Nk: key rows per head
    qk_scale,  # scale * log2(e): the scores in base 2
    scale,  # the softmax scale (dQ and dK carry it once)
    HEAD_DIM: tl.constexpr,  # D
    BLOCK_M: tl.constexpr,  # query rows per tile
    BLOCK_N: tl.constexpr,  # key rows per tile
    BLOCK_D: tl.constexpr,  # D padded to a power of two >= 16 (the tl.dot tile)
    IS_CAUSAL: tl.constexpr,  # SDPA's top-left causal mask
    IS_FP32: tl.constexpr,  # fp32 inputs (products at PRECISION)
    PRECISION: tl.constexpr,  # tl.dot input precision: 'ieee' or 'tf32'
):
    """dK and dV of one (batch*head, K block): loop over the Q blocks that see it."""
    bh = tl.program_id(1)  # K blocks of one head are neighbours in the launch order (shared Q/dO in L2)
    start_n = tl.program_id(0) * BLOCK_N  # causal: the first K blocks (seen by the most queries) start first
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    kv_mask = (offs_n < n_k)[:, None] & d_mask[None, :]
    kv_offs = bh * n_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    # Keys past n_k load as 0; their dK/dV rows are never stored, and dK[j] depends on key j only.
    k = tl.load(k_ptr + kv_offs, mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + kv_offs, mask=kv_mask, other=0.0)
    q_ptrs = q_ptr + bh * n_q * HEAD_DIM + offs_m0[:, None] * HEAD_DIM + offs_d[None, :]
    do_ptrs = do_ptr + bh * n_q * HEAD_DIM + offs_m0[:, None] * HEAD_DIM + offs_d[None, :]
    lse_ptr += bh * n_q
    delta_ptr += bh * n_q
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

    lo, a, b = dkdv_q_ranges(start_n, n_q, BLOCK_M, BLOCK_N, IS_CAUSAL)  # masked, whole, ragged last Q blocks
    dk, dv = _dkdv_inner(
        dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, lo, a, n_q, qk_scale, offs_n, offs_m0, d_mask,
        HEAD_DIM, BLOCK_M, BLOCK_D, IS_CAUSAL, True, IS_FP32, PRECISION,
    )  # fmt: skip
    dk, dv = _dkdv_inner(
        dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, a, b, n_q, qk_scale, offs_n, offs_m0, d_mask,
        HEAD_DIM, BLOCK_M, BLOCK_D, IS_CAUSAL, False, IS_FP32, PRECISION,
    )  # fmt: skip
    dk, dv = _dkdv_inner(
        dk, dv, k, v, q_ptrs, do_ptrs, lse_ptr, delta_ptr, b, n_q, n_q, qk_scale, offs_n, offs_m0, d_mask,
        HEAD_DIM, BLOCK_M, BLOCK_D, IS_CAUSAL, True, IS_FP32, PRECISION,
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
    qk_scale,
    offs_m,
    offs_n0,
    d_mask,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
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
        k = tl.load(k_ptrs + start_n * HEAD_DIM, mask=ld_mask, other=0.0)
        v = tl.load(v_ptrs + start_n * HEAD_DIM, mask=ld_mask, other=0.0)
        s = dot(q, tl.trans(k), IS_FP32, PRECISION) * qk_scale
        if MASKED:  # mask the scores, not P: a hidden score can exceed the row's LSE and overflow exp2
            visible = (offs_n < n_k)[None, :]
            if IS_CAUSAL:
                visible = visible & (offs_n[None, :] <= offs_m[:, None])
            s = tl.where(visible, s, float("-inf"))
        p = tl.exp2(s - lse2[:, None])
        dp = dot(do, tl.trans(v), IS_FP32, PRECISION)  # dP = dO V^T
        ds = p * (dp - delta[:, None])
        dq += dot(ds.to(k.dtype), k, IS_FP32, PRECISION)  # dQ = dS K (scaled at the end)
    return dq


@triton.jit
def attention_dq_kernel(
    q_ptr,  # [B*H, Nq, HEAD_DIM] queries, contiguous
    k_ptr,  # [B*H, Nk, HEAD_DIM] keys
    v_ptr,  # [B*H, Nk, HEAD_DIM] values
    o_ptr,  # [B*H, Nq, HEAD_DIM] output O
    do_ptr,  # [B*H, Nq, HEAD_DIM] dO, the output's gradient
    lse_ptr,  # [B*H, Nq] fp32 log-sum-exp of each score row (natural log)
    delta_ptr,  # [B*H, Nq] fp32 D = rowsum(dO * O)
    dq_ptr,  # [B*H, Nq, HEAD_DIM] dQ
    n_q,  # Nq: query rows per head
    n_k,  # Nk: key rows per head
    qk_scale,  # scale * log2(e): the scores in base 2
    scale,  # the softmax scale (dQ and dK carry it once)
    HEAD_DIM: tl.constexpr,  # D
    BLOCK_M: tl.constexpr,  # query rows per tile
    BLOCK_N: tl.constexpr,  # key rows per tile
    BLOCK_D: tl.constexpr,  # D padded to a power of two >= 16 (the tl.dot tile)
    IS_CAUSAL: tl.constexpr,  # SDPA's top-left causal mask
    IS_FP32: tl.constexpr,  # fp32 inputs (products at PRECISION)
    PRECISION: tl.constexpr,  # tl.dot input precision: 'ieee' or 'tf32'
):
    """dQ of one (batch*head, Q block): loop over the K blocks it sees, split like the forward's loop. Also
    D[bh, rows] = rowsum(dO * O) for its rows, stored to ``delta_ptr`` for :func:`attention_dkdv_kernel`."""
    pid_m = tl.program_id(0)
    if IS_CAUSAL:  # the longest programs (last Q blocks, most keys) first, as in the forward
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    row_ok = offs_m < n_q
    q_offs = bh * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    q_mask = row_ok[:, None] & d_mask[None, :]
    q = tl.load(q_ptr + q_offs, mask=q_mask, other=0.0)
    do = tl.load(do_ptr + q_offs, mask=q_mask, other=0.0)
    lse2 = tl.load(lse_ptr + bh * n_q + offs_m, mask=row_ok, other=0.0) * LOG2E
    o = tl.load(o_ptr + q_offs, mask=q_mask, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)  # D = rowsum(dO * O), [BLOCK_M], fp32
    tl.store(delta_ptr + bh * n_q + offs_m, delta, mask=row_ok)
    k_ptrs = k_ptr + bh * n_k * HEAD_DIM + offs_n0[:, None] * HEAD_DIM + offs_d[None, :]
    v_ptrs = v_ptr + bh * n_k * HEAD_DIM + offs_n0[:, None] * HEAD_DIM + offs_d[None, :]
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    hi = n_k
    full = (n_k // BLOCK_N) * BLOCK_N
    if IS_CAUSAL:
        hi = tl.minimum(n_k, start_m + BLOCK_M)
        full = tl.minimum(full, ((start_m + 1) // BLOCK_N) * BLOCK_N)
    dq = _dq_inner(
        dq, q, do, lse2, delta, k_ptrs, v_ptrs, 0, full, n_k, qk_scale, offs_m, offs_n0, d_mask,
        HEAD_DIM, BLOCK_N, BLOCK_D, IS_CAUSAL, False, IS_FP32, PRECISION,
    )  # fmt: skip
    dq = _dq_inner(
        dq, q, do, lse2, delta, k_ptrs, v_ptrs, full, hi, n_k, qk_scale, offs_m, offs_n0, d_mask,
        HEAD_DIM, BLOCK_N, BLOCK_D, IS_CAUSAL, True, IS_FP32, PRECISION,
    )  # fmt: skip
    tl.store(dq_ptr + q_offs, (dq * scale).to(dq_ptr.dtype.element_ty), mask=q_mask)


def backward_launches(plan, cfg_kv: AttentionConfig, cfg_q: AttentionConfig) -> tuple:
    """The two :class:`Launch` es of the backward for ``plan``: dQ (and D) with ``cfg_q``, then dK/dV with
    ``cfg_kv``."""
    common = dict(IS_CAUSAL=plan.is_causal, IS_FP32=plan.is_fp32, PRECISION=plan.precision, HEAD_DIM=plan.d)
    bh = plan.b * plan.h
    dkdv = Launch(attention_dkdv_kernel, (-(-plan.n_k // cfg_kv.block_n), bh),
                  dict(BLOCK_M=cfg_kv.block_m, BLOCK_N=cfg_kv.block_n, BLOCK_D=cfg_kv.block_d, **common,
                       num_warps=cfg_kv.num_warps, num_stages=cfg_kv.num_stages))  # fmt: skip
    dq = Launch(attention_dq_kernel, (-(-plan.n_q // cfg_q.block_m), bh),
                dict(BLOCK_M=cfg_q.block_m, BLOCK_N=cfg_q.block_n, BLOCK_D=cfg_q.block_d, **common,
                     num_warps=cfg_q.num_warps, num_stages=cfg_q.num_stages))  # fmt: skip
    return dq, dkdv
