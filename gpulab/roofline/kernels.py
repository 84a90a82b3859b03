"""Lesson 1's two microbenchmark kernels, each beside its float64 reference.

- :func:`fma_kernel`: FP32 FMA throughput with no memory traffic in the loop. Every lane runs four independent chains
  of ``a = a * b + c`` in registers, 2 FLOPs per FMA; with ``|b| < 1`` the chains converge to ``c / (1 - b)``, so
  :func:`fma_closed_form` is an exact float64 reference for chains of any length (:func:`fma_reference` steps).
- :func:`l2_sweep_kernel`: lesson 0's working-set sweep with loads marked ``cache_modifier=".cg"`` (cache in L2 only,
  bypass L1), so a working set that fits L2 measures L2's read bandwidth. Same schedule, same reference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import check, runtime
from gpulab.memory.kernels import block_size, check_sweep_args

__all__ = [
    "FMA_CHAINS",
    "FMA_UNROLL",
    "fma_kernel",
    "fma_chain",
    "fma_reference",
    "fma_closed_form",
    "l2_sweep_kernel",
    "l2_sweep",
]

# ----------------------------------------------------------------------------------------------------------------
# Kernel 1: FP32 FMA throughput, no memory traffic in the loop

FMA_CHAINS = 4  # independent accumulators per lane: while one FMA's result is in flight the next chain issues
FMA_UNROLL = 8  # FMAs per chain per loop trip, so the loop counter and branch cost ~1% of the issue slots
_NUM_WARPS = (1, 2, 4, 8, 16, 32)


@triton.jit
def fma_kernel(x_ptr, out_ptr, n, b, c, iters, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    """out[i] = sum over 4 chains j of the result of ``a = a*b + c`` applied iters*UNROLL times to a = x[j, i]."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # the last block is ragged on small sizes
    a0 = tl.load(x_ptr + offs, mask=mask, other=0.0)  # x is [4, n]: chain j starts from row j
    a1 = tl.load(x_ptr + n + offs, mask=mask, other=0.0)
    a2 = tl.load(x_ptr + 2 * n + offs, mask=mask, other=0.0)
    a3 = tl.load(x_ptr + 3 * n + offs, mask=mask, other=0.0)
    for _ in range(0, iters):
        for _ in tl.static_range(UNROLL):
            a0 = tl.fma(a0, b, c)  # one fused multiply-add = 2 FLOPs, all in registers
            a1 = tl.fma(a1, b, c)
            a2 = tl.fma(a2, b, c)
            a3 = tl.fma(a3, b, c)
    tl.store(out_ptr + offs, (a0 + a1) + (a2 + a3), mask=mask)  # stored, so no FMA can be optimised away


def fma_chain(x: torch.Tensor, iters: int, b: float = 0.75, c: float = 0.25, block: int | None = None, num_warps=4):
    """Run :func:`fma_kernel` on ``x`` [4, n] (float32): ``iters * FMA_UNROLL`` FMAs per chain; returns out [n].

    With |b| < 1 the chains converge to c / (1 - b) (1.0 for the defaults), so no value overflows however long the
    chain. ``block``: lanes per program, a power of two; ``num_warps``: 1 to 32, a power of two. The output comes from
    :func:`gpulab.check.new_output` (NaN-filled in tests, so an unwritten lane shows).
    """
    runtime.require_tensor("x", x)
    if x.dtype != torch.float32 or x.dim() != 2 or x.shape[0] != FMA_CHAINS or x.shape[1] < 1:
        raise ValueError(f"x must be a float32 tensor of shape [{FMA_CHAINS}, n >= 1], got {x.dtype} {tuple(x.shape)}.")
    if not x.is_contiguous():
        raise ValueError(f"x must be contiguous, got strides {x.stride()}; pass x.contiguous().")
    iters = runtime.positive_int("iters", iters)
    b, c = runtime.finite_float("b", b), runtime.finite_float("c", c)
    block = runtime.pick(cpu=64, gpu=1024) if block is None else block_size("block", block)
    num_warps = runtime.one_of("num_warps", num_warps, _NUM_WARPS)
    n = x.shape[1]
    out = check.new_output(n, dtype=torch.float32, device=x.device)
    fma_kernel[(triton.cdiv(n, block),)](
        x, out, n, float(b), float(c), iters, BLOCK=block, UNROLL=FMA_UNROLL, num_warps=num_warps
    )
    return out


def fma_reference(x: torch.Tensor, steps: int, b: float = 0.75, c: float = 0.25) -> torch.Tensor:
    """float64, step by step: ``a = a*b + c`` ``steps`` times on each chain (row of x), then the sum of the chains."""
    x, steps, b, c = _reference_args(x, steps, b, c)
    a = x.detach().to(torch.float64)
    for _ in range(steps):
        a = a * b + c
    return a.sum(0)


def fma_closed_form(x: torch.Tensor, steps: int, b: float = 0.75, c: float = 0.25) -> torch.Tensor:
    """float64, for long chains: a_T = a* + b^T (a_0 - a*) with the fixed point a* = c / (1 - b) (needs b != 1)."""
    x, steps, b, c = _reference_args(x, steps, b, c)
    if b == 1:
        raise ValueError("b=1 has no fixed point c / (1 - b); use fma_reference, or a b with |b| < 1.")
    fixed = c / (1 - b)
    return (fixed + b**steps * (x.detach().to(torch.float64) - fixed)).sum(0)


def _reference_args(x, steps, b, c):
    """The shared checks of the two references: x a tensor with chains along dim 0, steps >= 0, finite b and c."""
    runtime.require_tensor("x", x, device_check=False)
    if x.dim() < 1 or x.shape[0] < 1:
        raise ValueError(f"x must hold chains along its first dimension, got shape {tuple(x.shape)}.")
    steps = runtime.nonnegative_int("steps", steps)
    return x, steps, runtime.finite_float("b", b), runtime.finite_float("c", c)


# ----------------------------------------------------------------------------------------------------------------
# Kernel 2: L2 bandwidth, lesson 0's sweep with L1 bypassed


@triton.jit(do_not_specialize=["n_chunks", "n_programs"])
def l2_sweep_kernel(x_ptr, partial_ptr, n, n_chunks, n_programs, iters, BLOCK: tl.constexpr):
    """:func:`gpulab.memory.sweep_kernel` with one change: loads use ``cache_modifier=".cg"`` (L2 only, not L1)."""
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    chunk = pid % n_chunks
    step = n_programs % n_chunks
    for _ in range(0, iters):
        offs = chunk * BLOCK + lanes
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0, cache_modifier=".cg").to(tl.float32)
        chunk += step
        chunk = tl.where(chunk >= n_chunks, chunk - n_chunks, chunk)
    tl.store(partial_ptr + pid, tl.sum(acc, axis=0))


def l2_sweep(x: torch.Tensor, n: int, programs: int, iters: int, block: int | None = None) -> torch.Tensor:
    """:func:`gpulab.memory.working_set_sweep` through :func:`l2_sweep_kernel`: same checks, same schedule, so
    :func:`gpulab.memory.sweep_reference` is its reference too."""
    block, n_chunks = check_sweep_args(x, n, programs, iters, block)
    partial = check.new_output(programs, dtype=torch.float32, device=x.device)
    l2_sweep_kernel[(programs,)](
        x, partial, n, n_chunks, programs, iters, BLOCK=block, num_warps=8 if block >= 2048 else 4
    )
    return partial
