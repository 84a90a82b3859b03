"""v2: all gates in one tile, one product per step.

R of all four gates side by side as one tile R_all^T [DH, 4 DH]; a step loads Wx_t as one all-gates tile
[BLOCK_B, 4 DH], makes ONE product ``h @ R_all^T`` [BLOCK_B, 4 DH], takes the gates apart (free in the tensor
cores' output layout: a thread already holds all four gates of its units) and stores h_t and c_t as one tile.
Fewer, larger tiles mean fewer layout round trips through shared memory per step. What v3 changes: the input of a
step is loaded two steps ahead.
"""

from __future__ import annotations

import triton
import triton.language as tl

from gpulab.rnn.fused.tiles import gate_columns, load_r, lstm_step_all_gates

__all__ = ["v2_kernel"]


@triton.jit
def v2_kernel(wx_ptr, r_ptr, b_ptr, s0_ptr, out_ptr, last_ptr, B, T, NH,
              DH: tl.constexpr, BLOCK_B: tl.constexpr, IS_FP32: tl.constexpr, PRECISION: tl.constexpr):  # fmt: skip
    """Program (n, tile): head n, batch rows [tile * BLOCK_B, (tile + 1) * BLOCK_B); layouts as v1's."""
    n = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)  # [BLOCK_B]
    cols = tl.arange(0, DH)  # [DH]
    mask = (rows < B)[:, None] & (cols < DH)[None, :]  # [BLOCK_B, DH]
    HD = NH * DH

    rt = load_r(r_ptr, n, NH, DH, DH, 4, 4, True)  # R_all^T [DH, 4 DH], element [k, g DH + j] = R[g, n, j, k]
    slot, j = gate_columns(4, DH)  # [4 DH]: the gate and the unit of every all-gates column
    bias = tl.load(b_ptr + slot * HD + n * DH + j).to(tl.float32)[None, :]  # [1, 4 DH]
    wx_rows = wx_ptr + rows[:, None].to(tl.int64) * T * 4 * HD + (slot * HD + n * DH + j)[None, :]  # [BLOCK_B, 4 DH]
    wx_mask = (rows < B)[:, None]

    s_off = rows[:, None] * HD + n * DH + cols[None, :]
    h = tl.load(s0_ptr + s_off, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(s0_ptr + B * HD + s_off, mask=mask, other=0.0).to(tl.float32)
    # h_t and c_t stored as one [BLOCK_B, DH, 2] tile: one layout round trip, not two
    state = tl.arange(0, 2)
    out_rows = out_ptr + rows[:, None].to(tl.int64) * T * HD + n * DH + cols[None, :]
    hc_rows = out_rows[:, :, None] + (state * B * T * HD)[None, None, :]
    hc_mask = mask[:, :, None] & (state < 2)[None, None, :]

    for t in range(T):
        x = tl.load(wx_rows + t * 4 * HD, mask=wx_mask, other=0.0).to(tl.float32)
        h, c = lstm_step_all_gates(h, c, x, rt, bias, IS_FP32, PRECISION, BLOCK_B, DH)
        tl.store(hc_rows + t * HD, tl.join(h, c).to(out_ptr.dtype.element_ty), mask=hc_mask)

    tl.store(last_ptr + s_off, h.to(last_ptr.dtype.element_ty), mask=mask)
    tl.store(last_ptr + B * HD + s_off, c.to(last_ptr.dtype.element_ty), mask=mask)
