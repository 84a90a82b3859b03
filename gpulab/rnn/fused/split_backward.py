"""Lesson 7: the split-head backward, one reverse-time persistent kernel over P programs per head.

What you will learn: the backward's recurrence is the forward's, transposed, and *which side of the product you
exchange* decides what crosses L2 every step. The gradient reaching h_{t-1} through R is

    dh_{t-1}[k] = sum_{g, j} dG_t[g, j] R[g, j, k]         (k, j units; g gate slots)

Split the head by units as the forward does: program p owns units U_p (``BLOCK_U`` of them), runs their cell
backward, and so produces dG_t[:, U_p]. Two ways to finish the product:

1. *Exchange dG* (this kernel's first version; :mod:`gpulab.rnn.fused.versions` notes its measured step): every
   program reads all of dG_t (G x DH values per batch row) and multiplies it by R's columns of its units. It reads
   G = 4 times the forward's bytes per step, and the tile it reads must pass through shared memory to become a
   tensor-core operand.
2. *Exchange partial sums of dh* (this kernel): program p holds R's *rows* of its units, R[:, U_p, :]
   [G * BLOCK_U, DH], and pushes its share of every unit's gradient, ``dG_t[:, U_p] @ R[:, U_p, :]`` [BLOCK_B, DH]
   (accumulated in fp32, stored in the compute dtype as the forward stores h), to L2; after the barrier it reads
   the P shares of its own units and adds them in fp32. Each program writes and reads DH values per row, as many
   bytes as the forward reads, and the values it reads are only summed: no shared-memory round trip.

The partial sums live in a two-slot ring ``part[t % 2]``: step t writes slot t % 2 before the barrier; step t - 1
reads it after the barrier, then writes slot (t - 1) % 2. Rewriting a slot two steps later is safe because every
program has passed the barrier in between, so nobody still reads it. dG itself is still written (every step, in Wx's
layout [B, T, ...], so that it is dWx as it stands): the parameter products dR, db, dWx need all of it
(:func:`gpulab.rnn.backends.parameter_grads.gate_gradients_to_parameters`). dc never leaves the program (the LSTM's
cell path is per unit), nor does the GRU's direct path dh z'.

The barrier, its counter and the cooperative launch are those of the forward (:mod:`.split`); in the interpreter
the kernel runs one launch per step and carries dh (dc) in fp32 between launches. ``exchange='flags'`` and
``'hinted'`` (:mod:`.exchange`) replace the barrier: the hinted words carry the shares with their step's tag, read
after a counter that nobody fences (a candidate: the backward keeps 'barrier' until records show it faster;
``notes/rnn-split.md``).

Per step t = T-1 .. 0, program (p, n, tile), fp32 (G = 4 slots for lstm and gru, 1 for elman; the forward saved
pre-activations):

    dh = dL/dh_t + carried direct part + sum_q part[(t + 1) % 2][q, :, U_p]     [BLOCK_B, BLOCK_U] (none at T-1)
    (LSTM) dc = dL/dc_t + carried dc
    dG_own, dc, direct = cell_backward(pre_t, previous state, dh, dc)           [BLOCK_B, G * BLOCK_U]
    store dG_own at dG[t]
    part[t % 2][p] = dG_own @ R[:, U_p, :]        ([BLOCK_B, G * BLOCK_U] x [G * BLOCK_U, BLOCK_K], per chunk of k)
    barrier

and at the end dL/dh_{-1} = direct + sum_q part[0][q, :, U_p].
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import runtime
from gpulab.check import new_output
from gpulab.launch import aligned, cached_launch, direct_stream
from gpulab.rnn.backends.parameter_grads import gate_gradients_to_parameters
from gpulab.rnn.cells import elman_cell_backward, gru_cell_backward, lstm_cell_backward
from gpulab.rnn.functions import get_function
from gpulab.rnn.fused.clocks import clock_after, globaltimer_after, keep
from gpulab.rnn.fused.exchange import (
    EXCHANGES,
    SPIN_TRIES,
    flag_arrive,
    flags_wait,
    hinted_chunk,
    hinted_fits,
    hinted_stale,
    leave,
    pack_hinted,
    poison_if,
    tag_base,
    tagged_state,
)
from gpulab.rnn.fused.split_tiling import split_tiling
from gpulab.rnn.fused.tiles import barrier_counter, gate_columns, join_gates, persistent_mode, split_gates
from gpulab.triton_ops import dot, dot_operand

__all__ = ["split_backward_kernel", "split_rnn_backward", "split_rnn_gradients"]
"""The backward's exchange ('barrier', 'flags' or 'hinted'; :func:`split_rnn_backward`): lesson 7's records decide."""


@triton.jit
def load_r_rows(r_ptr, n, p, k0, NH, DH: tl.constexpr, BLOCK_U: tl.constexpr, BLOCK_K: tl.constexpr,
                G_R: tl.constexpr, G: tl.constexpr):  # fmt: skip
    """R's rows (gate, j) of p's units j, columns k in [k0, k0 + BLOCK_K): [G * BLOCK_U, BLOCK_K], element
    [slot * BLOCK_U + u, kk] = R[slot, n, p * BLOCK_U + u, k0 + kk] (zero past DH and for slots >= G_R)."""
    slot, u = gate_columns(G, BLOCK_U)
    j = p * BLOCK_U + u
    k = k0 + tl.arange(0, BLOCK_K)
    ptr = r_ptr + ((slot * NH + n) * DH + j)[:, None] * DH + k[None, :]
    return tl.load(ptr, mask=((slot < G_R) & (j < DH))[:, None] & (k < DH)[None, :], other=0.0)


@triton.jit
def _push(part_own, d_op, r, k0, row_ok, DH: tl.constexpr, BLOCK_K: tl.constexpr, IS_FP32: tl.constexpr,
          PRECISION: tl.constexpr, tag, HINTED: tl.constexpr):  # fmt: skip
    """This program's share of units [k0, k0 + BLOCK_K) of dh_{t-1}: ``d_op @ r`` [BLOCK_B, BLOCK_K], stored to its
    row of the partial-sum slot (``part_own`` [BLOCK_B, 1] points at unit 0 of it; HINTED: as words of the value in
    R's dtype and ``tag``, see .exchange)."""
    k = k0 + tl.arange(0, BLOCK_K)
    share = dot(d_op, r, IS_FP32, PRECISION)
    if HINTED:
        tl.store(part_own + k[None, :], pack_hinted(share.to(r.dtype), tag), mask=row_ok & (k < DH)[None, :])
    else:
        tl.store(part_own + k[None, :], share.to(part_own.dtype.element_ty), mask=row_ok & (k < DH)[None, :])
    return share


@triton.jit
def _gather(part_rows, units, row_ok, DH: tl.constexpr, SPLIT: tl.constexpr, BLOCK_B: tl.constexpr,
            BLOCK_U: tl.constexpr):  # fmt: skip
    """The sum of all SPLIT programs' shares of this program's units: [BLOCK_B, BLOCK_U] fp32. ``part_rows``
    [BLOCK_B, 1] points at program 0's share in a slot, one DH-row per program; read from L2 (other SMs wrote it).

    One [BLOCK_B, BLOCK_U] load per program, summed in order (no 3-D tile reduced over its programs' axis: the
    compiler then kept the sum, and the whole cell after it, in a layout that repeats every element on many
    threads). The loads do not depend on each other, so all are in flight at once."""
    ok = row_ok & (units < DH)[None, :]
    acc = tl.zeros([BLOCK_B, BLOCK_U], dtype=tl.float32)
    for q in tl.static_range(SPLIT):
        acc += tl.load(part_rows + q * DH + units[None, :], mask=ok, other=0.0, cache_modifier=".cg")
    return acc


@triton.jit
def _gather_hinted(part_rows, units, row_ok, want, DT: tl.constexpr, DH: tl.constexpr, SPLIT: tl.constexpr,
                   BLOCK_B: tl.constexpr, BLOCK_U: tl.constexpr):  # fmt: skip
    """:func:`_gather` from hinted words (``part_rows`` int32): the sum [BLOCK_B, BLOCK_U] fp32 and whether any word
    under ``row_ok`` still carries another tag than ``want`` (then the caller loads them all again)."""
    ok = row_ok & (units < DH)[None, :]
    acc = tl.zeros([BLOCK_B, BLOCK_U], dtype=tl.float32)
    x = tl.zeros([BLOCK_B, BLOCK_U], dtype=tl.int32)
    for q in tl.static_range(SPLIT):
        v, xq = hinted_chunk(part_rows + q * DH + units[None, :], ok, want, DT)
        acc += v.to(tl.float32)
        x = x | xq
    return acc, hinted_stale(x).to(tl.int32)


@triton.jit
def _step_inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, gate_rows, gate_mask, own, own_t, own_mask, t, B, HD,
                 G_B: tl.constexpr, state_stride, PREV_OFF: tl.constexpr, FUNCTION: tl.constexpr):  # fmt: skip
    """Step t's loads from HBM, in the tensors' dtype: (pre-activations [BLOCK_B, G * BLOCK_U], the previous
    state the cell needs, dL/dh_t, dL/dc_t (zero but for the LSTM)) of this program's units."""
    pre = tl.load(gate_rows + t * G_B * HD, mask=gate_mask, other=0.0)
    prev_ptr = tl.where(t > 0, out_ptr + PREV_OFF * state_stride + own_t + (t - 1) * HD,
                        s0_ptr + PREV_OFF * B * HD + own)  # fmt: skip
    prev = tl.load(prev_ptr, mask=own_mask, other=0.0)
    dh = tl.load(dout_ptr + own_t + t * HD, mask=own_mask, other=0.0)
    dc = tl.zeros_like(dh)
    if FUNCTION == 0:
        dc = tl.load(dout_ptr + state_stride + own_t + t * HD, mask=own_mask, other=0.0)
    return pre, prev, dh, dc


@triton.jit
def split_backward_kernel(
    gates_ptr,  # [B, T, G_B, NH, DH] pre-activations saved by the split forward
    out_ptr,  # [S, B, T, NH, DH] the forward's states
    s0_ptr,  # [S, B, 1, NH, DH] initial states
    r_ptr,  # [G_R, NH, DH, DH]
    dout_ptr,  # [S, B, T, NH, DH] dL/d(all states)
    init_ptr,  # [S, B, 1, NH, DH] the carry this launch starts from (read if HAS_INIT; see below)
    dg_ptr,  # [B, T, G_B, NH, DH] gate gradients, Wx's layout (written, for the parameter products and as dWx)
    part_ptr,  # [2, B, NH, SPLIT, DH]: the two slots of partial sums of dh, one row per program (HINTED: int32 words)
    carry_ptr,  # [S, B, 1, NH, DH] written: dL/d(initial states) if FINAL, else the carry after step t_lo
    bar_ptr,  # int64 barrier counter (BARRIER only)
    clk_ptr,  # int64 [programs, T + 1, 8] clock stamps (TIMING only; see .clocks)
    flag_ptr,  # int64 [programs] a flag per program (FLAGS only; see .exchange)
    seq_ptr,  # int64 [2] the tags' sequence number and the programs that left (FLAGS and HINTED)
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
    SPLIT: tl.constexpr,  # P, programs per head (and batch tile)
    BLOCK_B: tl.constexpr,
    BLOCK_U: tl.constexpr,
    BLOCK_K: tl.constexpr,
    CHUNKS: tl.constexpr,
    HAS_INIT: tl.constexpr,
    FINAL: tl.constexpr,  # end with the sum of step 0's shares: write dL/d(initial states) instead of the carry
    IS_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
    BARRIER: tl.constexpr,
    OPAQUE: tl.constexpr,  # compiled 16-bit kernels: the product's register operand through dot_operand
    TIMING: tl.constexpr,  # clock stamps per program and step into clk_ptr (GPU only; see .clocks)
    FLAGS: tl.constexpr,  # a flag per program instead of the counter barrier (see .exchange)
    P_PAD: tl.constexpr,  # SPLIT to a power of two (FLAGS only)
    SPIN: tl.constexpr,  # polls of the flags before giving up (exchange.SPIN_TRIES)
    FENCE: tl.constexpr,  # compiled kernels: the acquire fence after the flags (see exchange.flags_wait)
    HINTED: tl.constexpr,  # the shares as hinted words, read after a fence-free counter (16-bit; see .exchange)
):
    """Program (p, n, tile): units [p * BLOCK_U, (p + 1) * BLOCK_U) of head n, batch rows of ``tile``.

    The carry between steps (and launches) is (the part of dh that skips R, dc): at t = T-1 it is dL/d(last
    states); the part through R is added at the next step, from the shares all programs wrote one barrier earlier.
    So one launch per step (the interpreter) never reads what the same launch writes, and a last launch with no
    steps (FINAL) adds step 0's shares to give dL/d(initial states)."""
    G: tl.constexpr = 4 if G_B > 1 else 1
    p = tl.program_id(0)
    n = tl.program_id(1)
    rows = tl.program_id(2) * BLOCK_B + tl.arange(0, BLOCK_B)
    HD = NH * DH
    row_ok = (rows < B)[:, None]
    rows64 = rows.to(tl.int64)

    # R's rows of p's units, [G * BLOCK_U, BLOCK_K] per chunk of the columns k: on chip for the whole launch
    r0 = load_r_rows(r_ptr, n, p, 0, NH, DH, BLOCK_U, BLOCK_K, G_R, G)
    r1 = r0
    r2 = r0
    r3 = r0
    if CHUNKS > 1:
        r1 = load_r_rows(r_ptr, n, p, BLOCK_K, NH, DH, BLOCK_U, BLOCK_K, G_R, G)
    if CHUNKS > 2:
        r2 = load_r_rows(r_ptr, n, p, 2 * BLOCK_K, NH, DH, BLOCK_U, BLOCK_K, G_R, G)
    if CHUNKS > 3:
        r3 = load_r_rows(r_ptr, n, p, 3 * BLOCK_K, NH, DH, BLOCK_U, BLOCK_K, G_R, G)

    # p's units: the all-gates tiles [BLOCK_B, G * BLOCK_U] (saved pre-activations, dG) and the state tiles
    slot, u = gate_columns(G, BLOCK_U)
    j = p * BLOCK_U + u
    gate_mask = row_ok & ((slot < G_B) & (j < DH))[None, :]
    gate_rows = gates_ptr + rows64[:, None] * T * G_B * HD + (slot * HD + n * DH + j)[None, :]
    dg_own = dg_ptr + rows64[:, None] * T * G_B * HD + (slot * HD + n * DH + j)[None, :]  # + t * STEP
    units = p * BLOCK_U + tl.arange(0, BLOCK_U)
    own_mask = row_ok & (units < DH)[None, :]
    own = rows[:, None] * HD + n * DH + units[None, :]  # in [S, B, 1, NH, DH]
    own_t = rows64[:, None] * T * HD + n * DH + units[None, :]  # in [S, B, T, NH, DH], + t * HD
    part_rows = part_ptr + (rows64[:, None] * NH + n) * SPLIT * DH  # program 0's share in slot 0, + slot * PSLOT
    part_own = part_rows + p * DH  # this program's share
    PSLOT = B * NH * SPLIT * DH  # the stride between the two slots

    direct = tl.zeros([BLOCK_B, BLOCK_U], dtype=tl.float32)  # the carried part of dh that skips R
    dc = tl.zeros([BLOCK_B, BLOCK_U], dtype=tl.float32)
    if HAS_INIT:
        direct = tl.load(init_ptr + own, mask=own_mask, other=0.0).to(tl.float32)
        if FUNCTION == 0:
            dc = tl.load(init_ptr + B * HD + own, mask=own_mask, other=0.0).to(tl.float32)
    PREV_OFF: tl.constexpr = 1 if FUNCTION == 0 else 0  # the previous state the cell needs: c (lstm), h (gru)
    STEP = G_B * HD  # dG's time stride

    base = 0
    if BARRIER and not FLAGS:
        base = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
        base = base - base % n_programs
    # FLAGS: the shares of step t carry the tag base + (T - 1 - t) + 1 (the steps in the order they run, across
    # launches of one step each too: see .exchange)
    prog = (tl.program_id(2) * NH + n) * SPLIT + p
    tbase = base  # HINTED: the shares' tags as FLAGS numbers them; base stays the counter's (the hint)
    if FLAGS:
        base = tag_base(seq_ptr, T - t_hi)
    if HINTED:
        tbase = tag_base(seq_ptr, T - t_hi)
    # step t's inputs from HBM are requested one step ahead, so their latency hides behind the previous step's
    # exchange and barrier (never a step below 0: the last per-step launch runs no step, t_hi = 0)
    pre_n, prev_n, dh_n, dc_n = _step_inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, gate_rows, gate_mask, own,
                                             own_t, own_mask, tl.maximum(t_hi - 1, 0), B, HD, G_B, state_stride,
                                             PREV_OFF, FUNCTION)  # fmt: skip
    prog = (tl.program_id(2) * NH + n) * tl.num_programs(0) + p
    clk = clk_ptr + (prog * (T + 1)).to(tl.int64) * 8
    if TIMING:
        keep(clk + T * 8, clock_after(dc), BLOCK_B, BLOCK_U)
        keep(clk + T * 8 + 1, globaltimer_after(dc), BLOCK_B, BLOCK_U)
    for tt in range(t_hi - t_lo):
        t = t_hi - 1 - tt
        pre = pre_n.to(tl.float32)
        if TIMING:  # 0: this step's inputs have arrived (loaded one step ahead)
            keep(clk + t * 8, clock_after(pre), BLOCK_B, G * BLOCK_U)
        prev = prev_n.to(tl.float32)
        dh = direct + dh_n.to(tl.float32)
        dc += dc_n.to(tl.float32)
        pre_n, prev_n, dh_n, dc_n = _step_inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, gate_rows, gate_mask, own,
                                                 own_t, own_mask, tl.maximum(t - 1, 0), B, HD, G_B, state_stride,
                                                 PREV_OFF, FUNCTION)  # fmt: skip
        # the shares of step t + 1, written by every program before the last barrier (or launch); none at T - 1
        # (masked, not branched: a branch here made the compiler keep the cell below in two layouts)
        shares = part_rows + ((t + 1) % 2) * PSLOT
        late = 0
        if FLAGS:  # every program of this head has pushed its shares of step t + 1
            if t < T - 1:
                zero, late = flags_wait(flag_ptr + (prog - p), SPLIT, base + (T - 1 - t), P_PAD, SPIN, FENCE)
                shares += zero
        if HINTED:  # the counter says every program pushed step t + 1 (a hint), then the words, again if one is old
            if BARRIER and tt > 0:
                target = base + tt * n_programs
                seen = tl.atomic_add(bar_ptr, 0, sem="relaxed", scope="gpu")
                while seen < target:
                    seen = tl.atomic_add(bar_ptr, 0, sem="relaxed", scope="gpu")
            live = row_ok & (t < T - 1)
            got, late = _gather_hinted(shares, units, live, tbase + (T - 1 - t), r0.dtype, DH, SPLIT, BLOCK_B, BLOCK_U)
            tries = 1
            while (late > 0) & (tries < SPIN):
                got, late = _gather_hinted(shares, units, live, tbase + (T - 1 - t), r0.dtype, DH, SPLIT, BLOCK_B,
                                           BLOCK_U)  # fmt: skip
                tries += 1
            dh += got
        else:
            dh += _gather(shares, units, row_ok & (t < T - 1), DH, SPLIT, BLOCK_B, BLOCK_U)
        if FLAGS or HINTED:
            dh = poison_if(dh, late, SPIN)
        if TIMING:  # 1: the shares of dh from the other programs have arrived
            keep(clk + t * 8 + 1, clock_after(dh), BLOCK_B, BLOCK_U)
        g0, g1, g2, g3 = split_gates(pre, BLOCK_B, BLOCK_U, G)
        direct = tl.zeros([BLOCK_B, BLOCK_U], dtype=tl.float32)
        if FUNCTION == 0:
            d0, d1, d2, d3, dc = lstm_cell_backward(g0, g1, g2, g3, prev, dh, dc)
            d_all = join_gates(d0, d1, d2, d3, BLOCK_B, BLOCK_U, G)
        elif FUNCTION == 1:
            d0, d1, d2, d3, direct = gru_cell_backward(g0, g1, g2, g3, prev, dh)
            d_all = join_gates(d0, d1, d2, d3, BLOCK_B, BLOCK_U, G)
        else:
            d_all = elman_cell_backward(g0, dh)
        if TIMING:  # 2: the cell's backward (pointwise) is done
            keep(clk + t * 8 + 2, clock_after(d_all), BLOCK_B, G * BLOCK_U)
        d_all = d_all.to(dg_ptr.dtype.element_ty)
        tl.store(dg_own + t.to(tl.int64) * STEP, d_all, mask=gate_mask)
        # this program's shares of dh_{t-1}, from dG_t as stored (the parameter products read the same values)
        d_op = dot_operand(d_all.to(r0.dtype), OPAQUE)
        part_t = part_own + (t % 2) * PSLOT
        tag = tbase + (T - 1 - t) + 1
        share = _push(part_t, d_op, r0, 0, row_ok, DH, BLOCK_K, IS_FP32, PRECISION, tag, HINTED)
        if CHUNKS > 1:
            share = _push(part_t, d_op, r1, BLOCK_K, row_ok, DH, BLOCK_K, IS_FP32, PRECISION, tag, HINTED)
        if CHUNKS > 2:
            share = _push(part_t, d_op, r2, 2 * BLOCK_K, row_ok, DH, BLOCK_K, IS_FP32, PRECISION, tag, HINTED)
        if CHUNKS > 3:
            share = _push(part_t, d_op, r3, 3 * BLOCK_K, row_ok, DH, BLOCK_K, IS_FP32, PRECISION, tag, HINTED)
        if TIMING:  # 3: the products (this program's shares of dh_{t-1}) are done; 4: their stores issued
            keep(clk + t * 8 + 3, clock_after(share), BLOCK_B, BLOCK_K)
            keep(clk + t * 8 + 4, clock_after(share), BLOCK_B, BLOCK_K)
        if FLAGS:
            flag_arrive(flag_ptr + prog, base + (T - 1 - t) + 1)
            if TIMING:  # 5 = 4: no barrier (the wait is in the next step's exchange)
                keep(clk + t * 8 + 5, clock_after(share), BLOCK_B, BLOCK_K)
        if HINTED and BARRIER:  # the arrival, a hint: no fence (a CTA barrier, so that it comes after every store)
            tl.debug_barrier()
            tl.atomic_add(bar_ptr, 1, sem="relaxed", scope="gpu")
            if TIMING:  # 5: the arrival is issued (the wait is in the next step's exchange)
                keep(clk + t * 8 + 5, clock_after(share), BLOCK_B, BLOCK_K)
        if BARRIER and not FLAGS and not HINTED:
            tl.debug_barrier()  # every thread's stores of step t are issued before the arrival releases them
            tl.atomic_add(bar_ptr, 1, sem="release", scope="gpu")
            target = base + (tt + 1) * n_programs
            seen = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
            while seen < target:
                seen = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
            if TIMING:  # 5: the barrier is passed
                keep(clk + t * 8 + 5, clock_after(tl.zeros([1, 1], tl.int32) + seen.to(tl.int32)), 1, 1)

    if TIMING:
        keep(clk + T * 8 + 2, clock_after(dc), BLOCK_B, BLOCK_U)
        keep(clk + T * 8 + 3, globaltimer_after(dc), BLOCK_B, BLOCK_U)
    if FINAL:  # dL/dh_{-1}: step 0's shares (slot 0)
        shares0 = part_rows
        late0 = 0
        if FLAGS:
            zero0, late0 = flags_wait(flag_ptr + (prog - p), SPLIT, base + T, P_PAD, SPIN, FENCE)
            shares0 += zero0
        if HINTED:
            if BARRIER:
                target0 = base + (t_hi - t_lo) * n_programs
                seen0 = tl.atomic_add(bar_ptr, 0, sem="relaxed", scope="gpu")
                while seen0 < target0:
                    seen0 = tl.atomic_add(bar_ptr, 0, sem="relaxed", scope="gpu")
            got0, late0 = _gather_hinted(shares0, units, row_ok, tbase + T, r0.dtype, DH, SPLIT, BLOCK_B, BLOCK_U)
            tries0 = 1
            while (late0 > 0) & (tries0 < SPIN):
                got0, late0 = _gather_hinted(shares0, units, row_ok, tbase + T, r0.dtype, DH, SPLIT, BLOCK_B, BLOCK_U)
                tries0 += 1
            direct += got0
        else:
            direct += _gather(shares0, units, row_ok, DH, SPLIT, BLOCK_B, BLOCK_U)
        if FLAGS or HINTED:
            direct = poison_if(direct, late0, SPIN)
    if FLAGS or HINTED:
        leave(seq_ptr, n_programs, t_hi - t_lo)
    tl.store(carry_ptr + own, direct.to(carry_ptr.dtype.element_ty), mask=own_mask)
    if FUNCTION == 0:
        tl.store(carry_ptr + B * HD + own, dc.to(carry_ptr.dtype.element_ty), mask=own_mask)


def split_rnn_backward(
    d_out,
    gates,
    out,
    states,
    R,
    function="lstm",
    tiling=None,
    d_last=None,
    persistent=None,
    clocks=None,
    exchange=None,
):
    """The reverse-time loop: ``(dG [B, T, G_b, NH, DH] in Wx's layout, d_states [S, B, 1, NH, DH])``.

    ``gates`` are the pre-activations the split forward saved; ``d_last`` dL/d(last states) or None;
    ``persistent`` and ``clocks`` as in :func:`gpulab.rnn.fused.split.split_rnn_forward` (the stamps of step t at
    row t; the parts are :data:`gpulab.rnn.fused.clocks.BACKWARD_PARTS`). ``exchange``: 'barrier' (the counter),
    'flags' (a flag per program, :mod:`gpulab.rnn.fused.exchange`) or 'hinted' (the shares as words of a value and
    its tag, read after a fence-free counter; 16-bit); default 'barrier'.
    """
    persistent = persistent_mode(persistent)
    fn = get_function(function)
    d_out, gates, out, states, R = (t.contiguous() for t in (d_out, gates, out, states, R))
    S, B, T, NH, DH = out.shape
    dev, dt = out.device, out.dtype
    cfg = tiling or split_tiling(B, NH, DH, fn.name, dt, direction="backward")
    dG = new_output(B, T, fn.gates_b, NH, DH, dtype=dt, device=dev)
    part = torch.empty((2, B, NH, cfg.split, DH), dtype=dt, device=dev)  # every element read is written first
    grid = (cfg.split, NH, triton.cdiv(B, cfg.block_b))
    programs = grid[0] * grid[1] * grid[2]
    exchange = "barrier" if exchange is None else exchange
    runtime.one_of("exchange", exchange, tuple(e for e in EXCHANGES if e != "tagged"))
    if exchange == "hinted" and not hinted_fits(dt):
        raise ValueError(
            f"exchange='hinted' needs 16-bit values (float16, bfloat16); got {dt}: use exchange='barrier'."
        )
    if clocks is not None and (not persistent or tuple(clocks.shape) != (programs, T + 1, 8)):
        raise ValueError(
            f"clocks: a persistent launch's stamp buffer of shape {[programs, T + 1, 8]} (clocks.clock_buffer), "
            f"got {list(clocks.shape)} with persistent={persistent}."
        )
    consts = dict(
        FUNCTION=fn.code, G_R=fn.gates_r, G_B=fn.gates_b, DH=DH, SPLIT=cfg.split, BLOCK_B=cfg.block_b,
        BLOCK_U=cfg.block_u, BLOCK_K=cfg.block_k, CHUNKS=cfg.chunks,
        IS_FP32=dt == torch.float32, PRECISION=runtime.dot_precision(dt), BARRIER=persistent,
        OPAQUE=not runtime.INTERPRET and dt != torch.float32, TIMING=clocks is not None, FLAGS=exchange == "flags",
        P_PAD=triton.next_power_of_2(cfg.split), SPIN=SPIN_TRIES, FENCE=not runtime.INTERPRET,
        HINTED=exchange == "hinted", **cfg.launch(),
    )  # fmt: skip
    seq = flags = out
    if exchange == "flags":
        seq, flags = tagged_state(dev, programs, programs, "backward flags")
    elif exchange == "hinted":  # the two slots as int32 words
        seq, words = tagged_state(dev, programs, B * NH * cfg.split * DH, "backward hinted")
        part = words.view(torch.int32)
    stride = B * T * NH * DH
    if persistent:
        ds0 = new_output(S, B, 1, NH, DH, dtype=states.dtype, device=dev)
        bar = barrier_counter(dev, programs)
        init = d_last.contiguous() if d_last is not None else ds0
        ints = (B, T, NH, stride, 0, T, programs)
        launch = cached_launch(split_backward_kernel, grid, dict(
            consts, HAS_INIT=d_last is not None, FINAL=True, launch_cooperative_grid=True), ints)  # fmt: skip
        tensors = (
            gates,
            out,
            states,
            R,
            d_out,
            init,
            dG,
            part,
            ds0,
            bar,
            bar if clocks is None else clocks,
            flags,
            seq,
        )
        launch(direct_stream(dev) if aligned(*tensors) else None, *tensors, *ints)
        return dG, ds0
    carry = torch.zeros((S, B, 1, NH, DH), dtype=torch.float32, device=dev)
    if d_last is not None:
        carry.copy_(d_last)
    for t0, t1, final in [(t, t + 1, False) for t in reversed(range(T))] + [(0, 0, True)]:
        split_backward_kernel[grid](
            gates, out, states, R, d_out, carry, dG, part, carry, carry, carry, flags, seq, B, T, NH, stride, t0, t1,
            programs,
            HAS_INIT=True, FINAL=final, **consts,
        )  # fmt: skip
    return dG, carry.to(states.dtype)


def split_rnn_gradients(
    d_out, gates, out, states, R, function="lstm", d_last=None, tiling=None, exchange=None, small_rows=None
):
    """The whole split backward: ``(dWx, dR, db, d_states)``: the reverse-time kernel (``exchange`` as for
    :func:`split_rnn_backward`), then the parameter products over all steps at once (``small_rows``:
    :func:`gpulab.rnn.backends.parameter_grads.one_launch`'s)."""
    dG, ds0 = split_rnn_backward(d_out, gates, out, states, R, function, tiling, d_last, exchange=exchange)
    return (*gate_gradients_to_parameters(dG, out, states, function, small_rows=small_rows), ds0)
