"""v3: the input of a step is loaded two steps ahead, and the load really does not wait.

v2 loads Wx_t at the start of step t, so every step begins with a trip to memory. v3 issues the load of Wx_{t+2}
during step t. Two details decide whether the compiled loop waits for it anyway: the loop is unrolled by two, each
step of a pair loading into its own variable (written as a rotation, ``x = x_next; x_next = load(...)``, the back
edge copies the fresh registers and the copy waits for the load); and 16-bit data is loaded and carried as 32-bit
words of two values (carried as 16-bit elements, the compiler splits each word in the step of the load, which waits
for it). What v4 changes: one-instruction activations.
"""

from __future__ import annotations

import triton
import triton.language as tl

from gpulab.rnn.fused.tiles import gate_columns, load_r, lstm_step_all_gates
from gpulab.triton_ops import loaded_f32, word_pointer

__all__ = ["v3_kernel"]


@triton.jit
def _step(t, t_load, h, c, x, rt, bias, wx_rows, wx_mask, hc_rows, hc_mask, HD, HDP, IS_FP32: tl.constexpr,
          PRECISION: tl.constexpr, BLOCK_B: tl.constexpr, DH: tl.constexpr, P: tl.constexpr):  # fmt: skip
    """Step t with its prefetched input x (words when P = 2); issues the load of step ``t_load`` into x's registers
    once x is unpacked, and returns (h_t, c_t, the new x)."""
    xf = loaded_f32(x, rt.dtype, P, BLOCK_B, 4 * DH)  # [BLOCK_B, 4 DH] fp32
    x = tl.load(wx_rows + t_load * 4 * HDP, mask=wx_mask, other=0)  # two steps ahead
    h, c = lstm_step_all_gates(h, c, xf, rt, bias, IS_FP32, PRECISION, BLOCK_B, DH)
    tl.store(hc_rows + t * HD, tl.join(h, c).to(hc_rows.dtype.element_ty), mask=hc_mask)
    return h, c, x


@triton.jit
def v3_kernel(wx_ptr, r_ptr, b_ptr, s0_ptr, out_ptr, last_ptr, B, T, NH,
              DH: tl.constexpr, BLOCK_B: tl.constexpr, IS_FP32: tl.constexpr, PRECISION: tl.constexpr):  # fmt: skip
    """Program (n, tile): head n, batch rows [tile * BLOCK_B, (tile + 1) * BLOCK_B); layouts as v1's."""
    n = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.arange(0, DH)
    mask = (rows < B)[:, None] & (cols < DH)[None, :]
    HD = NH * DH

    rt = load_r(r_ptr, n, NH, DH, DH, 4, 4, True)  # R_all^T [DH, 4 DH]
    slot, j = gate_columns(4, DH)
    bias = tl.load(b_ptr + slot * HD + n * DH + j).to(tl.float32)[None, :]  # [1, 4 DH]
    # Wx in units of P elements: P = 2 loads two 16-bit values as one 32-bit word
    P: tl.constexpr = 1 if IS_FP32 else 2
    pslot, pj = gate_columns(4, DH // P)
    HDP = NH * (DH // P)
    wx_rows = (word_pointer(wx_ptr, P) + rows[:, None].to(tl.int64) * T * 4 * HDP
               + (pslot * HDP + n * (DH // P) + pj)[None, :])  # fmt: skip
    wx_mask = (rows < B)[:, None]

    s_off = rows[:, None] * HD + n * DH + cols[None, :]
    h = tl.load(s0_ptr + s_off, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(s0_ptr + B * HD + s_off, mask=mask, other=0.0).to(tl.float32)
    state = tl.arange(0, 2)
    out_rows = out_ptr + rows[:, None].to(tl.int64) * T * HD + n * DH + cols[None, :]
    hc_rows = out_rows[:, :, None] + (state * B * T * HD)[None, None, :]
    hc_mask = mask[:, :, None] & (state < 2)[None, None, :]

    # unrolled by two: steps t and t + 1 each use their own prefetched input (x_a, x_b) and load the input of two
    # steps later into it (clamped at T - 1: the last loads are harmless repeats)
    x_a = tl.load(wx_rows, mask=wx_mask, other=0)
    x_b = tl.load(wx_rows + tl.minimum(1, T - 1) * 4 * HDP, mask=wx_mask, other=0)
    for t in range(0, T - 1, 2):
        h, c, x_a = _step(t, tl.minimum(t + 2, T - 1), h, c, x_a, rt, bias, wx_rows, wx_mask, hc_rows, hc_mask, HD,
                          HDP, IS_FP32, PRECISION, BLOCK_B, DH, P)  # fmt: skip
        h, c, x_b = _step(t + 1, tl.minimum(t + 3, T - 1), h, c, x_b, rt, bias, wx_rows, wx_mask, hc_rows, hc_mask,
                          HD, HDP, IS_FP32, PRECISION, BLOCK_B, DH, P)  # fmt: skip
    if T % 2 == 1:
        h, c, x_a = _step(T - 1, T - 1, h, c, x_a, rt, bias, wx_rows, wx_mask, hc_rows, hc_mask, HD, HDP, IS_FP32,
                          PRECISION, BLOCK_B, DH, P)  # fmt: skip

    tl.store(last_ptr + s_off, h.to(last_ptr.dtype.element_ty), mask=mask)
    tl.store(last_ptr + B * HD + s_off, c.to(last_ptr.dtype.element_ty), mask=mask)
