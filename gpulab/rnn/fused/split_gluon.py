"""Lesson 7, version 6: the split LSTM forward in Gluon, R in registers and h read once per program.

Version 5 (:mod:`gpulab.rnn.fused.split`) holds each program's slice of R in *shared memory*: Triton 3.6 keeps a
loop-invariant ``tl.dot`` operand there and re-reads it every step, and every warp of the program reads *all* of
h_{t-1} too. On the H100 that is 144 KB of ``ldmatrix`` per step and program, 643 ns at 128 B per clock of a 759 ns
stamped product (lesson 7, Appendix G). This version states the layouts itself (Gluon) so that:

- **R_p lives in registers** for the whole sequence, already in the tensor cores' operand layout: program p's slice
  R_p [G * BLOCK_U, DH] (row ``slot * BLOCK_U + u`` is gate ``slot`` of unit ``p * BLOCK_U + u``) is split along K
  into ``KS`` chunks, one per warp: warp s holds R_p[:, s * KC : (s + 1) * KC] with KC = DH / KS. At one head of
  768, 4 gates x 8 units, 4 warps: 32 x 192 bf16 per warp, 96 registers per thread;
- **h_{t-1} is read once per program**, each warp loading only its K chunk [KC, BLOCK_B] from L2, in 16-byte rows
  that the compiler turns into the operand layout through shared memory (``h_loads='coalesced'``; loaded straight
  into the operand layout, 4 bytes a load, each L2 sector arrived half used: ``'operand'``, kept for the lesson);
- the product is transposed so that the warps split K: pre^T = R_p @ h_{t-1}^T as a batched ``mma_v2`` over the
  chunks, ``part[s] = R_p[:, chunk s] @ h_{t-1}[:, chunk s]^T`` [KS, G * BLOCK_U, BLOCK_B], and the chunks are
  summed through a swizzled buffer in shared memory (8 KB per step), each thread adding the KS partials of its own
  elements;
- the cell and the grid barrier are version 5's (a counter in global memory, release/acquire), but a program arrives
  right after storing h_t and stores c_t and the pre-activations while it waits (``GluonConfig.early_arrive``), and
  waits only for the programs of its own head and batch tile (one counter each: ``GluonConfig.barrier``);
- h_{t-1}'s two K pieces are both loaded before either changes layout (a change of layout is a CTA barrier: one by
  one, the second piece's trip through L2 waited for the first's).

Per step t, program (p, n, tile) (fp32 accumulation; G = 4 gates i, f, z, o):

    part[s] = R_p[:, s KC : (s+1) KC] @ h_{t-1}[rows, s KC : (s+1) KC]^T                   [G BU, BLOCK_B] each
    pre_g   = (sum_s part[s])[g BU : (g+1) BU] + Wx_t[rows, g, units of p]^T + b_g         [BU, BLOCK_B]
    c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(z);  h_t = sigmoid(o) tanh(c_t)
    store h_t (the next step's exchange); arrive; store c_t, the pre-activations (when training); wait

Gluon has no CPU interpreter, so this file is checked three ways: :func:`schedule_reference` runs the same
decomposition (the chunks, their sum, the cell) in float64 on any machine, against the vanilla backend's LSTM;
:func:`compile_sm90` compiles the kernel for sm_90 without a GPU (registers and spills, read by
``tests/rnn/fused/test_split_gluon.py``); and the GPU tests run it.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from gpulab import runtime
from gpulab.launch import aligned, direct_stream, in_order, keyed_launch
from gpulab.rnn.fused import gluon_ops as ops
from gpulab.rnn.fused import gluon_tiles
from gpulab.rnn.fused.config import GLUON_EXCHANGES, GluonConfig
from gpulab.rnn.fused.gluon_ops import cta_barrier, grid_barrier, sigmoid, tanh
from gpulab.rnn.fused.gluon_tiles import SHARED_BUDGET, V6Config, k_pieces, register_budget

__all__ = ["v6_config", "schedule_reference", "split_forward_v6", "compile_sm90", "register_estimate", "EXCHANGES"]


def v6_config(head_dim: int, block_u: int = 8, block_b: int = 16, warps: int = 4, tiles: int = 1) -> V6Config:
    """The tile for ``head_dim``, checked: DH a multiple of ``block_u`` and of 16 * ``warps`` (each warp's K chunk a
    whole number of 16-deep tensor-core steps, as one or two power-of-two tiles: :func:`k_pieces`); ``tiles`` batch
    tiles per program (each step loops over them: one launch of any batch in few programs)."""
    head_dim = runtime.positive_int("head_dim", head_dim)
    cfg = V6Config(block_u, block_b, warps, tiles)
    if head_dim % block_u or head_dim % (16 * warps):
        raise ValueError(
            f"head_dim={head_dim} must be a multiple of block_u={block_u} and of 16 * warps={16 * warps} (each "
            f"warp's K chunk whole 16-deep steps); use a head dim such as {max(block_u, 16 * warps) * 8}."
        )
    pieces = k_pieces(head_dim // warps)
    if pieces is None:
        fit = [w for w in (1, 2, 4, 8, 16) if head_dim % (16 * w) == 0 and k_pieces(head_dim // w)] or "none"
        raise ValueError(
            f"head_dim / warps = {head_dim // warps} must be one power of two or the sum of two (a Gluon tile is a "
            f"power of two; each warp's K chunk is at most two tiles), got head_dim={head_dim}, warps={warps}; use "
            f"warps in {fit}."
        )
    regs, budget = sum(register_estimate(head_dim, cfg).values()), register_budget(warps)
    smem = 4 * warps * 4 * block_u * block_b  # the partial sums, fp32 [KS, 4 BU, BLOCK_B]
    smem += 4 * block_u * block_b * tiles if tiles > 1 else 0  # each tile's c, fp32 [TILES, BU, BLOCK_B]
    if regs > budget or smem > SHARED_BUDGET:
        raise ValueError(
            f"head_dim={head_dim} with block_u={block_u}, block_b={block_b}, warps={warps} needs {regs} registers per "
            f"thread for its operands (at most {budget}: the rest of the step needs the others) and {smem} "
            f"bytes of shared memory (at most {SHARED_BUDGET}); use more warps or fewer units or rows per program."
        )
    return cfg


def register_estimate(head_dim: int, cfg: V6Config, itemsize: int = 2) -> dict:
    """Registers per thread that the operands take (32-bit each): R's chunk, h's chunk and the partial sums; what
    :func:`compile_sm90`'s ``ptxas`` count must stay above and under 255 beside them."""
    if not isinstance(cfg, V6Config):
        raise TypeError(f"cfg must be a V6Config (v6_config(...)), got {type(cfg).__name__}.")
    head_dim, itemsize = runtime.positive_int("head_dim", head_dim), runtime.one_of("itemsize", itemsize, (2, 4))
    m, kc = 4 * cfg.block_u, head_dim // cfg.warps
    return {"r": m * kc * itemsize // 4 // 32, "h": kc * cfg.block_b * itemsize // 4 // 32,
            "partials": m * cfg.block_b // 32}  # fmt: skip


def _checked(Wx, R, b, states) -> tuple[int, ...]:
    """Wx's shape [B, T, 4, NH, DH] once every input is a tensor of the LSTM's shapes (else a clear error)."""
    for name, x in (("Wx", Wx), ("R", R), ("b", b), ("states", states)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}.")
    if Wx.dim() != 5 or Wx.shape[2] != 4:
        raise ValueError(f"Wx must be [B, T, 4, NH, DH] (the LSTM's gates), got shape {list(Wx.shape)}.")
    B, T, _, NH, DH = Wx.shape
    if min(B, T, NH, DH) < 1:
        raise ValueError(f"Wx {list(Wx.shape)} is empty: version 6 needs at least one row, step, head and unit.")
    want = {"R": (4, NH, DH, DH), "b": (4, NH, DH), "states": (2, B, 1, NH, DH)}
    for name, x in (("R", R), ("b", b), ("states", states)):
        if tuple(x.shape) != want[name]:
            raise ValueError(f"{name} must have shape {list(want[name])} for Wx {list(Wx.shape)}, got {list(x.shape)}.")
    return tuple(Wx.shape)


def schedule_reference(Wx, R, b, states, cfg: V6Config | None = None):
    """Version 6's arithmetic, program by program and chunk by chunk, in float64 on any device: ``(states_all,
    states_last, gates)`` as :func:`split_forward_v6` returns them (LSTM, gates i, f, z, o).

    Each program (p, n, tile) forms ``KS = cfg.warps`` partial products of its gate rows of R with its K chunk of
    h_{t-1} and sums them in chunk order, as the kernel's threads do; the tests compare it with float64's LSTM
    (``flashrnn(..., backend='vanilla')``), so a wrong slice (a unit's gates from another program, a chunk counted
    twice) fails on a CPU before the kernel ever runs.
    """
    B, T, _, NH, DH = _checked(Wx, R, b, states)
    cfg = gluon_tiles.tile_for(DH, cfg, v6_config)
    bu, kc = cfg.block_u, DH // cfg.warps
    f64 = dict(dtype=torch.float64)
    Wx, R, b, s = Wx.to(**f64), R.to(**f64), b.to(**f64), states.to(**f64)
    h, c = s[0, :, 0].clone(), s[1, :, 0].clone()  # [B, NH, DH]
    out = torch.empty(2, B, T, NH, DH, **f64)
    gates = torch.empty(B, T, 4, NH, DH, **f64)
    for t in range(T):
        h_new, c_new = torch.empty_like(h), torch.empty_like(c)
        for n in range(NH):
            for p in range(DH // bu):
                units = slice(p * bu, (p + 1) * bu)
                rp = R[:, n, units, :].reshape(4 * bu, DH)  # [G BU, DH]: row slot * BU + u
                pre = torch.zeros(4 * bu, B, **f64)
                for ch in range(cfg.warps):  # one warp's partial product each, then their sum
                    k = slice(ch * kc, (ch + 1) * kc)
                    pre = pre + rp[:, k] @ h[:, n, k].T
                pre = pre.reshape(4, bu, B) + Wx[:, t, :, n, units].permute(1, 2, 0) + b[:, n, units, None]
                gates[:, t, :, n, units] = pre.permute(2, 0, 1)
                i, f, z, o = torch.sigmoid(pre[0]), torch.sigmoid(pre[1]), torch.tanh(pre[2]), torch.sigmoid(pre[3])
                cn = f * c[:, n, units].T + i * z
                c_new[:, n, units] = cn.T
                h_new[:, n, units] = (o * torch.tanh(cn)).T
        h, c = h_new, c_new
        out[0, :, t], out[1, :, t] = h, c
    return out, torch.stack((h, c))[:, :, None], gates


@gluon.jit
def _tag_word(h, tag, dtype: gl.constexpr):
    """h_t's 16 bits under step t's tag in one 32-bit word, ``tag << 16 | bits(h)``: a word is stored and loaded
    whole, so a reader that sees the tag sees the value stored with it (no fence, no counter)."""
    return (h.to(dtype).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF) | (tag << 16)


@gluon.jit
def _late(w, tag):
    """How many words of ``w`` do not carry ``tag`` yet (a scalar: every warp's words counted)."""
    return gl.sum(gl.reshape(((w >> 16) & 0xFFFF) != tag, [w.numel]).to(gl.int32), axis=0)


@gluon.jit
def _store_tagged(ptrs, words, HOW: gl.constexpr):
    """Store the tagged words: a plain store (0), a relaxed store at the GPU's scope (1), or a plain store and a fence
    (2)."""
    if HOW == 1:
        gl.inline_asm_elementwise("mov.b32 $0, 0; st.relaxed.gpu.global.b32 [$1], $2;", "=r,l,r", [ptrs, words],
                                  dtype=gl.int32, is_pure=False, pack=1)  # fmt: skip
    else:
        gl.store(ptrs, words)
        if HOW == 2:
            gl.inline_asm_elementwise("mov.b32 $0, 0; fence.acq_rel.gpu;", "=r,r", [words], dtype=gl.int32,
                                      is_pure=False, pack=1)  # fmt: skip


@gluon.jit
def _poll_load(ptrs):
    """The int32 words at ``ptrs`` from L2, 16 bytes a load (each thread's 4 adjacent words; relaxed at the GPU's
    scope, so every poll loads again: a volatile ``gl.load`` would be split into 4-byte loads)."""
    return gl.inline_asm_elementwise("ld.relaxed.gpu.global.v4.b32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,l,l,l,l",
                                     [ptrs], dtype=gl.int32, is_pure=False, pack=4)  # fmt: skip


@gluon.jit
def _h_tagged(p1, p2, sample, sample_mask, tag, TWO: gl.constexpr, dtype: gl.constexpr, lb: gl.constexpr):
    """h_{t-1}'s pieces from the tagged exchange (in 16-byte rows: COALESCED), in the operand layout ``lb``. First
    a sample (one word per program and row: ``sample``) is polled until it carries ``tag``, a few hundred words
    (polling all of h, every program at once, takes the L2's time from the stores it waits for); then all of it is
    loaded, and again while any word is late."""
    late = 1
    while late > 0:
        late = _late(gl.load(sample, mask=sample_mask, other=tag << 16, volatile=True), tag)
    w1 = _poll_load(p1)
    w2 = w1
    late = _late(w1, tag)
    if TWO:
        w2 = _poll_load(p2)
        late += _late(w2, tag)
    while late > 0:
        w1 = _poll_load(p1)
        late = _late(w1, tag)
        if TWO:
            w2 = _poll_load(p2)
            late += _late(w2, tag)
    h1 = gl.convert_layout((w1 & 0xFFFF).to(gl.int16).to(dtype, bitcast=True), lb)
    h2 = h1
    if TWO:
        h2 = gl.convert_layout((w2 & 0xFFFF).to(gl.int16).to(dtype, bitcast=True), lb)
    return h1, h2


@gluon.jit(do_not_specialize=["B", "T", "NH", "n_programs"])  # a size of 1 stays a tensor (one compile per tile)
def split_forward_v6_kernel(
    wx_ptr,  # [B, T, 4, NH, DH]
    r_ptr,  # [4, NH, DH, DH]
    b_ptr,  # [4, NH, DH]
    s0_ptr,  # [2, B, 1, NH, DH] initial (h, c)
    out_ptr,  # [2, B, T, NH, DH] all (h, c) (written); out[0] is the exchange buffer of h
    last_ptr,  # [2, B, 1, NH, DH] (h, c) after the last step (written)
    gates_ptr,  # [B, T, 4, NH, DH] pre-activations (SAVE_GATES)
    bar_ptr,  # int64 counter of the grid barrier
    clk_ptr,  # int64 [programs, T + 1, 8] clock stamps (TIMING only; see gpulab.rnn.fused.clocks)
    xch_ptr,  # int32 [2, tiles BLOCK_B, NH, DH] zeros: the tagged exchange of h (TAGGED), step t in slot t % 2
    B,
    T,
    NH,
    n_programs,
    DH: gl.constexpr,
    BLOCK_B: gl.constexpr,
    BLOCK_U: gl.constexpr,
    KS: gl.constexpr,  # K chunks = warps
    K1: gl.constexpr,  # a chunk's K as one or two power-of-two pieces (k_pieces): K1 + K2 = DH / KS
    K2: gl.constexpr,
    SAVE_GATES: gl.constexpr,
    FAST: gl.constexpr,  # one-instruction activations (bf16, as version 5: tiles.fast_activations)
    COALESCED: gl.constexpr,  # h_{t-1} in 16-byte rows, then to the operand layout (else: loaded in it, 4 bytes each)
    EARLY: gl.constexpr,  # arrive at the barrier right after storing h (c and the gates stored while waiting)
    TIMING: gl.constexpr,  # clock stamps per program and step into clk_ptr (the parts of gpulab.rnn.fused.clocks)
    LATE_INPUTS: gl.constexpr,  # the next step's inputs loaded after the arrival (else before the cell)
    GROUP_STRIDE: gl.constexpr,  # > 0: a barrier per head and batch tile, their counters this many int64 apart
    POLL_LOADS: gl.constexpr,  # the barrier's wait polls with acquire loads (else atomics: gluon_ops.POLL)
    TAG_STORE: gl.constexpr,  # how the tagged words are stored (_store_tagged)
    TAGGED: gl.constexpr,  # h exchanged in tagged words (xch_ptr), polled; no counter (else: out[0] and the barrier)
):
    M: gl.constexpr = 4 * BLOCK_U
    KC: gl.constexpr = DH // KS
    # the product's layouts: warp s computes chunk s of the batched mma; R and h as its operands in registers
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[KS, 1, 1], instr_shape=[1, 16, 8])
    la: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    lb: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    # the cell's layout: [KS, BLOCK_U, BLOCK_B] with the KS partials of an element in one thread, units along the
    # lanes (contiguous in h, c and the gates: a warp's stores of a row are one piece; with batch rows along the lanes
    # the reads of the partials were free of bank conflicts, but the scattered stores cost 0.6 us a step on the H100)
    lp3: gl.constexpr = gl.BlockedLayout([KS, 1, 1], [1, BLOCK_U, 32 // BLOCK_U], [1, 1, KS], [1, 2, 0])
    lp: gl.constexpr = gl.SliceLayout(0, lp3)  # [BLOCK_U, BLOCK_B]
    # the partials' buffer [KS, M, BLOCK_B] fp32, swizzled so that the cell's reads (a warp: BLOCK_U rows x 32 /
    # BLOCK_U columns) hit 32 banks: row r's columns XOR ((r / per_phase) % max_phase) * vec, with vec the lanes along
    # a row, per_phase the rows in one pass of the 32 banks, and a period of BLOCK_U rows (one gate's slice)
    SW_VEC: gl.constexpr = 32 // BLOCK_U if BLOCK_U < 32 else 1
    SW_PHASE: gl.constexpr = 32 // BLOCK_B if BLOCK_B < 32 else 1
    flat: gl.constexpr = gl.SwizzledSharedLayout(SW_VEC, SW_PHASE, BLOCK_B // SW_VEC, order=[2, 1, 0])

    p = gl.program_id(0)
    n = gl.program_id(1)
    r0 = gl.program_id(2) * BLOCK_B
    HD = NH * DH

    # R_p in the A layout, loaded once, in one or two K pieces per warp (K1 + K2 = KC, powers of two):
    # r1[s, m, k] = R[m // BU, n, p BU + m % BU, s KC + k], r2 the same from s KC + K1
    r1 = gl.load(r_ptr + ops.r_offsets(n, p, 0, K1, KC, NH, DH, BLOCK_U, KS, M, la))  # [KS, M, K1]
    r2 = r1
    if K2 > 0:
        r2 = gl.load(r_ptr + ops.r_offsets(n, p, K1, K2, KC, NH, DH, BLOCK_U, KS, M, la))  # [KS, M, K2]

    # h_{-1} in the B layout, the same pieces: hb1[s, k, j] = h[row r0 + j, s KC + k] (loaded once, in place)
    s0_1, s0_1_mask = ops.h_pointers(s0_ptr, r0, n, 0, K1, KC, KS, B, HD, DH, BLOCK_B, lb, False)
    hb1 = gl.load(s0_1, mask=s0_1_mask, other=0.0)
    hb2 = hb1
    if K2 > 0:
        s0_2, s0_2_mask = ops.h_pointers(s0_ptr, r0, n, K1, K2, KC, KS, B, HD, DH, BLOCK_B, lb, False)
        hb2 = gl.load(s0_2, mask=s0_2_mask, other=0.0)
    # where the steps read h_{t-1} (out[0] at step t - 1): in the operand layout, or in 16-byte rows (COALESCED)
    h1_ptr, h1_mask = ops.h_pointers(out_ptr, r0, n, 0, K1, KC, KS, B, T * HD, DH, BLOCK_B, lb, COALESCED)
    h2_ptr, h2_mask = h1_ptr, h1_mask
    if K2 > 0:
        h2_ptr, h2_mask = ops.h_pointers(out_ptr, r0, n, K1, K2, KC, KS, B, T * HD, DH, BLOCK_B, lb, COALESCED)
    if TAGGED:  # the sample: the last unit of every program, every row: [q, j] at flat index q BLOCK_B + j
        QP: gl.constexpr = triton.next_power_of_2(DH // BLOCK_U) * BLOCK_B
        lq: gl.constexpr = gl.BlockedLayout([1], [32], [KS], [0])
        q_j = gl.arange(0, QP, layout=lq)
        sample = xch_ptr + (r0 + q_j % BLOCK_B) * HD + n * DH + (q_j // BLOCK_B) * BLOCK_U + BLOCK_U - 1
        sample_mask = q_j // BLOCK_B < DH // BLOCK_U
        # the same pieces of the exchange's slot [tiles BLOCK_B, NH, DH] (words; whole tiles: no masks)
        h1_ptr, _ = ops.h_pointers(xch_ptr, r0, n, 0, K1, KC, KS, B, HD, DH, BLOCK_B, lb, COALESCED)
        h2_ptr = h1_ptr
        if K2 > 0:
            h2_ptr, _ = ops.h_pointers(xch_ptr, r0, n, K1, K2, KC, KS, B, HD, DH, BLOCK_B, lb, COALESCED)
    dt: gl.constexpr = out_ptr.dtype.element_ty

    # the cell's own elements: unit u of this program, batch row j
    u_p = gl.arange(0, BLOCK_U, layout=gl.SliceLayout(1, lp))
    j_p = gl.arange(0, BLOCK_B, layout=gl.SliceLayout(0, lp))
    rows_p = gl.expand_dims(r0 + j_p, 0)  # [1, BLOCK_B]
    own_mask = rows_p < B
    units = gl.expand_dims(p * BLOCK_U + u_p, 1)  # [BLOCK_U, 1]
    own = rows_p * HD + n * DH + units  # in [B, 1, NH, DH]
    out_own = out_ptr + rows_p.to(gl.int64) * T * HD + n * DH + units  # h at step 0
    c_stride = B.to(gl.int64) * T * HD  # from h to c in [2, B, T, NH, DH] (past 2^31 at long sequences)
    wx_own = wx_ptr + rows_p.to(gl.int64) * T * 4 * HD + n * DH + units  # gate 0 at step 0
    gate_own = gates_ptr + rows_p.to(gl.int64) * T * 4 * HD + n * DH + units
    b_own = b_ptr + n * DH + units
    bias_i = gl.load(b_own).to(gl.float32)
    bias_f = gl.load(b_own + HD).to(gl.float32)
    bias_z = gl.load(b_own + 2 * HD).to(gl.float32)
    bias_o = gl.load(b_own + 3 * HD).to(gl.float32)
    c = gl.load(s0_ptr + B * HD + own, mask=own_mask, other=0.0).to(gl.float32)
    h = c

    parts = gl.allocate_shared_memory(gl.float32, [KS, M, BLOCK_B], flat)
    xch_own = xch_ptr + rows_p * HD + n * DH + units  # this program's words in slot 0 (TAGGED; rows past B too)
    xch_slot = gl.num_programs(2) * BLOCK_B * HD
    base = 0
    if not TAGGED:
        bar_ptr, base = ops.barrier_start(bar_ptr, n_programs, GROUP_STRIDE)  # this head and tile's counter
    x_i, x_f, x_z, x_o = ops.gate_inputs(wx_own, own_mask, HD)
    clk = clk_ptr + ((n * gl.num_programs(0) + p) * gl.num_programs(2) + gl.program_id(2)).to(gl.int64) * (T + 1) * 8
    if TIMING:  # row T: the SM's clock and the global timer at the start (0, 1) and the end (2, 3)
        ops.keep2(clk + T * 8, ops.clock_after(c))
        ops.keep2(clk + T * 8 + 1, ops.globaltimer_after(c))
    for t in range(T):
        if TIMING:  # 0: this step's input projections have arrived (loaded one step ahead); 1: h_{t-1}
            ops.keep2(clk + t * 8, ops.clock_after(x_o.to(gl.float32)))
            if K2 > 0:
                ops.keep3(clk + t * 8 + 1, ops.clock_after(hb2.to(gl.float32)))
            else:
                ops.keep3(clk + t * 8 + 1, ops.clock_after(hb1.to(gl.float32)))
        part = mma_v2(r1, hb1, gl.zeros([KS, M, BLOCK_B], gl.float32, mma))  # [KS, M, BLOCK_B]
        if K2 > 0:
            part = mma_v2(r2, hb2, part)
        if TIMING:  # 2: the recurrent product is done
            ops.keep3(clk + t * 8 + 2, ops.clock_after(part))
        parts.store(part)
        cta_barrier()
        pre_i = gl.sum(parts.slice(0, BLOCK_U, dim=1).load(lp3), axis=0) + x_i.to(gl.float32) + bias_i
        pre_f = gl.sum(parts.slice(BLOCK_U, BLOCK_U, dim=1).load(lp3), axis=0) + x_f.to(gl.float32) + bias_f
        pre_z = gl.sum(parts.slice(2 * BLOCK_U, BLOCK_U, dim=1).load(lp3), axis=0) + x_z.to(gl.float32) + bias_z
        pre_o = gl.sum(parts.slice(3 * BLOCK_U, BLOCK_U, dim=1).load(lp3), axis=0) + x_o.to(gl.float32) + bias_o
        nxt = gl.minimum(t + 1, T - 1) * 4 * HD  # the next step's inputs, loaded while this step runs
        if not LATE_INPUTS:
            x_i, x_f, x_z, x_o = ops.gate_inputs(wx_own + nxt, own_mask, HD)
        i = sigmoid(pre_i, FAST)
        f = sigmoid(pre_f, FAST)
        o = sigmoid(pre_o, FAST)
        c = f * c + i * tanh(pre_z, FAST)
        h = o * tanh(c, FAST)
        if TIMING:  # 3: the cell (the partials' sum and the pointwise) is done
            ops.keep2(clk + t * 8 + 3, ops.clock_after(h))
        gl.store(out_own + t * HD, h.to(dt), mask=own_mask)
        if TAGGED:
            tag = t % 65535 + 1  # never 0 (the zeros the exchange starts from), never step t - 2's (the slot's last)
            cta_barrier()  # (every warp's reads of the partials are done before any warp's next store of them)
            _store_tagged(xch_own + (t % 2) * xch_slot, _tag_word(h, tag, dt), TAG_STORE)
        elif EARLY and t < T - 1:  # the others read h only: its stores are what the arrival releases
            ops.grid_arrive(bar_ptr)  # (its CTA barrier also ends the partials' reads)
        if LATE_INPUTS:  # (issued after the arrival: its release does not wait for them)
            x_i, x_f, x_z, x_o = ops.gate_inputs(wx_own + nxt, own_mask, HD)
        gl.store(out_own + t * HD + c_stride, c.to(out_ptr.dtype.element_ty), mask=own_mask)
        if SAVE_GATES:
            g_t = gate_own + t * 4 * HD
            gl.store(g_t, pre_i.to(gates_ptr.dtype.element_ty), mask=own_mask)
            gl.store(g_t + HD, pre_f.to(gates_ptr.dtype.element_ty), mask=own_mask)
            gl.store(g_t + 2 * HD, pre_z.to(gates_ptr.dtype.element_ty), mask=own_mask)
            gl.store(g_t + 3 * HD, pre_o.to(gates_ptr.dtype.element_ty), mask=own_mask)
        if TIMING:  # 4: the stores are issued
            ops.keep2(clk + t * 8 + 4, ops.clock_after(h))
        if TAGGED:
            if t < T - 1:  # poll the slot until every word carries step t's tag
                slot = (t % 2) * xch_slot
                hb1, hb2 = _h_tagged(h1_ptr + slot, h2_ptr + slot, sample + slot, sample_mask, tag, K2 > 0, dt, lb)
            if TIMING:  # 5: h_t has arrived, all of it, in the operand layout (stamp 1 follows at once)
                ops.keep3(clk + t * 8 + 5, ops.clock_after(hb1.to(gl.float32)))
        elif t < T - 1:  # (after the last step nobody reads h from another program)
            if EARLY:
                seen = ops.grid_wait(bar_ptr, base + (t + 1) * n_programs, POLL_LOADS)
            else:
                # (the barrier's CTA barrier ends the parts' reads)
                seen = grid_barrier(bar_ptr, base + (t + 1) * n_programs, POLL_LOADS)
            if TIMING:  # 5: the barrier is passed
                passed = gl.zeros([BLOCK_U, BLOCK_B], gl.int32, lp) + seen.to(gl.int32)
                ops.keep2(clk + t * 8 + 5, ops.clock_after(passed))
            # both pieces' loads issued before either changes layout (a change of layout is a CTA barrier, which
            # no load moves across: converted one by one, the second piece's trip to L2 waited for the first's)
            raw1 = gl.load(h1_ptr + t * HD, mask=h1_mask, other=0.0, cache_modifier=".cg")
            raw2 = raw1
            if K2 > 0:
                raw2 = gl.load(h2_ptr + t * HD, mask=h2_mask, other=0.0, cache_modifier=".cg")
            hb1 = gl.convert_layout(raw1, lb)
            if K2 > 0:
                hb2 = gl.convert_layout(raw2, lb)
        elif TIMING:
            ops.keep2(clk + t * 8 + 5, ops.clock_after(h))
    if TIMING:
        ops.keep2(clk + T * 8 + 2, ops.clock_after(h))
        ops.keep2(clk + T * 8 + 3, ops.globaltimer_after(h))
    gl.store(last_ptr + own, h.to(last_ptr.dtype.element_ty), mask=own_mask)
    gl.store(last_ptr + B * HD + own, c.to(last_ptr.dtype.element_ty), mask=own_mask)


H_LOADS = ("coalesced", "operand")
"""How a step reads h_{t-1} from L2: ``coalesced`` (16-byte loads along K, whole sectors, then to the operand layout
through shared memory) or ``operand`` (straight into the operand layout, 4 bytes a load: half of each sector)."""


EXCHANGES = GLUON_EXCHANGES
"""How the programs hand each other h_t (:data:`gpulab.rnn.fused.config.GLUON_EXCHANGES`): ``counter`` ships."""


def _constexprs(head_dim: int, cfg: V6Config, save_gates: bool, fast: bool, h_loads: str, timing: bool,
                exchange: str = "counter", config: GluonConfig | None = None) -> dict:  # fmt: skip
    config = GluonConfig.of(config)
    k1, k2 = k_pieces(head_dim // cfg.warps)
    return dict(DH=head_dim, BLOCK_B=cfg.block_b, BLOCK_U=cfg.block_u, KS=cfg.warps, K1=k1, K2=k2,
                SAVE_GATES=save_gates, FAST=fast, COALESCED=h_loads == "coalesced", EARLY=config.early_arrive,
                TIMING=timing, TAGGED=exchange == "tagged", TAG_STORE=config.tag_store,
                **ops.barrier_constexprs(config.barrier, config.poll),
                LATE_INPUTS=config.late_inputs_for(cfg.block_b))  # fmt: skip


def split_forward_v6(Wx, R, b, states, save_gates: bool = True, cfg: V6Config | None = None,
                     h_loads: str = "coalesced", clocks: torch.Tensor | None = None,
                     exchange: str | None = None, config: GluonConfig | None = None):  # fmt: skip
    """Version 6 on a GPU (sm_80 or newer; LSTM, 16-bit): ``(states_all, states_last, gates or None)`` as
    :func:`gpulab.rnn.fused.split.split_rnn_forward` returns them. One cooperative launch, a grid barrier per step.
    ``h_loads``: one of :data:`H_LOADS`. ``clocks``: a :func:`gpulab.rnn.fused.clocks.clock_buffer` (programs, T) to
    fill with each step's stamps (:func:`gpulab.rnn.fused.clocks.step_parts` reads it). ``exchange``: one of
    :data:`EXCHANGES` (None: ``config.exchange``). ``config``: a :class:`gpulab.rnn.fused.config.GluonConfig` (the
    barrier, its poll, what a step issues while it waits; None: what ships). On a CPU (or under the interpreter) it
    raises: run :func:`schedule_reference` there."""
    from gpulab.check import new_output  # noqa: PLC0415
    from gpulab.rnn.fused.tiles import fast_activations  # noqa: PLC0415

    B, T, _, NH, DH = _checked(Wx, R, b, states)
    if not isinstance(save_gates, bool):
        raise TypeError(f"save_gates must be True or False, got {save_gates!r}.")
    h_loads = runtime.one_of("h_loads", h_loads, H_LOADS)
    config = GluonConfig.of(config)
    exchange = runtime.one_of("exchange", config.exchange if exchange is None else exchange, EXCHANGES)
    if clocks is not None and not isinstance(clocks, torch.Tensor):
        raise TypeError(f"clocks must be None or a gpulab.rnn.fused.clocks.clock_buffer tensor, got {clocks!r}.")
    if Wx.dtype not in (torch.float16, torch.bfloat16) or any(x.dtype != Wx.dtype for x in (R, b, states)):
        raise TypeError(
            f"version 6 takes one 16-bit dtype (float16 or bfloat16) for Wx, R, b and states, got "
            f"{Wx.dtype}, {R.dtype}, {b.dtype}, {states.dtype}: use gpulab.rnn.fused.split.split_rnn_forward."
        )
    if Wx.device.type != "cuda" or runtime.INTERPRET:
        raise RuntimeError(
            "version 6 is a Gluon kernel: it runs on a CUDA GPU only (no interpreter); on a CPU run "
            "gpulab.rnn.fused.split_gluon.schedule_reference, the same arithmetic in float64."
        )
    cfg = gluon_tiles.tile_for(DH, cfg, v6_config)
    Wx, R, b, states = (x.contiguous() for x in (Wx, R, b, states))
    dev, dt = Wx.device, Wx.dtype
    out = new_output(2, B, T, NH, DH, dtype=dt, device=dev)
    gates = new_output(B, T, 4, NH, DH, dtype=dt, device=dev) if save_gates else None
    last = new_output(2, B, 1, NH, DH, dtype=dt, device=dev)
    grid = (DH // cfg.block_u, NH, -(-B // cfg.block_b))
    programs = grid[0] * grid[1] * grid[2]
    if clocks is not None and (tuple(clocks.shape) != (programs, T + 1, 8) or clocks.dtype != torch.int64
                               or clocks.device != dev):  # fmt: skip
        raise ValueError(
            f"clocks must be clock_buffer({programs}, {T}, device) (int64 [{programs}, {T + 1}, 8] on {dev}), got "
            f"{type(clocks).__name__} {list(getattr(clocks, 'shape', []))}."
        )
    bar, per_group = ops.launch_counter(dev, programs, NH, grid[2], config.barrier)
    tagged, timing = exchange == "tagged", clocks is not None  # (the tagged words start as zeros: no step's tag)
    xch = torch.zeros(2, grid[2] * cfg.block_b, NH, DH, dtype=torch.int32, device=dev) if tagged else bar
    # every argument by name, put in the kernel's order (in_order); the grid and constexprs built once per problem
    # (keyed_launch), later calls launched straight to the compiled kernel (gpulab.launch)
    args = in_order(split_forward_v6_kernel, wx_ptr=Wx, r_ptr=R, b_ptr=b, s0_ptr=states, out_ptr=out, last_ptr=last,
                    gates_ptr=gates if save_gates else out, bar_ptr=bar, clk_ptr=clocks if timing else bar,
                    xch_ptr=xch, B=B, T=T, NH=NH, n_programs=per_group)  # fmt: skip
    tensors, ints = args[:-4], args[-4:]

    def make():
        return grid, dict(num_warps=cfg.warps, launch_cooperative_grid=True,
                          **_constexprs(DH, cfg, save_gates, fast_activations(dt), h_loads, timing, exchange,
                                        config))  # fmt: skip

    launch = keyed_launch((split_forward_v6_kernel, DH, cfg, dt, save_gates, h_loads, timing, exchange, config) + ints,
                          make)  # fmt: skip
    launch(direct_stream(dev) if aligned(*tensors) else None, *tensors, *ints)
    return out, last, gates


def compile_sm90(head_dim: int = 768, cfg: V6Config | None = None, dtype: str = "bf16", save_gates: bool = True,
                 h_loads: str = "coalesced", timing: bool = False, exchange: str = "counter",
                 config: GluonConfig | None = None):  # fmt: skip
    """Triton's compiled version 6 for sm_90, nothing launched, no GPU needed (``asm`` holds 'ttgir', 'ptx',
    'cubin'; ``metadata`` the registers' and shared memory's use); ``config`` as for :func:`split_forward_v6`. Call
    from a process outside the interpreter."""
    dtype = runtime.one_of("dtype", dtype, ("bf16", "fp16"))
    for name, flag in (("save_gates", save_gates), ("timing", timing)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {flag!r}.")
    h_loads = runtime.one_of("h_loads", h_loads, H_LOADS)
    exchange = runtime.one_of("exchange", exchange, EXCHANGES)
    cfg = gluon_tiles.tile_for(head_dim, cfg, v6_config)
    constexprs = _constexprs(
        head_dim, cfg, save_gates, dtype == "bf16", h_loads, timing, exchange, GluonConfig.of(config)
    )
    return gluon_tiles.compile_sm90(split_forward_v6_kernel, dtype, constexprs, cfg.warps)
