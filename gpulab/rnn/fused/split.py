"""Lesson 7: one head on several SMs, a persistent forward kernel with a grid barrier per step.

What you will learn:

- **Split the head by output units.** R of one head of 768 (LSTM, bf16) is 4.7 MB; an SM holds 227 KB. Program p
  of P owns ``BLOCK_U`` hidden units and *all gates* of them, so its slice R_p^T [DH, G * BLOCK_U] (column
  ``slot * BLOCK_U + u`` is gate ``slot`` of unit ``p * BLOCK_U + u``) stays on chip for the whole sequence, and the
  cell update of its units needs nothing from other programs: c never leaves the program.
- **h is the only thing exchanged, through L2.** Each step every program reads the whole h_{t-1} [BLOCK_B, DH],
  written one step earlier by all P programs, as the rows of the output ``states_all[0, :, t-1]``: the output is
  the exchange buffer, one slot per step, so a slot is never overwritten while someone still reads it and one
  barrier per step is enough. The reads bypass L1 (``cache_modifier=".cg"``): the data was written on other SMs.
- **One grid barrier per step.** After storing its units of h_t a program arrives at a counter in global memory
  (``tl.atomic_add(..., sem="release", scope="gpu")`` after a CTA barrier, so all its threads' stores come first;
  its result unused, so nobody waits for it) and spins with acquire loads until all programs have arrived. The
  counter is never reset: each program reads it once at the start, when it holds ``base`` (a multiple of the
  program count: every earlier launch added programs x barriers) plus the arrivals of programs already waiting at
  the first barrier, never all of them; step t's barrier then waits for ``base + (t + 1) * programs``. That stays
  right across launches and CUDA-graph replays as long as every launch on a counter has the same number of
  programs and they do not overlap (:func:`gpulab.rnn.fused.tiles.barrier_counter` keeps one counter per device,
  stream and program count).
- **Everyone resident, or no launch.** A program spinning for one that never started would wait forever, so the
  launch is cooperative (``launch_cooperative_grid=True``): the driver starts the grid only if all of it fits on the
  GPU at once (:mod:`gpulab.rnn.fused.split_tiling` checks the same thing before launch and says why not).
- **Two other ways to meet, measured and not taken** (``exchange=``, :mod:`gpulab.rnn.fused.exchange`): h in tagged
  words (NCCL's LL protocol: the load is the barrier) and a flag per program instead of the counter. Both keep the
  interpreter path; on the H100 both made the step longer (``python -m gpulab bench 07 steps``; lesson 7, Appendix
  G). A third, **hinted words** ('hinted'): h as 32-bit words of a value and its tag, read once a counter that
  nobody fences says every program arrived, so no release fence waits for the stores on the way; it needs 4 warps
  (the words in flight spill with 2). It measured faster at one head of 768; the chooser takes it only where
  :data:`gpulab.rnn.fused.split_tiling.MEASURED_EXCHANGE` lists it (the LSTM forward at 768), the barrier
  elsewhere. ``clocks=`` stamps each step's
  parts (:mod:`gpulab.rnn.fused.clocks`).
- **The interpreter runs programs one after another**, so a barrier there waits forever. The same kernel therefore
  also runs *one step per launch* (``BARRIER=False``, ``t_start``/``t_stop`` one step apart): the launch boundary is
  the barrier, and each program carries its units' states to the next launch in fp32 through ``last``. CI and
  learners exercise exactly the math of the persistent kernel; :func:`split_rnn_forward` picks the mode.

Per step t, program (p, n, tile) (``@`` = ``tl.dot``, fp32 accumulation; K chunks of BLOCK_K; G = 4 slots for lstm
and gru, 1 for elman; gate layout and cells as in :mod:`.forward`):

    pre = sum_k h_{t-1}[:, chunk k] @ R_p^T[chunk k]  +  Wx_t[:, slots, units of p] + b     [BLOCK_B, G * BLOCK_U]
    (h_t, c_t) of p's units = cell(pre, (h_{t-1}, c_{t-1}) of p's units)
    store h_t (the next step's exchange), c_t, the pre-activations (when training)
    barrier

The saved gates are pre-activations (as the ``alternating`` backend saves them): :mod:`.split_backward` reads them,
and so does the ``alternating`` backward where no split backward fits.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import runtime
from gpulab.check import new_output
from gpulab.launch import aligned, cached_launch, direct_stream
from gpulab.rnn.cells import elman_cell, gru_cell, lstm_activations
from gpulab.rnn.functions import get_function
from gpulab.rnn.fused.clocks import clock_after, globaltimer_after, keep
from gpulab.rnn.fused.exchange import (
    EXCHANGES,
    SPIN_TRIES,
    TAG_MASK,
    flag_arrive,
    flags_wait,
    hinted_chunk,
    hinted_fits,
    hinted_stale,
    leave,
    pack_hinted,
    pack_tagged,
    poison_if,
    stale_words,
    tag_base,
    tagged_fits,
    tagged_state,
    unpack_tagged,
)
from gpulab.rnn.fused.split_tiling import split_tiling
from gpulab.rnn.fused.tiles import (
    barrier_counter,
    cell_tanh,
    fast_activations,
    gate_columns,
    gate_scale,
    lstm_activations_approx,
    persistent_mode,
    split_gates,
)
from gpulab.triton_ops import dot, loaded_f32, word_pointer

__all__ = ["split_forward_kernel", "split_rnn_forward"]


@triton.jit
def load_r_slice(r_ptr, n, p, k0, NH, DH: tl.constexpr, BLOCK_U: tl.constexpr, BLOCK_K: tl.constexpr,
                 G_R: tl.constexpr, G: tl.constexpr):  # fmt: skip
    """Rows [k0, k0 + BLOCK_K) of R_p^T: [BLOCK_K, G * BLOCK_U], element [k, slot * BLOCK_U + u] =
    R[slot, n, p * BLOCK_U + u, k0 + k] (zero past DH and for slots >= G_R)."""
    slot, u = gate_columns(G, BLOCK_U)
    j = p * BLOCK_U + u
    k = k0 + tl.arange(0, BLOCK_K)
    ptr = r_ptr + ((slot * NH + n) * DH + j)[None, :] * DH + k[:, None]
    return tl.load(ptr, mask=((slot < G_R) & (j < DH))[None, :] & (k < DH)[:, None], other=0.0)


@triton.jit
def _h_chunk(prev, k0, row_ok, DH: tl.constexpr, BLOCK_K: tl.constexpr):
    """h_{t-1}[:, k0 : k0 + BLOCK_K] from the exchange buffer, read from L2 (other SMs wrote it)."""
    kk = k0 + tl.arange(0, BLOCK_K)
    return tl.load(prev + k0, mask=row_ok & (kk < DH)[None, :], other=0.0, cache_modifier=".cg")


@triton.jit
def _tagged_chunks(xs, row_ok, want, DH: tl.constexpr, WK: tl.constexpr, CHUNKS: tl.constexpr):
    """The tagged words of h_{t-1} (``xs`` [BLOCK_B, WK]: words 0..WK-1 of the rows in the slot), up to four chunks
    of WK words each, all requested at once, and how many of them do not yet carry ``want`` (see .exchange)."""
    kk = tl.arange(0, WK)[None, :]
    m0 = row_ok & (kk < DH // 2)
    w0 = tl.load(xs, mask=m0, other=0, volatile=True)
    w1 = w0
    w2 = w0
    w3 = w0
    if CHUNKS > 1:
        m1 = row_ok & (WK + kk < DH // 2)
        w1 = tl.load(xs + WK, mask=m1, other=0, volatile=True)
    if CHUNKS > 2:
        m2 = row_ok & (2 * WK + kk < DH // 2)
        w2 = tl.load(xs + 2 * WK, mask=m2, other=0, volatile=True)
    if CHUNKS > 3:
        m3 = row_ok & (3 * WK + kk < DH // 2)
        w3 = tl.load(xs + 3 * WK, mask=m3, other=0, volatile=True)
    stale = stale_words(w0, m0, want)
    if CHUNKS > 1:
        stale += stale_words(w1, m1, want)
    if CHUNKS > 2:
        stale += stale_words(w2, m2, want)
    if CHUNKS > 3:
        stale += stale_words(w3, m3, want)
    return w0, w1, w2, w3, stale


@triton.jit
def _hinted_chunks(xs, row_ok, want, DT: tl.constexpr, DH: tl.constexpr, BLOCK_K: tl.constexpr, CHUNKS: tl.constexpr):
    """The hinted words of h_{t-1} (``xs`` [BLOCK_B, 1]: word 0 of the rows in the slot), all chunks requested at once:
    their values (DT [BLOCK_B, BLOCK_K] each) and whether any word still carries another tag than ``want``."""
    kk = tl.arange(0, BLOCK_K)[None, :]
    h0, x = hinted_chunk(xs + kk, row_ok & (kk < DH), want, DT)
    h1 = h0
    h2 = h0
    h3 = h0
    if CHUNKS > 1:
        h1, x1 = hinted_chunk(xs + BLOCK_K + kk, row_ok & (BLOCK_K + kk < DH), want, DT)
        x = x | x1
    if CHUNKS > 2:
        h2, x2 = hinted_chunk(xs + 2 * BLOCK_K + kk, row_ok & (2 * BLOCK_K + kk < DH), want, DT)
        x = x | x2
    if CHUNKS > 3:
        h3, x3 = hinted_chunk(xs + 3 * BLOCK_K + kk, row_ok & (3 * BLOCK_K + kk < DH), want, DT)
        x = x | x3
    return h0, h1, h2, h3, hinted_stale(x).to(tl.int32)


@triton.jit
def _apart(x, APART: tl.constexpr):
    """A product's result through an identity instruction the compiler cannot look through (GPU only), so that
    ``a + dot(h, r)`` stays an add instead of becoming the accumulator of the product: the chunks' products are then
    independent chains of tensor-core instructions that overlap, not one chain K / 16 instructions long."""
    if APART:
        return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=False, pack=1)
    else:
        return x


@triton.jit
def split_forward_kernel(
    wx_ptr,  # [B, T, G_W, NH, DH]
    r_ptr,  # [G_R, NH, DH, DH]
    b_ptr,  # [G_B, NH, DH]
    s0_ptr,  # [S, B, 1, NH, DH] initial states (h_{-1} for the product at step 0)
    init_ptr,  # [S, B, 1, NH, DH] the states this launch starts from (s0, or the previous launch's fp32 carry)
    out_ptr,  # [S, B, T, NH, DH] all states (written); states_all[0] is the exchange buffer of h
    last_ptr,  # [S, B, 1, NH, DH] the states after step t_stop - 1 (written)
    gates_ptr,  # [B, T, G_B, NH, DH] pre-activations for the backward (if SAVE_GATES)
    bar_ptr,  # int64 counter of the grid barrier (BARRIER and not TAGGED; HINTED: the hint)
    xch_ptr,  # int64 [2, B, NH, DH // 2] tagged words of h (TAGGED), int32 [2, B, NH, DH] hinted words (HINTED)
    seq_ptr,  # int64 [2] the tags' sequence number and the programs that left (TAGGED, FLAGS, HINTED)
    clk_ptr,  # int64 [programs, T + 1, 8] clock stamps (TIMING only; see .clocks)
    B,
    T,
    NH,
    state_stride,  # B * T * NH * DH: from h to c in the outputs
    t_start,
    t_stop,
    n_programs,  # programs in the grid: arrivals per barrier
    FUNCTION: tl.constexpr,
    G_W: tl.constexpr,
    G_R: tl.constexpr,
    G_B: tl.constexpr,
    DH: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_U: tl.constexpr,
    BLOCK_K: tl.constexpr,
    CHUNKS: tl.constexpr,  # 1..4 chunks of BLOCK_K cover DH
    SAVE_GATES: tl.constexpr,
    FAST: tl.constexpr,
    IS_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
    BARRIER: tl.constexpr,  # True: steps t_start..t_stop-1 in one launch with a grid barrier after each
    APART: tl.constexpr,  # the chunks' products as independent chains (see _apart; compiled kernels only)
    TAGGED: tl.constexpr,  # h exchanged as tagged words: the load is the barrier (16-bit, even DH; see .exchange)
    SPIN: tl.constexpr,  # loads of the tagged words before giving up (exchange.SPIN_TRIES)
    TIMING: tl.constexpr,  # clock stamps per program and step into clk_ptr (GPU only; see .clocks)
    FLAGS: tl.constexpr,  # a flag per program instead of the counter barrier (xch_ptr: the flags; see .exchange)
    P_PAD: tl.constexpr,  # the programs of a head and batch tile, to a power of two (FLAGS only)
    HINTED: tl.constexpr,  # h as hinted words, read after a fence-free counter (16-bit; see .exchange)
):
    """Program (p, n, tile): units [p * BLOCK_U, (p + 1) * BLOCK_U) of head n, batch rows of ``tile``."""
    G: tl.constexpr = 4 if G_B > 1 else 1
    p = tl.program_id(0)
    n = tl.program_id(1)
    rows = tl.program_id(2) * BLOCK_B + tl.arange(0, BLOCK_B)
    HD = NH * DH
    row_ok = (rows < B)[:, None]
    rows64 = rows.to(tl.int64)

    # this program's columns of the all-gates tiles [BLOCK_B, G * BLOCK_U]: (slot, unit j of the head)
    slot, u = gate_columns(G, BLOCK_U)
    j = p * BLOCK_U + u
    col_ok = j < DH
    scale = gate_scale(slot, FAST, FUNCTION)[None, :]
    bias = tl.load(b_ptr + slot * HD + n * DH + j, mask=(slot < G_B) & col_ok, other=0.0).to(tl.float32)[None, :]
    bias = bias * scale
    # Wx in words of PK elements: PK = 2 loads two 16-bit values as one 32-bit word, so the prefetched tile crosses
    # the loop's back edge untouched (see gpulab.triton_ops.unpack_pairs and the single-SM kernel, .forward)
    PK: tl.constexpr = 2 if (not IS_FP32) and DH % 2 == 0 and BLOCK_U % 2 == 0 else 1
    wslot, wu = gate_columns(G, BLOCK_U // PK)
    wslot = wslot - (G_B - G_W)  # gru's Wx starts at slot 1
    wj = p * (BLOCK_U // PK) + wu
    HDP = NH * (DH // PK)
    wx_rows = word_pointer(wx_ptr, PK) + rows64[:, None] * T * G_W * HDP + (wslot * HDP + n * (DH // PK) + wj)[None, :]
    wx_mask = row_ok & ((wslot >= 0) & (wslot < G_W) & (wj < DH // PK))[None, :]
    gate_rows = gates_ptr + rows64[:, None] * T * G_B * HD + (slot * HD + n * DH + j)[None, :]
    gate_mask = row_ok & ((slot < G_B) & col_ok)[None, :]

    # R_p^T in up to four chunks of rows, loaded once, scaled as the single-SM kernel does (FAST folds sigmoid's 1/2)
    dt = r_ptr.dtype.element_ty
    r0 = (load_r_slice(r_ptr, n, p, 0, NH, DH, BLOCK_U, BLOCK_K, G_R, G).to(tl.float32) * scale).to(dt)
    r1 = r0
    r2 = r0
    r3 = r0
    if CHUNKS > 1:
        r1 = (load_r_slice(r_ptr, n, p, BLOCK_K, NH, DH, BLOCK_U, BLOCK_K, G_R, G).to(tl.float32) * scale).to(dt)
    if CHUNKS > 2:
        r2 = (load_r_slice(r_ptr, n, p, 2 * BLOCK_K, NH, DH, BLOCK_U, BLOCK_K, G_R, G).to(tl.float32) * scale).to(dt)
    if CHUNKS > 3:
        r3 = (load_r_slice(r_ptr, n, p, 3 * BLOCK_K, NH, DH, BLOCK_U, BLOCK_K, G_R, G).to(tl.float32) * scale).to(dt)

    # this program's units of the states, fp32 for the whole launch
    units = p * BLOCK_U + tl.arange(0, BLOCK_U)
    own_mask = row_ok & (units < DH)[None, :]
    own = rows[:, None] * HD + n * DH + units[None, :]  # in [S, B, 1, NH, DH] without the state offset
    h = tl.load(init_ptr + own, mask=own_mask, other=0.0).to(tl.float32)
    c = h
    if FUNCTION == 0:
        c = tl.load(init_ptr + B * HD + own, mask=own_mask, other=0.0).to(tl.float32)
    out_own = out_ptr + rows64[:, None] * T * HD + n * DH + units[None, :]
    # h_{t-1} for the product, all DH units: from s0 at step 0, else from the output of step t-1
    kk = tl.arange(0, BLOCK_K)
    s0_h = s0_ptr + rows[:, None] * HD + n * DH + kk[None, :]
    out_h = out_ptr + rows64[:, None] * T * HD + n * DH + kk[None, :]

    base = 0  # the barrier's count before this launch: programs * (the generations of earlier launches)
    if BARRIER and not TAGGED and not FLAGS:
        base = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")  # a load: nobody passed our first barrier yet
        base = base - base % n_programs
    # TAGGED: h_s as words of two values and the tag of step s, in slot (s + 1) % 2 (see .exchange)
    WK: tl.constexpr = BLOCK_K // 2
    WU: tl.constexpr = BLOCK_U // 2
    XSLOT = B * NH * (DH // 2)
    x_rows = xch_ptr + (rows64[:, None] * NH + n) * (DH // 2)  # [BLOCK_B, 1]: word 0 of the row in slot 0
    x_words = x_rows + tl.arange(0, WK)[None, :]
    own_words = p * WU + tl.arange(0, WU)
    x_own = x_rows + own_words[None, :]
    x_own_mask = row_ok & (own_words < DH // 2)[None, :]
    prog = (tl.program_id(2) * NH + n) * tl.num_programs(0) + p
    # HINTED: h_s as words of one value and the tag of step s, in slot (s + 1) % 2
    HSLOT = B * NH * DH
    hw_rows = xch_ptr + (rows64[:, None] * NH + n) * DH  # [BLOCK_B, 1]: word 0 of the row in slot 0
    hw_own = hw_rows + units[None, :]
    tag0 = base
    if TAGGED or FLAGS or HINTED:  # step s's tag is tag0 + s + 1; step 0 reads h_{-1} from s0 (written before launch)
        tag0 = tag_base(seq_ptr, t_start)
    # HINTED: step s's tag is tag0 + s + 2, never 0 (the tag of the zeroed words a first launch finds); persistent
    # launches store h_{-1} as words too (tag0 + 1, slot 0), so step 0 reads words (one step per launch: s0 at t = 0)
    if HINTED and BARRIER:
        tl.store(hw_own, pack_hinted(h.to(dt), tag0 + 1), mask=own_mask)
    clk = clk_ptr + (prog * (T + 1)).to(tl.int64) * 8
    if TIMING:
        keep(clk + T * 8, clock_after(h), BLOCK_B, BLOCK_U)
        keep(clk + T * 8 + 1, globaltimer_after(h), BLOCK_B, BLOCK_U)
    x = tl.load(wx_rows + t_start * G_W * HDP, mask=wx_mask, other=0)
    for t in range(t_start, t_stop):
        if TIMING:  # 0: this step's input projections have arrived (loaded one step ahead)
            keep(clk + t * 8, clock_after(x.to(tl.float32)), BLOCK_B, G * BLOCK_U // PK)
        if TAGGED:  # all chunks of h_{t-1}'s words at once, again until every word carries step t-1's tag
            want = (tag0 + t) & TAG_MASK
            xs = x_words + (t % 2) * XSLOT
            live = row_ok & (t > 0)
            w0, w1, w2, w3, stale = _tagged_chunks(xs, live, want, DH, WK, CHUNKS)
            tries = 1
            while (stale > 0) & (tries < SPIN):
                w0, w1, w2, w3, stale = _tagged_chunks(xs, live, want, DH, WK, CHUNKS)
                tries += 1
            at0 = row_ok & (t == 0)
            h0 = tl.where(t == 0, _h_chunk(s0_h, 0, at0, DH, BLOCK_K), unpack_tagged(w0, dt, BLOCK_B, BLOCK_K))
            late = stale
            h1 = h0
            h2 = h0
            h3 = h0
            if CHUNKS > 1:
                h1 = tl.where(t == 0, _h_chunk(s0_h, BLOCK_K, at0, DH, BLOCK_K),
                              unpack_tagged(w1, dt, BLOCK_B, BLOCK_K))  # fmt: skip
            if CHUNKS > 2:
                h2 = tl.where(t == 0, _h_chunk(s0_h, 2 * BLOCK_K, at0, DH, BLOCK_K),
                              unpack_tagged(w2, dt, BLOCK_B, BLOCK_K))  # fmt: skip
            if CHUNKS > 3:
                h3 = tl.where(t == 0, _h_chunk(s0_h, 3 * BLOCK_K, at0, DH, BLOCK_K),
                              unpack_tagged(w3, dt, BLOCK_B, BLOCK_K))  # fmt: skip
        elif HINTED:  # the counter says every program arrived (a hint: no fence), then the words, again if one is old
            if BARRIER and t > t_start:
                target = base + (t - t_start) * n_programs
                seen = tl.atomic_add(bar_ptr, 0, sem="relaxed", scope="gpu")
                while seen < target:
                    seen = tl.atomic_add(bar_ptr, 0, sem="relaxed", scope="gpu")
            xs = hw_rows + (t % 2) * HSLOT
            live = row_ok
            if not BARRIER:
                live = row_ok & (t > 0)
            h0, h1, h2, h3, late = _hinted_chunks(xs, live, tag0 + t + 1, dt, DH, BLOCK_K, CHUNKS)
            tries = 1
            while (late > 0) & (tries < SPIN):
                h0, h1, h2, h3, late = _hinted_chunks(xs, live, tag0 + t + 1, dt, DH, BLOCK_K, CHUNKS)
                tries += 1
            if not BARRIER:  # one step per launch: h_{-1} from s0
                at0 = row_ok & (t == 0)
                h0 = tl.where(t == 0, _h_chunk(s0_h, 0, at0, DH, BLOCK_K), h0)
                if CHUNKS > 1:
                    h1 = tl.where(t == 0, _h_chunk(s0_h, BLOCK_K, at0, DH, BLOCK_K), h1)
                if CHUNKS > 2:
                    h2 = tl.where(t == 0, _h_chunk(s0_h, 2 * BLOCK_K, at0, DH, BLOCK_K), h2)
                if CHUNKS > 3:
                    h3 = tl.where(t == 0, _h_chunk(s0_h, 3 * BLOCK_K, at0, DH, BLOCK_K), h3)
        else:  # all chunks of h_{t-1} requested at once (one L2 round trip, not one per chunk), then the products
            prev = tl.where(t == 0, s0_h, out_h + (t - 1) * HD)
            late = 0
            if FLAGS:  # the flags of this head's programs at step t-1's tag, then the loads (kept after the fence)
                if t > 0:
                    zero, late = flags_wait(xch_ptr + (prog - p), tl.num_programs(0), tag0 + t, P_PAD, SPIN, APART)
                    prev += zero
            h0 = _h_chunk(prev, 0, row_ok, DH, BLOCK_K)
            h1 = h0
            h2 = h0
            h3 = h0
            if CHUNKS > 1:
                h1 = _h_chunk(prev, BLOCK_K, row_ok, DH, BLOCK_K)
            if CHUNKS > 2:
                h2 = _h_chunk(prev, 2 * BLOCK_K, row_ok, DH, BLOCK_K)
            if CHUNKS > 3:
                h3 = _h_chunk(prev, 3 * BLOCK_K, row_ok, DH, BLOCK_K)
        if TAGGED or FLAGS or HINTED:  # (interpreter: NaN if the reader gave up on a stale tag or flag)
            h0 = poison_if(h0, late, SPIN)
            h1 = poison_if(h1, late, SPIN)
            h2 = poison_if(h2, late, SPIN)
            h3 = poison_if(h3, late, SPIN)
        if TIMING:  # 1: h_{t-1} has arrived (its last chunk)
            if CHUNKS == 1:
                keep(clk + t * 8 + 1, clock_after(h0.to(tl.float32)), BLOCK_B, BLOCK_K)
            elif CHUNKS == 2:
                keep(clk + t * 8 + 1, clock_after(h1.to(tl.float32)), BLOCK_B, BLOCK_K)
            elif CHUNKS == 3:
                keep(clk + t * 8 + 1, clock_after(h2.to(tl.float32)), BLOCK_B, BLOCK_K)
            else:
                keep(clk + t * 8 + 1, clock_after(h3.to(tl.float32)), BLOCK_B, BLOCK_K)
        pre = loaded_f32(x, dt, PK, BLOCK_B, G * BLOCK_U) * scale + bias
        x = tl.load(wx_rows + tl.minimum(t + 1, T - 1) * G_W * HDP, mask=wx_mask, other=0)  # the next step's
        acc = _apart(dot(h0, r0, IS_FP32, PRECISION), APART)
        if CHUNKS > 1:
            acc += _apart(dot(h1, r1, IS_FP32, PRECISION), APART)
        if CHUNKS > 2:
            acc2 = _apart(dot(h2, r2, IS_FP32, PRECISION), APART)
            if CHUNKS > 3:
                acc2 += _apart(dot(h3, r3, IS_FP32, PRECISION), APART)
            acc += acc2
        if TIMING:  # 2: the recurrent product is done
            keep(clk + t * 8 + 2, clock_after(acc), BLOCK_B, G * BLOCK_U)
        pre += acc
        g0, g1, g2, g3 = split_gates(pre, BLOCK_B, BLOCK_U, G)
        if FUNCTION == 0:  # lstm: i, f, z, o
            if FAST:
                i, f, z, o = lstm_activations_approx(g0, g1, g2, g3)
            else:
                i, f, z, o = lstm_activations(g0, g1, g2, g3)
            c = f * c + i * z
            h = o * cell_tanh(c, FAST)
            tl.store(out_own + t * HD + state_stride, c.to(out_ptr.dtype.element_ty), mask=own_mask)
        elif FUNCTION == 1:  # gru: g (recurrent only), r, z, n (input only)
            h = gru_cell(g0, g1, g2, g3, h)
        else:  # elman
            h = elman_cell(g0)
        if TIMING:  # 3: the cell (pointwise) is done
            keep(clk + t * 8 + 3, clock_after(h), BLOCK_B, BLOCK_U)
        if TAGGED:  # h_t for the others first: it is what they wait for
            hw = pack_tagged(h.to(dt), (tag0 + t + 1) & TAG_MASK, BLOCK_B, BLOCK_U)
            tl.store(x_own + ((t + 1) % 2) * XSLOT, hw, mask=x_own_mask)
        if HINTED:  # h_t for the others first, then the arrival: a hint, so no fence (a CTA barrier, so it comes last)
            tl.store(hw_own + ((t + 1) % 2) * HSLOT, pack_hinted(h.to(dt), tag0 + t + 2), mask=own_mask)
            if BARRIER:
                if t < t_stop - 1:
                    tl.debug_barrier()
                    tl.atomic_add(bar_ptr, 1, sem="relaxed", scope="gpu")
        if SAVE_GATES:  # pre-activations as the alternating backward reads them (FAST's halving undone)
            tl.store(gate_rows + t * G_B * HD, (pre / scale).to(gates_ptr.dtype.element_ty), mask=gate_mask)
        tl.store(out_own + t * HD, h.to(out_ptr.dtype.element_ty), mask=own_mask)
        if TIMING:  # 4: the stores are issued
            keep(clk + t * 8 + 4, clock_after(h), BLOCK_B, BLOCK_U)
        if FLAGS:
            flag_arrive(xch_ptr + prog, tag0 + t + 1)
        if BARRIER and not TAGGED and not FLAGS and not HINTED:
            if t < t_stop - 1:  # (after the last step nobody reads h from another program)
                tl.debug_barrier()  # every thread's store of h_t is issued before the arrival releases them
                tl.atomic_add(bar_ptr, 1, sem="release", scope="gpu")  # arrive (result unused: no wait)
                target = base + (t + 1 - t_start) * n_programs
                seen = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")  # spin: loads with acquire
                while seen < target:
                    seen = tl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
                if TIMING:  # 5: the barrier is passed
                    keep(clk + t * 8 + 5, clock_after(tl.zeros([1, 1], tl.int32) + seen.to(tl.int32)), 1, 1)
        if TIMING:
            if TAGGED or FLAGS or HINTED:  # no barrier: 5 = 4 (the wait is in the next step's exchange)
                keep(clk + t * 8 + 5, clock_after(h), BLOCK_B, BLOCK_U)

    if TIMING:
        keep(clk + T * 8 + 2, clock_after(h), BLOCK_B, BLOCK_U)
        keep(clk + T * 8 + 3, globaltimer_after(h), BLOCK_B, BLOCK_U)
    if TAGGED or FLAGS or HINTED:  # HINTED: one tag more once the last step is done (see below)
        # A hinted sequence's words carry tags up to tag0 + T + 1 (h_{T-1}'s; a persistent launch's h_{-1} words
        # take tag0 + 1): the launch that ends at step T adds that one more, whether it ran every step (persistent)
        # or only the last (one step per launch). Without it, one-step launches leave seq one short, and a persistent
        # launch after them finds the last h's words carrying the tag its h_{-1} wants.
        leave(seq_ptr, n_programs, t_stop - t_start + (HINTED and t_stop == T))
    tl.store(last_ptr + own, h.to(last_ptr.dtype.element_ty), mask=own_mask)
    if FUNCTION == 0:
        tl.store(last_ptr + B * HD + own, c.to(last_ptr.dtype.element_ty), mask=own_mask)


def split_rnn_forward(
    Wx, R, b, states, function="lstm", save_gates=True, tiling=None, persistent=None, exchange=None, clocks=None
):
    """The split-head forward: ``(states_all, states_last, gates or None)``; inputs as for
    :func:`gpulab.rnn.fused.forward.fused_rnn_forward` (validated, one compute dtype). ``gates`` are the
    pre-activations [B, T, G_b, NH, DH] in the compute dtype.

    ``persistent``: one launch for all steps with a grid barrier (default on a GPU), or one launch per step
    (default in the interpreter, where a barrier cannot work; asking for ``persistent=True`` there raises).
    ``tiling``: a :class:`gpulab.rnn.fused.split_tiling.SplitTiling` (default:
    :func:`~gpulab.rnn.fused.split_tiling.split_tiling`). ``exchange``: 'barrier' (a counter barrier, then the load
    of h), 'tagged' (h in tagged words, :mod:`gpulab.rnn.fused.exchange`; 16-bit, even head dim), 'flags' or
    'hinted' (h in words of a value and its tag, read after a fence-free counter; 16-bit); default the tiling's, where
    it fits, else 'barrier'. ``clocks``: a buffer from :func:`gpulab.rnn.fused.clocks.clock_buffer` (programs, T) to
    fill with the steps' clock stamps (persistent launches on a GPU only).
    """
    persistent = persistent_mode(persistent)
    fn = get_function(function)
    Wx, R, b, states = (t.contiguous() for t in (Wx, R, b, states))
    B, T, _, NH, DH = Wx.shape
    cfg = tiling or split_tiling(B, NH, DH, fn.name, Wx.dtype)
    dev, dt = Wx.device, Wx.dtype
    fits = {"tagged": tagged_fits(dt, DH, cfg.block_u, cfg.block_k), "hinted": hinted_fits(dt)}
    if exchange is None:
        exchange = cfg.exchange if fits.get(cfg.exchange, True) else "barrier"
    runtime.one_of("exchange", exchange, EXCHANGES)
    if exchange == "tagged" and not fits["tagged"]:
        raise ValueError(
            f"exchange='tagged' needs 16-bit values, an even head dim and even tiles; got {dt}, head dim {DH}, "
            f"block_u {cfg.block_u}, block_k {cfg.block_k}: use exchange='barrier'."
        )
    if exchange == "hinted" and not fits["hinted"]:
        raise ValueError(
            f"exchange='hinted' needs 16-bit values (float16, bfloat16); got {dt}: use exchange='barrier'."
        )
    out = new_output(fn.states, B, T, NH, DH, dtype=dt, device=dev)
    gates = new_output(B, T, fn.gates_b, NH, DH, dtype=dt, device=dev) if save_gates else None
    grid = (cfg.split, NH, triton.cdiv(B, cfg.block_b))
    programs = grid[0] * grid[1] * grid[2]
    if clocks is not None and (not persistent or tuple(clocks.shape) != (programs, T + 1, 8)):
        raise ValueError(
            f"clocks: a persistent launch's stamp buffer of shape {[programs, T + 1, 8]} (clocks.clock_buffer), "
            f"got {list(clocks.shape)} with persistent={persistent}."
        )
    tagged = exchange == "tagged"
    consts = dict(
        FUNCTION=fn.code, G_W=fn.gates_w, G_R=fn.gates_r, G_B=fn.gates_b, DH=DH, BLOCK_B=cfg.block_b,
        BLOCK_U=cfg.block_u, BLOCK_K=cfg.block_k, CHUNKS=cfg.chunks, SAVE_GATES=save_gates,
        FAST=fast_activations(dt), IS_FP32=dt == torch.float32, PRECISION=runtime.dot_precision(dt),
        BARRIER=persistent, APART=not runtime.INTERPRET, TAGGED=tagged, SPIN=SPIN_TRIES, TIMING=clocks is not None,
        FLAGS=exchange == "flags", P_PAD=triton.next_power_of_2(cfg.split), HINTED=exchange == "hinted",
        **cfg.launch(),
    )  # fmt: skip
    stride = B * T * NH * DH
    g = gates if save_gates else out
    bar = barrier_counter(dev, programs) if persistent else out
    seq, words = bar, bar
    if tagged:
        seq, words = tagged_state(dev, programs, 2 * B * NH * (DH // 2), "forward")
    elif exchange == "flags":
        seq, words = tagged_state(dev, programs, programs, "flags")
    elif exchange == "hinted":  # two slots of B * NH * DH int32 words
        seq, words = tagged_state(dev, programs, B * NH * DH, "hinted")
        words = words.view(torch.int32)
    clk = clocks if clocks is not None else bar
    if persistent:
        last = new_output(fn.states, B, 1, NH, DH, dtype=dt, device=dev)
        ints = (B, T, NH, stride, 0, T, programs)
        launch = cached_launch(split_forward_kernel, grid, dict(consts, launch_cooperative_grid=True), ints)
        tensors = (Wx, R, b, states, states, out, last, g, bar, words, seq, clk)
        launch(direct_stream(dev) if aligned(*tensors) else None, *tensors, *ints)
        return out, last, gates
    carry = states.to(torch.float32, copy=True)  # each program's units, from one launch to the next
    for t in range(T):
        split_forward_kernel[grid](
            Wx, R, b, states, states if t == 0 else carry, out, carry, g, bar, words, seq, clk, B, T, NH, stride,
            t, t + 1, programs, **consts,
        )  # fmt: skip
    return out, carry.to(dt), gates
