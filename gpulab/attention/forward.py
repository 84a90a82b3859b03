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
- **Masks only where a block is ragged.** The key loop runs in two parts: key blocks that every query of the block
  sees completely (no bounds check, no causal mask) and then the few that need a mask: the diagonal blocks of a
  causal kernel and the last block when ``Nk`` is not a multiple of ``BLOCK_N``. Masked scores are ``-inf``.
- **The log-sum-exp is saved** (``LSE = (m + log2 l) * ln 2``, natural log, fp32, [B, H, Nq]): with it the backward
  rebuilds ``P = exp(S - LSE)`` without storing P.

A row that sees no key at all (the wrapper refuses ``Nk = 0``, and a causal row i always sees key 0) would give
``O = 0`` and ``LSE = 0``: the max is replaced by 0 where it is still ``-inf`` before any ``exp2``, so no NaN appears.
:func:`gpulab.attention.schedule.block_schedule` draws which (Q block, K block) pairs run with and without a mask.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import check, runtime, triton_ops
from gpulab.attention import hopper
from gpulab.attention.configs import AttentionConfig, attention_config, autotuned_config
from gpulab.attention.plan import Plan, check_config, check_inputs, forward_plan
from gpulab.launch import Launch, direct_stream
from gpulab.triton_ops import dot

__all__ = ["attention_forward_kernel", "attention_forward", "run_forward", "forward_launch", "check_inputs",
           "check_config"]  # fmt: skip


@triton.jit
def _fwd_inner(
    acc,
    l_i,
    m_i,
    q,
    k_ptrs,
    v_ptrs,
    start_m,
    lo,
    hi,
    n_k,
    qk_scale,
    offs_m,
    offs_n,
    d_mask,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    MASKED: tl.constexpr,
    IS_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Key blocks [lo, hi) for one Q block: update (acc, l, m). MASKED: bounds and causal masks on each block."""
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        if MASKED:
            kv_mask = (cols < n_k)[:, None]
            if BLOCK_D != HEAD_DIM:
                kv_mask = kv_mask & d_mask[None, :]
            k = tl.load(k_ptrs + start_n * HEAD_DIM, mask=kv_mask, other=0.0)
            v = tl.load(v_ptrs + start_n * HEAD_DIM, mask=kv_mask, other=0.0)
        elif BLOCK_D != HEAD_DIM:  # full key block, but the head dim is padded: mask the columns only
            k = tl.load(k_ptrs + start_n * HEAD_DIM, mask=d_mask[None, :], other=0.0)
            v = tl.load(v_ptrs + start_n * HEAD_DIM, mask=d_mask[None, :], other=0.0)
        else:
            k = tl.load(k_ptrs + start_n * HEAD_DIM)
            v = tl.load(v_ptrs + start_n * HEAD_DIM)
        # S2 = Q K^T * scale * log2(e): the scores in base 2, [BLOCK_M, BLOCK_N]
        s = dot(q, tl.trans(k), IS_FP32, PRECISION) * qk_scale
        if MASKED:
            visible = (cols < n_k)[None, :]
            if IS_CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None])  # top-left causal: key j <= query i
            s = tl.where(visible, s, float("-inf"))
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
def attention_forward_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    lse_ptr,
    n_q,
    n_k,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
    IS_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """O[bh, rows] and LSE[bh, rows] for one (batch*head, Q block). Inputs contiguous [B*H, N, HEAD_DIM]."""
    # Q blocks of one head are neighbours in the launch order: the programs running at once share K/V in L2.
    pid_m = tl.program_id(0)
    if IS_CAUSAL:  # the longest programs (last Q blocks, most keys) first: the final wave is made of short ones
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    row_mask = offs_m < n_q

    # This head's rows start at bh * N * HEAD_DIM; a row is HEAD_DIM elements long (the wrapper made them contiguous).
    q_ptrs = q_ptr + bh * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    k_ptrs = k_ptr + bh * n_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    v_ptrs = v_ptr + bh * n_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    q = tl.load(q_ptrs, mask=row_mask[:, None] & d_mask[None, :], other=0.0)  # loaded once, kept in registers

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Keys this block needs: all of them, or (causal) those before its last query. Of those, key blocks that lie
    # completely inside the sequence and completely left of the block's first query need no mask at all.
    hi = n_k
    full = (n_k // BLOCK_N) * BLOCK_N
    if IS_CAUSAL:
        hi = tl.minimum(n_k, start_m + BLOCK_M)
        full = tl.minimum(full, ((start_m + 1) // BLOCK_N) * BLOCK_N)
    acc, l_i, m_i = _fwd_inner(
        acc, l_i, m_i, q, k_ptrs, v_ptrs, start_m, 0, full, n_k, qk_scale, offs_m, offs_n, d_mask,
        HEAD_DIM, BLOCK_N, BLOCK_D, IS_CAUSAL, False, IS_FP32, PRECISION,
    )  # fmt: skip
    acc, l_i, m_i = _fwd_inner(
        acc, l_i, m_i, q, k_ptrs, v_ptrs, start_m, full, hi, n_k, qk_scale, offs_m, offs_n, d_mask,
        HEAD_DIM, BLOCK_N, BLOCK_D, IS_CAUSAL, True, IS_FP32, PRECISION,
    )  # fmt: skip

    l_safe = tl.where(l_i > 0.0, l_i, 1.0)  # a row that saw no key: O = 0, not 0/0
    m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
    o = acc / l_safe[:, None]
    lse = (m_safe + tl.log2(l_safe)) * triton_ops.LN2  # base 2 back to natural log
    o_ptrs = o_ptr + bh * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=row_mask[:, None] & d_mask[None, :])
    tl.store(lse_ptr + bh * n_q + offs_m, lse, mask=row_mask)


# ----------------------------------------------------------------------------------------------------------------
# wrappers


def forward_launch(plan: Plan, cfg: AttentionConfig) -> Launch:
    """The :class:`Launch` of :func:`attention_forward_kernel` for ``plan`` with tiles ``cfg``."""
    grid = (-(-plan.n_q // cfg.block_m), plan.b * plan.h)  # Q blocks fastest: neighbours share K/V
    constexprs = dict(HEAD_DIM=plan.d, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_D=cfg.block_d,
                      IS_CAUSAL=plan.is_causal, IS_FP32=plan.is_fp32, PRECISION=plan.precision,
                      num_warps=cfg.num_warps, num_stages=cfg.num_stages)  # fmt: skip
    return Launch(attention_forward_kernel, grid, constexprs)


def run_forward(plan: Plan, q, k, v):
    """``(O, LSE)`` for inputs whose signature ``plan`` was made for (no checks here: :func:`forward_plan` did them).

    The host work per call: two allocations, ``contiguous()`` only where the plan says an input is not, one launch.
    """
    o = check.new_output(plan.o_shape, dtype=plan.dtype, device=plan.device)
    lse = check.new_output(plan.lse_shape, dtype=torch.float32, device=plan.device)
    if plan.empty:  # no batch, heads or queries (nothing to write), or no keys: O = 0 and LSE = 0, as SDPA's O
        return o.zero_(), lse.zero_()
    if not plan.contiguous:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    launch = plan.forward
    if plan.version == 2:  # Hopper: TMA descriptors and warp specialization (gpulab.attention.hopper)
        if launch is None:
            cfg = plan.config or hopper.hopper_config(plan.d, plan.is_causal)
            launch = plan.forward = hopper.forward_v2_launch(plan, cfg)
        if not runtime.INTERPRET:
            hopper.ensure_allocator()
        if (q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15:  # TMA reads from 16-byte aligned addresses only
            q, k, v = (t.clone() if t.data_ptr() & 15 else t for t in (q, k, v))  # fresh, aligned copies
        launch(direct_stream(plan.device), q, k, v, o, lse, plan.n_q, plan.n_k, plan.b * plan.h, plan.qk_scale)
        return o, lse
    if launch is None:
        cfg = plan.config
        if cfg == "auto":  # time the candidates once for this problem, keep the fastest
            run = lambda c: attention_forward(q, k, v, plan.is_causal, plan.scale, plan.allow_tf32, config=c)  # noqa: E731
            cfg = autotuned_config("forward", plan.d, plan.dtype, plan.is_causal, plan.n_q, plan.n_k, run)
        elif cfg is None:
            cfg = attention_config("forward", plan.d, plan.dtype, plan.n_q, plan.n_k)
        launch = plan.forward = forward_launch(plan, cfg)
    aligned = not ((q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15)
    launch(direct_stream(plan.device) if aligned else None, q, k, v, o, lse, plan.n_q, plan.n_k, plan.qk_scale)
    return o, lse


def attention_forward(
    q, k, v, is_causal: bool = False, scale: float | None = None, allow_tf32: bool = False, config=None, version=None
):
    """Run :func:`attention_forward_kernel`; returns ``(O, LSE)``: O like q, LSE fp32 [B, H, Nq] (natural log).

    ``config``: an :class:`AttentionConfig`, None for :func:`attention_config`'s, or ``"auto"`` to autotune on a GPU
    (:func:`gpulab.attention.configs.autotune`; the interpreter uses the fixed config). The checks and the tile
    choice run once per input signature (:func:`gpulab.attention.plan.forward_plan`). ``config`` may also be a
    :class:`gpulab.attention.hopper.HopperConfig` for version 2.

    ``version``: None picks the kernel (version 2, :mod:`gpulab.attention.hopper`, on a compute-capability-9 GPU
    for fp16/bf16 and head dims that are multiples of 8; else version 1); 1 or 2 asks for one (version 2 also runs
    in the interpreter).

    No autograd here; :func:`gpulab.attention.flash_attention` is the differentiable entry point.
    """
    return run_forward(forward_plan(q, k, v, is_causal, scale, allow_tf32, config, version), q, k, v)
