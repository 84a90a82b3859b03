"""Lesson 6: the fused RNN backward, one persistent reverse-time Triton kernel, and batched products beside it.

What you will learn:

- **The backward is a recurrence too, run backwards in time.** The gradient reaching h_{t-1} depends on the gate
  gradients of step t: ``dh_{t-1} = sum_g dG_{t,g} @ R[g]`` (+ the cell's direct path). So one program per
  (head, batch tile) walks t = T-1 ... 0 carrying dh and dc in fp32 registers, with R (this time *not*
  transposed) loaded once, exactly like the forward, and as there as one tile for all gates:
  ``dG_all @ R_all``, [BLOCK_B, G * DH] x [G * DH, DH], is the sum over the gates in one product.
- **Only the recurrence is sequential.** The kernel writes the gate gradients dG (in Wx's layout, [B, T, G_b, NH,
  DH]; or time-major: ``BackwardConfig.dg_layout``) and stops there. Everything else is parallel over all steps:

      dR[g, n] = sum_{b, t} dG[b, t, g, n]^T h_{t-1}[b, n]   per gate and head one product over K = B*T rows
                                                              (bf16 operands, fp32 accumulation)
      db       = sum_{b, t} dG[b, t]                            a sum over the same rows
      dWx      = dG (its input gates)                           no work at all: the same tensor

  Accumulating dR inside the kernel would need another G_r * DH * DH fp32 values per program on chip: at DH = 128
  that is 256 KB, the whole register file of an SM, on top of R itself (see :mod:`gpulab.rnn.fused.tiling`).
- **Recompute what is cheap, store what is not.** For the LSTM the forward saved the gate *activations* i', f', z',
  o' (fp16 for 16-bit dtypes: bounded values, finer than bf16 near 1); the backward recomputes c_t = f' c_{t-1} +
  i' z' and one tanh per unit instead of five special-function instructions per unit and step. GRU and Elman save
  pre-activations, and the cells' backward functions (:mod:`gpulab.rnn.cells`) recompute from them.
- **Use the SMs the recurrence leaves idle.** The kernel runs one program per head and batch tile: 12 of the H100's
  132 SMs at the lesson's problem. :func:`fused_rnn_gradients` cuts the sequence into pieces in time, runs the
  kernel on them last to first (each launch starts from the previous one's carried dh, dc), and computes each
  finished piece's share of dR and db on a second CUDA stream while the kernel works on the next piece: only the
  first piece's products are left when the kernel ends (one cut, at T/8: ``BackwardConfig.cuts``).
- **Check what the compiler made of the product.** dG is assembled from the gate tiles with ``tl.join``; from that,
  Triton picks a k-by-4 register layout for the operand and reorders R's fragments to match with register moves
  on every step. :func:`gpulab.triton_ops.dot_operand` hides dG's origin and removes them (count the loop's
  instructions with :mod:`gpulab.rnn.fused.measure.sass`; ``tests/rnn/fused/test_rnn_compiled.py`` checks the operand
  layout).
- **No copies of the incoming gradient.** dL/d(last states) enters as the initial value of the carried dh (and dc)
  instead of being added into a copy of dL/d(all states).
- **Prefetch without waiting** (as in the forward, :mod:`.forward`): step t-1's inputs are loaded
  during step t, right after step t's own inputs were unpacked, into the same variables, and 16-bit data travels
  as 32-bit words.

Per step t (all fp32; the cell backward functions hold the math):

    dh_t = dL/dh_t (from the outputs) + dh carried from step t+1  (at t = T-1: dL/d(last h))
    lstm:  dc_t = dL/dc_t + dc carried;  c_t = f' c_{t-1} + i' z';
           (di, df, dz, do), dc = lstm_gate_grads(i', f', z', o', c_{t-1}, tanh(c_t), dh_t, dc_t)
           dh = [di, df, dz, do] @ R_all
    gru:   (dg, dr, dz, dn), direct = gru_cell_backward(g, r, z, n, h_{t-1}, dh_t)
           dh = direct + [dg, dr, dz, dn] @ R_all  (R_all's slot 3 is zero: n takes no R)
    elman: dg = elman_cell_backward(g, dh_t);  dh = dg @ R_0
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from gpulab import runtime
from gpulab.check import new_output
from gpulab.launch import aligned, direct_stream, keyed_launch
from gpulab.rnn.backends.parameter_grads import (
    gate_gradients_to_parameters,
    input_gate_grads,
    step_products,
    step_splits,
)
from gpulab.rnn.cells import elman_cell_backward, gru_cell_backward, lstm_gate_grads
from gpulab.rnn.functions import get_function
from gpulab.rnn.fused.config import DG_LAYOUTS, PRODUCTS, BackwardConfig
from gpulab.rnn.fused.tiles import cell_tanh, fast_activations, gate_columns, join_gates, load_r, split_gates
from gpulab.rnn.fused.tiling import fused_tiling
from gpulab.triton_ops import dot, dot_operand, loaded_f32, own_chain, word_pointer

__all__ = [
    "fused_backward_kernel",
    "fused_rnn_backward",
    "fused_rnn_gradients",
    "pieces",
    "DG_LAYOUTS",
    "PRODUCTS",
    "PER_GATE_FROM",
    "per_gate",
]


@triton.jit
def load_r_slot(r_ptr, n, NH, DH: tl.constexpr, BLOCK_D: tl.constexpr, SLOT: tl.constexpr):
    """R[SLOT, n] [BLOCK_D, BLOCK_D], element [j, k] (zero past DH): the rows of :func:`load_r`'s R_all of one slot,
    loaded with plain row and column indices (through ``load_r`` with one slot, the compiler lays the tile out
    otherwise and the per-gate step takes 20 more instructions at head dim 64; ``notes/rnn-fused.md``)."""
    j = tl.arange(0, BLOCK_D)[:, None]
    k = tl.arange(0, BLOCK_D)[None, :]
    return tl.load(r_ptr + ((SLOT * NH + n) * DH + j) * DH + k, mask=(j < DH) & (k < DH), other=0.0)


@triton.jit
def _step_inputs(gate_rows, gate_mask, gate_step, dout_rows, prev_rows, s0_rows, in_mask, t, HD):
    """The loads of step t: the saved gates and the state inputs, two all-slot tiles (the pointers and
    the row stride ``HD`` in the kernel's units of P elements)."""
    g = tl.load(gate_rows + t * gate_step, mask=gate_mask, other=0)
    ptr = tl.where(in_mask == 2, tl.where(t > 0, prev_rows + (t - 1) * HD, s0_rows), dout_rows + t * HD)
    s = tl.load(ptr, mask=in_mask > 0, other=0)
    return g, s


@triton.jit
def fused_backward_kernel(
    gates_ptr,  # [B, T, G_B, NH, DH] saved by the forward: LSTM activations (fp16 if 16-bit), else pre-activations
    out_ptr,  # [S, B, T, NH, DH] the forward's states
    s0_ptr,  # [S, B, 1, NH, DH] initial states
    r_ptr,  # [G_R, NH, DH, DH]
    dout_ptr,  # [S, B, T, NH, DH] dL/d(all states)
    dlast_ptr,  # [S, B, 1, NH, DH] dL/d(last states): the carried dh (dc) at t = T-1 (read if HAS_DLAST)
    dg_ptr,  # [B, T, G_B, NH, DH] gate gradients, Wx's layout ([T, B, ...] if DG_TIME_MAJOR), steps T0 .. T1-1
    ds0_ptr,  # [S, B, 1, NH, DH] the carried dh (dc) after step T0: dL/d(initial states) when T0 = 0 (written)
    B,
    T,
    T0,  # this launch runs steps T1-1 down to T0 (the whole sequence: 0, T)
    T1,
    NH,
    state_stride,  # B * T * NH * DH
    FUNCTION: tl.constexpr,
    G_R: tl.constexpr,
    G_B: tl.constexpr,
    DH: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_D: tl.constexpr,
    R_ON_CHIP: tl.constexpr,
    HAS_DLAST: tl.constexpr,
    FAST: tl.constexpr,  # the LSTM's tanh(c_t) in one instruction (tiles.cell_tanh)
    IS_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
    COMPILED: tl.constexpr = True,  # False in Triton's interpreter (no inline assembly there; see dot_operand)
    DG_TIME_MAJOR: tl.constexpr = False,  # dG time-major [T, B, G_B, NH, DH] (BackwardConfig.dg_layout 'time')
    PER_GATE: tl.constexpr = False,  # the product per gate (BackwardConfig.product; lstm and gru, R on chip)
):
    """Program (n, tile): head n, one batch tile, steps T1-1 down to T0."""
    G: tl.constexpr = 4 if G_B > 1 else 1  # gate slots, as in the forward
    n = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    HD = NH * DH
    s0_stride = B * HD

    # R_all of this head [G * BLOCK_D, BLOCK_D], so that dh_{t-1} += dG_all @ R_all. Loaded once (R_ON_CHIP), or
    # re-read every step (as in the forward).
    if R_ON_CHIP:
        r_all = load_r(r_ptr, n, NH, DH, BLOCK_D, G_R, G, False)
    if PER_GATE:  # R_g [BLOCK_D, BLOCK_D] of each gate slot g instead (R_ON_CHIP only): R_all's rows of one slot
        r0 = load_r_slot(r_ptr, n, NH, DH, BLOCK_D, 0)
        r1 = load_r_slot(r_ptr, n, NH, DH, BLOCK_D, 1)
        r2 = load_r_slot(r_ptr, n, NH, DH, BLOCK_D, 2)
        r3 = r2
        if G_R == 4:
            r3 = load_r_slot(r_ptr, n, NH, DH, BLOCK_D, 3)

    RDT = r_ptr.dtype.element_ty  # the products' operand dtype
    slot, j = gate_columns(G, BLOCK_D)
    row_ok = (rows < B)[:, None]
    gate_mask = row_ok & ((slot < G_B) & (j < DH))[None, :]
    if DG_TIME_MAJOR:
        dg_row, dg_step = G_B * HD, B * G_B * HD
    else:
        dg_row, dg_step = T * G_B * HD, G_B * HD
    dg_rows = dg_ptr + rows[:, None].to(tl.int64) * dg_row + (slot * HD + n * DH + j)[None, :]  # + t * dg_step
    # The loads, in units of P elements: P = 2 packs two 16-bit values into one 32-bit word (see unpack_pairs in
    # gpulab.triton_ops). Two all-slot tiles [BLOCK_B, G * BLOCK_D]: the saved gates, and the state
    # inputs (slot 0 dL/dh_t, slot 1 dL/dc_t (lstm), slot 2 the previous state the cell's backward needs: c_{t-1}
    # for the LSTM, h_{t-1} for the GRU, from the initial states at t = 0). Two tiles, not four: each costs one
    # layout round trip.
    P: tl.constexpr = 2 if (not IS_FP32) and DH % 2 == 0 else 1
    DHP: tl.constexpr = DH // P
    HDP = NH * DHP
    pslot, pj = gate_columns(G, BLOCK_D // P)
    gates_base, dout_base = word_pointer(gates_ptr, P), word_pointer(dout_ptr, P)
    out_base, s0_base = word_pointer(out_ptr, P), word_pointer(s0_ptr, P)
    gate_in_mask = row_ok & ((pslot < G_B) & (pj < DHP))[None, :]
    gate_rows = gates_base + rows[:, None].to(tl.int64) * T * G_B * HDP + (pslot * HDP + n * DHP + pj)[None, :]
    S: tl.constexpr = 2 if FUNCTION == 0 else 1  # states
    PREV: tl.constexpr = FUNCTION != 2  # lstm and gru need the previous state
    kind = tl.where(pslot == 2, 2, 1) * (((pslot < S) | ((pslot == 2) & PREV)) & (pj < DHP))  # per column
    in_mask = tl.where(row_ok, kind[None, :], 0)  # [BLOCK_B, G * BLOCK_D // P]: 0 unused, 1 from d_out, 2 previous
    state_off = (S - 1) * (pslot == 2)  # c (state 1) for the lstm, h for the gru
    stride_p = state_stride // P
    rows_t = rows[:, None].to(tl.int64) * T * HDP + (n * DHP + pj)[None, :]
    dout_rows = dout_base + rows_t + (pslot * stride_p)[None, :]
    prev_rows = out_base + rows_t + (state_off * stride_p)[None, :]
    s0_rows = s0_base + rows[:, None] * HDP + (state_off * (s0_stride // P) + n * DHP + pj)[None, :]
    cols = tl.arange(0, BLOCK_D)
    mask = row_ok & (cols < DH)[None, :]
    head = n * DH + cols[None, :]

    # dL/dh_t and dL/dc_t through step t+1 (R and the cell's direct path); at t = T-1, dL/d(last states)
    dh = tl.zeros([BLOCK_B, BLOCK_D], dtype=tl.float32)
    dc = tl.zeros([BLOCK_B, BLOCK_D], dtype=tl.float32)
    if HAS_DLAST:
        dh = tl.load(dlast_ptr + rows[:, None] * HD + head, mask=mask, other=0.0).to(tl.float32)
        if FUNCTION == 0:
            dc = tl.load(dlast_ptr + s0_stride + rows[:, None] * HD + head, mask=mask, other=0.0).to(tl.float32)
    # step t's inputs are loaded during step t+1, once that step's own inputs are used (their registers are free)
    g_in, s_in = _step_inputs(gate_rows, gate_in_mask, G_B * HDP, dout_rows, prev_rows, s0_rows, in_mask, T1 - 1, HDP)
    for tt in range(T1 - T0):
        t = T1 - 1 - tt
        if not R_ON_CHIP:
            r_all = load_r(r_ptr, n, NH, DH, BLOCK_D, G_R, G, False)
        g_all = loaded_f32(g_in, gates_ptr.dtype.element_ty, P, BLOCK_B, G * BLOCK_D)
        s_all = loaded_f32(s_in, RDT, P, BLOCK_B, G * BLOCK_D)
        g0, g1, g2, g3 = split_gates(g_all, BLOCK_B, BLOCK_D, G)
        dh_out, dc_out, prev, _ = split_gates(s_all, BLOCK_B, BLOCK_D, G)
        g_in, s_in = _step_inputs(
            gate_rows, gate_in_mask, G_B * HDP, dout_rows, prev_rows, s0_rows, in_mask, tl.maximum(t - 1, T0), HDP
        )
        dh = dh + dh_out
        direct = tl.zeros([BLOCK_B, BLOCK_D], dtype=tl.float32)  # the part of dh_{t-1} that skips R
        if FUNCTION == 0:  # lstm: the forward saved the activations i', f', z', o'; c_t is recomputed from them
            tc = cell_tanh(g1 * prev + g0 * g2, FAST)
            d0, d1, d2, d3, dc = lstm_gate_grads(g0, g1, g2, g3, prev, tc, dh, dc + dc_out)
            d_all = join_gates(d0, d1, d2, d3, BLOCK_B, BLOCK_D, G)
        elif FUNCTION == 1:  # gru: the recurrent gates are (g, r, z), n takes no R (R_all's slot 3 is zero)
            d0, d1, d2, d3, direct = gru_cell_backward(g0, g1, g2, g3, prev, dh)
            d_all = join_gates(d0, d1, d2, d3, BLOCK_B, BLOCK_D, G)
        else:  # elman
            d_all = elman_cell_backward(g0, dh)
        dG = d_all.to(dg_ptr.dtype.element_ty)
        if PER_GATE:  # sum_g dG_g @ R_g: G_R products of depth DH, independent chains (BackwardConfig.product)
            OPQ: tl.constexpr = COMPILED and not IS_FP32
            a0 = own_chain(dot(dot_operand(d0.to(RDT), OPQ), r0, IS_FP32, PRECISION), OPQ)
            a1 = own_chain(dot(dot_operand(d1.to(RDT), OPQ), r1, IS_FP32, PRECISION), OPQ)
            a2 = own_chain(dot(dot_operand(d2.to(RDT), OPQ), r2, IS_FP32, PRECISION), OPQ)
            if G_R == 4:  # (gru: slot 3, n, takes no R)
                a3 = own_chain(dot(dot_operand(d3.to(RDT), OPQ), r3, IS_FP32, PRECISION), OPQ)
                dh = direct + ((a0 + a1) + (a2 + a3))
            else:
                dh = direct + ((a0 + a1) + a2)
        else:
            dh = direct + dot(dot_operand(dG.to(RDT), COMPILED and not IS_FP32), r_all, IS_FP32, PRECISION)
        tl.store(dg_rows + t.to(tl.int64) * dg_step, dG, mask=gate_mask)

    ds0_rows = ds0_ptr + rows[:, None] * HD + head
    tl.store(ds0_rows, dh.to(ds0_ptr.dtype.element_ty), mask=mask)
    if FUNCTION == 0:
        tl.store(ds0_rows + s0_stride, dc.to(ds0_ptr.dtype.element_ty), mask=mask)


def _launch(d_out, gates, out, states, R, fn, cfg, dG, T0, T1, d_last, time_major, product):
    """One launch of :func:`fused_backward_kernel` over steps T1-1 .. T0 (dG time-major if ``time_major``); returns
    the carry after step T0."""
    S, B, T, NH, DH = out.shape
    carry = new_output(S, B, 1, NH, DH, dtype=states.dtype, device=out.device)
    ints = (B, T, T0, T1, NH, B * T * NH * DH)
    has_dlast, dtype = d_last is not None, out.dtype

    def make():  # the grid and constexprs, built once per problem (keyed_launch)
        return (NH, triton.cdiv(B, cfg.block_b)), dict(
            FUNCTION=fn.code, G_R=fn.gates_r, G_B=fn.gates_b, DH=DH,
            BLOCK_B=cfg.block_b, BLOCK_D=cfg.block_d, R_ON_CHIP=cfg.r_on_chip, HAS_DLAST=has_dlast,
            FAST=fast_activations(dtype), IS_FP32=dtype == torch.float32,
            PRECISION=runtime.dot_precision(dtype), COMPILED=not runtime.INTERPRET, DG_TIME_MAJOR=time_major,
            PER_GATE=by_gate, **cfg.launch(),
        )  # fmt: skip

    by_gate = per_gate(fn, cfg, product)
    key = (fused_backward_kernel, fn.code, dtype, DH, cfg, has_dlast, time_major, by_gate)
    launch = keyed_launch(key + ints, make)
    tensors = (gates, out, states, R, d_out, d_last if has_dlast else states, dG, carry)
    launch(direct_stream(out.device) if aligned(*tensors) else None, *tensors, *ints)
    return carry


def _inputs(d_out, gates, out, states, R, function, tiling, d_last, time_major):
    fn = get_function(function)
    S, B, T, NH, DH = out.shape
    d_out, gates, out, states, R = (t.contiguous() for t in (d_out, gates, out, states, R))
    d_last = d_last.contiguous() if d_last is not None else None
    cfg = tiling or fused_tiling(B, NH, DH, fn.name, out.dtype, direction="backward")
    rows = (T, B) if time_major else (B, T)
    dG = new_output(*rows, fn.gates_b, NH, DH, dtype=out.dtype, device=out.device)
    return fn, (d_out, gates, out, states, R), d_last, cfg, dG


def fused_rnn_backward(d_out, gates, out, states, R, function="lstm", tiling=None, d_last=None, config=None):
    """Launch :func:`fused_backward_kernel` once over the whole sequence: returns ``(dG [B, T, G_b, NH, DH],
    d_states [S, B, 1, NH, DH])``.

    ``d_out`` [S, B, T, NH, DH] is dL/d(all states); ``d_last`` [S, B, 1, NH, DH] dL/d(last states), or None when
    it is already added into ``d_out`` at the last step. ``config``: a
    :class:`gpulab.rnn.fused.config.BackwardConfig` (None: what ships).
    """
    config = _config(config)
    time_major = config.dg_layout == "time"
    fn, tensors, d_last, cfg, dG = _inputs(d_out, gates, out, states, R, function, tiling, d_last, time_major)
    ds0 = _launch(*tensors, fn, cfg, dG, 0, out.shape[2], d_last, time_major, config.product)
    return (dG.transpose(0, 1) if time_major else dG), ds0


PER_GATE_FROM = 128  # the padded head dim (BLOCK_D) from which 'by head dim' multiplies per gate


def per_gate(fn, cfg, product: str = "by head dim") -> bool:
    """Whether the backward of ``fn`` (an RNNFunction) at tiling ``cfg`` multiplies per gate under ``product`` (one
    of :data:`PRODUCTS`: 'by head dim' ships, per gate from :data:`PER_GATE_FROM`; Elman has one gate, always 'all
    gates')."""
    if fn.name == "elman" or not cfg.r_on_chip or product == "all gates":
        return False
    return product == "per gate" or cfg.block_d >= PER_GATE_FROM


def _config(config):
    if config is None:
        return BackwardConfig()
    if not isinstance(config, BackwardConfig):
        raise TypeError(f"config must be None or a gpulab.rnn.fused.config.BackwardConfig, got {config!r}.")
    return config


def pieces(T, config=None):
    """The time pieces [(t0, t1), ...] of :func:`fused_rnn_gradients` for a sequence of T steps, cut at
    ``config.cuts`` (a :class:`gpulab.rnn.fused.config.BackwardConfig`; None: what ships)."""
    config = _config(config)
    cuts = config.cuts
    if T < config.min_piece_steps * (len(cuts) + 1):
        return [(0, T)]
    edges = [0] + [min(max(round(T * c), 1), T - 1) for c in cuts] + [T]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def fused_rnn_gradients(
    d_out, gates, out, states, R, function="lstm", tiling=None, d_last=None, config=None, small_rows=None
):
    """The whole backward: ``(dWx, dR, db, d_states)``, with the parameter products overlapped with the kernel.

    The reverse-time kernel runs one program per head and batch tile: 12 of the H100's 132 SMs at the lesson's
    problem. So the sequence is cut into pieces in time (at ``config.cuts``), the kernel runs them last to first (each
    launch starting from the previous one's carried dh, dc), and as soon as a piece's dG is written its share of dR
    and db is computed on a second CUDA stream, on the idle SMs, while the kernel works on the next piece: one
    launch of :func:`gpulab.rnn.backends.parameter_grads.step_products` per piece, reading the piece's dG rows and
    h_{t-1} where they lie and writing fp32 sums by row split; the splits of all pieces are summed at the end, in a
    fixed order. Only the first piece's products remain after the kernel. A sequence too short to cut runs the
    kernel and then the products on one stream (a second stream costs host time that only pays beside a long
    kernel); the interpreter runs the pieces' launches in order on one stream.

    dG is stored as ``config.dg_layout`` says (what ships: Wx's layout, dWx is dG itself). ``config``: a
    :class:`gpulab.rnn.fused.config.BackwardConfig` (None: what ships); ``small_rows``: for the products of one
    piece (:func:`gpulab.rnn.backends.parameter_grads.one_launch`; None: its default).
    """
    config = _config(config)
    time_major = config.dg_layout == "time"
    fn, tensors, d_last, cfg, dG = _inputs(d_out, gates, out, states, R, function, tiling, d_last, time_major)
    d_out, gates, out, states, R = tensors
    S, B, T, NH, DH = out.shape
    bounds = pieces(T, config)
    if len(bounds) == 1:  # one piece: kernel, then products, one stream
        carry = _launch(d_out, gates, out, states, R, fn, cfg, dG, 0, T, d_last, time_major, config.product)
        grads = gate_gradients_to_parameters(dG, out, states, fn.name, time_major=time_major, small_rows=small_rows)
        return (*grads, carry)
    splits = [step_splits(B, t1 - t0) for t0, t1 in bounds]
    dR = new_output(sum(splits), fn.gates_r, NH, DH, DH, dtype=torch.float32, device=out.device)
    db = new_output(sum(splits), fn.gates_b, NH, DH, dtype=torch.float32, device=out.device)
    main = torch.cuda.current_stream(out.device) if out.is_cuda else None
    side = _side_stream(out.device) if out.is_cuda else None
    carry, end = d_last, sum(splits)
    for (t0, t1), n in reversed(list(zip(bounds, splits))):
        carry = _launch(d_out, gates, out, states, R, fn, cfg, dG, t0, t1, carry, time_major, config.product)
        if side is not None:
            side.wait_stream(main)  # this piece's dG is written
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            step_products(dG, out, states, fn.name, t0, t1, dR[end - n : end], db[end - n : end], time_major)
        end -= n
    if side is not None:
        main.wait_stream(side)
        for t in (dG, dR, db):
            t.record_stream(side)
    return input_gate_grads(dG, fn, time_major), dR.sum(0).to(out.dtype), db.sum(0).to(out.dtype), carry


_SIDE_STREAMS: dict = {}


def _side_stream(device) -> torch.cuda.Stream:
    """The second stream of :func:`fused_rnn_gradients` on ``device``, made once (a new stream per call costs host
    time)."""
    stream = _SIDE_STREAMS.get(device)
    if stream is None:
        stream = _SIDE_STREAMS[device] = torch.cuda.Stream(device=device)
    return stream
