"""Lesson 6: the fused RNN forward, one persistent Triton kernel for the whole sequence (FlashRNN-style).

What you will learn:

- **R stays on chip.** One program per (head n, batch tile) loads its head's recurrent weights, G_r blocks of
  DH x DH, *once*, as one tile R_all^T [DH, G * DH] (all gates side by side), then runs all T steps. The
  ``alternating`` backend reads R from memory at every step (T times); here it is read once. (Triton keeps a
  ``tl.dot`` operand that never changes in shared memory and feeds it to the tensor cores from there.)
- **The time loop is inside the kernel.** One launch instead of ~2T; the state h (and c) lives in registers in fp32
  from the first step to the last and never makes a round trip through HBM (each h_t is still *written*: it is
  the output).
- **A step is a latency chain: shorten it.** With B = 16 a program is alone on its SM and nothing hides its
  latency, so a step costs the sum of its dependent parts. Three choices make the chain short:

  * *one product per step for all gates*: ``h @ R_all^T`` [BLOCK_B, DH] x [DH, G * DH], and one load of Wx_t and
    one store of the gates, each [BLOCK_B, G * DH]. Every tile whose layout differs between memory and the tensor
    cores makes a round trip through shared memory with barriers (a ``convert_layout``): one per tile, so few big
    tiles beat many small ones. The gates come apart again with ``reshape``/``permute``/``split``, which costs
    nothing: in the tensor cores' output layout a thread already holds all G gates of its units.
  * *prefetch two steps ahead, for real*: the load of Wx_{t+2} is issued at step t, right after Wx_t was moved into
    the product's layout (its registers are free from then on), so memory latency (about one step) never stalls
    the chain. Two details decide whether the compiled loop actually waits: (1) the loop is unrolled by two and
    each step of a pair loads into its *own* variable: written as a rotation (``x = x_next; x_next = x_after;
    x_after = load(...)``) the back edge copies the fresh registers and the copy waits for the load in the step
    that issued it; (2) 16-bit data is loaded and carried as 32-bit words (two values each, :func:`unpack_pairs`):
    carried as 16-bit elements, the compiler splits each loaded word in halves in the step of the load, with the
    same wait (versions v2 and v3 of :mod:`gpulab.rnn.fused.versions` show the difference);
  * *one-instruction activations* for 16-bit dtypes on the GPU: ``tanh.approx.f32`` (and sigmoid(x) =
    (1 + tanh(x / 2)) / 2) instead of exp + an IEEE division: five special-function instructions per unit instead
    of ten. Its relative error (~5e-4) is far below bf16 rounding (4e-3); fp32 and the interpreter keep the exact
    cells of :mod:`gpulab.rnn.cells`. The 1/2 inside the sigmoid is folded into R, Wx and b once
    (:func:`gate_scale`; exact, a power of two), which saves a multiply per sigmoid gate and step (count the loop's
    instructions with :mod:`gpulab.rnn.fused.measure.sass`).

- **Write only what the backward needs.** Besides the outputs (all states), when a gradient is needed G_b values per
  unit and step: for the LSTM the gate *activations* i', f', z', o' (the backward then recomputes one tanh per unit
  instead of five; kept in fp16 for 16-bit dtypes, :func:`saved_dtype`), for GRU and Elman the pre-activations.

Per step, for the program's rows (batch tile) of head n (``@`` = ``tl.dot`` on fp32-accumulating tensor cores;
G = 4 gate slots for lstm and gru, 1 for elman):

    pre = h_{t-1} @ R_all^T + (Wx_t + b)        [BLOCK_B, DH] x [DH, G * DH] -> [BLOCK_B, G * DH]
    lstm:  (i, f, z, o) = pre;  h_t, c_t = lstm_cell(i, f, z, o, c_{t-1})
    gru:   slots (g, r, z, n): g = Ry_0 + b_0;  r = Wx_t,0 + Ry_1 + b_1;  z = Wx_t,1 + Ry_2 + b_2;  n = Wx_t,2 + b_3
           (R's slot 3 and Wx's slot 0 are zero);  h_t = gru_cell(g, r, z, n, h_{t-1})
    elman: g = pre;  h_t = elman_cell(g)

The cells are :mod:`gpulab.rnn.cells`' ``@triton.jit`` functions. Batch rows past B and head-dim columns past DH
(when DH is not a power of two >= 16) are masked: R's padding is loaded as zero, so padded columns of h never
reach a real one.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import dtypes, runtime
from gpulab.check import new_output
from gpulab.launch import aligned, direct_stream, keyed_launch
from gpulab.rnn.cells import elman_cell, gru_cell, lstm_activations
from gpulab.rnn.functions import get_function
from gpulab.rnn.fused.tiles import (
    cell_tanh,
    fast_activations,
    gate_columns,
    gate_scale,
    join_gates,
    load_r,
    lstm_activations_approx,
    split_gates,
)
from gpulab.rnn.fused.tiling import fused_tiling
from gpulab.triton_ops import dot, loaded_f32, word_pointer

__all__ = ["fused_forward_kernel", "fused_rnn_forward", "saved_dtype"]


@triton.jit
def _forward_step(t, h, c, x, t_load, rt, scale, bias, wx_rows, wx_mask, out_rows, hc_rows, hc_mask, gate_rows,
                  gate_mask, mask, HD, HDP, state_stride, r_ptr, n, NH,
                  FUNCTION: tl.constexpr, G_W: tl.constexpr, G_R: tl.constexpr, G_B: tl.constexpr, G: tl.constexpr,
                  DH: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_D: tl.constexpr, SAVE_GATES: tl.constexpr,
                  R_ON_CHIP: tl.constexpr, FAST: tl.constexpr, IS_FP32: tl.constexpr, PRECISION: tl.constexpr,
                  P: tl.constexpr):  # fmt: skip
    """Step t: (h_t, c_t) from (h_{t-1}, c_{t-1}) and x = Wx_t (as loaded: P = 2 packs 16-bit pairs in 32-bit
    words); stores h_t, c_t (and the gates), and returns them with the load of Wx at step ``t_load``, issued as soon
    as x is used (so that the load lands in x's registers): at DH <= 64 once x is in the product's layout, at
    DH 128 (at the 255-register cap, where the early load made the compiler pad the loop and the step slower)
    after the product."""
    xf = loaded_f32(x, r_ptr.dtype.element_ty, P, BLOCK_B, G * BLOCK_D)
    # the recurrent product, all gates at once: the only part of a step that mixes units
    if not R_ON_CHIP:
        rt = (load_r(r_ptr, n, NH, DH, BLOCK_D, G_R, G, True).to(tl.float32) * scale).to(r_ptr.dtype.element_ty)
    xs = xf * scale + bias
    if BLOCK_D <= 64:  # x's registers are free once x is converted: load the input of step t_load into them now
        x = tl.load(wx_rows + t_load * G_W * HDP, mask=wx_mask, other=0)
    pre = dot(h.to(r_ptr.dtype.element_ty), rt, IS_FP32, PRECISION) + xs
    if BLOCK_D > 64:  # at DH 128 the kernel is at the 255-register cap: loading after the product costs less
        x = tl.load(wx_rows + t_load * G_W * HDP, mask=wx_mask, other=0)
    g0, g1, g2, g3 = split_gates(pre, BLOCK_B, BLOCK_D, G)
    saved = pre
    if FUNCTION == 0:  # lstm: i, f, z, o; the backward gets the activations (it then recomputes one tanh, not five)
        if FAST:
            i, f, z, o = lstm_activations_approx(g0, g1, g2, g3)
        else:
            i, f, z, o = lstm_activations(g0, g1, g2, g3)
        c = f * c + i * z
        h = o * cell_tanh(c, FAST)
        if SAVE_GATES:
            saved = join_gates(i, f, z, o, BLOCK_B, BLOCK_D, G)
    elif FUNCTION == 1:  # gru: g (recurrent only), r, z, n (input only)
        h = gru_cell(g0, g1, g2, g3, h)
    else:  # elman
        h = elman_cell(g0)

    if FUNCTION == 0:  # h_t and c_t as one [BLOCK_B, BLOCK_D, 2] tile: one layout round trip, not two
        tl.store(hc_rows + t * HD, tl.join(h, c).to(out_rows.dtype.element_ty), mask=hc_mask)
    else:
        tl.store(out_rows + t * HD, h.to(out_rows.dtype.element_ty), mask=mask)
    if SAVE_GATES:
        tl.store(gate_rows + t * G_B * HD, saved.to(gate_rows.dtype.element_ty), mask=gate_mask)
    return h, c, x


@triton.jit
def fused_forward_kernel(
    wx_ptr,  # [B, T, G_W, NH, DH]
    r_ptr,  # [G_R, NH, DH, DH], R[g, n, j, k]: unit k of h to unit j of gate g
    b_ptr,  # [G_B, NH, DH]
    s0_ptr,  # [S, B, 1, NH, DH] initial states
    out_ptr,  # [S, B, T, NH, DH] all states (written)
    last_ptr,  # [S, B, 1, NH, DH] last states (written)
    gates_ptr,  # [B, T, G_B, NH, DH] for the backward: LSTM activations, else pre-activations (if SAVE_GATES)
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
    FAST: tl.constexpr,  # one-instruction activations (lstm_activations_approx); see fast_activations()
    IS_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Program (n, tile): head n, batch rows [tile * BLOCK_B, (tile + 1) * BLOCK_B), all T steps."""
    G: tl.constexpr = 4 if G_B > 1 else 1  # gate slots of the all-gates tiles (gru's 3 + 1 padded to 4)
    n = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    HD = NH * DH  # elements of one (gate or state) slice of all heads

    # all-gates tiles [BLOCK_B, G * BLOCK_D]: column (slot, j) of head n. Wx's gate for slot s is s - (G_B - G_W)
    # (gru's Wx starts at slot 1), biases are per slot.
    slot, j = gate_columns(G, BLOCK_D)
    row_ok = (rows < B)[:, None]
    scale = gate_scale(slot, FAST, FUNCTION)[None, :]  # 1/2 on the LSTM's sigmoid gates in FAST mode
    bias = tl.load(b_ptr + slot * HD + n * DH + j, mask=(slot < G_B) & (j < DH), other=0.0).to(tl.float32)[None, :]
    bias = bias * scale
    # R_all^T of this head [BLOCK_D, G * BLOCK_D], loaded once (R_ON_CHIP), or re-read every step (from L1 at best;
    # it is staged through shared memory either way, so gpulab.rnn.fused.tiling keeps it on chip whenever it fits).
    rt = 0.0  # (re-read in every step when not R_ON_CHIP)
    if R_ON_CHIP:
        rt = (load_r(r_ptr, n, NH, DH, BLOCK_D, G_R, G, True).to(tl.float32) * scale).to(r_ptr.dtype.element_ty)
    # Wx in units of P elements: P = 2 loads two 16-bit values as one 32-bit word (see unpack_pairs)
    P: tl.constexpr = 2 if (not IS_FP32) and DH % 2 == 0 else 1
    pslot, pj = gate_columns(G, BLOCK_D // P)
    pwslot = pslot - (G_B - G_W)
    wx_mask = row_ok & ((pwslot >= 0) & (pwslot < G_W) & (pj < DH // P))[None, :]
    wx_base = word_pointer(wx_ptr, P)
    HDP = NH * (DH // P)
    wx_rows = wx_base + rows[:, None].to(tl.int64) * T * G_W * HDP + (pwslot * HDP + n * (DH // P) + pj)[None, :]
    gate_rows = gates_ptr + rows[:, None].to(tl.int64) * T * G_B * HD + (slot * HD + n * DH + j)[None, :]
    gate_mask = row_ok & ((slot < G_B) & (j < DH))[None, :]

    # states [BLOCK_B, BLOCK_D], fp32 in registers for the whole sequence
    cols = tl.arange(0, BLOCK_D)
    mask = row_ok & (cols < DH)[None, :]
    s_off = rows[:, None] * HD + n * DH + cols[None, :]  # [S, B, 1, NH, DH] without the state offset
    h = tl.load(s0_ptr + s_off, mask=mask, other=0.0).to(tl.float32)
    c = h
    if FUNCTION == 0:
        c = tl.load(s0_ptr + B * HD + s_off, mask=mask, other=0.0).to(tl.float32)
    out_rows = out_ptr + rows[:, None].to(tl.int64) * T * HD + n * DH + cols[None, :]
    state = tl.arange(0, 2)  # h, c of the LSTM: state_stride apart
    hc_rows = out_rows[:, :, None] + (state * state_stride)[None, None, :]
    hc_mask = mask[:, :, None] & (state < 2)[None, None, :]

    # The time loop, unrolled by two: steps t and t+1 each use their own prefetched Wx (x_a, x_b) and load their
    # own input of two steps later into it (indices clamped at T-1: the last loads are harmless repeats).
    x_a = tl.load(wx_rows, mask=wx_mask, other=0)
    x_b = tl.load(wx_rows + tl.minimum(1, T - 1) * G_W * HDP, mask=wx_mask, other=0)
    for t in range(0, T - 1, 2):
        h, c, x_a = _forward_step(
            t, h, c, x_a, tl.minimum(t + 2, T - 1), rt, scale, bias, wx_rows, wx_mask, out_rows, hc_rows, hc_mask,
            gate_rows, gate_mask, mask, HD, HDP, state_stride, r_ptr, n, NH,
            FUNCTION, G_W, G_R, G_B, G, DH, BLOCK_B, BLOCK_D, SAVE_GATES, R_ON_CHIP, FAST, IS_FP32, PRECISION,
            P)  # fmt: skip
        h, c, x_b = _forward_step(
            t + 1, h, c, x_b, tl.minimum(t + 3, T - 1), rt, scale, bias, wx_rows, wx_mask, out_rows, hc_rows, hc_mask,
            gate_rows, gate_mask, mask, HD, HDP, state_stride, r_ptr, n, NH,
            FUNCTION, G_W, G_R, G_B, G, DH, BLOCK_B, BLOCK_D, SAVE_GATES, R_ON_CHIP, FAST, IS_FP32, PRECISION,
            P)  # fmt: skip
    if T % 2 == 1:  # the last step of an odd T
        h, c, x_a = _forward_step(
            T - 1, h, c, x_a, T - 1, rt, scale, bias, wx_rows, wx_mask, out_rows, hc_rows, hc_mask,
            gate_rows, gate_mask, mask, HD, HDP, state_stride, r_ptr, n, NH,
            FUNCTION, G_W, G_R, G_B, G, DH, BLOCK_B, BLOCK_D, SAVE_GATES, R_ON_CHIP, FAST, IS_FP32, PRECISION,
            P)  # fmt: skip

    tl.store(last_ptr + s_off, h.to(last_ptr.dtype.element_ty), mask=mask)
    if FUNCTION == 0:
        tl.store(last_ptr + B * HD + s_off, c.to(last_ptr.dtype.element_ty), mask=mask)


def saved_dtype(function, dtype) -> torch.dtype:
    """The dtype of what the forward saves for the backward: the LSTM's activations are bounded (|a| <= 1), so for
    16-bit compute they are kept in float16, whose 11-bit mantissa keeps 1 - sigmoid near 1 (bfloat16 would round
    it to a multiple of 2^-8); the other functions save pre-activations in the compute dtype."""
    dtype = dtypes.as_dtype(dtype)
    if get_function(function).name == "lstm" and dtype in (torch.float16, torch.bfloat16):
        return torch.float16
    return dtype


def fused_rnn_forward(Wx, R, b, states, function="lstm", save_gates=True, tiling=None):
    """Launch :func:`fused_forward_kernel`; returns ``(states_all, states_last, gates or None)``.

    Inputs as :func:`gpulab.rnn.flashrnn` takes them, already validated and in one compute dtype (contiguous copies
    are made if needed). ``gates`` [B, T, G_b, NH, DH] are what the backward needs: for the LSTM the gate activations
    (i', f', z', o', in :func:`saved_dtype`), for GRU and Elman the pre-activations (bias included).
    ``tiling``: a :class:`gpulab.rnn.fused.tiling.FusedTiling` (default: :func:`gpulab.rnn.fused.tiling.fused_tiling`).
    """
    fn = get_function(function)
    Wx, R, b, states = (t.contiguous() for t in (Wx, R, b, states))
    B, T, _, NH, DH = Wx.shape
    cfg = tiling or fused_tiling(B, NH, DH, fn.name, Wx.dtype, direction="forward")
    out = new_output(fn.states, B, T, NH, DH, dtype=Wx.dtype, device=Wx.device)
    last = new_output(fn.states, B, 1, NH, DH, dtype=Wx.dtype, device=Wx.device)
    gates = None
    if save_gates:
        gates = new_output(B, T, fn.gates_b, NH, DH, dtype=saved_dtype(fn, Wx.dtype), device=Wx.device)
    ints = (B, T, NH, B * T * NH * DH)
    dtype = Wx.dtype

    def make():  # the grid and constexprs, built once per problem (keyed_launch)
        return (NH, triton.cdiv(B, cfg.block_b)), dict(
            FUNCTION=fn.code, G_W=fn.gates_w, G_R=fn.gates_r, G_B=fn.gates_b, DH=DH,
            BLOCK_B=cfg.block_b, BLOCK_D=cfg.block_d, SAVE_GATES=save_gates, R_ON_CHIP=cfg.r_on_chip,
            FAST=fast_activations(dtype), IS_FP32=dtype == torch.float32, PRECISION=runtime.dot_precision(dtype),
            **cfg.launch(),
        )  # fmt: skip

    launch = keyed_launch((fused_forward_kernel, fn.code, dtype, DH, cfg, save_gates) + ints, make)
    tensors = (Wx, R, b, states, out, last, gates if save_gates else out)
    launch(direct_stream(Wx.device) if aligned(*tensors) else None, *tensors, *ints)
    return out, last, gates
