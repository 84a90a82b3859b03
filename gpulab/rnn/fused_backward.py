"""Lesson 5: the fused RNN backward, one persistent reverse-time Triton kernel, then three big products.

What you will learn:

- **The backward is a recurrence too, run backwards in time.** The gradient reaching h_{t-1} depends on the gate
  gradients of step t: ``dh_{t-1} = sum_g dG_{t,g} @ R[g]`` (+ the cell's direct path). So one program per
  (head, batch tile) walks t = T-1 ... 0 carrying dh and dc in fp32 registers, with R (this time *not*
  transposed) loaded once, exactly like the forward.
- **Only the recurrence is sequential.** The kernel writes the gate gradients dG [B, T, G_b, NH, DH] and stops
  there. Everything else is one parallel operation over all steps at once:

      dR[g, n] = sum_{b, t} dG[b, t, g, n]^T h_{t-1}[b, n]   one batched product (K = B*T) per head and gate
      db       = sum_{b, t} dG[b, t]                            one reduction
      dWx      = dG (its input gates)                           no work at all: the same tensor

  Accumulating dR inside the kernel would need another G_r * DH * DH fp32 values per program on chip: at DH = 128
  that is 256 KB, the whole register file of an SM, on top of R itself (see :mod:`gpulab.rnn.tiling`).
- **Recompute, don't store.** The forward saved the gate pre-activations; the cells' backward functions
  (:mod:`gpulab.rnn.cells`) recompute sigmoid, tanh and c_t from them, which is cheaper than storing more.

Per step t (all fp32; the cell backward functions hold the math):

    dh_t = dL/dh_t (from the outputs) + dh carried from step t+1
    lstm:  dc_t = dL/dc_t + dc carried;  (di, df, dz, do), dc = lstm_cell_backward(i, f, z, o, c_{t-1}, dh_t, dc_t)
           dh = di @ R_0 + df @ R_1 + dz @ R_2 + do @ R_3
    gru:   (dg, dr, dz, dn), direct = gru_cell_backward(g, r, z, n, h_{t-1}, dh_t);  dh = direct + dg @ R_0 + ...
    elman: dg = elman_cell_backward(g, dh_t);  dh = dg @ R_0
"""

from __future__ import annotations

import torch

from gpulab import runtime

import triton  # isort: skip
import triton.language as tl  # isort: skip

from gpulab.rnn.api import new_output  # noqa: E402
from gpulab.rnn.cells import elman_cell_backward, gru_cell_backward, lstm_cell_backward  # noqa: E402
from gpulab.rnn.functions import get_function  # noqa: E402
from gpulab.rnn.fused_forward import load_r, matmul  # noqa: E402
from gpulab.rnn.tiling import fused_tiling  # noqa: E402

__all__ = ["fused_backward_kernel", "fused_rnn_backward", "parameter_grads", "previous_h"]


@triton.jit
def _step_inputs(gate_rows, dout_rows, out_rows, s0_rows, t, mask, HD, state_stride, s0_stride,
                 G_B: tl.constexpr, FUNCTION: tl.constexpr):  # fmt: skip
    """The loads of step t (nothing when t < 0): saved pre-activations (up to 4), dL/dh_t, dL/dc_t and the previous
    state the cell's backward needs (c_{t-1} for the LSTM, h_{t-1} for the GRU; from the initial states at t = 0)."""
    valid = mask & (t >= 0)
    g = gate_rows + t * G_B * HD
    g0 = tl.load(g, mask=valid, other=0.0).to(tl.float32)
    g1, g2, g3 = g0, g0, g0
    if G_B > 1:
        g1 = tl.load(g + 1 * HD, mask=valid, other=0.0).to(tl.float32)
        g2 = tl.load(g + 2 * HD, mask=valid, other=0.0).to(tl.float32)
        g3 = tl.load(g + 3 * HD, mask=valid, other=0.0).to(tl.float32)
    dh_out = tl.load(dout_rows + t * HD, mask=valid, other=0.0).to(tl.float32)
    dc_out = dh_out
    prev = dh_out
    if FUNCTION == 0:
        dc_out = tl.load(dout_rows + state_stride + t * HD, mask=valid, other=0.0).to(tl.float32)
        prev_ptr = tl.where(t > 0, out_rows + state_stride + (t - 1) * HD, s0_rows + s0_stride)
        prev = tl.load(prev_ptr, mask=valid, other=0.0).to(tl.float32)
    if FUNCTION == 1:
        prev_ptr = tl.where(t > 0, out_rows + (t - 1) * HD, s0_rows)
        prev = tl.load(prev_ptr, mask=valid, other=0.0).to(tl.float32)
    return g0, g1, g2, g3, dh_out, dc_out, prev


@triton.jit
def fused_backward_kernel(
    gates_ptr,  # [B, T, G_B, NH, DH] pre-activations saved by the forward
    out_ptr,  # [S, B, T, NH, DH] the forward's states
    s0_ptr,  # [S, B, 1, NH, DH] initial states
    r_ptr,  # [G_R, NH, DH, DH]
    dout_ptr,  # [S, B, T, NH, DH] dL/d(states), the last states' gradient already added at T-1
    dg_ptr,  # [B, T, G_B, NH, DH] gate gradients (written)
    ds0_ptr,  # [S, B, 1, NH, DH] dL/d(initial states) (written)
    B,
    T,
    NH,
    state_stride,  # B * T * NH * DH
    FUNCTION: tl.constexpr,
    G_R: tl.constexpr,
    G_B: tl.constexpr,
    DH: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_D: tl.constexpr,
    R_ON_CHIP: tl.constexpr,
    IS_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Program (n, tile): head n, one batch tile, steps T-1 down to 0."""
    n = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows < B)[:, None] & (cols < DH)[None, :]
    HD = NH * DH
    s0_stride = B * HD

    # R of this head per gate: r_g[j, k] = R[g, n, j, k], so that dh_{t-1} += dG_g @ r_g. Loaded once into
    # registers (R_ON_CHIP), or re-read every step for large head dims (from L1).
    r_tile = r_ptr + n * DH * DH + cols[:, None] * DH + cols[None, :]
    r_mask = (cols < DH)[:, None] & (cols < DH)[None, :]
    if R_ON_CHIP:
        r0, r1, r2, r3 = load_r(r_tile, r_mask, NH * DH * DH, G_R)

    RDT = r_ptr.dtype.element_ty  # the products' operand dtype
    head = n * DH + cols[None, :]
    gate_rows = gates_ptr + rows[:, None].to(tl.int64) * T * G_B * HD + head
    dg_rows = dg_ptr + rows[:, None].to(tl.int64) * T * G_B * HD + head
    out_rows = out_ptr + rows[:, None].to(tl.int64) * T * HD + head
    dout_rows = dout_ptr + rows[:, None].to(tl.int64) * T * HD + head
    s0_rows = s0_ptr + rows[:, None] * HD + head

    dh = tl.zeros([BLOCK_B, BLOCK_D], dtype=tl.float32)  # dL/dh_t through step t+1 (R and the cell's direct path)
    dc = tl.zeros([BLOCK_B, BLOCK_D], dtype=tl.float32)  # dL/dc_t through step t+1
    nxt = _step_inputs(gate_rows, dout_rows, out_rows, s0_rows, T - 1, mask, HD, state_stride, s0_stride,
                       G_B, FUNCTION)  # fmt: skip
    for tt in range(T):
        t = T - 1 - tt
        g0, g1, g2, g3, dh_out, dc_out, prev = nxt
        nxt = _step_inputs(
            gate_rows, dout_rows, out_rows, s0_rows, t - 1, mask, HD, state_stride, s0_stride, G_B, FUNCTION
        )  # fmt: skip (prefetch step t-1 while step t computes)
        dh = dh + dh_out
        if not R_ON_CHIP:
            r0, r1, r2, r3 = load_r(r_tile, r_mask, NH * DH * DH, G_R)
        if FUNCTION == 0:  # lstm
            d0, d1, d2, d3, dc = lstm_cell_backward(g0, g1, g2, g3, prev, dh, dc + dc_out)
            dh = matmul(d0.to(RDT), r0, IS_FP32, PRECISION) + matmul(d1.to(RDT), r1, IS_FP32, PRECISION)
            dh += matmul(d2.to(RDT), r2, IS_FP32, PRECISION) + matmul(d3.to(RDT), r3, IS_FP32, PRECISION)
        elif FUNCTION == 1:  # gru: the recurrent gates are (g, r, z), n takes no R
            d0, d1, d2, d3, direct = gru_cell_backward(g0, g1, g2, g3, prev, dh)
            dh = direct + matmul(d0.to(RDT), r0, IS_FP32, PRECISION)
            dh += matmul(d1.to(RDT), r1, IS_FP32, PRECISION) + matmul(d2.to(RDT), r2, IS_FP32, PRECISION)
        else:  # elman
            d0 = elman_cell_backward(g0, dh)
            d1, d2, d3 = d0, d0, d0
            dh = matmul(d0.to(RDT), r0, IS_FP32, PRECISION)
        dgt = dg_rows + t * G_B * HD
        tl.store(dgt, d0.to(dg_ptr.dtype.element_ty), mask=mask)
        if G_B > 1:
            tl.store(dgt + 1 * HD, d1.to(dg_ptr.dtype.element_ty), mask=mask)
            tl.store(dgt + 2 * HD, d2.to(dg_ptr.dtype.element_ty), mask=mask)
            tl.store(dgt + 3 * HD, d3.to(dg_ptr.dtype.element_ty), mask=mask)

    ds0_rows = ds0_ptr + rows[:, None] * HD + head
    tl.store(ds0_rows, dh.to(ds0_ptr.dtype.element_ty), mask=mask)
    if FUNCTION == 0:
        tl.store(ds0_rows + s0_stride, dc.to(ds0_ptr.dtype.element_ty), mask=mask)


def previous_h(out, states):
    """h_{t-1} for every step, [B, T, NH, DH]: the initial h, then the outputs h_0 .. h_{T-2}."""
    return torch.cat((states[0], out[0, :, :-1]), dim=1)


def parameter_grads(dG, out, states, function):
    """(dWx, dR, db) from the gate gradients dG [B, T, G_b, NH, DH], in dG's dtype.

    dR[g, n, j, k] = sum_{b,t} dG[b, t, g, n, j] h_{t-1}[b, n, k]: one batched product over heads and gates with
    K = B*T (fp32 accumulation); db = the sum of dG over batch and time; dWx = the input gates of dG, no copy.
    """
    fn = get_function(function)
    B, T, _, NH, DH = dG.shape
    h_prev = previous_h(out, states).reshape(B * T, NH, DH).transpose(0, 1)  # [NH, B*T, DH]
    dgr = dG[:, :, fn.r_gates].reshape(B * T, fn.gates_r * NH, DH).permute(1, 2, 0)  # [(G, NH), DH_j, B*T]
    dgr = dgr.reshape(fn.gates_r, NH, DH, B * T)
    dR = torch.matmul(dgr, h_prev.unsqueeze(0))  # [G, NH, DH_j, DH_k]
    db = dG.sum(dim=(0, 1), dtype=torch.float32).to(dG.dtype)
    return dG[:, :, fn.w_gates], dR, db


def fused_rnn_backward(d_out, gates, out, states, R, function="lstm", tiling=None):
    """Launch :func:`fused_backward_kernel`: returns ``(dG [B, T, G_b, NH, DH], d_states [S, B, 1, NH, DH])``.

    ``d_out`` [S, B, T, NH, DH] is dL/d(all states) with dL/d(last states) already added at the last step.
    """
    fn = get_function(function)
    S, B, T, NH, DH = out.shape
    d_out, gates, out, states, R = (t.contiguous() for t in (d_out, gates, out, states, R))
    cfg = tiling or fused_tiling(B, NH, DH, fn.name, out.dtype, direction="backward")
    dG = new_output(B, T, fn.gates_b, NH, DH, dtype=out.dtype, device=out.device)
    ds0 = new_output(S, B, 1, NH, DH, dtype=states.dtype, device=out.device)
    grid = (NH, triton.cdiv(B, cfg.block_b))
    fused_backward_kernel[grid](
        gates, out, states, R, d_out, dG, ds0,
        B, T, NH, B * T * NH * DH,
        FUNCTION=fn.code, G_R=fn.gates_r, G_B=fn.gates_b, DH=DH,
        BLOCK_B=cfg.block_b, BLOCK_D=cfg.block_d, R_ON_CHIP=cfg.r_on_chip,
        IS_FP32=out.dtype == torch.float32, PRECISION=runtime.dot_precision(out.dtype),
        **cfg.launch(),
    )  # fmt: skip
    return dG, ds0
