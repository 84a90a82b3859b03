"""Lesson 7, backward version b4: the split LSTM backward in Gluon, R's rows in registers (version 6's backward).

Version b3 (:mod:`gpulab.rnn.fused.split_backward`) splits the head by units as the forward does: program p runs its
units' cell backward, writes dG_t of its units and pushes its share of every unit's dh_{t-1},
``dG_t[:, U_p] @ R[:, U_p, :]`` [B, DH], through L2; after the barrier each program sums the P shares of its own
units. Compiled for the H100 (one head of 768, 16 units, 8 warps) its step reads R's rows and the gate gradients
through ``ldmatrix``: 112 KB per step and program. This version keeps b3's exchange and barrier and changes where
the operands live:

- **R's rows of p's units, transposed**, R_p^T [DH, 4 U] (row k, column ``slot * U + u`` = R[slot, n, p U + u, k]),
  are the tensor cores' A operand, **in registers** for the whole sequence; the warps split its DH rows (the
  product's M), so each warp holds DH / W of them: at 768 with 16 units and 8 warps, 96 x 64 bf16, 96 registers per
  thread. A Gluon tile's sides are powers of two, so DH is held as two tiles (768 = 512 + 256, ``k_pieces``);
- the product is transposed, ``share^T = R_p^T @ dG_t[:, U_p]^T`` [DH, B]: its B operand, this program's gate
  gradients [4 U, B], is small (2 KB) and goes through shared memory once per step for all warps;
- the shares are stored transposed, ``part[slot][tile, n, p, k, j]`` (batch row j contiguous), in 16-byte rows
  (``share_stores='coalesced'``; from the product's fragments, 4 bytes a store: ``'fragments'``), and the gather reads
  rows of its own units.

Per step t = T-1 .. 0, program (p, n, tile) (fp32; the forward saved pre-activations; G = 4 gates i, f, z, o):

    dh = dL/dh_t + sum_q part[(t + 1) % 2][q, U_p]^T         (none at T-1)      [U, B]
    dc = dL/dc_t + carried dc
    (di, df, dz, do), dc = cell_backward(pre_t, c_{t-1}, dh, dc)
    part[t % 2][p] = R_p^T @ dG_t[:, U_p]^T                                      [DH, B]
    arrive; store dG_t of U_p; load step t-1's inputs; wait
                          (dG stored and the next inputs loaded while waiting: GluonConfig's backward_early_arrive,
                          prefetch)

and at the end dL/dh_{-1} = sum_q part[0][q, U_p]^T, dL/dc_{-1} = dc. As in b3, dG is stored in Wx's layout [B, T, 4,
NH, DH]: the parameter products read it as one matrix of B * T rows, and it is dWx as it stands. Each step's inputs
(saved pre-activations, c_{t-1}, dL/d(states)) come from HBM; loaded after the barrier, their trip added to every
step's, so they are loaded a step ahead, while the program waits (``GluonConfig.prefetch``). Each head and batch tile
waits at its own counter, for its own programs only (``GluonConfig.barrier``). On a CPU :func:`schedule_reference` runs
the same decomposition in float64 (tests compare it with autograd through the vanilla backend); :func:`compile_sm90`
compiles the kernel for sm_90 without a GPU; the GPU tests run it.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from gpulab import runtime
from gpulab.launch import aligned, direct_stream, in_order, keyed_launch
from gpulab.rnn.fused import gluon_ops as ops
from gpulab.rnn.fused import gluon_tiles
from gpulab.rnn.fused.config import GluonConfig
from gpulab.rnn.fused.gluon_ops import cta_barrier, grid_barrier, sigmoid, tanh
from gpulab.rnn.fused.gluon_tiles import V6Config, k_pieces, register_budget

__all__ = ["b4_config", "schedule_reference", "split_backward_b4", "compile_sm90", "GATES_FIRST"]

GATES_FIRST = gl.constexpr((3, 2, 0, 1))
"""The permutation that turns the four gates joined as ``join(join(i, f), join(z, o))`` [U, B, 2, 2] (``join`` puts
its new dimension last, so element [u, j, y, x] is gate 2 x + y) into [2, 2, U, B] whose reshape to [4 U, B] has row
g U + u: the kernel's B operand. A CPU test checks it with ``tl.join`` in the interpreter."""


def b4_config(head_dim: int, block_u: int = 16, block_b: int = 16, warps: int = 8, tiles: int = 1) -> V6Config:
    """The backward's tile for ``head_dim``: ``block_u`` units per program (its 4 gates: the product's depth
    4 * block_u), ``warps`` warps splitting the DH rows of R_p^T, held as at most two power-of-two tiles each at
    least 16 rows per warp (:func:`gpulab.rnn.fused.gluon_tiles.k_pieces`); one batch tile per program (``tiles``
    1: a larger batch runs in launches of fewer rows, :func:`gpulab.rnn.fused.plan.b4_rows`)."""
    head_dim = runtime.positive_int("head_dim", head_dim)
    if runtime.positive_int("tiles", tiles) != 1:
        raise ValueError(f"tiles={tiles}: b4 takes one batch tile per program; use tiles=1 and launches of fewer "
                         "rows (gpulab.rnn.fused.plan.b4_rows).")  # fmt: skip
    cfg = V6Config(block_u, block_b, warps)
    pieces = k_pieces(head_dim)
    if head_dim % block_u or pieces is None or min(x for x in pieces if x) < 16 * warps:
        raise ValueError(
            f"head_dim={head_dim} must be a multiple of block_u={block_u} and one power of two or the sum of two, "
            f"each at least 16 * warps = {16 * warps} (each warp's rows of R^T whole 16-row tiles); use a head dim "
            f"such as 768 (512 + 256) with warps <= {max(1, min(x for x in pieces if x) // 16) if pieces else 1}."
        )
    rows = head_dim // warps  # each warp's rows of R^T: its A operand (16-bit pairs) and its share (fp32)
    regs, budget = rows * 4 * block_u * 2 // 4 // 32 + rows * block_b // 32, register_budget(warps)
    if regs > budget:
        raise ValueError(
            f"head_dim={head_dim} with block_u={block_u}, block_b={block_b}, warps={warps} needs {regs} registers per "
            f"thread for R^T's rows and the shares (at most {budget}); use more warps or fewer units or rows per "
            "program."
        )
    return cfg


def _checked(d_out, gates, out, states, R, d_last) -> tuple[int, ...]:
    """``out``'s shape [2, B, T, NH, DH] once every input is a tensor of the LSTM backward's shapes."""
    named = (("d_out", d_out), ("gates", gates), ("out", out), ("states", states), ("R", R))
    for name, x in named + (() if d_last is None else (("d_last", d_last),)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor{' or None' if name == 'd_last' else ''}, got "
                            f"{type(x).__name__}.")  # fmt: skip
    if out.dim() != 5 or out.shape[0] != 2 or out.numel() == 0:
        raise ValueError(f"out must be the LSTM's states [2, B, T, NH, DH] (non-empty), got {list(out.shape)}.")
    _, B, T, NH, DH = out.shape
    want = {"d_out": (2, B, T, NH, DH), "gates": (B, T, 4, NH, DH), "states": (2, B, 1, NH, DH),
            "R": (4, NH, DH, DH), "d_last": (2, B, 1, NH, DH)}  # fmt: skip
    for name, x in named + (() if d_last is None else (("d_last", d_last),)):
        if name != "out" and tuple(x.shape) != want[name]:
            raise ValueError(f"{name} must have shape {list(want[name])} for out {list(out.shape)}, got "
                             f"{list(x.shape)}.")  # fmt: skip
    return tuple(out.shape)


def schedule_reference(d_out, gates, out, states, R, d_last=None, cfg: V6Config | None = None):
    """b4's arithmetic program by program in float64 on any device: ``(dG [B, T, 4, NH, DH], d_states [2, B, 1, NH,
    DH])`` as :func:`split_backward_b4` returns them. Each program forms its share R_p^T @ dG_p^T of all of dh_{t-1}
    from its M pieces, and each unit's dh sums the shares in program order, as the kernel's gather does."""
    S, B, T, NH, DH = _checked(d_out, gates, out, states, R, d_last)
    cfg = gluon_tiles.tile_for(DH, cfg, b4_config)
    bu, pieces = cfg.block_u, [x for x in k_pieces(DH) if x]
    f64 = dict(dtype=torch.float64)
    d_out, gates, out, states, R = (x.to(**f64) for x in (d_out, gates, out, states, R))
    dG = torch.empty(B, T, 4, NH, DH, **f64)
    dh_carry = torch.zeros(B, NH, DH, **f64) if d_last is None else d_last[0, :, 0].to(**f64)
    dc = torch.zeros(B, NH, DH, **f64) if d_last is None else d_last[1, :, 0].to(**f64)
    shares = None  # [P, B, NH, DH]: the previous step's, per program
    for t in range(T - 1, -1, -1):
        dh = d_out[0, :, t] + dh_carry
        dh_carry = torch.zeros_like(dh)
        if shares is not None:
            for q in range(shares.shape[0]):
                dh = dh + shares[q]
        dc = dc + d_out[1, :, t]
        pre = gates[:, t]  # [B, 4, NH, DH]
        i, f, z, o = torch.sigmoid(pre[:, 0]), torch.sigmoid(pre[:, 1]), torch.tanh(pre[:, 2]), torch.sigmoid(pre[:, 3])
        c_prev = out[1, :, t - 1] if t > 0 else states[1, :, 0]
        tc = torch.tanh(f * c_prev + i * z)
        dc = dc + dh * o * (1 - tc * tc)
        dG[:, t] = torch.stack((dc * z * i * (1 - i), dc * c_prev * f * (1 - f), dc * i * (1 - z * z),
                             dh * tc * o * (1 - o)), dim=1)  # fmt: skip
        dc = dc * f
        shares = torch.zeros(DH // bu, B, NH, DH, **f64)
        for n in range(NH):
            for p in range(DH // bu):
                units = slice(p * bu, (p + 1) * bu)
                rt = R[:, n, units, :].reshape(4 * bu, DH).T  # R_p^T [DH, 4 U]
                dg_t = dG[:, t, :, n, units].reshape(B, 4 * bu).T  # [4 U, B]
                k0 = 0
                for m in pieces:  # the kernel's M pieces (512 + 256 at 768)
                    shares[p, :, n, k0 : k0 + m] = (rt[k0 : k0 + m] @ dg_t).T
                    k0 += m
    dh0 = dh_carry
    for q in range(shares.shape[0]):
        dh0 = dh0 + shares[q]
    return dG, torch.stack((dh0, dc))[:, :, None]


@gluon.jit
def _step_inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, gate_t, own_t, own, ok, t, HD, B, c_stride):
    """Step t's inputs as stored (16-bit; converted where used, so a load in flight stalls nothing): the saved
    pre-activations i, f, z, o, c_{t-1} (the initial c at t = 0), dL/dh_t and dL/dc_t."""
    g_t = gates_ptr + gate_t + t * 4 * HD
    x_i = gl.load(g_t, mask=ok, other=0.0)
    x_f = gl.load(g_t + HD, mask=ok, other=0.0)
    x_z = gl.load(g_t + 2 * HD, mask=ok, other=0.0)
    x_o = gl.load(g_t + 3 * HD, mask=ok, other=0.0)
    if t > 0:
        x_c = gl.load(out_ptr + c_stride + own_t + (t - 1) * HD, mask=ok, other=0.0)
    else:
        x_c = gl.load(s0_ptr + B * HD + own, mask=ok, other=0.0)
    x_h = gl.load(dout_ptr + own_t + t * HD, mask=ok, other=0.0)
    x_dc = gl.load(dout_ptr + c_stride + own_t + t * HD, mask=ok, other=0.0)
    return x_i, x_f, x_z, x_o, x_c, x_h, x_dc


@gluon.jit(do_not_specialize=["B", "T", "NH", "n_programs"])  # a size of 1 stays a tensor (one compile per tile)
def split_backward_b4_kernel(
    gates_ptr,  # [B, T, 4, NH, DH] pre-activations saved by the forward
    out_ptr,  # [2, B, T, NH, DH] the forward's (h, c)
    s0_ptr,  # [2, B, 1, NH, DH] initial states
    r_ptr,  # [4, NH, DH, DH]
    dout_ptr,  # [2, B, T, NH, DH] dL/d(all states)
    dlast_ptr,  # [2, B, 1, NH, DH] dL/d(last states) (HAS_LAST)
    dg_ptr,  # [T, B, 4, NH, DH] gate gradients, time-major (written)
    part_ptr,  # [2, tiles, NH, SPLIT, DH, BLOCK_B] the shares of dh, transposed (written and read)
    ds0_ptr,  # [2, B, 1, NH, DH] dL/d(initial states) (written)
    bar_ptr,  # int64 counter of the grid barrier
    db_ptr,  # [tiles, 4, NH, DH] fp32: each batch tile's sum over its rows and steps of dG (SUM_DB; written)
    B,
    T,
    NH,
    n_programs,
    DH: gl.constexpr,
    BLOCK_B: gl.constexpr,
    BLOCK_U: gl.constexpr,
    W: gl.constexpr,  # warps: they split R_p^T's DH rows
    M1: gl.constexpr,  # DH as one or two power-of-two tiles: M1 + M2 = DH
    M2: gl.constexpr,
    SPLIT: gl.constexpr,  # programs per head and batch tile
    HAS_LAST: gl.constexpr,
    FAST: gl.constexpr,  # one-instruction activations (bf16, as version 5: tiles.fast_activations)
    COALESCED: gl.constexpr,  # the shares stored in 16-byte rows (else from the product's fragments, 4 bytes each)
    EARLY: gl.constexpr,  # arrive at the barrier right after pushing the shares (dG stored while waiting)
    GROUP_STRIDE: gl.constexpr,  # > 0: a barrier per head and batch tile, their counters this many int64 apart
    POLL_LOADS: gl.constexpr,  # the barrier's wait polls with acquire loads (else atomics: gluon_ops.POLL)
    PREFETCH: gl.constexpr,  # each step's inputs loaded during the previous step's wait (else at its start)
    SUM_DB: gl.constexpr,  # also sum dG over the tile's rows and all steps: db's share of this tile (fp32)
):
    K: gl.constexpr = 4 * BLOCK_U
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[W, 1], instr_shape=[16, 8])
    la: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    lb: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    # the cell's layout [BLOCK_U, BLOCK_B]: units along the lanes (contiguous in memory), rows across the warps
    TU: gl.constexpr = 32 if BLOCK_U > 32 else BLOCK_U
    lp: gl.constexpr = gl.BlockedLayout([1, 1], [TU, 32 // TU], [1, W], [0, 1])
    # the gather's layout [BLOCK_U, BLOCK_B]: batch rows along the lanes (contiguous in the shares' slabs)
    SJ: gl.constexpr = 2 if BLOCK_B > 32 else 1
    lg: gl.constexpr = gl.BlockedLayout([1, SJ], [32 // (BLOCK_B // SJ), BLOCK_B // SJ], [W, 1], [1, 0])
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])

    p = gl.program_id(0)
    n = gl.program_id(1)
    tile = gl.program_id(2)
    HD = NH * DH

    # R_p^T in registers, one or two tiles of rows (M1 + M2 = DH)
    a1 = ops.rt_tile(r_ptr, n, p, 0, M1, NH, DH, BLOCK_U, la)  # [M1, K]
    a2 = a1
    if M2 > 0:
        a2 = ops.rt_tile(r_ptr, n, p, M1, M2, NH, DH, BLOCK_U, la)  # [M2, K]

    # this program's elements: unit u, batch row j
    u = gl.arange(0, BLOCK_U, layout=gl.SliceLayout(1, lp))
    j = gl.arange(0, BLOCK_B, layout=gl.SliceLayout(0, lp))
    rows = gl.expand_dims(tile * BLOCK_B + j, 0)  # [1, BLOCK_B]
    ok = rows < B
    units = gl.expand_dims(p * BLOCK_U + u, 1)  # [BLOCK_U, 1]
    own = rows * HD + n * DH + units  # in [B, 1, NH, DH]
    own_t = rows.to(gl.int64) * T * HD + n * DH + units  # in [B, T, NH, DH] at t = 0
    gate_t = rows.to(gl.int64) * T * 4 * HD + n * DH + units  # in [B, T, 4, NH, DH] at t = 0, gate 0
    dg_own = dg_ptr + rows.to(gl.int64) * T * 4 * HD + n * DH + units  # in [B, T, 4, NH, DH] at t = 0, + t * 4 HD
    c_stride = B.to(gl.int64) * T * HD  # from h to c in [2, B, T, NH, DH] (past 2^31 at long sequences)
    # the shares: slab (slot, tile, n, q) is [DH, BLOCK_B]; this program writes q = p, reads its units of every q
    PSLOT = gl.num_programs(2) * NH * SPLIT * DH * BLOCK_B
    slab0 = part_ptr + (tile * NH + n) * SPLIT * DH * BLOCK_B
    part_own = slab0 + p * DH * BLOCK_B
    u_g = gl.arange(0, BLOCK_U, layout=gl.SliceLayout(1, lg))
    j_g = gl.arange(0, BLOCK_B, layout=gl.SliceLayout(0, lg))
    units_b = gl.expand_dims(p * BLOCK_U + u_g, 1) * BLOCK_B + gl.expand_dims(j_g, 0)  # own rows of a slab

    dgs = gl.allocate_shared_memory(r_ptr.dtype.element_ty, [K, BLOCK_B], flat)
    db_i = gl.zeros([BLOCK_U, BLOCK_B], gl.float32, lp)  # SUM_DB: dG summed over the steps, per gate
    db_f = db_i
    db_z = db_i
    db_o = db_i
    dh_c = gl.zeros([BLOCK_U, BLOCK_B], gl.float32, lp)  # the carried part of dh (d_last's at T - 1)
    dc = gl.zeros([BLOCK_U, BLOCK_B], gl.float32, lp)
    if HAS_LAST:
        dh_c = gl.load(dlast_ptr + own, mask=ok, other=0.0).to(gl.float32)
        dc = gl.load(dlast_ptr + B * HD + own, mask=ok, other=0.0).to(gl.float32)
    bar_ptr, base = ops.barrier_start(bar_ptr, n_programs, GROUP_STRIDE)  # this head and tile's counter
    # step T - 1's inputs (PREFETCH: each step loads the next one's while it waits at the barrier)
    x_i, x_f, x_z, x_o, x_c, x_h, x_dc = _step_inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, gate_t, own_t, own, ok,
                                                       T - 1, HD, B, c_stride)  # fmt: skip
    for tt in range(T):
        t = T - 1 - tt
        # step t's inputs: saved pre-activations, c_{t-1}, dL/dh_t, dL/dc_t (loaded a step ahead, or now)
        if not PREFETCH:
            x_i, x_f, x_z, x_o, x_c, x_h, x_dc = _step_inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, gate_t, own_t,
                                                               own, ok, t, HD, B, c_stride)  # fmt: skip
        pre_i, pre_f, pre_z, pre_o = x_i.to(gl.float32), x_f.to(gl.float32), x_z.to(gl.float32), x_o.to(gl.float32)
        c_prev = x_c.to(gl.float32)
        dh = dh_c + x_h.to(gl.float32)
        dc += x_dc.to(gl.float32)
        dh_c = gl.zeros([BLOCK_U, BLOCK_B], gl.float32, lp)
        if tt > 0:  # the shares of step t + 1, pushed by every program before the last barrier
            dh += ops.gather_shares(slab0 + ((t + 1) % 2) * PSLOT, units_b, SPLIT, DH, BLOCK_B, lp)
        # the cell backward (the activations recomputed from the pre-activations, c_t from c_{t-1})
        i = sigmoid(pre_i, FAST)
        f = sigmoid(pre_f, FAST)
        z = tanh(pre_z, FAST)
        o = sigmoid(pre_o, FAST)
        tc = tanh(f * c_prev + i * z, FAST)
        dc = dc + dh * o * (1.0 - tc * tc)
        d_i = (dc * z * i * (1.0 - i)).to(dg_ptr.dtype.element_ty)
        d_f = (dc * c_prev * f * (1.0 - f)).to(dg_ptr.dtype.element_ty)
        d_z = (dc * i * (1.0 - z * z)).to(dg_ptr.dtype.element_ty)
        d_o = (dh * tc * o * (1.0 - o)).to(dg_ptr.dtype.element_ty)
        dc = dc * f
        if SUM_DB:  # the gradients as stored (16-bit), as db = sum of dG sums them
            db_i += d_i.to(gl.float32)
            db_f += d_f.to(gl.float32)
            db_z += d_z.to(gl.float32)
            db_o += d_o.to(gl.float32)
        dg_t = dg_own + t * 4 * HD
        if not EARLY:
            gl.store(dg_t, d_i, mask=ok)
            gl.store(dg_t + HD, d_f, mask=ok)
            gl.store(dg_t + 2 * HD, d_z, mask=ok)
            gl.store(dg_t + 3 * HD, d_o, mask=ok)
        # this program's shares of dh_{t-1} from dG_t as stored: dG^T [4 U, B] through shared memory to every warp
        # one store of the four gates as [4 U, B] (row g U + u): four stores to slices of one buffer would each get a
        # CTA barrier from the compiler. join adds the new dimension last: [u, j, y, x] is gate 2 x + y
        both = gl.join(gl.join(d_i, d_f), gl.join(d_z, d_o))  # [U, B, 2, 2]
        dgs.store(gl.reshape(gl.permute(both, GATES_FIRST.value), [K, BLOCK_B]))
        cta_barrier()
        bop = dgs.load(lb)  # [K, BLOCK_B]
        own_slab = part_own + (t % 2) * PSLOT
        share1 = mma_v2(a1, bop, gl.zeros([M1, BLOCK_B], gl.float32, mma))
        ops.push_share(share1, own_slab, 0, M1, BLOCK_B, W, mma, COALESCED)
        if M2 > 0:
            share2 = mma_v2(a2, bop, gl.zeros([M2, BLOCK_B], gl.float32, mma))
            ops.push_share(share2, own_slab, M1, M2, BLOCK_B, W, mma, COALESCED)
        if EARLY:  # the others read the shares only: their stores are what the arrival releases
            ops.grid_arrive(bar_ptr)  # (its CTA barrier also ends this step's reads of dgs)
            gl.store(dg_t, d_i, mask=ok)
            gl.store(dg_t + HD, d_f, mask=ok)
            gl.store(dg_t + 2 * HD, d_z, mask=ok)
            gl.store(dg_t + 3 * HD, d_o, mask=ok)
            if PREFETCH:  # the next step's inputs, in flight while this program waits
                x_i, x_f, x_z, x_o, x_c, x_h, x_dc = _step_inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, gate_t, own_t,
                                                                   own, ok, gl.maximum(t - 1, 0), HD, B,
                                                                   c_stride)  # fmt: skip
            ops.grid_wait(bar_ptr, base + (tt + 1) * n_programs, POLL_LOADS)
        else:
            if PREFETCH:
                x_i, x_f, x_z, x_o, x_c, x_h, x_dc = _step_inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, gate_t, own_t,
                                                                   own, ok, gl.maximum(t - 1, 0), HD, B,
                                                                   c_stride)  # fmt: skip
            # (the barrier's CTA barrier also ends the reads of dgs)
            grid_barrier(bar_ptr, base + (tt + 1) * n_programs, POLL_LOADS)
    dh0 = ops.gather_shares(slab0, units_b, SPLIT, DH, BLOCK_B, lp)  # step 0's shares (slot 0): dL/dh_{-1}
    gl.store(ds0_ptr + own, dh0.to(ds0_ptr.dtype.element_ty), mask=ok)
    gl.store(ds0_ptr + B * HD + own, dc.to(ds0_ptr.dtype.element_ty), mask=ok)
    if SUM_DB:  # this tile's share of db: [4, U] of row (tile, gate, n), units p U ..
        db_own = db_ptr + (tile * 4 * NH + n) * DH + p * BLOCK_U + u
        gl.store(db_own, gl.sum(gl.where(ok, db_i, 0.0), axis=1))
        gl.store(db_own + NH * DH, gl.sum(gl.where(ok, db_f, 0.0), axis=1))
        gl.store(db_own + 2 * NH * DH, gl.sum(gl.where(ok, db_z, 0.0), axis=1))
        gl.store(db_own + 3 * NH * DH, gl.sum(gl.where(ok, db_o, 0.0), axis=1))


SHARE_STORES = ("coalesced", "fragments")
"""How a step stores its shares of dh_{t-1}: ``coalesced`` (through shared memory into 16-byte rows, whole sectors)
or ``fragments`` (from the product's registers, 4 bytes a store)."""


def _constexprs(head_dim: int, cfg: V6Config, has_last: bool, fast: bool, share_stores: str = "coalesced",
                sum_db: bool = False, config: GluonConfig | None = None) -> dict:  # fmt: skip
    config = GluonConfig.of(config)
    m1, m2 = k_pieces(head_dim)
    return dict(DH=head_dim, BLOCK_B=cfg.block_b, BLOCK_U=cfg.block_u, W=cfg.warps, M1=m1, M2=m2,
                SPLIT=head_dim // cfg.block_u, HAS_LAST=has_last, FAST=fast,
                COALESCED=share_stores == "coalesced", EARLY=config.backward_early_arrive,
                **ops.barrier_constexprs(config.barrier, config.poll), PREFETCH=config.prefetch,
                SUM_DB=sum_db)  # fmt: skip


def split_backward_b4(d_out, gates, out, states, R, d_last=None, cfg: V6Config | None = None,
                      share_stores: str = "coalesced", sum_db: bool = False,
                      config: GluonConfig | None = None):  # fmt: skip
    """b4 on a GPU (LSTM, 16-bit): ``(dG [B, T, 4, NH, DH] in Wx's layout, d_states [2, B, 1, NH, DH])`` as
    :func:`gpulab.rnn.fused.split_backward.split_rnn_backward` returns them; ``gates`` the pre-activations the
    forward saved (:func:`gpulab.rnn.fused.split_gluon.split_forward_v6` or version 5);
    ``share_stores`` one of :data:`SHARE_STORES`. With ``sum_db`` also db [4, NH, DH] (dG summed over the batch and
    the steps in the kernel, fp32, per batch tile; the tiles summed here; in dG's dtype) as a third result: the
    reduction that would read all of dG once more (the package passes ``config.sum_db``). ``config``: a
    :class:`gpulab.rnn.fused.config.GluonConfig` (the barrier, its poll, what a step issues while it waits; None:
    what ships). On a CPU it raises: run :func:`schedule_reference` there."""
    from gpulab.check import new_output  # noqa: PLC0415
    from gpulab.rnn.fused.tiles import fast_activations  # noqa: PLC0415

    _, B, T, NH, DH = _checked(d_out, gates, out, states, R, d_last)
    share_stores = runtime.one_of("share_stores", share_stores, SHARE_STORES)
    sum_db = runtime.strict_bool("sum_db", sum_db)
    config = GluonConfig.of(config)
    tensors = (d_out, gates, out, states, R) + (() if d_last is None else (d_last,))
    if out.dtype not in (torch.float16, torch.bfloat16) or any(x.dtype != out.dtype for x in tensors):
        raise TypeError(
            f"b4 takes one 16-bit dtype (float16 or bfloat16) for every input, got {[x.dtype for x in tensors]}: "
            "use gpulab.rnn.fused.split_backward.split_rnn_backward."
        )
    if out.device.type != "cuda" or runtime.INTERPRET:
        raise RuntimeError(
            "b4 is a Gluon kernel: it runs on a CUDA GPU only (no interpreter); on a CPU run "
            "gpulab.rnn.fused.split_gluon_backward.schedule_reference, the same arithmetic in float64."
        )
    cfg = gluon_tiles.tile_for(DH, cfg, b4_config)
    d_out, gates, out, states, R = (x.contiguous() for x in (d_out, gates, out, states, R))
    dev, dt = out.device, out.dtype
    tiles = -(-B // cfg.block_b)
    dG = new_output(B, T, 4, NH, DH, dtype=dt, device=dev)
    ds0 = new_output(2, B, 1, NH, DH, dtype=dt, device=dev)
    part = torch.empty(2, tiles, NH, DH // cfg.block_u, DH, cfg.block_b, dtype=dt, device=dev)  # written first
    grid = (DH // cfg.block_u, NH, tiles)
    programs = grid[0] * grid[1] * grid[2]
    bar, per_group = ops.launch_counter(dev, programs, NH, tiles, config.barrier)
    db = new_output(tiles, 4, NH, DH, dtype=torch.float32, device=dev) if sum_db else bar
    has_last = d_last is not None
    # every argument by name, put in the kernel's order (in_order); the grid and constexprs built once per problem
    # (keyed_launch), later calls launched straight to the compiled kernel (gpulab.launch)
    args = in_order(split_backward_b4_kernel, gates_ptr=gates, out_ptr=out, s0_ptr=states, r_ptr=R, dout_ptr=d_out,
                    dlast_ptr=d_last.contiguous() if has_last else d_out, dg_ptr=dG, part_ptr=part, ds0_ptr=ds0,
                    bar_ptr=bar, db_ptr=db, B=B, T=T, NH=NH, n_programs=per_group)  # fmt: skip
    tensors, ints = args[:-4], args[-4:]

    def make():
        constexprs = _constexprs(DH, cfg, has_last, fast_activations(dt), share_stores, sum_db, config)
        return grid, dict(num_warps=cfg.warps, launch_cooperative_grid=True, **constexprs)

    launch = keyed_launch((split_backward_b4_kernel, DH, cfg, dt, has_last, share_stores, sum_db, config) + ints, make)
    launch(direct_stream(dev) if aligned(*tensors) else None, *tensors, *ints)
    return (dG, ds0, db.sum(0).to(dt)) if sum_db else (dG, ds0)


def compile_sm90(head_dim: int = 768, cfg: V6Config | None = None, dtype: str = "bf16", has_last: bool = True,
                 share_stores: str = "coalesced", sum_db: bool = False,
                 config: GluonConfig | None = None):  # fmt: skip
    """Triton's compiled b4 for sm_90, nothing launched, no GPU needed (``config`` as for
    :func:`split_backward_b4`). Call from a process outside the interpreter
    (:func:`gpulab.rnn.fused.measure.sass.b4_stats` does)."""
    dtype = runtime.one_of("dtype", dtype, ("bf16", "fp16"))
    if not isinstance(has_last, bool):
        raise TypeError(f"has_last must be True or False, got {has_last!r}.")
    share_stores = runtime.one_of("share_stores", share_stores, SHARE_STORES)
    cfg = gluon_tiles.tile_for(head_dim, cfg, b4_config)
    constexprs = _constexprs(head_dim, cfg, has_last, dtype == "bf16", share_stores,
                             runtime.strict_bool("sum_db", sum_db), GluonConfig.of(config))  # fmt: skip
    return gluon_tiles.compile_sm90(split_backward_b4_kernel, dtype, constexprs, cfg.warps)
