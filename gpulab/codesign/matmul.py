"""Lesson 2, the kernel: a matmul whose tile never changes with the shape, and its float64 reference.

cuBLAS picks a tile per shape, which smooths its wave staircase; a kernel with one fixed ``BLOCK_M x BLOCK_N``
tile shows tile and wave quantization exactly as :mod:`gpulab.codesign.gemm_model` counts them. One program per
output tile; each loops over K in steps of ``BLOCK_K``, accumulating in fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import hardware, runtime
from gpulab.check import new_output

__all__ = [
    "matmul_fixed_tile_kernel",
    "matmul_fixed_tile",
    "matmul_reference",
    "TRITON_GPU_CONFIG",
    "TRITON_CPU_CONFIG",
]

# ----------------------------------------------------------------------------------------------------------------
# A fixed-tile matmul in Triton: one program per BLOCK_M x BLOCK_N output tile, whatever the shape.


@triton.jit
def matmul_fixed_tile_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """C[tile] = A[rows of tile, :] @ B[:, columns of tile], accumulated in fp32 over K in steps of BLOCK_K."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        # Ragged edges: rows past M, columns past N and the K tail past K load zeros, which add nothing to the sum.
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (ks[None, :] < K - k0), other=0.0)
        b = tl.load(b_ptrs, mask=(ks[:, None] < K - k0) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """float64 ``a @ b`` on the CPU (``a`` [M, K], ``b`` [K, N] on any device, any floating dtype)."""
    _inputs(a, b, device_check=False)
    return a.detach().to("cpu", torch.float64) @ b.detach().to("cpu", torch.float64)


def _inputs(a, b, device_check: bool = True) -> tuple[int, int, int]:
    """``(m, n, k)`` of 2-D tensors ``a`` [M, K] and ``b`` [K, N]; a clear error naming the argument otherwise."""
    runtime.require_tensor("a", a, 2, device_check=device_check)
    runtime.require_tensor("b", b, 2, device_check=device_check)
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"a is {m} x {k} and b is {k2} x {n}: the inner sizes must match.")
    return m, n, k


def _block(name, value) -> int:
    value = runtime.positive_int(name, value)
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two (tl.arange needs one), got {value}.")
    return runtime.dot_block(value)  # >= 16: GPUs need tl.dot operands of at least 16 along each dimension


def _block_count(name, value) -> int:
    value = runtime.positive_int(name, value)
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two (1, 2, 4, 8, ...), got {value}.")
    return value


def matmul_fixed_tile(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor | None = None,
    block_m: int = 128,
    block_n: int = 128,
    block_k: int = 64,
    num_warps: int | None = None,
    num_stages: int | None = None,
    allow_tf32: bool = False,
) -> torch.Tensor:
    """``a @ b`` with :func:`matmul_fixed_tile_kernel`: a grid of ``cdiv(M, block_m) x cdiv(N, block_n)`` programs.

    The tile never changes with the shape, so its tile and wave quantization are exactly the model's. Blocks are
    powers of two, raised to at least 16. fp32 inputs use IEEE products unless ``allow_tf32``. Returns ``out``
    (allocated with :func:`gpulab.check.new_output` when not given: NaN-filled in the interpreter and in tests).

    Args:
        a: [M, K], b: [K, N], on gpulab's device, both float32, float16 or (on a GPU with it) bfloat16.
        out: [M, N] in the same dtype, or None; any strides.
        block_m, block_n, block_k: the tile, powers of two. num_warps (a power of two), num_stages: launch options.
    """
    m, n, k = _inputs(a, b)
    dtype = hardware.require_dtype("a", a.dtype)
    if b.dtype != dtype:
        raise ValueError(f"b has dtype {b.dtype}, but a has {dtype}; pass both in the same dtype.")
    if out is not None:
        runtime.require_tensor("out", out, 2)
        if tuple(out.shape) != (m, n) or out.dtype != dtype:
            raise ValueError(f"out must be a ({m}, {n}) {dtype} tensor, got {tuple(out.shape)} {out.dtype}.")
    bm, bn, bk = _block("block_m", block_m), _block("block_n", block_n), _block("block_k", block_k)
    launch = {}
    if num_warps is not None:
        launch["num_warps"] = _block_count("num_warps", num_warps)
    if num_stages is not None:
        launch["num_stages"] = runtime.positive_int("num_stages", num_stages)
    allow_tf32 = runtime.strict_bool("allow_tf32", allow_tf32)
    if max(a.numel(), b.numel(), m * n) >= 2**31:  # the kernel's offsets are 32-bit integers
        raise ValueError(f"a, b and out must each have fewer than 2**31 elements, got {m} x {k} @ {k} x {n}.")
    if out is None:
        out = new_output(m, n, dtype=dtype, device=a.device)
    if m == 0 or n == 0:
        return out
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    matmul_fixed_tile_kernel[grid](
        a,
        b,
        out,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        out.stride(0),
        out.stride(1),
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        PRECISION=runtime.dot_precision(dtype, allow_tf32),
        **launch,
    )
    return out


TRITON_GPU_CONFIG = dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3)
"""The fixed tile on the GPU: the first configuration in the autotuning list of Triton's matmul tutorial. With all
three stages buffered its shared memory is 3 x (128x64 + 64x256) x 2 bytes = 144 KB, more than half an SM's 228 KB:
one program per SM, so one tile per SM per wave (the results record ``shared_bytes`` to check it)."""

TRITON_CPU_CONFIG = dict(block_m=16, block_n=32, block_k=16)
