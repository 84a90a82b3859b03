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

A row that sees no key at all (possible only with ``Nk = 0``, which the wrapper handles before launch) would give
``O = 0`` and ``LSE = 0``: the max is replaced by 0 where it is still ``-inf`` before any ``exp2``, so no NaN appears.
"""

from __future__ import annotations

import math

import torch

from gpulab import dtypes, runtime

import triton  # isort: skip
import triton.language as tl  # isort: skip

from gpulab.attention.configs import (  # noqa: E402
    MAX_HEAD_DIM,
    AttentionConfig,
    attention_config,
    autotuned_config,
)
from gpulab.attention.reference import default_scale  # noqa: E402

__all__ = [
    "attention_forward_kernel",
    "attention_forward",
    "check_inputs",
    "block_schedule",
    "plot_block_schedule",
    "LOG2E",
]

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)
LN2 = 0.6931471805599453  # ln(2): log(x) = log2(x) * LN2


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
        if IS_FP32:
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale
        else:
            s = tl.dot(q, tl.trans(k)) * qk_scale  # 16-bit operands: the tensor-core default
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
        if IS_FP32:
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
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
    lse = (m_safe + tl.log2(l_safe)) * 0.6931471805599453  # base 2 back to natural log
    o_ptrs = o_ptr + bh * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=row_mask[:, None] & d_mask[None, :])
    tl.store(lse_ptr + bh * n_q + offs_m, lse, mask=row_mask)


# ----------------------------------------------------------------------------------------------------------------
# wrappers


def check_inputs(q, k, v, scale=None, allow_tf32: bool = False, names=("q", "k", "v")) -> float:
    """Raise ValueError (saying what is supported) unless q, k, v are valid attention inputs; return the scale."""
    for name, t in zip(names, (q, k, v)):
        runtime.require_tensor(name, t)
        if t.dim() != 4:
            raise ValueError(
                f"{name} must be 4-dimensional [batch, heads, seq, head_dim], got shape {tuple(t.shape)}; "
                "add the missing dimensions with unsqueeze."
            )
    for name, t in zip(names[1:], (k, v)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name} is {t.dtype} but {names[0]} is {q.dtype}; q, k and v must share one dtype.")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but {names[0]} is on {q.device}; put q, k, v on one device.")
    dtypes.require_dtype(names[0], q.dtype, allowed=(torch.float32, torch.float16, torch.bfloat16))
    b, h, _, d = q.shape
    if tuple(k.shape[:2]) != (b, h) or tuple(v.shape[:2]) != (b, h):
        raise ValueError(
            f"batch and heads differ: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}; "
            "all three must be [batch, heads, seq, head_dim] with the same batch and heads (no broadcasting)."
        )
    if b * h > 65535:
        raise ValueError(
            f"batch * heads = {b * h} is over 65535, the largest second grid dimension these kernels launch; "
            "split the batch into chunks of at most 65535 // heads."
        )
    if k.shape != v.shape:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape.")
    if k.shape[3] != d:
        raise ValueError(f"q has head_dim {d} but k and v have {k.shape[3]}; they must match.")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(
            f"head_dim {d} is not supported; these kernels take head dims 1 to {MAX_HEAD_DIM} (any value, "
            "powers of two or not)."
        )
    if allow_tf32 and q.dtype != torch.float32:
        raise ValueError(f"allow_tf32 only applies to float32 inputs, got {q.dtype}.")
    scale = default_scale(d, scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale}.")
    return scale


def attention_forward(
    q, k, v, is_causal: bool = False, scale: float | None = None, allow_tf32: bool = False, config=None
):
    """Run :func:`attention_forward_kernel`; returns ``(O, LSE)``: O like q, LSE fp32 [B, H, Nq] (natural log).

    ``config``: an :class:`AttentionConfig`, None for :func:`attention_config`'s, or ``"auto"`` to autotune on a GPU
    (:func:`gpulab.attention.configs.autotune`; the interpreter uses the fixed config).

    No autograd here; :func:`gpulab.attention.flash_attention` is the differentiable entry point.
    """
    scale = check_inputs(q, k, v, scale, allow_tf32)
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    from gpulab.check import poisoned

    o = poisoned(b, h, n_q, d, dtype=q.dtype, device=q.device)
    lse = poisoned(b, h, n_q, dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, lse
    if n_k == 0:  # no key to see: every row is 0 (SDPA would give NaN)
        return o.zero_(), lse.zero_()
    q, k, v = (t.contiguous() for t in (q, k, v))
    if config == "auto":  # time the candidates once for this problem, keep the fastest
        run = lambda c: attention_forward(q, k, v, is_causal, scale, allow_tf32, config=c)  # noqa: E731
        config = autotuned_config("forward", d, q.dtype, is_causal, n_q, n_k, run)
    cfg: AttentionConfig = (
        config if isinstance(config, AttentionConfig) else attention_config("forward", d, q.dtype, n_q, n_k)
    )
    grid = (triton.cdiv(n_q, cfg.block_m), b * h)  # Q blocks fastest: neighbours share K/V
    attention_forward_kernel[grid](
        q,
        k,
        v,
        o,
        lse,
        n_q,
        n_k,
        scale * LOG2E,
        HEAD_DIM=d,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_D=cfg.block_d,
        IS_CAUSAL=bool(is_causal),
        IS_FP32=q.dtype == torch.float32,
        PRECISION=runtime.dot_precision(q.dtype, allow_tf32),
        **cfg.launch(),
    )
    return o, lse


# ----------------------------------------------------------------------------------------------------------------
# the kernel's loop split, as data (for the lesson's picture and its tests)

SKIPPED, FULL, MASKED = 0, 1, 2


def block_schedule(n_q: int, n_k: int, block_m: int, block_n: int, is_causal: bool = False) -> list[list[int]]:
    """What :func:`attention_forward_kernel` does with each (Q block, K block) pair: ``FULL`` (loaded, no mask),
    ``MASKED`` (loaded, bounds/causal mask applied) or ``SKIPPED`` (never loaded). Mirrors the kernel's ``full``
    and ``hi`` bounds exactly; rows are Q blocks, columns K blocks."""
    for name, v in (("n_q", n_q), ("n_k", n_k), ("block_m", block_m), ("block_n", block_n)):
        runtime.positive_int(name, v)
    rows = []
    for start_m in range(0, n_q, block_m):
        hi, full = n_k, (n_k // block_n) * block_n
        if is_causal:
            hi = min(n_k, start_m + block_m)
            full = min(full, ((start_m + 1) // block_n) * block_n)
        rows.append(
            [FULL if start_n < full else MASKED if start_n < hi else SKIPPED for start_n in range(0, n_k, block_n)]
        )
    return rows


def plot_block_schedule(n_q, n_k, block_m, block_n, is_causal=False, ax=None):
    """The schedule as a picture: grey blocks are skipped, blue ones run without a mask, orange ones with one."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    sched = block_schedule(n_q, n_k, block_m, block_n, is_causal)
    if ax is None:
        _, ax = plt.subplots(figsize=(4, 4))
    ax.imshow(sched, cmap=ListedColormap(["0.9", "C0", "C1"]), vmin=0, vmax=2)
    counts = [sum(row.count(k) for row in sched) for k in (FULL, MASKED, SKIPPED)]
    ax.set_title(
        f"Nq={n_q}, Nk={n_k}, {block_m}x{block_n} tiles{', causal' if is_causal else ''}\n"
        f"{counts[0]} full, {counts[1]} masked, {counts[2]} skipped",
        fontsize=9,
    )
    ax.set_xlabel("K block")
    ax.set_ylabel("Q block")
    return ax
