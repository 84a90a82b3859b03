"""Lesson 4, part 2b: version 2 of the attention backward, for Hopper (sm_90): the tiles arrive through TMA.

What you will learn: the backward is two loops of products, like the forward, and the same change applies: every
``[BLOCK, D]`` tile of Q, dO, K and V is copied by the tensor memory accelerator from a per-head descriptor
(:mod:`gpulab.attention.v2.forward`), which zero-fills rows past the sequence and columns past the head dim, so the
loads need no masks; only the scores keep theirs. The math and the split of the work are version 1's
(``v1/backward.py``), line for line:

    dV = P^T dO        dP = dO V^T        dS = P * (dP - D)        dQ = scale dS K        dK = scale dS^T Q

with ``P = exp2(S * scale * log2 e - LSE * log2 e)`` rebuilt from the forward's log-sum-exp and ``D = rowsum(dO * O)``.
:func:`attention_dq_v2_kernel` (one program per Q block) runs first and writes D for its rows;
:func:`attention_dkdv_v2_kernel` (one program per K block) loops over the Q blocks that see its keys.

Warp specialization is not used (Triton 3.6 gives wrong results with it on sm_90; see
:data:`gpulab.attention.v2.forward.WS_BROKEN_ON_SM90`). Off by default: the plan never takes these kernels, because on
the H100 they computed the same gradients as version 1's kernels and were no faster (notes/attention-hopper.md,
'Version 2'). Run them with :func:`attention_backward` and a :class:`V2BackwardConfig`, or hand
:func:`v2_backward`'s launches to :func:`gpulab.attention.plan.run_backward` (or set them as a copied plan's
``backward``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from gpulab import check, runtime
from gpulab.attention import plan as attention_plan
from gpulab.attention import sm90
from gpulab.attention.configs import AttentionConfig, attention_config
from gpulab.attention.shared import dkdv_q_ranges
from gpulab.attention.sm90 import compile_for_sm90, ttgir_in_fresh_process
from gpulab.launch import Launch, direct_stream
from gpulab.triton_ops import LOG2E

__all__ = ["attention_dkdv_v2_kernel", "attention_dq_v2_kernel", "backward_v2_launches", "sm90_backward_ttgir",
           "V2BackwardConfig", "V2Backward", "v2_backward", "attention_backward"]  # fmt: skip


@triton.jit
def _dkdv_v2_inner(
    dk, dv, k, v, q_desc, do_desc, lse_ptr, delta_ptr, lo, hi, n_q, qk_scale, offs_n, offs_m0,
    BLOCK_M: tl.constexpr, IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
):  # fmt: skip
    """Q blocks [lo, hi) against one K block: accumulate dK (unscaled) and dV, [BLOCK_N, BLOCK_D] each."""
    for start_m in range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + offs_m0
        row_ok = offs_m < n_q
        q = q_desc.load([start_m, 0])  # [BLOCK_M, BLOCK_D] through TMA; rows >= Nq read as 0
        do = do_desc.load([start_m, 0])
        lse2 = tl.load(lse_ptr + offs_m, mask=row_ok, other=0.0) * LOG2E  # natural log -> base 2
        delta = tl.load(delta_ptr + offs_m, mask=row_ok, other=0.0)
        s_t = tl.dot(k, q.T) * qk_scale  # S^T, [BLOCK_N, BLOCK_M]
        if MASKED:  # mask the scores, not P: a hidden score can exceed the row's LSE and overflow exp2
            visible = row_ok[None, :]
            if IS_CAUSAL:
                visible = visible & (offs_n[:, None] <= offs_m[None, :])
            s_t = tl.where(visible, s_t, float("-inf"))
        p_t = tl.exp2(s_t - lse2[None, :])  # P^T
        dv += tl.dot(p_t.to(do.dtype), do)  # dV = P^T dO
        dp_t = tl.dot(v, do.T)  # dP^T = V dO^T
        ds_t = p_t * (dp_t - delta[None, :])  # dS^T = P^T * (dP^T - D)
        dk += tl.dot(ds_t.to(q.dtype), q)  # dK = dS^T Q (scaled at the end)
    return dk, dv


@triton.jit
def attention_dkdv_v2_kernel(
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
):
    """dK and dV of one (batch*head, K block), inputs contiguous [B*H, N, HEAD_DIM]: loop over the Q blocks that
    see it (version 1's three parts: cut by the diagonal, whole, ragged last)."""
    bh = tl.program_id(1)
    head = bh.to(tl.int64)
    start_n = tl.program_id(0) * BLOCK_N
    q_desc = tl.make_tensor_descriptor(q_ptr + head * n_q * HEAD_DIM, shape=[n_q, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, BLOCK_D])  # fmt: skip
    do_desc = tl.make_tensor_descriptor(do_ptr + head * n_q * HEAD_DIM, shape=[n_q, HEAD_DIM],
                                        strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, BLOCK_D])  # fmt: skip
    k_desc = tl.make_tensor_descriptor(k_ptr + head * n_k * HEAD_DIM, shape=[n_k, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, BLOCK_D])  # fmt: skip
    v_desc = tl.make_tensor_descriptor(v_ptr + head * n_k * HEAD_DIM, shape=[n_k, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, BLOCK_D])  # fmt: skip
    k = k_desc.load([start_n, 0])  # [BLOCK_N, BLOCK_D], kept for the whole loop; keys past Nk read as 0
    v = v_desc.load([start_n, 0])
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    lse_ptr += head * n_q
    delta_ptr += head * n_q
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

    lo, a, b = dkdv_q_ranges(start_n, n_q, BLOCK_M, BLOCK_N, IS_CAUSAL)
    dk, dv = _dkdv_v2_inner(dk, dv, k, v, q_desc, do_desc, lse_ptr, delta_ptr, lo, a, n_q, qk_scale, offs_n,
                            offs_m0, BLOCK_M, IS_CAUSAL, True)  # fmt: skip
    dk, dv = _dkdv_v2_inner(dk, dv, k, v, q_desc, do_desc, lse_ptr, delta_ptr, a, b, n_q, qk_scale, offs_n,
                            offs_m0, BLOCK_M, IS_CAUSAL, False)  # fmt: skip
    dk, dv = _dkdv_v2_inner(dk, dv, k, v, q_desc, do_desc, lse_ptr, delta_ptr, b, n_q, n_q, qk_scale, offs_n,
                            offs_m0, BLOCK_M, IS_CAUSAL, True)  # fmt: skip
    offs_d = tl.arange(0, BLOCK_D)
    kv_offs = head * n_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    kv_mask = (offs_n < n_k)[:, None] & (offs_d < HEAD_DIM)[None, :]
    tl.store(dk_ptr + kv_offs, (dk * scale).to(dk_ptr.dtype.element_ty), mask=kv_mask)
    tl.store(dv_ptr + kv_offs, dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq_v2_inner(
    dq, q, do, lse2, delta, k_desc, v_desc, lo, hi, n_k, qk_scale, offs_m, offs_n0,
    BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
):  # fmt: skip
    """K blocks [lo, hi) against one Q block: accumulate dQ (unscaled), [BLOCK_M, BLOCK_D]."""
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = k_desc.load([start_n, 0])  # [BLOCK_N, BLOCK_D]; rows >= Nk read as 0
        v = v_desc.load([start_n, 0])
        s = tl.dot(q, k.T) * qk_scale  # [BLOCK_M, BLOCK_N]
        if MASKED:
            offs_n = start_n + offs_n0
            visible = (offs_n < n_k)[None, :]
            if IS_CAUSAL:
                visible = visible & (offs_n[None, :] <= offs_m[:, None])
            s = tl.where(visible, s, float("-inf"))
        p = tl.exp2(s - lse2[:, None])
        dp = tl.dot(do, v.T)  # dP = dO V^T
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)  # dQ = dS K (scaled at the end)
    return dq


@triton.jit
def attention_dq_v2_kernel(
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
):
    """dQ of one (batch*head, Q block), and D = rowsum(dO * O) for its rows (stored for the dK/dV kernel)."""
    pid_m = tl.program_id(0)
    if IS_CAUSAL:  # the longest programs first
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    head = bh.to(tl.int64)
    start_m = pid_m * BLOCK_M
    q_desc = tl.make_tensor_descriptor(q_ptr + head * n_q * HEAD_DIM, shape=[n_q, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, BLOCK_D])  # fmt: skip
    do_desc = tl.make_tensor_descriptor(do_ptr + head * n_q * HEAD_DIM, shape=[n_q, HEAD_DIM],
                                        strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, BLOCK_D])  # fmt: skip
    o_desc = tl.make_tensor_descriptor(o_ptr + head * n_q * HEAD_DIM, shape=[n_q, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, BLOCK_D])  # fmt: skip
    k_desc = tl.make_tensor_descriptor(k_ptr + head * n_k * HEAD_DIM, shape=[n_k, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, BLOCK_D])  # fmt: skip
    v_desc = tl.make_tensor_descriptor(v_ptr + head * n_k * HEAD_DIM, shape=[n_k, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, BLOCK_D])  # fmt: skip
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    row_ok = offs_m < n_q
    q = q_desc.load([start_m, 0])  # [BLOCK_M, BLOCK_D]
    do = do_desc.load([start_m, 0])
    o = o_desc.load([start_m, 0])
    lse2 = tl.load(lse_ptr + head * n_q + offs_m, mask=row_ok, other=0.0) * LOG2E
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)  # D = rowsum(dO * O), [BLOCK_M], fp32
    tl.store(delta_ptr + head * n_q + offs_m, delta, mask=row_ok)
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    hi = n_k
    full = (n_k // BLOCK_N) * BLOCK_N
    if IS_CAUSAL:
        hi = tl.minimum(n_k, start_m + BLOCK_M)
        full = tl.minimum(full, ((start_m + 1) // BLOCK_N) * BLOCK_N)
    dq = _dq_v2_inner(dq, q, do, lse2, delta, k_desc, v_desc, 0, full, n_k, qk_scale, offs_m, offs_n0,
                      BLOCK_N, IS_CAUSAL, False)  # fmt: skip
    dq = _dq_v2_inner(dq, q, do, lse2, delta, k_desc, v_desc, full, hi, n_k, qk_scale, offs_m, offs_n0,
                      BLOCK_N, IS_CAUSAL, True)  # fmt: skip
    offs_d = tl.arange(0, BLOCK_D)
    q_offs = head * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(dq_ptr + q_offs, (dq * scale).to(dq_ptr.dtype.element_ty),
             mask=row_ok[:, None] & (offs_d < HEAD_DIM)[None, :])  # fmt: skip


def backward_v2_launches(plan, cfg_kv: AttentionConfig, cfg_q: AttentionConfig) -> tuple:
    """The two :class:`Launch` es of version 2's backward: dQ (and D) with ``cfg_q``, then dK/dV with ``cfg_kv``
    (version 1's tile configs; the head-dim tile is the padded head dim)."""
    common = dict(IS_CAUSAL=plan.is_causal, HEAD_DIM=plan.d)
    bh = plan.b * plan.h
    dkdv = Launch(attention_dkdv_v2_kernel, (triton.cdiv(plan.n_k, cfg_kv.block_n), bh),
                  dict(BLOCK_M=cfg_kv.block_m, BLOCK_N=cfg_kv.block_n, BLOCK_D=cfg_kv.block_d, **common,
                       num_warps=cfg_kv.num_warps, num_stages=cfg_kv.num_stages))  # fmt: skip
    dq = Launch(attention_dq_v2_kernel, (triton.cdiv(plan.n_q, cfg_q.block_m), bh),
                dict(BLOCK_M=cfg_q.block_m, BLOCK_N=cfg_q.block_n, BLOCK_D=cfg_q.block_d, **common,
                     num_warps=cfg_q.num_warps, num_stages=cfg_q.num_stages))  # fmt: skip
    return dq, dkdv


@dataclasses.dataclass(frozen=True)
class V2BackwardConfig:
    """The tiles of version 2's two backward kernels: ``dkdv`` and ``dq`` :class:`AttentionConfig` s (None: version
    1's tiles for the problem, :func:`gpulab.attention.configs.attention_config`)."""

    dkdv: AttentionConfig | None = None
    dq: AttentionConfig | None = None

    def __post_init__(self):
        for name in ("dkdv", "dq"):
            if not (getattr(self, name) is None or isinstance(getattr(self, name), AttentionConfig)):
                raise TypeError(f"{name} must be an AttentionConfig or None, got {getattr(self, name)!r}.")


class V2Backward(NamedTuple):
    """Version 2's backward launches, what :func:`gpulab.attention.plan.run_backward` takes as ``launches``."""

    dq: Launch
    dkdv: Launch
    kind = "two kernels, TMA"
    atomic = False

    def run(self, plan, do, q, k, v, o, lse, dq, dk, dv):
        """D and dQ, then dK and dV; inputs at addresses TMA cannot read (not 16-byte aligned) are copied first."""
        if (q.data_ptr() | k.data_ptr() | v.data_ptr() | o.data_ptr() | do.data_ptr() | lse.data_ptr()) & 15:
            q, k, v, o, do, lse = (t.clone() if t.data_ptr() & 15 else t for t in (q, k, v, o, do, lse))
        if not runtime.INTERPRET:
            sm90.ensure_allocator()
        stream = direct_stream(plan.device)
        delta = check.new_output(plan.lse_shape, dtype=torch.float32, device=plan.device)
        n_q, n_k, qk_scale, scale = plan.n_q, plan.n_k, plan.qk_scale, plan.scale
        self.dq(stream, q, k, v, o, do, lse, delta, dq, n_q, n_k, qk_scale, scale)  # writes D = rowsum(dO * O)
        self.dkdv(stream, q, k, v, do, lse, delta, dk, dv, n_q, n_k, qk_scale, scale)  # reads D: runs second
        return dq, dk, dv


def v2_backward(plan, config: V2BackwardConfig = V2BackwardConfig()) -> V2Backward:
    """Version 2's backward launches for ``plan`` at ``config``'s tiles."""
    if not isinstance(config, V2BackwardConfig):
        raise TypeError(f"config must be a V2BackwardConfig, got {type(config).__name__}.")
    cfg_kv = config.dkdv or attention_config("dkdv", plan.d, plan.dtype, plan.n_q, plan.n_k)
    cfg_q = config.dq or attention_config("dq", plan.d, plan.dtype, plan.n_q, plan.n_k)
    return V2Backward(*backward_v2_launches(plan, cfg_kv, cfg_q))


def attention_backward(do, q, k, v, o, lse, is_causal: bool = False, scale: float | None = None,
                       allow_tf32: bool = False, config: V2BackwardConfig = V2BackwardConfig()):  # fmt: skip
    """:func:`gpulab.attention.attention_backward` through version 2's kernels: ``(dQ, dK, dV)``. The cached plan is
    not changed."""
    plan = attention_plan.backward_plan(do, q, k, v, o, lse, is_causal, scale, allow_tf32)
    return attention_plan.run_backward(plan, do, q, k, v, o, lse, launches=v2_backward(plan, config))


def sm90_backward_compile(kind: str, head_dim: int, is_causal: bool, cfg: AttentionConfig, dtype: str = "bf16"):
    """Compile version 2's ``kind`` ('dq' or 'dkdv') kernel for sm_90 (no GPU needed, nothing launched); needs
    compiled mode: use :func:`sm90_backward_ttgir` from an interpreter process."""
    ptr = f"*{dtype}"
    if kind == "dq":
        kernel, names = attention_dq_v2_kernel, ("q", "k", "v", "o", "do", "lse", "delta", "dq")
    else:
        kernel, names = attention_dkdv_v2_kernel, ("q", "k", "v", "do", "lse", "delta", "dk", "dv")
    signature = {f"{n}_ptr": ("*fp32" if n in ("lse", "delta") else ptr) for n in names}
    signature.update({"n_q": "i32", "n_k": "i32", "qk_scale": "fp32", "scale": "fp32"})
    constexprs = dict(HEAD_DIM=head_dim, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_D=cfg.block_d,
                      IS_CAUSAL=is_causal)  # fmt: skip
    return compile_for_sm90(kernel, signature, constexprs, len(names), cfg)


_BOOTSTRAP = (
    "import sys, json, torch; torch.cuda.is_available = lambda: True; "
    "from gpulab.attention.experiments import v2_backward as hb; from gpulab.attention.configs import AttentionConfig; "
    "a = json.loads(sys.argv[1]); "
    "k = hb.sm90_backward_compile(a['kind'], a['d'], a['causal'], AttentionConfig(**a['cfg'])); "
    "sys.stdout.write(k.asm['ttgir'])"
)


def sm90_backward_ttgir(kind: str = "dq", head_dim: int = 64, is_causal: bool = True, cfg=None,
                        timeout: float = 600) -> str:  # fmt: skip
    """The TTGIR of version 2's backward ``kind`` kernel ('dq' or 'dkdv') compiled for sm_90 in a fresh process that
    needs no GPU (``cfg``: an :class:`AttentionConfig`, default the H100's tiles of that kernel): the check that its
    tiles still arrive through TMA (``ttng.async_tma_copy_global_to_local``) and its products are wgmma."""
    runtime.one_of("kind", kind, ("dq", "dkdv"))
    head_dim = runtime.integer("head_dim", head_dim, minimum=1)
    cfg = cfg or attention_config(kind, head_dim, "bfloat16", 4096, 4096, gpu="h100", interpreter=False)
    if not isinstance(cfg, AttentionConfig):
        raise TypeError(f"cfg must be an AttentionConfig or None, got {type(cfg).__name__}.")
    arg = json.dumps({"kind": kind, "d": head_dim, "causal": bool(is_causal), "cfg": dataclasses.asdict(cfg)})
    return ttgir_in_fresh_process(_BOOTSTRAP, arg, f"version 2's {kind} kernel", timeout)
