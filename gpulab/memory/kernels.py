"""Lesson 0's two kernels: a masked copy, and a sweep that reads one working set over and over.

``copy``: the simplest memory-bound kernel. Program ``p`` copies elements ``[p*BLOCK, (p+1)*BLOCK)``; the last block
is ragged, so loads and stores are masked. It reads N and writes N elements: ``2*N*itemsize`` bytes, no FLOPs.

``working_set_sweep``: reads a working set of W bytes over and over inside one launch, on the schedule of
:mod:`gpulab.memory.schedule` (program ``p`` reads chunk ``(p + i*P) mod C`` at step ``i``), and stores one sum per
program, so no load can be optimised away. :func:`gpulab.memory.sweep_reference` is its float64 reference.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from gpulab import check, runtime

__all__ = [
    "copy_kernel",
    "copy_reference",
    "copy",
    "sweep_kernel",
    "check_sweep_args",
    "working_set_sweep",
    "block_size",
]


def block_size(name: str, value) -> int:
    """``value`` if it is a positive power of two (a Triton block: ``tl.arange`` needs one), else an error naming
    ``name``."""
    value = runtime.positive_int(name, value)
    if value & (value - 1):
        fix = 1 << (value - 1).bit_length()
        raise ValueError(f"{name} must be a power of two (a Triton block size), got {value}; use {fix}.")
    return value


# ----------------------------------------------------------------------------------------------------------------
# copy: read N, write N


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    """dst[i] = src[i] for i < n. One program per block of BLOCK elements."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # the last block is ragged: its lanes past n must neither read nor write
    x = tl.load(src_ptr + offs, mask=mask)
    tl.store(dst_ptr + offs, x, mask=mask)


def copy_reference(src: torch.Tensor) -> torch.Tensor:
    """The reference for :func:`copy`: ``src.clone()``."""
    runtime.require_tensor("src", src, device_check=False)
    return src.clone()


def copy(src: torch.Tensor, out: torch.Tensor | None = None, block: int | None = None) -> torch.Tensor:
    """Copy a contiguous tensor with :func:`copy_kernel`; returns ``out`` (allocated if not given).

    ``block``: elements per program, a power of two (default 1024 on CPU, 4096 on a GPU).
    """
    runtime.require_tensor("src", src)
    if not src.is_contiguous():
        raise ValueError(f"src must be contiguous, got strides {src.stride()}; pass src.contiguous().")
    block = runtime.pick(cpu=1024, gpu=4096) if block is None else block_size("block", block)
    if out is None:
        out = check.new_output(src.shape, dtype=src.dtype, device=src.device)
    else:
        runtime.require_tensor("out", out)
    if out.shape != src.shape or out.dtype != src.dtype or out.device != src.device or not out.is_contiguous():
        raise ValueError(
            f"out must be a contiguous tensor like src ({tuple(src.shape)}, {src.dtype}, {src.device}); "
            f"got ({tuple(out.shape)}, {out.dtype}, {out.device})."
        )
    n = src.numel()
    if n == 0:
        return out
    copy_kernel[(triton.cdiv(n, block),)](src, out, n, BLOCK=block, num_warps=4 if block <= 1024 else 8)
    return out


# ----------------------------------------------------------------------------------------------------------------
# working-set sweep: read W bytes, many times, inside one launch


# The chunk count and step are runtime values on purpose: were Triton to specialise n_chunks == 1 (its default for
# integer arguments equal to 1), the load address would become loop-invariant and the compiler could hoist it,
# "measuring" more than L1 can deliver.
@triton.jit(do_not_specialize=["n_chunks", "n_programs"])
def sweep_kernel(x_ptr, partial_ptr, n, n_chunks, n_programs, iters, BLOCK: tl.constexpr):
    """partial[p] = sum over i < iters of sum(chunk((p + i*P) mod C)), where chunk c is x[c*BLOCK : (c+1)*BLOCK]."""
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)  # one partial sum per lane: the loads stay independent
    chunk = pid % n_chunks
    step = n_programs % n_chunks
    for _ in range(0, iters):
        offs = chunk * BLOCK + lanes
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
        chunk += step
        chunk = tl.where(chunk >= n_chunks, chunk - n_chunks, chunk)  # mod C without a division
    tl.store(partial_ptr + pid, tl.sum(acc, axis=0))


def check_sweep_args(x, n: int, programs: int, iters: int, block: int | None) -> tuple[int, int]:
    """Validate the arguments of a sweep launch; return ``(block, n_chunks)``. Shared by every sweep kernel."""
    runtime.require_tensor("x", x)
    if x.dtype != torch.float32:
        raise ValueError(f"x must be float32, got {x.dtype}; pass x.float().")
    if not x.is_contiguous():
        raise ValueError(f"x must be contiguous, got strides {x.stride()}; pass x.contiguous().")
    n = runtime.integer("n", n)
    if not 1 <= n <= x.numel():
        raise ValueError(f"n must be between 1 and x.numel()={x.numel()}, got {n}.")
    programs, iters = runtime.positive_int("programs", programs), runtime.positive_int("iters", iters)
    block = 4096 if block is None else block_size("block", block)
    n_chunks = math.ceil(n / block)
    if math.gcd(programs, n_chunks) != 1:
        raise ValueError(
            f"programs={programs} shares a factor with the chunk count {n_chunks}, so some programs would never "
            "visit some chunks; get a valid count from sweep_plan()."
        )
    return block, n_chunks


def working_set_sweep(x: torch.Tensor, n: int, programs: int, iters: int, block: int | None = None):
    """Launch :func:`sweep_kernel` over the first ``n`` elements of ``x``; returns the per-program sums [programs].

    ``programs`` must be coprime to the chunk count (use :func:`gpulab.memory.sweep_plan`), so that every program
    visits every chunk. The sums are fp32, in a buffer from :func:`gpulab.check.new_output` (NaN-filled in tests, so an
    unwritten one shows).
    """
    block, n_chunks = check_sweep_args(x, n, programs, iters, block)
    partial = check.new_output(programs, dtype=torch.float32, device=x.device)
    sweep_kernel[(programs,)](
        x, partial, n, n_chunks, programs, iters, BLOCK=block, num_warps=8 if block >= 2048 else 4
    )
    return partial
