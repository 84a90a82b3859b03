"""Version 3's backward for packed batches of variable lengths (:func:`gpulab.attention.varlen.varlen_attn`).

What you will learn: the padded kernel (:mod:`gpulab.attention.v3.backward`, step 5) takes a packed batch with one
compile-time bit (``GQA_WIN`` bit 8) and no copy. Q, dO ``[Tq, Hq, D]`` and K, V ``[Tk, Hkv, D]`` are read through
TMA descriptors that see them as ``[H, T, D]`` (strides ``D, H D, 1``): a block is (head, packed row, 0). The grid
is (key blocks of 128 of the longest key sequence, Hkv, sequences); each program reads its sequence's offsets from
``cu_seq_q`` / ``cu_seq_k`` on the device (:func:`gpulab.attention.v3.backward_pair.seq_bounds`), so the host never
reads them and the launch can be captured in a CUDA graph. A key block past its sequence's end visits nothing and
stores nothing; query blocks start at the sequence's first row, so a block never reaches rows of the sequence
before; the rows of the next sequence that a block near the end brings in are masked
(:func:`gpulab.attention.v3.backward_pair.varlen_mask`), and dK, dV, dQ are stored only up to the sequence's end.
A window ``(left, right)`` is aligned bottom-right per sequence, grouped-query heads as in the padded kernel.
LSE and D are ``[Hq, Tq]`` (varlen's layout), dQ's fp32 buffer ``[Hq, Tq, D]``, scaled and transposed into dQ
``[Tq, Hq, D]`` by one ``torch.mul``.

:func:`gpulab.attention.measure.v3_backward_model.model_varlen_backward` replays the same programs on the CPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from gpulab import check, runtime
from gpulab.attention.v3 import backward as v3_backward
from gpulab.attention.v3.backward_configs import VARLEN_STEPS, V3BackwardConfig, constexprs, gqa_win
from gpulab.attention.v3.forward import LOG2E, smem_layouts

__all__ = ["varlen_backward_supported", "varlen_backward_config", "attention_backward_varlen",
           "varlen_delta_kernel"]  # fmt: skip


def varlen_backward_supported(q, k, v) -> tuple[bool, str]:
    """(True, "") where version 3's backward takes packed q [Tq, Hq, D], k, v [Tk, Hkv, D] (Hkv dividing Hq), else
    (False, the reason): the padded backward's conditions (:func:`gpulab.attention.v3.backward.backward_supported`)
    on [1, H, T, D] views of them, and Hkv * D * 2 bytes a multiple of 16 (the descriptors' row stride)."""
    if not all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in (q, k, v)):
        return False, "version 3's packed backward takes q, k, v [T, H, D]"
    if any(t.shape[0] == 0 for t in (q, k)):
        return False, "version 3 needs at least one query and one key"
    views = [t.unsqueeze(0).transpose(1, 2) for t in (q, k, v)]
    return v3_backward.backward_supported(*views)


def varlen_backward_config(head_dim: int) -> V3BackwardConfig:
    """The launch: the padded default for long sequences (:data:`gpulab.attention.v3.backward_configs.MEASURED`,
    step 5, with its ``kv_regs`` and ``stats_smem``)."""
    cfg = v3_backward.backward_config(head_dim, False)
    if cfg.step not in VARLEN_STEPS:  # pragma: no cover - MEASURED is step 5 at every head dim
        cfg = V3BackwardConfig(step=5, kv_regs=cfg.kv_regs, stats_smem=cfg.stats_smem)
    return cfg


@triton.jit
def varlen_delta_kernel(o_ptr, do_ptr, delta_ptr, t_q, h, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """D[hq, t] = sum_d dO[t, hq, d] O[t, hq, d] (fp32) for o, do [Tq, Hq, D] into delta [Hq, Tq]; grid
    (ceil(Tq / BLOCK_M), Hq). Rows of no sequence get a D too (never read)."""
    hq = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HEAD_DIM)
    offs = (rows.to(tl.int64) * h + hq)[:, None] * HEAD_DIM + cols[None, :]
    ok = (rows < t_q)[:, None]
    o = tl.load(o_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    tl.store(delta_ptr + hq.to(tl.int64) * t_q + rows, tl.sum(o * do, 1), mask=rows < t_q)


def attention_backward_varlen(do, q, k, v, o, lse, cu_q, cu_k, max_k: int, scale: float, window=(-1, -1),
                              cfg: V3BackwardConfig | None = None):  # fmt: skip
    """``(dq, dk, dv)`` like q, k, v of a packed batch on version 3: do, q, o [Tq, Hq, D] and k, v [Tk, Hkv, D]
    contiguous, lse [Hq, Tq] fp32 (natural log, the forward's), cu_q, cu_k int32 [S + 1] (checked by the caller:
    :func:`gpulab.attention.varlen.check_offsets`), ``max_k`` the longest key sequence, ``scale`` the softmax scale,
    ``window`` (left, right) per sequence. Key rows of no sequence get no dK, dV (as version 1's)."""
    ok, why = varlen_backward_supported(q, k, v)
    if not ok:
        raise ValueError(f"version 3 cannot run this packed batch: {why}.")
    runtime.positive_int("max_k", max_k)
    cfg = cfg or varlen_backward_config(q.shape[2])
    t_q, h, d = q.shape
    t_k, h_kv = k.shape[:2]
    group, n_seq = h // h_kv, cu_q.shape[0] - 1
    left, right = window
    win = (-left if left >= 0 else 0, right if right >= 0 else 0)
    delta = torch.empty((h, t_q), device=q.device, dtype=torch.float32)
    varlen_delta_kernel[(triton.cdiv(t_q, 64), h)](o, do, delta, t_q, h, HEAD_DIM=d, BLOCK_M=64)
    dq_acc = torch.zeros((h, t_q, d), device=q.device, dtype=torch.float32)
    dk = check.new_output(k.shape, dtype=k.dtype, device=k.device)  # poisoned in tests: rows left unwritten show
    dv = check.new_output(v.shape, dtype=v.dtype, device=v.device)
    q_layout, kv_layout = smem_layouts(d, cfg.block_n, q.dtype)
    q_desc = TensorDescriptor(q, [h, t_q, d], [d, h * d, 1], [1, 64, d], q_layout)
    do_desc = TensorDescriptor(do, [h, t_q, d], [d, h * d, 1], [1, 64, d], q_layout)
    k_desc = TensorDescriptor(k, [h_kv, t_k, d], [d, h_kv * d, 1], [1, cfg.block_n, d], kv_layout)
    v_desc = TensorDescriptor(v, [h_kv, t_k, d], [d, h_kv * d, 1], [1, cfg.block_n, d], kv_layout)
    unused = torch.zeros(1, device=q.device, dtype=torch.int32)
    grid = (triton.cdiv(max_k, cfg.block_n), h_kv, n_seq)
    extra = {} if cfg.maxnreg is None else {"maxnreg": cfg.maxnreg}
    with torch.cuda.device(q.device):
        v3_backward.attention_backward_v3_kernel[grid](
            q_desc, k_desc, v_desc, do_desc, lse, delta, dq_acc, dk, dv, dk, unused, cu_q, cu_k, t_q, t_k, h_kv, group,
            *win, scale * LOG2E, scale, num_warps=4, **extra,
            **constexprs(d, False, cfg, gqa_win(group, window, varlen=True)))  # fmt: skip
    dq = check.new_output(q.shape, dtype=q.dtype, device=q.device)
    torch.mul(dq_acc.transpose(0, 1), scale, out=dq)
    return dq, dk, dv
