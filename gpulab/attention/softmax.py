"""Lesson 4, step 2: softmax three ways in PyTorch, and online softmax in Triton for rows too long for registers.

What you will learn:
- *naive* ``exp(x) / sum(exp(x))`` overflows as soon as a logit passes ~88 (fp32);
- *safe*: subtract the row max first, ``exp(x - m) / sum(exp(x - m))``: same result, never overflows, but needs the
  max before the sum (three passes over the row);
- *online* (Milakov & Gimelshein, 2018): one pass keeps a running max ``m`` and a running sum ``l`` of
  ``exp(x - m)``; when a new block raises the max from ``m`` to ``m'``, the old sum is rescaled by ``exp(m - m')``:

      m' = max(m, max_j x_j)        l' = l * exp(m - m') + sum_j exp(x_j - m')

  and a second pass writes ``exp(x - m) / l``.

The Triton kernel, :func:`online_softmax_kernel`, runs the online algorithm on rows that do not fit in one program's
registers:

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
import triton
import triton.language as tl

from gpulab import check, hardware, runtime
from gpulab.triton_ops import LOG2E

__all__ = ["softmax_naive", "softmax_safe", "softmax_online", "online_softmax_kernel", "online_softmax"]


def _require_logits(x) -> torch.Tensor:
    runtime.require_tensor("x", x, device_check=False)
    if x.dim() == 0 or not x.is_floating_point():
        raise ValueError(
            f"x must be a floating-point tensor with at least one dimension (softmax runs over the last one), "
            f"got {x.dtype} of shape {list(x.shape)}."
        )
    return x


# ----------------------------------------------------------------------------------------------------------------
# softmax three ways in PyTorch (over the last dimension)


def softmax_naive(x: torch.Tensor) -> torch.Tensor:
    """``exp(x) / sum(exp(x))``: the textbook formula. Overflows to inf/NaN for logits above ~88 in fp32."""
    _require_logits(x)
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)


def softmax_safe(x: torch.Tensor) -> torch.Tensor:
    """Subtract the row max first: pass 1 the max, pass 2 the sum, pass 3 the output. A row of all -inf gives 0; rows
    of length 0 give an empty result, as the other two do."""
    _require_logits(x)
    m = x.amax(-1, keepdim=True) if x.shape[-1] else x.new_zeros(x.shape[:-1] + (1,))  # amax refuses empty rows
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # an all -inf row: exp(-inf) = 0, not NaN
    e = torch.exp(x - m)
    l = e.sum(-1, keepdim=True)
    return e / torch.where(l > 0, l, torch.ones_like(l))


def _online_stats(x: torch.Tensor, block: int):
    """Running max and sum over blocks of the last dimension (the online algorithm's single pass)."""
    m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype, device=x.device)
    l = torch.zeros_like(m)
    for start in range(0, x.shape[-1], block):
        xb = x[..., start : start + block]
        m_new = torch.maximum(m, xb.amax(-1, keepdim=True))
        m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        l = l * torch.exp(m - m_safe) + torch.exp(xb - m_safe).sum(-1, keepdim=True)  # rescale the old sum
        m = m_new
    return m, l


def softmax_online(x: torch.Tensor, block: int = 1) -> torch.Tensor:
    """Online softmax: one pass for the running max and sum (``block`` elements at a time), one to write the output.

    ``block=1`` is the algorithm exactly as Milakov & Gimelshein write it, one element at a time.
    """
    _require_logits(x)
    block = runtime.positive_int("block", block)
    m, l = _online_stats(x, block)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    return torch.exp(x - m) / torch.where(l > 0, l, torch.ones_like(l))


# ----------------------------------------------------------------------------------------------------------------
# online softmax in Triton


@triton.jit
def online_softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    """y[row] = softmax(x[row]) for one row of a contiguous [rows, n_cols] matrix, in two passes over the row."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    lanes = tl.arange(0, BLOCK)

    # pass 1: per-lane running max and rescaled running sum (base 2: x2 = x * log2 e)
    m = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + lanes
        x2 = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32) * LOG2E
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
        x2 = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32) * LOG2E
        y = tl.exp2(x2 - m_row) / l_row
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=cols < n_cols)


def online_softmax(x: torch.Tensor, block: int | None = None) -> torch.Tensor:
    """Softmax over the last dimension of ``x`` (any rank, any length) with :func:`online_softmax_kernel`.

    Returns a new tensor of ``x``'s shape and dtype. ``block`` (a power of two) is how many elements a program
    handles per step; default 1024 on a GPU, 256 in the interpreter. A row of all -inf gives NaN, like
    ``torch.softmax``.
    """
    runtime.require_tensor("x", x)
    hardware.require_dtype("x", x.dtype, allowed=(torch.float32, torch.float16, torch.bfloat16))
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension; softmax runs over the last one.")
    if block is None:
        block = runtime.pick(cpu=256, gpu=1024)
    block = runtime.positive_int("block", block)
    if block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block}; use {runtime.next_power_of_2(block)}.")
    x2 = x.contiguous().view(-1, x.shape[-1]) if x.numel() else x.reshape(-1, max(x.shape[-1], 1))
    y = check.new_output(x2.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return y.view(x.shape)
    online_softmax_kernel[(x2.shape[0],)](x2, y, x2.shape[1], BLOCK=block, num_warps=4 if block <= 1024 else 8)
    return y.view(x.shape)
