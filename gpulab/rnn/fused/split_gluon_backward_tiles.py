"""Backward b4 for large batches: one program loops over several batch tiles in every step.

b4 (:mod:`gpulab.rnn.fused.split_gluon_backward`) gives every (head, batch tile) its own P programs, R_p^T in each
one's registers, so a launch is P x heads x batch tiles programs, all resident at once: at one head of 1024 in 16
units that is 64 programs per batch tile, and a batch of 64 already needs more than an H200's 132 SMs. Here program
(p, n, g) keeps b4's R_p^T [DH, 4 U] in registers and runs ``TILES`` batch tiles of ``BLOCK_B`` rows (tiles
g TILES .. g TILES + TILES - 1) in turn within each step, so a launch is P x heads x ceil(tiles / TILES) programs:

- R_p^T is loaded once and multiplies every tile's gate gradients;
- each tile's carried dc lives in shared memory ([TILES, BLOCK_U, BLOCK_B] fp32; each thread reads back what it
  wrote); db (``SUM_DB``) is summed over all of the program's tiles in one set of registers;
- each tile has its own slabs of shares (as b4's batch tiles have): part[slot][tile, n, q] [DH, BLOCK_B];
- the next tile's inputs are loaded before this tile's cell and product (their trip overlaps them), tile 0's of
  step t-1 while the program waits;
- the grid barrier is once per step, after the last tile (every tile's shares of dh_{t-1} pushed).

Per step t = T-1 .. 0, program (p, n, g), for k = 0 .. TILES - 1 (rows (g TILES + k) BLOCK_B ..), as b4:

    dh = dL/dh_t + sum_q part[(t + 1) % 2][tile k, q, U_p]^T    (d_last's h at T-1)    [U, B]
    dc = dL/dc_t + dc[k]                                        (d_last's c at T-1)
    (di, df, dz, do), dc[k] = cell_backward(pre_t, c_{t-1}, dh, dc)
    part[t % 2][tile k, p] = R_p^T @ dG_t[:, U_p]^T                                     [DH, B]
  then arrive (after the last tile's shares), store the last tile's dG, load tile 0's inputs of step t-1, wait.

At the end dL/dh_{-1} of tile k = sum_q part[0][tile k, q, U_p]^T and dL/dc_{-1} = dc[k]. Checked as b4 is:
:func:`schedule_reference` (float64, the same programs, groups, tiles and M pieces) against autograd through the
vanilla backend; :func:`compile_sm90` (registers, spills; no GPU); the GPU tests
(``tests/rnn/fused/test_split_gluon_backward_tiles.py``) run it against the float64 schedule.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from gpulab import runtime
from gpulab.rnn.fused import gluon_ops as ops
from gpulab.rnn.fused import gluon_tiles
from gpulab.rnn.fused.config import GluonConfig
from gpulab.rnn.fused.gluon_ops import cta_barrier, sigmoid, tanh
from gpulab.rnn.fused.gluon_tiles import SHARED_BUDGET, V6Config, k_pieces, register_budget

__all__ = ["b4_tiles_config", "schedule_reference", "split_backward_tiles", "compile_sm90", "GATES_FIRST"]

GATES_FIRST = gl.constexpr((3, 2, 0, 1))
"""b4's permutation of ``join(join(i, f), join(z, o))`` [U, B, 2, 2] into [2, 2, U, B], whose reshape to [4 U, B] has
row g U + u (:data:`gpulab.rnn.fused.split_gluon_backward.GATES_FIRST`; a test checks they agree)."""


def b4_tiles_config(head_dim: int, block_u: int = 16, block_b: int = 16, warps: int = 8, tiles: int = 2) -> V6Config:
    """The tile for ``head_dim``: b4's (``block_u`` units, ``block_b`` rows, ``warps`` warps splitting R_p^T's DH rows
    as at most two power-of-two tiles, R_p^T and a share within the register budget) with ``tiles`` batch tiles per
    program (1 to :data:`gpulab.rnn.fused.gluon_tiles.MAX_TILES`; their dc and the gate gradients within shared
    memory)."""
    head_dim = runtime.positive_int("head_dim", head_dim)
    cfg = V6Config(block_u, block_b, warps, tiles)
    pieces = k_pieces(head_dim)
    if head_dim % block_u or pieces is None or min(x for x in pieces if x) < 16 * warps:
        raise ValueError(
            f"head_dim={head_dim} must be a multiple of block_u={block_u} and one power of two or the sum of two, "
            f"each at least 16 * warps = {16 * warps} (each warp's rows of R^T whole 16-row tiles); use a head dim "
            f"such as 768 (512 + 256) with warps <= {max(1, min(x for x in pieces if x) // 16) if pieces else 1}."
        )
    rows = head_dim // warps  # each warp's rows of R^T (16-bit pairs) and of one share (fp32)
    regs, budget = rows * 4 * block_u * 2 // 4 // 32 + rows * block_b // 32, register_budget(warps)
    smem = 2 * 4 * block_u * block_b + 4 * tiles * block_u * block_b  # dG^T [4 U, B] (16-bit), each tile's dc
    if regs > budget or smem > SHARED_BUDGET:
        raise ValueError(
            f"head_dim={head_dim} with block_u={block_u}, block_b={block_b}, warps={warps}, tiles={tiles} needs "
            f"{regs} registers per thread for R^T's rows and a share (at most {budget}) and {smem} bytes of shared "
            f"memory (at most {SHARED_BUDGET}); use more warps or fewer units, rows or tiles per program."
        )
    return cfg


def _checked(d_out, gates, out, states, R, d_last) -> tuple[int, ...]:
    """``out``'s shape [2, B, T, NH, DH] once every input is a tensor of the LSTM backward's shapes."""
    named = (("d_out", d_out), ("gates", gates), ("out", out), ("states", states), ("R", R))
    named += () if d_last is None else (("d_last", d_last),)
    for name, x in named:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor{' or None' if name == 'd_last' else ''}, got "
                            f"{type(x).__name__}.")  # fmt: skip
    if out.dim() != 5 or out.shape[0] != 2 or out.numel() == 0:
        raise ValueError(f"out must be the LSTM's states [2, B, T, NH, DH] (non-empty), got {list(out.shape)}.")
    _, B, T, NH, DH = out.shape
    want = {"d_out": (2, B, T, NH, DH), "gates": (B, T, 4, NH, DH), "states": (2, B, 1, NH, DH),
            "R": (4, NH, DH, DH), "d_last": (2, B, 1, NH, DH)}  # fmt: skip
    for name, x in named:
        if name != "out" and tuple(x.shape) != want[name]:
            raise ValueError(f"{name} must have shape {list(want[name])} for out {list(out.shape)}, got "
                             f"{list(x.shape)}.")  # fmt: skip
    return tuple(out.shape)


def _tile(head_dim: int, cfg) -> V6Config:
    if not isinstance(cfg, V6Config):
        raise TypeError(f"cfg must be a V6Config (b4_tiles_config(head_dim, ..., tiles=...)), got {cfg!r}.")
    return b4_tiles_config(head_dim, cfg.block_u, cfg.block_b, cfg.warps, cfg.tiles)


def schedule_reference(d_out, gates, out, states, R, d_last=None, *, cfg: V6Config):
    """The kernel's arithmetic in float64, program by program: ``(dG [B, T, 4, NH, DH], d_states [2, B, 1, NH,
    DH])`` as :func:`split_backward_tiles` returns them. Program (p, n, g) runs tiles k = 0 .. TILES - 1 of its
    group (rows past B skipped, as the kernel masks them), each tile with its own dc and its own shares, formed from
    R_p^T's M pieces; each unit's dh sums the previous step's shares of its tile in program order. A row's arithmetic
    does not depend on which tile or group holds it, so the reference steps every row of a program at once (the
    same float64 operations per row; a loop per tile took minutes at B 256, T 32)."""
    _, B, T, NH, DH = _checked(d_out, gates, out, states, R, d_last)
    cfg = _tile(DH, cfg)
    bu, pieces, P = cfg.block_u, [x for x in k_pieces(DH) if x], DH // cfg.block_u
    f64 = dict(dtype=torch.float64)
    d_out, gates, out, states, R = (x.to(**f64) for x in (d_out, gates, out, states, R))
    dG = torch.full((B, T, 4, NH, DH), float("nan"), **f64)
    ds0 = torch.full((2, B, 1, NH, DH), float("nan"), **f64)
    dc = torch.zeros(B, NH, DH, **f64) if d_last is None else d_last[1, :, 0].to(**f64).clone()
    shares = None  # [P, B, NH, DH]: the previous step's share of every program, per row
    for t in range(T - 1, -1, -1):
        new = torch.full((P, B, NH, DH), float("nan"), **f64)
        for n in range(NH):
            for p in range(P):
                units = slice(p * bu, (p + 1) * bu)
                rt = R[:, n, units, :].reshape(4 * bu, DH).T  # R_p^T [DH, 4 U]
                # the program's tiles, (g * TILES + k) * BLOCK_B onwards (rows past B masked), cover every row once;
                # a row's arithmetic is the same in whichever tile holds it: all of them are one step here
                rows = slice(0, B)
                dh = d_out[0, rows, t, n, units]
                if shares is None and d_last is not None:
                    dh = dh + d_last[0, rows, 0, n, units].to(**f64)
                for q in range(P if shares is not None else 0):
                    dh = dh + shares[q, rows, n, units]
                c = dc[rows, n, units] + d_out[1, rows, t, n, units]
                pre = gates[rows, t, :, n, units]  # [rows, 4, U]
                i, f = torch.sigmoid(pre[:, 0]), torch.sigmoid(pre[:, 1])
                z, o = torch.tanh(pre[:, 2]), torch.sigmoid(pre[:, 3])
                c_prev = out[1, rows, t - 1, n, units] if t > 0 else states[1, rows, 0, n, units]
                tc = torch.tanh(f * c_prev + i * z)
                c = c + dh * o * (1 - tc * tc)
                dg = torch.stack((c * z * i * (1 - i), c * c_prev * f * (1 - f), c * i * (1 - z * z),
                                  dh * tc * o * (1 - o)), dim=1)  # fmt: skip
                dG[rows, t, :, n, units] = dg
                dc[rows, n, units] = c * f
                dg_t = dg.reshape(-1, 4 * bu).T  # [4 U, rows]
                k0 = 0
                for m in pieces:  # the kernel's M pieces (512 + 256 at 768)
                    new[p, rows, n, k0 : k0 + m] = (rt[k0 : k0 + m] @ dg_t).T
                    k0 += m
        shares = new
    for n in range(NH):
        for p in range(P):
            units = slice(p * bu, (p + 1) * bu)
            dh0 = shares[:, :, n, units].sum(0)  # in program order, as the kernel's gather
            ds0[0, :, 0, n, units] = dh0
            ds0[1, :, 0, n, units] = dc[:, n, units]
    return dG, ds0


@gluon.jit
def _inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, rows, units, n, t, T, HD, B, DH: gl.constexpr):
    """Step t's inputs of rows ``rows`` [1, BLOCK_B] and units ``units`` [BLOCK_U, 1] as stored (16-bit): the saved
    pre-activations i, f, z, o, c_{t-1} (the initial c at t = 0), dL/dh_t and dL/dc_t."""
    ok = rows < B
    r64 = rows.to(gl.int64)
    own_t = r64 * T * HD + n * DH + units + t * HD  # in [B, T, NH, DH] at step t
    x_i, x_f, x_z, x_o = ops.gate_inputs(gates_ptr + r64 * T * 4 * HD + n * DH + units + t * 4 * HD, ok, HD)
    c_stride = B.to(gl.int64) * T * HD
    if t > 0:
        x_c = gl.load(out_ptr + c_stride + own_t - HD, mask=ok, other=0.0)
    else:
        x_c = gl.load(s0_ptr + B * HD + rows * HD + n * DH + units, mask=ok, other=0.0)
    x_h = gl.load(dout_ptr + own_t, mask=ok, other=0.0)
    x_dc = gl.load(dout_ptr + c_stride + own_t, mask=ok, other=0.0)
    return x_i, x_f, x_z, x_o, x_c, x_h, x_dc


@gluon.jit(do_not_specialize=["B", "T", "NH", "n_programs"])
def split_backward_tiles_kernel(
    gates_ptr,  # [B, T, 4, NH, DH] pre-activations saved by the forward
    out_ptr,  # [2, B, T, NH, DH] the forward's (h, c)
    s0_ptr,  # [2, B, 1, NH, DH] initial states
    r_ptr,  # [4, NH, DH, DH]
    dout_ptr,  # [2, B, T, NH, DH] dL/d(all states)
    dlast_ptr,  # [2, B, 1, NH, DH] dL/d(last states) (HAS_LAST)
    dg_ptr,  # [B, T, 4, NH, DH] gate gradients (written)
    part_ptr,  # [2, groups * TILES, NH, SPLIT, DH, BLOCK_B] the shares of dh, transposed (written and read)
    ds0_ptr,  # [2, B, 1, NH, DH] dL/d(initial states) (written)
    bar_ptr,  # int64 counter of the grid barrier
    db_ptr,  # [groups, 4, NH, DH] fp32: each group's sum over its rows and steps of dG (SUM_DB; written)
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
    SPLIT: gl.constexpr,  # programs per head and batch group
    TILES: gl.constexpr,  # batch tiles per program, run in turn every step
    HAS_LAST: gl.constexpr,
    FAST: gl.constexpr,  # one-instruction activations (bf16)
    COALESCED: gl.constexpr,  # the shares stored in 16-byte rows
    EARLY: gl.constexpr,  # arrive right after the last tile's shares (its dG stored while waiting)
    GROUP_STRIDE: gl.constexpr,  # > 0: a barrier per head and batch group
    POLL_LOADS: gl.constexpr,
    SUM_DB: gl.constexpr,  # also sum dG over the group's rows and all steps (fp32)
):
    K: gl.constexpr = 4 * BLOCK_U
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[W, 1], instr_shape=[16, 8])
    la: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    lb: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    TU: gl.constexpr = 32 if BLOCK_U > 32 else BLOCK_U
    lp: gl.constexpr = gl.BlockedLayout([1, 1], [TU, 32 // TU], [1, W], [0, 1])  # the cell's [BLOCK_U, BLOCK_B]
    SJ: gl.constexpr = 2 if BLOCK_B > 32 else 1
    lg: gl.constexpr = gl.BlockedLayout([1, SJ], [32 // (BLOCK_B // SJ), BLOCK_B // SJ], [W, 1], [1, 0])  # gather
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
    dt: gl.constexpr = dg_ptr.dtype.element_ty

    p = gl.program_id(0)
    n = gl.program_id(1)
    g = gl.program_id(2)
    HD = NH * DH

    a1 = ops.rt_tile(r_ptr, n, p, 0, M1, NH, DH, BLOCK_U, la)  # R_p^T [M1, K]
    a2 = a1
    if M2 > 0:
        a2 = ops.rt_tile(r_ptr, n, p, M1, M2, NH, DH, BLOCK_U, la)  # [M2, K]

    u = gl.arange(0, BLOCK_U, layout=gl.SliceLayout(1, lp))
    j = gl.arange(0, BLOCK_B, layout=gl.SliceLayout(0, lp))
    rows0 = gl.expand_dims(g * TILES * BLOCK_B + j, 0)  # tile 0's rows [1, BLOCK_B]; tile k: k BLOCK_B further
    units = gl.expand_dims(p * BLOCK_U + u, 1)  # [BLOCK_U, 1]
    # the shares: slab (slot, tile, n, q) is [DH, BLOCK_B]; tile k of this group at slab0 + k * TILE_SLABS
    TILE_SLABS = NH * SPLIT * DH * BLOCK_B
    PSLOT = gl.num_programs(2) * TILES * TILE_SLABS
    slab0 = part_ptr + (g * TILES * NH + n) * SPLIT * DH * BLOCK_B
    u_g = gl.arange(0, BLOCK_U, layout=gl.SliceLayout(1, lg))
    j_g = gl.arange(0, BLOCK_B, layout=gl.SliceLayout(0, lg))
    units_b = gl.expand_dims(p * BLOCK_U + u_g, 1) * BLOCK_B + gl.expand_dims(j_g, 0)  # own rows of a slab

    dgs = gl.allocate_shared_memory(r_ptr.dtype.element_ty, [K, BLOCK_B], flat)
    cs = gl.allocate_shared_memory(gl.float32, [TILES, BLOCK_U, BLOCK_B], flat)  # each tile's carried dc
    for k in gl.static_range(TILES):
        rows = rows0 + k * BLOCK_B
        dc0 = gl.zeros([BLOCK_U, BLOCK_B], gl.float32, lp)
        if HAS_LAST:
            dc0 = gl.load(dlast_ptr + B * HD + rows * HD + n * DH + units, mask=rows < B, other=0.0).to(gl.float32)
        cs.index(k).store(dc0)
    db_i = gl.zeros([BLOCK_U, BLOCK_B], gl.float32, lp)  # SUM_DB: dG summed over the tiles and steps, per gate
    db_f = db_i
    db_z = db_i
    db_o = db_i
    bar_ptr, base = ops.barrier_start(bar_ptr, n_programs, GROUP_STRIDE)  # this head and group's counter
    x_i, x_f, x_z, x_o, x_c, x_h, x_dc = _inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, rows0, units, n, T - 1, T, HD,
                                                 B, DH)  # fmt: skip
    d_i = gl.zeros([BLOCK_U, BLOCK_B], dt, lp)  # the last tile's gate gradients, stored after the arrival (EARLY)
    d_f = d_i
    d_z = d_i
    d_o = d_i
    for tt in range(T):
        t = T - 1 - tt
        for kk in range(TILES):  # a loop, not unrolled: each tile's addresses are made afresh, not kept in registers
            rows = rows0 + kk * BLOCK_B
            ok = rows < B
            pre_i, pre_f, pre_z, pre_o = x_i.to(gl.float32), x_f.to(gl.float32), x_z.to(gl.float32), x_o.to(gl.float32)
            c_prev = x_c.to(gl.float32)
            dh = x_h.to(gl.float32)
            dc = cs.index(kk).load(lp) + x_dc.to(gl.float32)
            slabs = slab0 + kk * TILE_SLABS
            if tt > 0:  # tile k's shares of step t + 1, pushed by every program before the last barrier
                dh += ops.gather_shares(slabs + ((t + 1) % 2) * PSLOT, units_b, SPLIT, DH, BLOCK_B, lp)
            else:
                if HAS_LAST:
                    dh += gl.load(dlast_ptr + rows * HD + n * DH + units, mask=ok, other=0.0).to(gl.float32)
            if kk + 1 < TILES:  # the next tile's inputs, in flight while this tile's cell and product run
                x_i, x_f, x_z, x_o, x_c, x_h, x_dc = _inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, rows + BLOCK_B,
                                                             units, n, t, T, HD, B, DH)  # fmt: skip
            i = sigmoid(pre_i, FAST)
            f = sigmoid(pre_f, FAST)
            z = tanh(pre_z, FAST)
            o = sigmoid(pre_o, FAST)
            tc = tanh(f * c_prev + i * z, FAST)
            dc = dc + dh * o * (1.0 - tc * tc)
            d_i = (dc * z * i * (1.0 - i)).to(dt)
            d_f = (dc * c_prev * f * (1.0 - f)).to(dt)
            d_z = (dc * i * (1.0 - z * z)).to(dt)
            d_o = (dh * tc * o * (1.0 - o)).to(dt)
            cs.index(kk).store(dc * f)
            if SUM_DB:  # the gradients as stored (16-bit), of rows within the batch
                db_i += gl.where(ok, d_i.to(gl.float32), 0.0)
                db_f += gl.where(ok, d_f.to(gl.float32), 0.0)
                db_z += gl.where(ok, d_z.to(gl.float32), 0.0)
                db_o += gl.where(ok, d_o.to(gl.float32), 0.0)
            keep = ok
            if EARLY:  # the last tile's are stored after the arrival
                keep = ok & (kk + 1 < TILES)
            dg_t = dg_ptr + rows.to(gl.int64) * T * 4 * HD + n * DH + units + t * 4 * HD
            gl.store(dg_t, d_i, mask=keep)
            gl.store(dg_t + HD, d_f, mask=keep)
            gl.store(dg_t + 2 * HD, d_z, mask=keep)
            gl.store(dg_t + 3 * HD, d_o, mask=keep)
            # this tile's shares of dh_{t-1}: dG^T [4 U, B] through shared memory to every warp (one store: b4's)
            both = gl.join(gl.join(d_i, d_f), gl.join(d_z, d_o))  # [U, B, 2, 2]
            cta_barrier()  # every warp's reads of the previous tile's dG^T are done
            dgs.store(gl.reshape(gl.permute(both, GATES_FIRST.value), [K, BLOCK_B]))
            cta_barrier()
            bop = dgs.load(lb)  # [K, BLOCK_B]
            own_slab = slabs + p * DH * BLOCK_B + (t % 2) * PSLOT
            share1 = mma_v2(a1, bop, gl.zeros([M1, BLOCK_B], gl.float32, mma))
            ops.push_share(share1, own_slab, 0, M1, BLOCK_B, W, mma, COALESCED)
            if M2 > 0:
                share2 = mma_v2(a2, bop, gl.zeros([M2, BLOCK_B], gl.float32, mma))
                ops.push_share(share2, own_slab, M1, M2, BLOCK_B, W, mma, COALESCED)
        # every tile's shares pushed: one barrier for the group
        ops.grid_arrive(bar_ptr)  # (its CTA barrier also ends this step's reads of dgs)
        if EARLY:
            last = rows0 + (TILES - 1) * BLOCK_B
            dg_t = dg_ptr + last.to(gl.int64) * T * 4 * HD + n * DH + units + t * 4 * HD
            gl.store(dg_t, d_i, mask=last < B)
            gl.store(dg_t + HD, d_f, mask=last < B)
            gl.store(dg_t + 2 * HD, d_z, mask=last < B)
            gl.store(dg_t + 3 * HD, d_o, mask=last < B)
        x_i, x_f, x_z, x_o, x_c, x_h, x_dc = _inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, rows0, units, n,
                                                     gl.maximum(t - 1, 0), T, HD, B, DH)  # fmt: skip
        ops.grid_wait(bar_ptr, base + (tt + 1) * n_programs, POLL_LOADS)
    for k in gl.static_range(TILES):  # step 0's shares (slot 0): dL/dh_{-1}; the carried dc: dL/dc_{-1}
        rows = rows0 + k * BLOCK_B
        own = rows * HD + n * DH + units
        dh0 = ops.gather_shares(slab0 + k * TILE_SLABS, units_b, SPLIT, DH, BLOCK_B, lp)
        gl.store(ds0_ptr + own, dh0.to(ds0_ptr.dtype.element_ty), mask=rows < B)
        gl.store(ds0_ptr + B * HD + own, cs.index(k).load(lp).to(ds0_ptr.dtype.element_ty), mask=rows < B)
    if SUM_DB:  # this group's share of db: [4, U] of row (g, gate, n), units p U ..
        db_own = db_ptr + (g * 4 * NH + n) * DH + p * BLOCK_U + u
        gl.store(db_own, gl.sum(db_i, axis=1))
        gl.store(db_own + NH * DH, gl.sum(db_f, axis=1))
        gl.store(db_own + 2 * NH * DH, gl.sum(db_z, axis=1))
        gl.store(db_own + 3 * NH * DH, gl.sum(db_o, axis=1))


def _constexprs(head_dim: int, cfg: V6Config, has_last: bool, fast: bool, sum_db: bool, config: GluonConfig) -> dict:
    m1, m2 = k_pieces(head_dim)
    return dict(DH=head_dim, BLOCK_B=cfg.block_b, BLOCK_U=cfg.block_u, W=cfg.warps, M1=m1, M2=m2,
                SPLIT=head_dim // cfg.block_u, TILES=cfg.tiles, HAS_LAST=has_last, FAST=fast, COALESCED=True,
                EARLY=config.backward_early_arrive, **ops.barrier_constexprs(config.barrier, config.poll),
                SUM_DB=sum_db)  # fmt: skip


def split_backward_tiles(d_out, gates, out, states, R, d_last=None, *, cfg: V6Config, sum_db: bool = False,
                         config: GluonConfig | None = None):  # fmt: skip
    """The backward on a GPU (LSTM, 16-bit): ``(dG [B, T, 4, NH, DH] in Wx's layout, d_states [2, B, 1, NH, DH])``
    (with ``sum_db`` also db [4, NH, DH] in dG's dtype) as :func:`gpulab.rnn.fused.split_gluon_backward.
    split_backward_b4` returns them, in one cooperative launch of ``cfg.programs(B, NH, DH)`` programs
    (``cfg.tiles`` batch tiles each; ``cfg`` from :func:`b4_tiles_config`). ``config``: the Gluon switches it takes
    (barrier, poll, ``backward_early_arrive``; each step's next inputs are always loaded ahead). On a CPU it raises:
    run :func:`schedule_reference` there."""
    from gpulab.check import new_output  # noqa: PLC0415
    from gpulab.rnn.fused.tiles import fast_activations  # noqa: PLC0415

    _, B, T, NH, DH = _checked(d_out, gates, out, states, R, d_last)
    cfg = _tile(DH, cfg)
    sum_db = runtime.strict_bool("sum_db", sum_db)
    config = GluonConfig.of(config)
    tensors = (d_out, gates, out, states, R) + (() if d_last is None else (d_last,))
    if out.dtype not in (torch.float16, torch.bfloat16) or any(x.dtype != out.dtype for x in tensors):
        raise TypeError(f"the backward takes one 16-bit dtype (float16 or bfloat16) for every input, got "
                        f"{[x.dtype for x in tensors]}: use gpulab.rnn.fused.split_backward."
                        "split_rnn_backward.")  # fmt: skip
    if out.device.type != "cuda" or runtime.INTERPRET:
        raise RuntimeError("a Gluon kernel: it runs on a CUDA GPU only; on a CPU run "
                           "gpulab.rnn.fused.split_gluon_backward_tiles.schedule_reference (float64).")  # fmt: skip
    d_out, gates, out, states, R = (x.contiguous() for x in (d_out, gates, out, states, R))
    dev, dt = out.device, out.dtype
    groups = cfg.groups(B)
    dG = new_output(B, T, 4, NH, DH, dtype=dt, device=dev)
    ds0 = new_output(2, B, 1, NH, DH, dtype=dt, device=dev)
    part = torch.empty(2, groups * cfg.tiles, NH, DH // cfg.block_u, DH, cfg.block_b, dtype=dt, device=dev)
    grid = (DH // cfg.block_u, NH, groups)
    gluon_tiles.check_resident(grid, cfg, dev)
    bar, per_group = ops.launch_counter(dev, grid[0] * grid[1] * grid[2], NH, groups, config.barrier)
    db = new_output(groups, 4, NH, DH, dtype=torch.float32, device=dev) if sum_db else bar
    split_backward_tiles_kernel[grid](
        gates_ptr=gates, out_ptr=out, s0_ptr=states, r_ptr=R, dout_ptr=d_out,
        dlast_ptr=d_out if d_last is None else d_last.contiguous(), dg_ptr=dG, part_ptr=part, ds0_ptr=ds0,
        bar_ptr=bar, db_ptr=db, B=B, T=T, NH=NH, n_programs=per_group,
        **_constexprs(DH, cfg, d_last is not None, fast_activations(dt), sum_db, config),
        num_warps=cfg.warps, launch_cooperative_grid=True,
    )  # fmt: skip
    return (dG, ds0, db.sum(0).to(dt)) if sum_db else (dG, ds0)


def compile_sm90(head_dim: int, cfg: V6Config, dtype: str = "bf16", has_last: bool = True, sum_db: bool = True,
                 config: GluonConfig | None = None):  # fmt: skip
    """Triton's compiled kernel for sm_90, nothing launched, no GPU needed (``metadata`` holds the registers and
    shared memory). Call from a process outside the interpreter."""
    dtype = runtime.one_of("dtype", dtype, ("bf16", "fp16"))
    cfg = _tile(head_dim, cfg)
    constexprs = _constexprs(head_dim, cfg, runtime.strict_bool("has_last", has_last), dtype == "bf16",
                             runtime.strict_bool("sum_db", sum_db), GluonConfig.of(config))  # fmt: skip
    return gluon_tiles.compile_sm90(split_backward_tiles_kernel, dtype, constexprs, cfg.warps)
