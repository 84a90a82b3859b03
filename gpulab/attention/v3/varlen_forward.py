"""Version 3's forward on packed batches of sequences of different lengths (``varlen_attn``'s layout).

What you will learn: the padded kernel runs a packed batch with three changes, all behind its ``VARLEN`` constexpr
(:func:`gpulab.attention.v3.forward.attention_forward_v3_kernel`):

- the TMA descriptors view a packed [T, H, D] tensor as [H, T, D] (strides ``(D, H D, 1)``: the same [1, 64, D]
  blocks and shared layouts as the padded [B H, N, D] views), so a tile of sequence s, head h loads the box at
  ``(h, cu_seq[s] + row, 0)``;
- each program reads its sequence's offsets from ``cu_seq_q`` / ``cu_seq_k`` on the device
  (:func:`gpulab.attention.v3.tiles.varlen_tile`): the host sizes the work as (query tile of the longest sequence,
  head, sequence) items and never reads the offsets, so the launch can be captured in a CUDA graph. Persistent
  programs (one per SM, :func:`varlen_config`'s default) walk the items longest work first and skip those past
  their sequence's end (three loads and a comparison); key blocks past the sequence's keys are never loaded;
- a tile's copies run on into the next sequence's rows (a box is 64 rows whatever the sequence's length): its
  keys are masked on the edge block (key < the sequence's key length, and the window per sequence, aligned at its
  bottom-right corner), and the sequence's last query tile stores O from registers under a row mask instead of a
  TMA store, which would overwrite the next sequence's first rows. Values of masked keys are multiplied by P = 0, so
  rows of another sequence must hold finite numbers (they do, unless an input holds inf or NaN elsewhere).

:func:`supported` is the gate (version 3's: Hopper, the tested Triton, float16/bfloat16, head dim 64 or 128, a
positive scale, aligned tensors); :func:`attention_forward_varlen` the launch, ``(o [Tq, Hq, D], lse [Hq, Tq])``.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from gpulab import check, runtime
from gpulab.attention import sm90
from gpulab.attention.reference import check_window
from gpulab.attention.v3 import configs, forward, launch

__all__ = ["supported", "aligned", "varlen_config", "attention_forward_varlen", "PLANS"]

PLANS = launch.BoundedCache(64)
"""Launch plans keyed on shapes, dtypes, device, the longest query length, scale, window and config (no tensor)."""


def supported(q, k, v, scale: float | None = None, window_size=(-1, -1), enable_gqa: bool = False) -> tuple[bool, str]:
    """(True, "") when version 3 can run the packed q [Tq, Hq, D], k, v [Tk, Hkv, D] here, else (False, the
    reason): :func:`gpulab.attention.v3.configs.supported` of the [1, H, T, D] views (GPU, Triton, dtype, head dim,
    heads, scale). Whether a call's tensors are laid out for TMA is :func:`aligned`'s (it may change from call to
    call). Never raises on tensors."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            return False, f"{name} must be a packed [T, H, D] tensor, got {getattr(t, 'shape', type(t).__name__)}"
    ok, why = configs.supported(*(t.transpose(0, 1)[None] for t in (q, k, v)), False, scale, enable_gqa=enable_gqa,
                                window_size=window_size)  # fmt: skip
    return ok, why


def aligned(*tensors) -> bool:
    """Whether every tensor is contiguous with 16-byte aligned data (a TMA descriptor's base)."""
    return all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in tensors)


def varlen_config(head_dim: int, window_size=(-1, -1), max_q: int | None = None,
                  persistent: bool = True) -> configs.V3Config:  # fmt: skip
    """The packed launch's tiles: the padded problem's measured ones for the window (:func:`.configs.window_config`
    at the longest query length) on a persistent grid (one program per SM walking the tiles longest work first,
    :func:`gpulab.attention.v3.tiles.varlen_tile`, with two Q buffers per consumer so the next tile's Q loads
    while this one computes), causal or not; ``persistent=False``: one tile per program, one Q buffer (the switch
    to compare: pass either config as ``cfg``). Never ``pairs`` (a pair of tiles of one sequence does not balance
    across sequences of different lengths)."""
    cfg = configs.window_config(head_dim, False, window_size, seq=max_q)
    if runtime.strict_bool("persistent", persistent):
        return dataclasses.replace(cfg, persistent=True, pairs=False, q_buffers=2)
    return dataclasses.replace(cfg, persistent=False, pairs=False, q_buffers=1)


class _Plan:
    """One packed signature's launch: grid, sizes, constexprs, shared layouts, and the raw launch once compiled."""

    __slots__ = ("cfg", "grid", "sizes", "qk_scale", "constexprs", "layouts", "device", "raw", "shapes")

    def __init__(self, q, k, max_q: int, n_seq: int, scale: float, window, cfg: configs.V3Config):
        t_q, h, d = q.shape
        t_k, h_kv = k.shape[:2]
        n_m = triton.cdiv(max_q, 64 * cfg.consumers)
        self.cfg, self.grid = cfg, n_m * h * n_seq
        if cfg.persistent:  # one program per SM (at most one per tile)
            self.grid = min(self.grid, sm90.sm_count(q.device.index))
        self.sizes = (t_q, n_m, h, h // h_kv, *window, n_seq)  # the kernel's n_q, n_k, n_bh, group, ... (VARLEN)
        self.qk_scale = scale * forward.LOG2E
        self.constexprs = configs.constexprs(d, False, cfg, False, h != h_kv, window, True)
        self.layouts = forward.smem_layouts(d, cfg.block_n, q.dtype)
        self.shapes = (((h, t_q, d), (d, h * d, 1)), ((h_kv, t_k, d), (d, h_kv * d, 1)))  # [H, T, D] views
        self.device = q.device.index
        self.raw = None

    def launch(self, q, k, v, o, lse, cu_q, cu_k) -> None:
        (q_shape, q_strides), (kv_shape, kv_strides) = self.shapes
        rest = (lse, o, cu_q, cu_k, *self.sizes, self.qk_scale, *self.constexprs.values())
        if self.raw is not None and launch.RawLaunch.usable():
            descs = ((q.data_ptr(), q_shape, q_strides), (k.data_ptr(), kv_shape, kv_strides),
                     (v.data_ptr(), kv_shape, kv_strides), (o.data_ptr(), q_shape, q_strides))  # fmt: skip
            self.raw.launch(self.grid, torch._C._cuda_getCurrentRawStream(self.device), descs, rest)
            return
        q_layout, kv_layout = self.layouts
        d, block_n = q_shape[2], self.cfg.block_n
        descs = (TensorDescriptor(q, list(q_shape), list(q_strides), [1, 64, d], q_layout),
                 TensorDescriptor(k, list(kv_shape), list(kv_strides), [1, block_n, d], kv_layout),
                 TensorDescriptor(v, list(kv_shape), list(kv_strides), [1, block_n, d], kv_layout),
                 TensorDescriptor(o, list(q_shape), list(q_strides), [1, 64, d], q_layout))  # fmt: skip
        compiled = forward.attention_forward_v3_kernel[(self.grid,)](
            *descs, lse, o, cu_q, cu_k, *self.sizes, self.qk_scale, num_warps=4, maxnreg=self.cfg.maxnreg,
            **self.constexprs,
        )  # fmt: skip
        if self.raw is None and compiled is not None:
            self.raw = launch.RawLaunch.of(compiled, forward.TENSOR_MAPS)


def attention_forward_varlen(q, k, v, cu_seq_q, cu_seq_k, max_q: int, scale: float, window_size=(-1, -1),
                             cfg: configs.V3Config | None = None):  # fmt: skip
    """Version 3's packed forward: ``(o, lse)``, o [Tq, Hq, D] in q's dtype (rows outside every sequence not
    written), lse [Hq, Tq] float32 (natural log; 0 for a row that sees no key, and not written outside every
    sequence). q [Tq, Hq, D], k, v [Tk, Hkv, D] contiguous (Hkv dividing Hq: query head h reads KV head
    ``h // (Hq // Hkv)``), int32 offsets ``cu_seq_q`` / ``cu_seq_k`` [S + 1] on q's device, read only by the kernel
    (the caller checks them: :func:`gpulab.attention.varlen.check_offsets`), ``max_q`` the longest query length,
    ``scale`` the softmax scale (positive), ``window_size`` ``(left, right)`` per sequence, bottom-right aligned.
    Raises ValueError where :func:`supported` or :func:`aligned` says no."""
    window = check_window(window_size)
    key = (q.shape, q.dtype, q.device, k.shape, cu_seq_q.shape, max_q, scale, window, cfg)

    def build():
        ok, why = supported(q, k, v, scale, window, k.shape[1] != q.shape[1])
        if not ok:
            raise ValueError(f"version 3 cannot run this packed input: {why}.")
        if cfg is not None and (not isinstance(cfg, configs.V3Config) or cfg.pairs):
            raise ValueError(f"cfg must be None or a V3Config with pairs=False (varlen_config(..., persistent=False) "
                             f"for one tile per program), got {cfg!r}.")  # fmt: skip
        return _Plan(q, k, max_q, cu_seq_q.shape[0] - 1, scale, window,
                     cfg or varlen_config(q.shape[2], window, max_q))  # fmt: skip

    plan = PLANS.get(key, build)
    o = check.new_output(q.shape, dtype=q.dtype, device=q.device)
    lse = check.new_output((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    if not aligned(q, k, v, o):
        raise ValueError(
            "version 3's packed forward reads contiguous, 16-byte aligned q, k, v (TMA descriptors); "
            "pass q.contiguous() (a copy: torch.empty_like(q).copy_(q) where only the address is off)."
        )
    if plan.grid:
        if torch.cuda.current_device() == plan.device:
            plan.launch(q, k, v, o, lse, cu_seq_q, cu_seq_k)
        else:
            with torch.cuda.device(plan.device):
                plan.launch(q, k, v, o, lse, cu_seq_q, cu_seq_k)
    return o, lse
