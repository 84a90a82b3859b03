"""Lesson 4, the backward in one pass: five products per block pair, dQ through fp32 atomic adds.

Off by default: run it through :func:`attention_backward` with a :class:`FusedBackwardConfig`.

What you will learn: why the two-kernel backward (:mod:`gpulab.attention.v1.backward`) does seven products where the
math needs five, and what it costs to do five. The two-kernel backward computes ``S = Q K^T`` and ``dP = dO V^T`` twice
(once per kernel) so that every program writes only its own rows. Here one program per K block does everything:

    for each Q block i that sees K block j:
        S^T   = K_j Q_i^T                    P^T = exp2(S^T * scale * log2 e - LSE_i * log2 e)
        dV_j += P^T dO_i                     dP^T = V_j dO_i^T
        dS^T  = P^T * (dP^T - D_i)           dK_j += dS^T Q_i
        dQ_i += dS K_j        (atomic: every K block adds into the same rows of dQ)

with ``D = rowsum(dO * O)`` from :func:`attention_preprocess_kernel` before it. dQ
accumulates unscaled in an fp32 buffer ``[B*H, Nq, d]`` and is scaled and cast once at the end (FlashAttention-2's
``dq_accum``). The price: ``Nk / BLOCK_N`` atomic additions per element of dQ, and a dQ that is not bit-for-bit the
same from run to run (fp32 additions in a different order); :func:`use_fused` keeps the two-kernel backward where
determinism is asked for (``torch.use_deterministic_algorithms``) and where the problem is too small to pay the two
extra launches.

Measured on the H100 (``python -m gpulab bench 05 fused``, records under
``benchmarks/05_attention_hopper/hopper/fused/``), the trade did not pay: the atomic additions cost more than the two
products they save, except on long causal problems, so the plan never takes it (notes/attention.md, 'The one-pass
backward'). FlashAttention-3 makes the same trade pay with warp specialization (the additions issued by their own warps,
under the next block's products)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from gpulab.attention import plan as attention_plan
from gpulab.attention.configs import AttentionConfig
from gpulab.attention.shared import attention_preprocess_kernel, dkdv_q_ranges
from gpulab.launch import Launch, direct_stream
from gpulab.triton_ops import LOG2E, dot

__all__ = ["attention_dkdvq_kernel", "FusedBackward", "FusedBackwardConfig", "preprocess_launch",
           "fused_backward_launch", "use_fused", "fused_backward", "attention_backward", "FUSED_MIN_WORK",
           "FUSED_CONFIGS"]  # fmt: skip

FUSED_MIN_WORK = 1 << 31
"""B * H * Nq * Nk * d below which the two-kernel backward runs (the fused one adds a zero-fill and a cast: host
time that a small problem does not win back)."""

FUSED_CONFIGS = {
    64: AttentionConfig(block_m=64, block_n=64, block_d=64, num_warps=4, num_stages=3),
    128: AttentionConfig(block_m=64, block_n=128, block_d=128, num_warps=8, num_stages=2),
}
"""Tiles per padded head dim (``block_n`` keys per program, ``block_m`` queries per step): the H100 sweep's best."""


@dataclasses.dataclass(frozen=True)
class FusedBackwardConfig:
    """When and how :func:`attention_backward` takes the one-pass kernel.

    ``min_work``: B * H * Nq * Nk * d below which the two kernels run instead (default :data:`FUSED_MIN_WORK`);
    ``tiles``: ``((padded head dim, AttentionConfig), ...)``, the tiles per padded head dim (None:
    :data:`FUSED_CONFIGS`); a head dim without tiles takes the two kernels; ``any_device``: also on the CPU's
    interpreter and for fp32 inputs (the tests' way to run it without a GPU)."""

    min_work: int = FUSED_MIN_WORK
    tiles: tuple | None = None
    any_device: bool = False

    def __post_init__(self):
        if self.min_work.__class__ is not int or self.min_work < 0:
            raise TypeError(f"min_work must be an int >= 0, got {self.min_work!r}.")
        if self.tiles is not None and not (
            isinstance(self.tiles, tuple)
            and all(isinstance(t, tuple) and len(t) == 2 and isinstance(t[1], AttentionConfig) for t in self.tiles)
        ):
            raise TypeError(f"tiles must be None or a tuple of (head dim, AttentionConfig) pairs, got {self.tiles!r}.")
        if self.any_device.__class__ is not bool:
            raise TypeError(f"any_device must be a bool, got {self.any_device!r}.")

    def tile_table(self) -> dict:
        """Padded head dim -> :class:`AttentionConfig`."""
        return FUSED_CONFIGS if self.tiles is None else dict(self.tiles)


@triton.jit
def _dkdvq_inner(
    dk, dv, k, v, q_ptrs, do_ptrs, dq_ptrs, lse_ptr, delta_ptr, lo, hi, n_q, qk_scale, offs_n, offs_m0, d_mask,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
    IS_FP32: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """Q blocks [lo, hi) against one K block: accumulate dK (unscaled) and dV [BLOCK_N, BLOCK_D]; add each Q block's
    share of dQ (unscaled) [BLOCK_M, BLOCK_D] into the fp32 buffer."""
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_m0
        if MASKED:
            row_ok = offs_m < n_q
        else:
            row_ok = offs_m >= 0  # all true
        ld_mask = row_ok[:, None] & d_mask[None, :]
        q = tl.load(q_ptrs + start_m * HEAD_DIM, mask=ld_mask, other=0.0)  # [BLOCK_M, BLOCK_D]
        do = tl.load(do_ptrs + start_m * HEAD_DIM, mask=ld_mask, other=0.0)
        lse2 = tl.load(lse_ptr + offs_m, mask=row_ok, other=0.0) * LOG2E  # [BLOCK_M], base 2
        delta = tl.load(delta_ptr + offs_m, mask=row_ok, other=0.0)
        s_t = dot(k, tl.trans(q), IS_FP32, PRECISION) * qk_scale  # S^T, [BLOCK_N, BLOCK_M]
        if MASKED:  # mask the scores, not P: a hidden score can exceed the row's LSE and overflow exp2
            visible = row_ok[None, :]
            if IS_CAUSAL:
                visible = visible & (offs_n[:, None] <= offs_m[None, :])
            s_t = tl.where(visible, s_t, float("-inf"))
        p_t = tl.exp2(s_t - lse2[None, :])  # P^T
        dv += dot(p_t.to(do.dtype), do, IS_FP32, PRECISION)  # dV = P^T dO
        dp_t = dot(v, tl.trans(do), IS_FP32, PRECISION)  # dP^T = V dO^T
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)  # dS^T = P^T * (dP^T - D), [BLOCK_N, BLOCK_M]
        dk += dot(ds_t, q, IS_FP32, PRECISION)  # dK = dS^T Q
        dq = dot(tl.trans(ds_t), k, IS_FP32, PRECISION)  # this K block's share of dQ = dS K, [BLOCK_M, BLOCK_D]
        tl.atomic_add(dq_ptrs + start_m * HEAD_DIM, dq, mask=ld_mask, sem="relaxed")
    return dk, dv


@triton.jit
def attention_dkdvq_kernel(
    q_ptr,  # [B*H, Nq, HEAD_DIM] queries, contiguous
    k_ptr,  # [B*H, Nk, HEAD_DIM] keys
    v_ptr,  # [B*H, Nk, HEAD_DIM] values
    do_ptr,  # [B*H, Nq, HEAD_DIM] dO, the output's gradient
    lse_ptr,  # [B*H, Nq] fp32 log-sum-exp of each score row (natural log)
    delta_ptr,  # [B*H, Nq] fp32 D = rowsum(dO * O)
    dq_acc_ptr,  # [B*H, Nq, HEAD_DIM] fp32 dQ accumulator, zeroed, unscaled
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
    """dK, dV of one (batch*head, K block), and its additions to dQ: inputs contiguous [B*H, N, HEAD_DIM], dQ's
    buffer fp32 [B*H, Nq, HEAD_DIM] zeroed before. The Q blocks split as in version 1's dK/dV kernel: cut by the
    causal diagonal (masked), whole (no mask), the ragged last (masked)."""
    bh = tl.program_id(1)
    start_n = tl.program_id(0) * BLOCK_N  # causal: the first K blocks (seen by the most queries) start first
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    kv_mask = (offs_n < n_k)[:, None] & d_mask[None, :]
    kv_offs = bh * n_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    k = tl.load(k_ptr + kv_offs, mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]; keys past n_k load as 0
    v = tl.load(v_ptr + kv_offs, mask=kv_mask, other=0.0)
    q_rows = bh * n_q * HEAD_DIM + offs_m0[:, None] * HEAD_DIM + offs_d[None, :]  # [BLOCK_M, BLOCK_D]
    q_ptrs, do_ptrs, dq_ptrs = q_ptr + q_rows, do_ptr + q_rows, dq_acc_ptr + q_rows
    lse_ptr += bh * n_q
    delta_ptr += bh * n_q
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

    lo, a, b = dkdv_q_ranges(start_n, n_q, BLOCK_M, BLOCK_N, IS_CAUSAL)
    dk, dv = _dkdvq_inner(dk, dv, k, v, q_ptrs, do_ptrs, dq_ptrs, lse_ptr, delta_ptr, lo, a, n_q, qk_scale, offs_n,
                          offs_m0, d_mask, HEAD_DIM, BLOCK_M, IS_CAUSAL, True, IS_FP32, PRECISION)  # fmt: skip
    dk, dv = _dkdvq_inner(dk, dv, k, v, q_ptrs, do_ptrs, dq_ptrs, lse_ptr, delta_ptr, a, b, n_q, qk_scale, offs_n,
                          offs_m0, d_mask, HEAD_DIM, BLOCK_M, IS_CAUSAL, False, IS_FP32, PRECISION)  # fmt: skip
    dk, dv = _dkdvq_inner(dk, dv, k, v, q_ptrs, do_ptrs, dq_ptrs, lse_ptr, delta_ptr, b, n_q, n_q, qk_scale, offs_n,
                          offs_m0, d_mask, HEAD_DIM, BLOCK_M, IS_CAUSAL, True, IS_FP32, PRECISION)  # fmt: skip
    tl.store(dk_ptr + kv_offs, (dk * scale).to(dk_ptr.dtype.element_ty), mask=kv_mask)
    tl.store(dv_ptr + kv_offs, dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)


def _padded(d: int) -> int:
    """The head-dim tile: the head dim rounded up to a power of two, at least 16 (a tensor-core product's K)."""
    return max(16, triton.next_power_of_2(d))


class FusedBackward(NamedTuple):
    """The one-pass backward's launches: D = rowsum(dO * O), then :func:`attention_dkdvq_kernel`; what
    :func:`gpulab.attention.plan.run_backward` takes as ``launches``."""

    preprocess: Launch
    main: Launch
    kind = "one pass (atomic dQ)"
    atomic = True  # dQ sums in no fixed order: the plan takes the two kernels where determinism is asked for

    def run(self, plan, do, q, k, v, o, lse, dq, dk, dv):
        """D, then the one-pass kernel adding into an fp32 dQ buffer, then dQ scaled and cast into ``dq``."""
        ptrs = q.data_ptr() | k.data_ptr() | v.data_ptr() | o.data_ptr() | do.data_ptr() | lse.data_ptr()
        stream = direct_stream(plan.device) if not ptrs & 15 else None
        delta = torch.empty(plan.lse_shape, dtype=torch.float32, device=plan.device)
        dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=plan.device)
        self.preprocess(stream, o, do, delta, plan.n_q)
        self.main(stream, q, k, v, do, lse, delta, dq_acc, dk, dv, plan.n_q, plan.n_k, plan.qk_scale, plan.scale)
        torch.mul(dq_acc, plan.scale, out=dq)  # scaled once, cast to the inputs' dtype
        return dq, dk, dv


PREPROCESS_ROWS = 64


def preprocess_launch(plan) -> Launch:
    """The :class:`Launch` of :func:`attention_preprocess_kernel` for ``plan`` (``PREPROCESS_ROWS`` rows a program)."""
    return Launch(attention_preprocess_kernel, (triton.cdiv(plan.n_q, PREPROCESS_ROWS), plan.b * plan.h),
                  dict(HEAD_DIM=plan.d, BLOCK_M=PREPROCESS_ROWS, BLOCK_D=_padded(plan.d)))  # fmt: skip


def use_fused(plan, config: FusedBackwardConfig = FusedBackwardConfig()) -> bool:
    """Whether :func:`attention_backward` takes the one-pass backward for ``plan`` under ``config``: 16-bit inputs on
    a GPU (any inputs, anywhere, with ``config.any_device``), a problem of at least ``config.min_work``, a head dim
    with tiles in ``config``'s table, no tiles asked for, and determinism not asked for."""
    return (
        (config.any_device or (plan.device.type == "cuda" and not plan.is_fp32))
        and plan.b * plan.h * plan.n_q * plan.n_k * plan.d >= config.min_work
        and _padded(plan.d) in config.tile_table()
        and plan.backward_configs is None
        and not torch.are_deterministic_algorithms_enabled()
    )


def fused_backward_launch(plan, cfg: AttentionConfig | None = None,
                          config: FusedBackwardConfig = FusedBackwardConfig()) -> Launch:  # fmt: skip
    """The :class:`Launch` of :func:`attention_dkdvq_kernel` for ``plan`` (``cfg`` default: ``config``'s tiles at the
    padded head dim)."""
    cfg = cfg or config.tile_table()[_padded(plan.d)]
    return Launch(attention_dkdvq_kernel, (triton.cdiv(plan.n_k, cfg.block_n), plan.b * plan.h),
                  dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_D=cfg.block_d, IS_CAUSAL=plan.is_causal,
                       IS_FP32=plan.is_fp32, PRECISION=plan.precision, HEAD_DIM=plan.d,
                       num_warps=cfg.num_warps, num_stages=cfg.num_stages))  # fmt: skip


def fused_backward(plan, cfg: AttentionConfig | None = None,
                   config: FusedBackwardConfig = FusedBackwardConfig()) -> FusedBackward:  # fmt: skip
    """The one-pass backward's launches for ``plan`` (at ``cfg``'s tiles, or ``config``'s), to pass as
    :func:`gpulab.attention.plan.run_backward`'s ``launches`` (e.g. to sweep its tiles)."""
    return FusedBackward(preprocess_launch(plan), fused_backward_launch(plan, cfg, config))


def attention_backward(do, q, k, v, o, lse, is_causal: bool = False, scale: float | None = None,
                       allow_tf32: bool = False, config: FusedBackwardConfig = FusedBackwardConfig()):  # fmt: skip
    """:func:`gpulab.attention.attention_backward` with the one-pass kernel where :func:`use_fused` allows it under
    ``config`` (else the plan's own backward): ``(dQ, dK, dV)``. The cached plan is not changed."""
    if not isinstance(config, FusedBackwardConfig):
        raise TypeError(f"config must be a FusedBackwardConfig, got {type(config).__name__}.")
    plan = attention_plan.backward_plan(do, q, k, v, o, lse, is_causal, scale, allow_tf32)
    launches = fused_backward(plan, config=config) if use_fused(plan, config) else None
    return attention_plan.run_backward(plan, do, q, k, v, o, lse, launches=launches)
