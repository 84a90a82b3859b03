"""v1: the persistent LSTM forward, one product per gate.

One program per (head, batch tile) runs all T steps. The head's R stays on chip for the whole sequence as four
tiles R_g^T [DH, DH] (one per gate), the states h and c stay in registers; a step loads the four gates of Wx_t,
makes four products ``h @ R_g^T``, applies the cell and stores h_t and c_t. What v2 changes: one product for all
gates.
"""

from __future__ import annotations

import triton
import triton.language as tl

from gpulab.rnn.cells import lstm_activations
from gpulab.triton_ops import dot, tanh

__all__ = ["v1_kernel"]


@triton.jit
def v1_kernel(wx_ptr, r_ptr, b_ptr, s0_ptr, out_ptr, last_ptr, B, T, NH,
              DH: tl.constexpr, BLOCK_B: tl.constexpr, IS_FP32: tl.constexpr, PRECISION: tl.constexpr):  # fmt: skip
    """Program (n, tile): head n, batch rows [tile * BLOCK_B, (tile + 1) * BLOCK_B).

    wx [B, T, 4, NH, DH], r [4, NH, DH, DH] (R[g, n, j, k]: unit k of h to unit j of gate g), b [4, NH, DH],
    s0 [2, B, 1, NH, DH]; writes out [2, B, T, NH, DH] (every h_t and c_t) and last [2, B, 1, NH, DH].
    """
    n = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)  # [BLOCK_B]
    cols = tl.arange(0, DH)  # [DH]
    mask = (rows < B)[:, None] & (cols < DH)[None, :]  # [BLOCK_B, DH]
    HD = NH * DH  # elements of one gate (or state) slice of all heads
    RG = NH * DH * DH  # from one gate's R to the next

    # R_g^T of head n, [DH, DH] each, element [k, j] = R[g, n, j, k]: on chip for all T steps
    rt = r_ptr + n * DH * DH + cols[None, :] * DH + cols[:, None]
    rt_i, rt_f, rt_z, rt_o = tl.load(rt), tl.load(rt + RG), tl.load(rt + 2 * RG), tl.load(rt + 3 * RG)
    bias = b_ptr + n * DH + cols[None, :]  # [1, DH] rows, broadcast over the batch
    b_i, b_f = tl.load(bias).to(tl.float32), tl.load(bias + HD).to(tl.float32)
    b_z, b_o = tl.load(bias + 2 * HD).to(tl.float32), tl.load(bias + 3 * HD).to(tl.float32)

    s_off = rows[:, None] * HD + n * DH + cols[None, :]  # [BLOCK_B, DH] in a [B, 1, NH, DH] state
    h = tl.load(s0_ptr + s_off, mask=mask, other=0.0).to(tl.float32)  # fp32 state in registers
    c = tl.load(s0_ptr + B * HD + s_off, mask=mask, other=0.0).to(tl.float32)
    wx_rows = wx_ptr + rows[:, None].to(tl.int64) * T * 4 * HD + n * DH + cols[None, :]
    out_rows = out_ptr + rows[:, None].to(tl.int64) * T * HD + n * DH + cols[None, :]
    state_stride = B * T * HD  # from h to c in out

    for t in range(T):
        x = wx_rows + t * 4 * HD
        hr = h.to(r_ptr.dtype.element_ty)  # the product's operand in R's dtype
        i = tl.load(x, mask=mask, other=0.0).to(tl.float32) + dot(hr, rt_i, IS_FP32, PRECISION) + b_i
        f = tl.load(x + HD, mask=mask, other=0.0).to(tl.float32) + dot(hr, rt_f, IS_FP32, PRECISION) + b_f
        z = tl.load(x + 2 * HD, mask=mask, other=0.0).to(tl.float32) + dot(hr, rt_z, IS_FP32, PRECISION) + b_z
        o = tl.load(x + 3 * HD, mask=mask, other=0.0).to(tl.float32) + dot(hr, rt_o, IS_FP32, PRECISION) + b_o
        i, f, z, o = lstm_activations(i, f, z, o)
        c = f * c + i * z
        h = o * tanh(c)
        tl.store(out_rows + t * HD, h.to(out_ptr.dtype.element_ty), mask=mask)
        tl.store(out_rows + state_stride + t * HD, c.to(out_ptr.dtype.element_ty), mask=mask)

    tl.store(last_ptr + s_off, h.to(last_ptr.dtype.element_ty), mask=mask)
    tl.store(last_ptr + B * HD + s_off, c.to(last_ptr.dtype.element_ty), mask=mask)
