"""Lesson 5: the fused RNN forward, one persistent Triton kernel for the whole sequence (FlashRNN-style).

What you will learn:

- **R stays on chip.** One program per (head n, batch tile) loads its head's recurrent weights, G_r blocks of
  DH x DH, into registers *once*, then runs all T steps. The ``alternating`` backend reads R from memory at every
  step (T times); here it is read once.
- **The time loop is inside the kernel.** One launch instead of ~2T; the state h (and c) lives in registers in fp32
  from the first step to the last and never makes a round trip through HBM (each h_t is still *written*: it is
  the output).
- **Prefetch.** The loads of step t+1's input projections Wx_{t+1} are issued before step t's products, so their
  memory latency hides behind the step's compute instead of adding to it.
- **Write only what the backward needs.** Besides the outputs (all states), the gate pre-activations (G_b per
  step, in the compute dtype) when a gradient is needed; nothing else.

Per step, for the program's rows (batch tile) of head n (``@`` = ``tl.dot`` on fp32-accumulating tensor cores):

    Ry_g = h_{t-1} @ R[g, n]^T                  g < G_r, [BLOCK_B, DH] x [DH, DH]
    lstm:  (i, f, z, o) = Wx_t + Ry + b;  h_t, c_t = lstm_cell(i, f, z, o, c_{t-1})
    gru:   g = Ry_0 + b_0;  r = Wx_t,0 + Ry_1 + b_1;  z = Wx_t,1 + Ry_2 + b_2;  n = Wx_t,2 + b_3
           h_t = gru_cell(g, r, z, n, h_{t-1})
    elman: g = Wx_t + Ry_0 + b_0;  h_t = elman_cell(g)

The cells are :mod:`gpulab.rnn.cells`' ``@triton.jit`` functions. Batch rows past B and head-dim columns past DH
(when DH is not a power of two >= 16) are masked: R's padding is loaded as zero, so padded columns of h never
reach a real one.
"""

from __future__ import annotations

import torch

from gpulab import runtime

import triton  # isort: skip
import triton.language as tl  # isort: skip

from gpulab.rnn.api import new_output  # noqa: E402
from gpulab.rnn.cells import elman_cell, gru_cell, lstm_cell  # noqa: E402
from gpulab.rnn.functions import get_function  # noqa: E402
from gpulab.rnn.tiling import fused_tiling  # noqa: E402

__all__ = ["fused_forward_kernel", "fused_rnn_forward", "matmul", "load_r"]


@triton.jit
def matmul(a, b, IS_FP32: tl.constexpr, PRECISION: tl.constexpr):
    """a @ b accumulated in fp32; fp32 operands in ``PRECISION`` ('ieee' unless tf32 is allowed)."""
    if IS_FP32:
        return tl.dot(a, b, input_precision=PRECISION)
    else:
        return tl.dot(a, b)


@triton.jit
def load_r(r_tile, r_mask, gate_stride, G_R: tl.constexpr):
    """The G_R (1, 3 or 4) DH x DH blocks of R at ``r_tile`` (+ g * gate_stride); unused ones repeat block 0."""
    r0 = tl.load(r_tile, mask=r_mask, other=0.0)
    r1, r2, r3 = r0, r0, r0
    if G_R > 1:
        r1 = tl.load(r_tile + 1 * gate_stride, mask=r_mask, other=0.0)
        r2 = tl.load(r_tile + 2 * gate_stride, mask=r_mask, other=0.0)
    if G_R > 3:
        r3 = tl.load(r_tile + 3 * gate_stride, mask=r_mask, other=0.0)
    return r0, r1, r2, r3


@triton.jit
def fused_forward_kernel(
    wx_ptr,  # [B, T, G_W, NH, DH]
    r_ptr,  # [G_R, NH, DH, DH], R[g, n, j, k]: unit k of h to unit j of gate g
    b_ptr,  # [G_B, NH, DH]
    s0_ptr,  # [S, B, 1, NH, DH] initial states
    out_ptr,  # [S, B, T, NH, DH] all states (written)
    last_ptr,  # [S, B, 1, NH, DH] last states (written)
    gates_ptr,  # [B, T, G_B, NH, DH] gate pre-activations for the backward (written if SAVE_GATES)
    B,
    T,
    NH,
    state_stride,  # B * T * NH * DH: from h to c in the outputs
    FUNCTION: tl.constexpr,  # 0 lstm, 1 gru, 2 elman (gpulab.rnn.functions)
    G_W: tl.constexpr,
    G_R: tl.constexpr,
    G_B: tl.constexpr,
    DH: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SAVE_GATES: tl.constexpr,
    R_ON_CHIP: tl.constexpr,
    IS_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Program (n, tile): head n, batch rows [tile * BLOCK_B, (tile + 1) * BLOCK_B), all T steps."""
    n = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows < B)[:, None] & (cols < DH)[None, :]
    HD = NH * DH  # elements of one (gate or state) slice of all heads

    # R^T of this head, per gate: rt_g[k, j] = R[g, n, j, k], so that Ry_g = h @ rt_g. Loaded once, into
    # registers (R_ON_CHIP), or for head dims too large for that, re-read every step (it then stays in L1).
    r_tile = r_ptr + n * DH * DH + cols[:, None] + cols[None, :] * DH
    r_mask = (cols < DH)[:, None] & (cols < DH)[None, :]
    if R_ON_CHIP:
        rt0, rt1, rt2, rt3 = load_r(r_tile, r_mask, NH * DH * DH, G_R)
    # biases, fp32 [1, BLOCK_D] rows broadcast over the batch tile
    b_row = b_ptr + n * DH + cols[None, :]
    b_mask = (cols < DH)[None, :]
    b0 = tl.load(b_row, mask=b_mask, other=0.0).to(tl.float32)
    b1 = b0
    b2 = b0
    b3 = b0
    if G_B > 1:
        b1 = tl.load(b_row + 1 * HD, mask=b_mask, other=0.0).to(tl.float32)
        b2 = tl.load(b_row + 2 * HD, mask=b_mask, other=0.0).to(tl.float32)
        b3 = tl.load(b_row + 3 * HD, mask=b_mask, other=0.0).to(tl.float32)

    # states, fp32 in registers for the whole sequence
    s_off = rows[:, None] * HD + n * DH + cols[None, :]  # [S, B, 1, NH, DH] without the state offset
    h = tl.load(s0_ptr + s_off, mask=mask, other=0.0).to(tl.float32)
    c = h
    if FUNCTION == 0:
        c = tl.load(s0_ptr + B * HD + s_off, mask=mask, other=0.0).to(tl.float32)

    # row pointers of step 0; step t adds t * (row stride of T)
    wx_rows = wx_ptr + rows[:, None].to(tl.int64) * T * G_W * HD + n * DH + cols[None, :]
    out_rows = out_ptr + rows[:, None].to(tl.int64) * T * HD + n * DH + cols[None, :]
    gate_rows = gates_ptr + rows[:, None].to(tl.int64) * T * G_B * HD + n * DH + cols[None, :]

    # prefetch step 0's Wx
    x0 = tl.load(wx_rows, mask=mask, other=0.0)
    x1 = x0
    x2 = x0
    x3 = x0
    if G_W > 1:
        x1 = tl.load(wx_rows + 1 * HD, mask=mask, other=0.0)
        x2 = tl.load(wx_rows + 2 * HD, mask=mask, other=0.0)
    if G_W > 3:
        x3 = tl.load(wx_rows + 3 * HD, mask=mask, other=0.0)

    for t in range(T):
        # this step's inputs are the prefetched ones; issue the loads of step t+1 now (masked off after the end)
        w0, w1, w2, w3 = x0.to(tl.float32), x1.to(tl.float32), x2.to(tl.float32), x3.to(tl.float32)
        nxt = wx_rows + (t + 1) * G_W * HD
        nmask = mask & (t + 1 < T)
        x0 = tl.load(nxt, mask=nmask, other=0.0)
        if G_W > 1:
            x1 = tl.load(nxt + 1 * HD, mask=nmask, other=0.0)
            x2 = tl.load(nxt + 2 * HD, mask=nmask, other=0.0)
        if G_W > 3:
            x3 = tl.load(nxt + 3 * HD, mask=nmask, other=0.0)

        # the recurrent products: the only part of a step that mixes units
        if not R_ON_CHIP:
            rt0, rt1, rt2, rt3 = load_r(r_tile, r_mask, NH * DH * DH, G_R)
        hq = h.to(r_ptr.dtype.element_ty)
        ry0 = matmul(hq, rt0, IS_FP32, PRECISION)
        if FUNCTION == 0:  # lstm: i, f, z, o
            g0 = w0 + ry0 + b0
            g1 = w1 + matmul(hq, rt1, IS_FP32, PRECISION) + b1
            g2 = w2 + matmul(hq, rt2, IS_FP32, PRECISION) + b2
            g3 = w3 + matmul(hq, rt3, IS_FP32, PRECISION) + b3
            h, c = lstm_cell(g0, g1, g2, g3, c)
        elif FUNCTION == 1:  # gru: g (recurrent only), r, z, n (input only)
            g0 = ry0 + b0
            g1 = w0 + matmul(hq, rt1, IS_FP32, PRECISION) + b1
            g2 = w1 + matmul(hq, rt2, IS_FP32, PRECISION) + b2
            g3 = w2 + b3
            h = gru_cell(g0, g1, g2, g3, h)
        else:  # elman
            g0 = w0 + ry0 + b0
            g1, g2, g3 = g0, g0, g0
            h = elman_cell(g0)

        out_t = out_rows + t * HD
        tl.store(out_t, h.to(out_ptr.dtype.element_ty), mask=mask)
        if FUNCTION == 0:
            tl.store(out_t + state_stride, c.to(out_ptr.dtype.element_ty), mask=mask)
        if SAVE_GATES:
            gt = gate_rows + t * G_B * HD
            tl.store(gt, g0.to(gates_ptr.dtype.element_ty), mask=mask)
            if G_B > 1:
                tl.store(gt + 1 * HD, g1.to(gates_ptr.dtype.element_ty), mask=mask)
                tl.store(gt + 2 * HD, g2.to(gates_ptr.dtype.element_ty), mask=mask)
                tl.store(gt + 3 * HD, g3.to(gates_ptr.dtype.element_ty), mask=mask)

    tl.store(last_ptr + s_off, h.to(last_ptr.dtype.element_ty), mask=mask)
    if FUNCTION == 0:
        tl.store(last_ptr + B * HD + s_off, c.to(last_ptr.dtype.element_ty), mask=mask)


def fused_rnn_forward(Wx, R, b, states, function="lstm", save_gates=True, tiling=None):
    """Launch :func:`fused_forward_kernel`; returns ``(states_all, states_last, gates or None)``.

    Inputs as :func:`gpulab.rnn.flashrnn` takes them, already validated and in one compute dtype (contiguous copies
    are made if needed). ``gates`` [B, T, G_b, NH, DH] are the pre-activations (bias included), for the backward.
    ``tiling``: a :class:`gpulab.rnn.tiling.FusedTiling` (default: :func:`gpulab.rnn.tiling.fused_tiling`).
    """
    fn = get_function(function)
    Wx, R, b, states = (t.contiguous() for t in (Wx, R, b, states))
    B, T, _, NH, DH = Wx.shape
    cfg = tiling or fused_tiling(B, NH, DH, fn.name, Wx.dtype, direction="forward")
    out = new_output(fn.states, B, T, NH, DH, dtype=Wx.dtype, device=Wx.device)
    last = new_output(fn.states, B, 1, NH, DH, dtype=Wx.dtype, device=Wx.device)
    gates = new_output(B, T, fn.gates_b, NH, DH, dtype=Wx.dtype, device=Wx.device) if save_gates else None
    grid = (NH, triton.cdiv(B, cfg.block_b))
    fused_forward_kernel[grid](
        Wx, R, b, states, out, last, gates if save_gates else out,
        B, T, NH, B * T * NH * DH,
        FUNCTION=fn.code, G_W=fn.gates_w, G_R=fn.gates_r, G_B=fn.gates_b, DH=DH,
        BLOCK_B=cfg.block_b, BLOCK_D=cfg.block_d, SAVE_GATES=save_gates, R_ON_CHIP=cfg.r_on_chip,
        IS_FP32=Wx.dtype == torch.float32, PRECISION=runtime.dot_precision(Wx.dtype),
        **cfg.launch(),
    )  # fmt: skip
    return out, last, gates
