"""Lesson 5, part 2b: the split-head backward, one reverse-time persistent kernel over P programs per head.

What you will learn: the backward's recurrence has the forward's shape, transposed. The gradient reaching h_{t-1}
through R is ``dh_{t-1}[k] = sum_{g, j} dG_t[g, j] R[g, j, k]``: every unit k needs the gate gradients of *all*
units j of step t. So split the head as the forward does, by units, but now program p owns units k of dh:

- it keeps the *columns* of R that produce its units, R[:, :, p's k] as tiles [G * BLOCK_K, BLOCK_U] (rows
  (gate, j) of a chunk of j), on chip for the whole sequence;
- per step t (reverse) it runs the cell backward of its units (their saved pre-activations, their dh, dc, and the
  previous state), writes its units' dG_t (the output the parameter products need, and the exchange buffer: one
  slot per step, so one barrier per step suffices), arrives at the grid barrier, and once all programs have written
  dG_t, reads the whole dG_t from L2 and multiplies it by its R columns: its units of dh_{t-1}. dc never leaves the
  program (the LSTM's cell path is per unit), nor does the GRU's direct path dh z'.

The barrier, its counter and the cooperative launch are those of the forward (:mod:`.split`); in the interpreter
the kernel runs one launch per step and carries dh (dc) in fp32 between launches. The parameter gradients (dR, db,
dWx) are then one pass of products over all steps
(:func:`gpulab.rnn.backends.parameter_grads.gate_gradients_to_parameters`).

Per step t = T-1 .. 0, program (p, n, tile), fp32 (G = 4 slots for lstm and gru, 1 for elman; the forward saved
pre-activations):

    dh = dL/dh_t + carried direct part + sum_chunks dG_{t+1}[:, slots, chunk] @ R[slots, chunk, own units]
                                          ([BLOCK_B, G * BLOCK_K] x [G * BLOCK_K, BLOCK_U]; none at t = T-1)
    (LSTM) dc = dL/dc_t + carried dc
    dG_own, dc, direct = cell_backward(pre_t, previous state, dh, dc)        [BLOCK_B, G * BLOCK_U]
    store dG_own at dG[t];  barrier

and at the end dL/dh_{-1} = direct + dG_0 @ R's columns.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import runtime
from gpulab.check import new_output
from gpulab.launch import aligned, cached_launch, direct_stream
from gpulab.rnn.backends.fused.split import _apart, barrier_counter
from gpulab.rnn.backends.fused.tiles import gate_columns, join_gates, split_gates
from gpulab.rnn.backends.parameter_grads import gate_gradients_to_parameters
from gpulab.rnn.cells import elman_cell_backward, gru_cell_backward, lstm_cell_backward
from gpulab.rnn.functions import get_function
from gpulab.rnn.split_tiling import split_tiling
from gpulab.triton_ops import dot

__all__ = ["split_backward_kernel", "split_rnn_backward", "split_rnn_gradients"]


@triton.jit
def load_r_columns(r_ptr, n, p, k0, NH, DH: tl.constexpr, BLOCK_U: tl.constexpr, BLOCK_K: tl.constexpr,
                   G_R: tl.constexpr, G: tl.constexpr):  # fmt: skip
    """R's rows (gate, j) for j in [k0, k0 + BLOCK_K), columns p's units: [G * BLOCK_K, BLOCK_U], element
    [slot * BLOCK_K + jj, u] = R[slot, n, k0 + jj, p * BLOCK_U + u] (zero past DH and for slots >= G_R)."""
    slot, jj = gate_columns(G, BLOCK_K)
    j = k0 + jj
    k = p * BLOCK_U + tl.arange(0, BLOCK_U)
    ptr = r_ptr + ((slot * NH + n) * DH + j)[:, None] * DH + k[None, :]
    return tl.load(ptr, mask=((slot < G_R) & (j < DH))[:, None] & (k < DH)[None, :], other=0.0)


@triton.jit
def _dg_chunk(dg_t, k0, row_ok, DH: tl.constexpr, BLOCK_K: tl.constexpr, G: tl.constexpr, HD):
    """dG_t[:, all slots, k0 : k0 + BLOCK_K] as [BLOCK_B, G * BLOCK_K], read from L2 (other SMs wrote it)."""
    slot, jj = gate_columns(G, BLOCK_K)
    j = k0 + jj
    return tl.load(dg_t + (slot * HD + j)[None, :], mask=row_ok & (j < DH)[None, :], other=0.0, cache_modifier=".cg")


@triton.jit
def _through_r(dg_t, r0, r1, r2, r3, row_ok, HD, DH: tl.constexpr, BLOCK_K: tl.constexpr, G: tl.constexpr,
               CHUNKS: tl.constexpr, IS_FP32: tl.constexpr, PRECISION: tl.constexpr, APART: tl.constexpr):  # fmt: skip
    """The part of dh_{t-1} (p's units) that flows through R: all of dG_t [BLOCK_B, G * DH] times p's columns of R,
    chunk by chunk (every chunk requested before the products; the products as independent chains)."""
    a0 = _dg_chunk(dg_t, 0, row_ok, DH, BLOCK_K, G, HD)
    a1 = a0
    a2 = a0
    a3 = a0
    if CHUNKS > 1:
        a1 = _dg_chunk(dg_t, BLOCK_K, row_ok, DH, BLOCK_K, G, HD)
    if CHUNKS > 2:
        a2 = _dg_chunk(dg_t, 2 * BLOCK_K, row_ok, DH, BLOCK_K, G, HD)
    if CHUNKS > 3:
        a3 = _dg_chunk(dg_t, 3 * BLOCK_K, row_ok, DH, BLOCK_K, G, HD)
    dt = r0.dtype
    acc = _apart(dot(a0.to(dt), r0, IS_FP32, PRECISION), APART)
    if CHUNKS > 1:
        acc += _apart(dot(a1.to(dt), r1, IS_FP32, PRECISION), APART)
    if CHUNKS > 2:
        acc2 = _apart(dot(a2.to(dt), r2, IS_FP32, PRECISION), APART)
        if CHUNKS > 3:
            acc2 += _apart(dot(a3.to(dt), r3, IS_FP32, PRECISION), APART)
        acc += acc2
    return acc


@triton.jit
def split_backward_kernel(
    gates_ptr,  # [B, T, G_B, NH, DH] pre-activations saved by the split forward
    out_ptr,  # [S, B, T, NH, DH] the forward's states
    s0_ptr,  # [S, B, 1, NH, DH] initial states
    r_ptr,  # [G_R, NH, DH, DH]
    dout_ptr,  # [S, B, T, NH, DH] dL/d(all states)
    init_ptr,  # [S, B, 1, NH, DH] the carry this launch starts from (read if HAS_INIT; see below)
    dg_ptr,  # [T, B, G_B, NH, DH] gate gradients, time-major (written); the exchange buffer
    carry_ptr,  # [S, B, 1, NH, DH] written: dL/d(initial states) if FINAL, else the carry after step t_lo
    bar_ptr,  # int64 barrier counter (BARRIER only)
    B,
    T,
    NH,
    state_stride,  # B * T * NH * DH
    t_lo,  # this launch runs steps t_hi - 1 down to t_lo
    t_hi,
    n_programs,
    FUNCTION: tl.constexpr,
    G_R: tl.constexpr,
    G_B: tl.constexpr,
    DH: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_U: tl.constexpr,
    BLOCK_K: tl.constexpr,
    CHUNKS: tl.constexpr,
    HAS_INIT: tl.constexpr,
    FINAL: tl.constexpr,  # end with the product of dG_0: write dL/d(initial states) instead of the carry
    IS_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
    BARRIER: tl.constexpr,
    APART: tl.constexpr,
):
    """Program (p, n, tile): units [p * BLOCK_U, (p + 1) * BLOCK_U) of head n's dh, batch rows of ``tile``.

    The carry between steps (and launches) is (the part of dh that skips R, dc): at t = T-1 it is dL/d(last
    states); the part through R is added at the next step, from dG written by all programs one barrier earlier.
    So one launch per step (the interpreter) never reads what the same launch writes, and a last launch with no
    steps (FINAL) adds dG_0's part to give dL/d(initial states)."""
    G: tl.constexpr = 4 if G_B > 1 else 1
    p = tl.program_id(0)
    n = tl.program_id(1)
    rows = tl.program_id(2) * BLOCK_B + tl.arange(0, BLOCK_B)
    HD = NH * DH
    row_ok = (rows < B)[:, None]
    rows64 = rows.to(tl.int64)

    # R's columns for p's units, in up to four chunks of rows (gate, j)
    r0 = load_r_columns(r_ptr, n, p, 0, NH, DH, BLOCK_U, BLOCK_K, G_R, G)
    r1 = r0
    r2 = r0
    r3 = r0
    if CHUNKS > 1:
        r1 = load_r_columns(r_ptr, n, p, BLOCK_K, NH, DH, BLOCK_U, BLOCK_K, G_R, G)
    if CHUNKS > 2:
        r2 = load_r_columns(r_ptr, n, p, 2 * BLOCK_K, NH, DH, BLOCK_U, BLOCK_K, G_R, G)
    if CHUNKS > 3:
        r3 = load_r_columns(r_ptr, n, p, 3 * BLOCK_K, NH, DH, BLOCK_U, BLOCK_K, G_R, G)

    # p's units: the all-gates tiles [BLOCK_B, G * BLOCK_U] (saved pre-activations, dG) and the state tiles
    slot, u = gate_columns(G, BLOCK_U)
    j = p * BLOCK_U + u
    gate_mask = row_ok & ((slot < G_B) & (j < DH))[None, :]
    gate_rows = gates_ptr + rows64[:, None] * T * G_B * HD + (slot * HD + n * DH + j)[None, :]
    dg_own = dg_ptr + rows64[:, None] * G_B * HD + (slot * HD + n * DH + j)[None, :]  # + t * B * G_B * HD
    units = p * BLOCK_U + tl.arange(0, BLOCK_U)
    own_mask = row_ok & (units < DH)[None, :]
    own = rows[:, None] * HD + n * DH + units[None, :]  # in [S, B, 1, NH, DH]
    own_t = rows64[:, None] * T * HD + n * DH + units[None, :]  # in [S, B, T, NH, DH], + t * HD
    dg_rows = dg_ptr + rows64[:, None] * G_B * HD + n * DH  # the row of dG_t for this head, + t * B * G_B * HD

    direct = tl.zeros([BLOCK_B, BLOCK_U], dtype=tl.float32)  # the carried part of dh that skips R
    dc = tl.zeros([BLOCK_B, BLOCK_U], dtype=tl.float32)
    if HAS_INIT:
        direct = tl.load(init_ptr + own, mask=own_mask, other=0.0).to(tl.float32)
        if FUNCTION == 0:
            dc = tl.load(init_ptr + B * HD + own, mask=own_mask, other=0.0).to(tl.float32)
    PREV_OFF: tl.constexpr = 1 if FUNCTION == 0 else 0  # the previous state the cell needs: c (lstm), h (gru)
    STEP = B * G_B * HD  # dG's time stride

    base = 0
    if BARRIER:
        base = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
        base = base - base % n_programs
    for tt in range(t_hi - t_lo):
        t = t_hi - 1 - tt
        pre = tl.load(gate_rows + t * G_B * HD, mask=gate_mask, other=0.0).to(tl.float32)
        prev_ptr = tl.where(t > 0, out_ptr + PREV_OFF * state_stride + own_t + (t - 1) * HD,
                            s0_ptr + PREV_OFF * B * HD + own)  # fmt: skip
        prev = tl.load(prev_ptr, mask=own_mask, other=0.0).to(tl.float32)
        dh = direct + tl.load(dout_ptr + own_t + t * HD, mask=own_mask, other=0.0).to(tl.float32)
        if t < T - 1:  # dG_{t+1}, written by every program before the last barrier (or launch)
            dh += _through_r(dg_rows + (t + 1).to(tl.int64) * STEP, r0, r1, r2, r3, row_ok, HD,
                             DH, BLOCK_K, G, CHUNKS, IS_FP32, PRECISION, APART)  # fmt: skip
        g0, g1, g2, g3 = split_gates(pre, BLOCK_B, BLOCK_U, G)
        direct = tl.zeros([BLOCK_B, BLOCK_U], dtype=tl.float32)
        if FUNCTION == 0:
            dc += tl.load(dout_ptr + state_stride + own_t + t * HD, mask=own_mask, other=0.0).to(tl.float32)
            d0, d1, d2, d3, dc = lstm_cell_backward(g0, g1, g2, g3, prev, dh, dc)
            d_all = join_gates(d0, d1, d2, d3, BLOCK_B, BLOCK_U, G)
        elif FUNCTION == 1:
            d0, d1, d2, d3, direct = gru_cell_backward(g0, g1, g2, g3, prev, dh)
            d_all = join_gates(d0, d1, d2, d3, BLOCK_B, BLOCK_U, G)
        else:
            d_all = elman_cell_backward(g0, dh)
        tl.store(dg_own + t.to(tl.int64) * STEP, d_all.to(dg_ptr.dtype.element_ty), mask=gate_mask)
        if BARRIER:
            tl.debug_barrier()  # every thread's store of dG_t is issued before the arrival releases them
            tl.atomic_add(bar_ptr, 1, sem="release", scope="gpu")
            target = base + (tt + 1) * n_programs
            seen = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
            while seen < target:
                seen = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")

    if FINAL:  # dL/dh_{-1}: dG_0's part through R
        direct += _through_r(dg_rows, r0, r1, r2, r3, row_ok, HD, DH, BLOCK_K, G, CHUNKS, IS_FP32, PRECISION, APART)
    tl.store(carry_ptr + own, direct.to(carry_ptr.dtype.element_ty), mask=own_mask)
    if FUNCTION == 0:
        tl.store(carry_ptr + B * HD + own, dc.to(carry_ptr.dtype.element_ty), mask=own_mask)


def split_rnn_backward(d_out, gates, out, states, R, function="lstm", tiling=None, d_last=None, persistent=None):
    """The reverse-time loop: ``(dG [T, B, G_b, NH, DH] time-major, d_states [S, B, 1, NH, DH])``.

    ``gates`` are the pre-activations the split forward saved; ``d_last`` dL/d(last states) or None;
    ``persistent`` as in :func:`gpulab.rnn.backends.fused.split.split_rnn_forward`.
    """
    if persistent is None:
        persistent = not runtime.INTERPRET
    if persistent and runtime.INTERPRET:
        raise RuntimeError(
            "persistent=True: the interpreter runs programs one after another, so a grid barrier would wait "
            "forever; use persistent=False (one launch per step, the same math)."
        )
    fn = get_function(function)
    d_out, gates, out, states, R = (t.contiguous() for t in (d_out, gates, out, states, R))
    S, B, T, NH, DH = out.shape
    dev, dt = out.device, out.dtype
    cfg = tiling or split_tiling(B, NH, DH, fn.name, dt, direction="backward")
    dG = new_output(T, B, fn.gates_b, NH, DH, dtype=dt, device=dev)
    grid = (cfg.split, NH, triton.cdiv(B, cfg.block_b))
    programs = grid[0] * grid[1] * grid[2]
    consts = dict(
        FUNCTION=fn.code, G_R=fn.gates_r, G_B=fn.gates_b, DH=DH, BLOCK_B=cfg.block_b, BLOCK_U=cfg.block_u,
        BLOCK_K=cfg.block_k, CHUNKS=cfg.chunks, IS_FP32=dt == torch.float32, PRECISION=runtime.dot_precision(dt),
        BARRIER=persistent, APART=not runtime.INTERPRET, **cfg.launch(),
    )  # fmt: skip
    stride = B * T * NH * DH
    if persistent:
        ds0 = new_output(S, B, 1, NH, DH, dtype=states.dtype, device=dev)
        bar = barrier_counter(dev, programs)
        init = d_last.contiguous() if d_last is not None else ds0
        ints = (B, T, NH, stride, 0, T, programs)
        launch = cached_launch(split_backward_kernel, grid, dict(
            consts, HAS_INIT=d_last is not None, FINAL=True, launch_cooperative_grid=True), ints)  # fmt: skip
        tensors = (gates, out, states, R, d_out, init, dG, ds0, bar)
        launch(direct_stream(dev) if aligned(*tensors) else None, *tensors, *ints)
        return dG, ds0
    carry = torch.zeros((S, B, 1, NH, DH), dtype=torch.float32, device=dev)
    if d_last is not None:
        carry.copy_(d_last)
    for t0, t1, final in [(t, t + 1, False) for t in reversed(range(T))] + [(0, 0, True)]:
        split_backward_kernel[grid](
            gates, out, states, R, d_out, carry, dG, carry, carry, B, T, NH, stride, t0, t1, programs,
            HAS_INIT=True, FINAL=final, **consts,
        )  # fmt: skip
    return dG, carry.to(states.dtype)


def split_rnn_gradients(d_out, gates, out, states, R, function="lstm", d_last=None, tiling=None):
    """The whole split backward: ``(dWx, dR, db, d_states)``: the reverse-time kernel, then the parameter products
    over all steps at once."""
    dG, ds0 = split_rnn_backward(d_out, gates, out, states, R, function, tiling, d_last)
    return (*gate_gradients_to_parameters(dG, out, states, function, time_major=True), ds0)
