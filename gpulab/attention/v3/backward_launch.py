"""Version 3's backward, host side: what a launch needs is worked out once per signature, then the compiled kernel
is launched through Triton's C launcher with cached TMA tensor maps.

What you will learn: the backward's host path is the forward's (:mod:`gpulab.attention.v3.launch`) with one
difference, a two-dimensional grid (key blocks, batch x heads). Triton's ``kernel[grid](...)`` binds the arguments,
hashes a cache key and encodes four 128-byte tensor maps on every call; a :class:`BackwardPlan` does that once and
keeps :class:`gpulab.attention.v3.launch.RawLaunch`'s launcher, tensor maps coming from :data:`TENSOR_MAPS` (keyed on
address and geometry, so never stale). :func:`gpulab.attention.v3.backward.attention_backward` keeps the plans in
:data:`PLANS` and does the checks only when it builds one.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from gpulab import runtime
from gpulab.attention.v3 import launch
from gpulab.attention.v3.forward import LOG2E

__all__ = ["BackwardPlan", "PLANS", "TENSOR_MAPS", "WORKSPACES", "persistent_programs"]

PLANS = launch.BoundedCache(64)
"""Backward launch plans (:class:`BackwardPlan`) keyed on the inputs' classes, shapes, dtypes and devices, ``causal``,
``scale`` and the config: a hit skips the checks and the planning. Holds no tensor."""
TENSOR_MAPS = launch.BoundedCache(64)
"""The backward's TMA tensor maps (Q, dO, K, V), keyed as the forward's (:func:`gpulab.attention.v3.launch.tma_key`)."""
WORKSPACES = launch.BoundedCache(4)
"""Step 8's buffers, ``(dq_acc fp32 [B*H, Nq, D], counters int32 [B*H, ceil(Nq/64)])`` keyed on (device, stream,
B*H, Nq, D): zeroed when made, left zeroed by every call (the last program to add into a query block zeros it and
its counter back), so reused without a zeroing launch. One per stream: two backwards in flight on different streams
never share one; a dropped entry is freed in its stream's order by PyTorch's allocator."""


class BackwardPlan:
    """One signature's backward launch, worked out once: ``kernel`` (the Gluon backward), sizes, grid (``programs``
    persistent programs, or None: one per key block and head), ``scale``,
    K/V block rows ``block_n``, the register cap ``maxnreg`` (None: none), the ``constexprs`` and the shared
    ``layouts`` of a Q and a K/V block; after its first call through Triton, launched through the compiled kernel's C
    launcher with cached tensor maps (the forward's :class:`gpulab.attention.v3.launch.RawLaunch`, given a
    two-dimensional grid); ``fused_prep``: step 9 (D's launch zeroes dQ's buffer); ``window`` the ``(left, right)``
    of a sliding window, and k's heads (fewer than q's: grouped-query heads) set the grid's rows. Built by
    :func:`gpulab.attention.v3.backward.attention_backward` from checked inputs."""

    def __init__(self, kernel, q, k, scale: float, block_n: int, maxnreg, constexprs: dict, layouts,
                 programs: int | None = None, fused_prep: bool = False, window=(-1, -1)):  # fmt: skip
        b, h, self.n_q, self.d = q.shape
        self.kernel, self.n_k, self.bh, self.scale = kernel, k.shape[2], b * h, scale
        # grouped-query heads: K, V have b * Hkv rows of heads, the grid one program row per KV head; a window's
        # (win_lo, win_hi) bounds of j - i (gpulab.attention.v3.backward_pair), 0 where a side is unbounded
        self.group, self.bh_kv = h // k.shape[1], b * k.shape[1]
        off = self.n_k - self.n_q
        self.win = (off - window[0] if window[0] >= 0 else 0, off + window[1] if window[1] >= 0 else 0)
        self.block_n, self.maxnreg, self.constexprs, self.layouts = block_n, maxnreg, constexprs, layouts
        # persistent (step 7): ``programs`` programs walk the tiles; else one program per (key block, head)
        self.grid = (triton.cdiv(self.n_k, block_n), self.bh_kv) if programs is None else (programs, 1)
        self.device, self.raw = q.device.index, None
        self.dq_cast = bool(constexprs.get("DQ_CAST", False))
        self.fused_prep = fused_prep  # step 9: D's launch zeroes dQ's buffer
        self.no_counters = torch.zeros(1, device=q.device, dtype=torch.int32)  # the unused cnt_ptr without step 8

    def workspace(self, q):
        """Step 8's zeroed ``(dq_acc, counters)`` for this signature on the current stream (:data:`WORKSPACES`)."""
        key = (self.device, torch._C._cuda_getCurrentRawStream(self.device), self.bh, self.n_q, self.d)
        n_qb = triton.cdiv(self.n_q, 64)
        return WORKSPACES.get(
            key,
            lambda: (
                torch.zeros(q.shape, device=q.device, dtype=torch.float32),
                torch.zeros(self.bh * n_qb, device=q.device, dtype=torch.int32),
            ),
        )

    def launch(self, q, k, v, do, lse, delta, dq_acc, dk, dv, dq_out=None, counters=None) -> None:
        n_q, n_k, d, bh, bh_kv = self.n_q, self.n_k, self.d, self.bh, self.bh_kv
        if dq_out is None:  # no step 8: typed placeholders the kernel never touches
            dq_out, counters = dk, self.no_counters
        rest = (lse, delta, dq_acc, dk, dv, dq_out, counters, self.no_counters, self.no_counters, n_q, n_k, bh_kv,
                self.group, *self.win,
                self.scale * LOG2E, self.scale)  # fmt: skip
        if self.raw is not None and launch.RawLaunch.usable():
            raw, args = self.raw, []
            q_geo, kv_geo = ((bh, n_q, d), (n_q * d, d, 1)), ((bh_kv, n_k, d), (n_k * d, d, 1))
            for t, (shape, strides), meta in zip((q, k, v, do), (q_geo, kv_geo, kv_geo, q_geo), raw.metas):
                args += [raw.tensor_map(t.data_ptr(), shape, strides, meta), *shape, *strides]
            raw.call((*self.grid, 1), torch._C._cuda_getCurrentRawStream(self.device),
                     [*args, *rest, *self.constexprs.values()])  # fmt: skip
            return
        (q_layout, kv_layout), block_n = self.layouts, self.block_n
        q_desc = TensorDescriptor(q, [bh, n_q, d], [n_q * d, d, 1], [1, 64, d], q_layout)
        do_desc = TensorDescriptor(do, [bh, n_q, d], [n_q * d, d, 1], [1, 64, d], q_layout)
        k_desc = TensorDescriptor(k, [bh_kv, n_k, d], [n_k * d, d, 1], [1, block_n, d], kv_layout)
        v_desc = TensorDescriptor(v, [bh_kv, n_k, d], [n_k * d, d, 1], [1, block_n, d], kv_layout)
        extra = {} if self.maxnreg is None else {"maxnreg": self.maxnreg}
        compiled = self.kernel[self.grid](q_desc, k_desc, v_desc, do_desc, *rest, num_warps=4, **extra,
                                          **self.constexprs)  # fmt: skip
        if self.raw is None and compiled is not None:
            self.raw = launch.RawLaunch.of(compiled, TENSOR_MAPS)


def persistent_programs(b_h: int, n_k: int, causal: bool, sms: int) -> int:
    """Step 7's grid: ``min(work units, sms)``, a unit being one 128-key block of one head (causal: two, the pairs
    of :func:`gpulab.attention.v3.backward_pair.persistent_tile`)."""
    for name, x in (("b_h", b_h), ("n_k", n_k), ("sms", sms)):
        runtime.positive_int(name, x)
    runtime.strict_bool("causal", causal)
    n_kb = triton.cdiv(n_k, 128)
    units = b_h * ((n_kb + 1) // 2 if causal else n_kb)
    return max(1, min(units, sms))
