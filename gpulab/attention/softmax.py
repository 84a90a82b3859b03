"""Lesson 4, step 2 in Triton: online softmax for rows too long to hold in registers.

What you will learn: a safe softmax needs the row max before the sum, so a row that does not fit in one program's
registers is read three times (max, sum, output). The online algorithm (Milakov & Gimelshein, 2018) reads it twice:

- pass 1 streams the row in blocks of BLOCK elements. Each lane keeps its own running max ``m`` and running sum
  ``l`` of ``exp(x - m)``; when a new element raises a lane's max from ``m`` to ``m'`` its sum is rescaled by
  ``exp(m - m')``. At the end the lanes are merged the same way: ``M = max(m)``, ``L = sum(l * exp(m - M))``;
- pass 2 streams the row again and writes ``exp(x - M) / L``.

Memory traffic: 2 reads + 1 write per element instead of 3 reads + 1 write. This is the softmax that
FlashAttention runs along each row of S, one key block at a time. Computed in fp32 whatever the storage dtype;
``exp`` is taken as ``exp2(x * log2 e)``.
"""

from __future__ import annotations

import torch

from gpulab import dtypes, runtime

import triton  # isort: skip
import triton.language as tl  # isort: skip

__all__ = ["online_softmax_kernel", "online_softmax"]


@triton.jit
def online_softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    """y[row] = softmax(x[row]) for one row of a contiguous [rows, n_cols] matrix, in two passes over the row."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    lanes = tl.arange(0, BLOCK)
    log2e = 1.4426950408889634

    # pass 1: per-lane running max and rescaled running sum (base 2: x2 = x * log2 e)
    m = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + lanes
        x2 = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32) * log2e
        m_new = tl.maximum(m, x2)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # nothing seen yet in this lane: no -inf - -inf
        l = l * tl.exp2(m - m_use) + tl.exp2(x2 - m_use)
        m = m_new

    # merge the lanes: one max and one sum for the row
    m_row = tl.max(m, 0)
    m_row = tl.where(m_row == float("-inf"), 0.0, m_row)
    l_row = tl.sum(l * tl.exp2(m - m_row), 0)

    # pass 2: normalise and write
    for start in range(0, n_cols, BLOCK):
        cols = start + lanes
        x2 = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32) * log2e
        y = tl.exp2(x2 - m_row) / l_row
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=cols < n_cols)


def online_softmax(x: torch.Tensor, block: int | None = None) -> torch.Tensor:
    """Softmax over the last dimension of ``x`` (any rank, any length) with :func:`online_softmax_kernel`.

    Returns a new tensor of ``x``'s shape and dtype. ``block`` (a power of two) is how many elements a program
    handles per step; default 1024 on a GPU, 256 in the interpreter. A row of all -inf gives NaN, like
    ``torch.softmax``.
    """
    runtime.require_tensor("x", x)
    dtypes.require_dtype("x", x.dtype, allowed=(torch.float32, torch.float16, torch.bfloat16))
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension; softmax runs over the last one.")
    block = block or runtime.pick(cpu=256, gpu=1024)
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block}.")
    from gpulab.check import poisoned

    x2 = x.contiguous().view(-1, x.shape[-1]) if x.numel() else x.reshape(-1, max(x.shape[-1], 1))
    y = poisoned(x2.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return y.view(x.shape)
    online_softmax_kernel[(x2.shape[0],)](x2, y, x2.shape[1], BLOCK=block, num_warps=4 if block <= 1024 else 8)
    return y.view(x.shape)
