"""Backward b4 with a program's units in two pieces: the split LSTM backward for a head past b4's power-of-two splits.

b4 (:mod:`gpulab.rnn.fused.split_gluon_backward`) holds R_p^T [DH, 4 U] of its ``U`` units in registers as the tensor
cores' A operand; its product's depth 4 U is a Gluon tile's side, so U is a power of two, and at one head of 1536
neither 16 units (96 programs, 96 x 64 values per thread at 16 warps beside the shares) nor 8 (192 programs, past an
H200's 132 SMs) fits. Here a program owns ``BLOCK_U = U1 + U2`` units (12 = 8 + 4: 128 programs) and the product's
depth is two pieces, one per unit piece, accumulated into one share:

- R_p^T is held as A tiles ``a[m piece][unit piece]``: rows M0 .. M0 + MP of DH (DH as one or two power-of-two
  tiles, ``k_pieces``: 1536 = 1024 + 512), columns ``g U_q + u`` of unit piece q;
- each unit piece runs b4's cell backward on its own units and stores its gate gradients [4 U_q, B] to its own
  shared buffer, the B operand of its half of the depth;
- ``share^T = R_a^T @ dG_a^T + R_b^T @ dG_b^T`` [DH, B] is pushed through L2 as b4's (one slab per program, batch
  rows contiguous), and each piece gathers its own units' rows of every program's slab after the barrier.

Per step t = T-1 .. 0, program (p, n, tile), piece q (fp32; pre-activations saved by the forward):

    dh_q = dL/dh_t[U_q] + sum_p' part[(t + 1) % 2][p', U_q]^T       (none at T-1)
    (di, df, dz, do)_q, dc_q = cell_backward(pre_t[U_q], c_{t-1}[U_q], dh_q, dc_q + dL/dc_t[U_q])
    part[t % 2][p] = sum_q R[:, U_q]^T @ dG_t[:, U_q]^T                             [DH, B]
    arrive; store dG_t; load step t-1's inputs; wait

and at the end dL/dh_{-1} = sum_p' part[0][p', U_q]^T, dL/dc_{-1} = dc. dG is stored in Wx's layout [B, T, 4, NH, DH].
The barrier is b4's (one counter per head and batch tile). Checked as b4 is: :func:`schedule_reference` (float64,
the same programs, pieces and shares) against autograd, :func:`compile_sm90` (no GPU), and the GPU tests.
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
from gpulab.rnn.fused.gluon_ops import sigmoid, tanh
from gpulab.rnn.fused.gluon_tiles import UnitsConfig, k_pieces, unit_pieces, units_backward_config

__all__ = ["schedule_reference", "split_backward_units", "compile_sm90"]

_GATES_FIRST = gl.constexpr((3, 2, 0, 1))  # [U, B, 2, 2] of join(join(i, f), join(z, o)) -> [2, 2, U, B]: row g U + u


def _tile(head_dim, cfg):
    if cfg is None:
        return units_backward_config(head_dim)
    if not isinstance(cfg, UnitsConfig):
        raise TypeError(f"cfg must be a UnitsConfig (units_backward_config(head_dim, ...)) or None, got {cfg!r}.")
    return units_backward_config(head_dim, cfg.block_u, cfg.block_b, cfg.warps)


def _checked(d_out, gates, out, states, R, d_last) -> tuple[int, ...]:
    named = (("d_out", d_out), ("gates", gates), ("out", out), ("states", states), ("R", R), ("d_last", d_last))
    for name, x in named:
        if not isinstance(x, torch.Tensor) and not (name == "d_last" and x is None):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}.")
    if out.dim() != 5 or out.shape[0] != 2 or out.numel() == 0:
        raise ValueError(f"out must be the LSTM's states [2, B, T, NH, DH] (non-empty), got {list(out.shape)}.")
    _, B, T, NH, DH = out.shape
    want = {"d_out": (2, B, T, NH, DH), "gates": (B, T, 4, NH, DH), "out": (2, B, T, NH, DH),
            "states": (2, B, 1, NH, DH), "R": (4, NH, DH, DH), "d_last": (2, B, 1, NH, DH)}  # fmt: skip
    for name, x in named:
        if x is not None and tuple(x.shape) != want[name]:
            raise ValueError(f"{name} must have shape {list(want[name])} for out {list(out.shape)}, got "
                             f"{list(x.shape)}.")  # fmt: skip
    return tuple(out.shape)


def schedule_reference(d_out, gates, out, states, R, d_last=None, cfg: UnitsConfig | None = None):
    """The kernel's arithmetic program by program in float64: ``(dG [B, T, 4, NH, DH], d_states [2, B, 1, NH,
    DH])``. Each program's share of dh_{t-1} is the sum over its unit pieces of R[:, U_q]^T @ dG[:, U_q]^T, formed
    per M piece; each unit's dh sums the shares in program order, as the gather does."""
    _, B, T, NH, DH = _checked(d_out, gates, out, states, R, d_last)
    cfg = _tile(DH, cfg)
    bu, pieces, m_pieces = cfg.block_u, unit_pieces(cfg.block_u), [x for x in k_pieces(DH) if x]
    f64 = dict(dtype=torch.float64)
    d_out, gates, out, states, R = (x.to(**f64) for x in (d_out, gates, out, states, R))
    dG = torch.empty(B, T, 4, NH, DH, **f64)
    dh_carry = torch.zeros(B, NH, DH, **f64) if d_last is None else d_last[0, :, 0].to(**f64)
    dc = torch.zeros(B, NH, DH, **f64) if d_last is None else d_last[1, :, 0].to(**f64)
    shares = None
    for t in range(T - 1, -1, -1):
        dh = d_out[0, :, t] + dh_carry
        dh_carry = torch.zeros_like(dh)
        if shares is not None:
            for q in range(shares.shape[0]):
                dh = dh + shares[q]
        dc = dc + d_out[1, :, t]
        pre = gates[:, t]
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
                k0 = 0
                for m in m_pieces:
                    u0 = p * bu
                    for up in pieces:  # the two halves of the depth, accumulated in order
                        units = slice(u0, u0 + up)
                        rt = R[:, n, units, k0 : k0 + m].reshape(4 * up, m).T  # [MP, 4 U_q]
                        shares[p, :, n, k0 : k0 + m] += (rt @ dG[:, t, :, n, units].reshape(B, 4 * up).T).T
                        u0 += up
                    k0 += m
    dh0 = dh_carry
    for q in range(shares.shape[0]):
        dh0 = dh0 + shares[q]
    return dG, torch.stack((dh0, dc))[:, :, None]


@gluon.jit
def _rt_piece(r_ptr, n, u0, M0: gl.constexpr, MP: gl.constexpr, NH, DH: gl.constexpr, UQ: gl.constexpr,
              la: gl.constexpr):  # fmt: skip
    """R_p^T's rows [M0, M0 + MP) of unit piece u0 .. u0 + UQ in the A layout: [MP, 4 UQ], element [m, g UQ + u] =
    R[g, n, u0 + u, M0 + m]."""
    m = gl.arange(0, MP, layout=gl.SliceLayout(1, la))
    k = gl.arange(0, 4 * UQ, layout=gl.SliceLayout(0, la))
    row = ((k // UQ) * NH + n) * DH + u0 + k % UQ
    return gl.load(r_ptr + gl.expand_dims(row, 0) * DH + M0 + gl.expand_dims(m, 1))


@gluon.jit
def _piece(tile, n, u0, UQ: gl.constexpr, BLOCK_B: gl.constexpr, B, T, DH: gl.constexpr, HD, W: gl.constexpr):
    """A piece's elements [UQ, BLOCK_B]: offsets in [B, 1, NH, DH], [B, T, NH, DH] (t = 0) and [B, T, 4, NH, DH]
    (t = 0, gate 0) and the rows' mask, in the cell's layout (units along the lanes); and its rows of a share's slab
    in the gather's layout (batch rows along the lanes: contiguous in a slab), as b4's."""
    TU: gl.constexpr = 32 if UQ > 32 else UQ
    lp: gl.constexpr = gl.BlockedLayout([1, 1], [TU, 32 // TU], [1, W], [0, 1])
    u = gl.arange(0, UQ, layout=gl.SliceLayout(1, lp))
    j = gl.arange(0, BLOCK_B, layout=gl.SliceLayout(0, lp))
    rows = gl.expand_dims(tile * BLOCK_B + j, 0)
    units = gl.expand_dims(u0 + u, 1)
    own = rows * HD + n * DH + units
    own_t = rows.to(gl.int64) * T * HD + n * DH + units
    gate_t = rows.to(gl.int64) * T * 4 * HD + n * DH + units
    SJ: gl.constexpr = 2 if BLOCK_B > 32 else 1
    lg: gl.constexpr = gl.BlockedLayout([1, SJ], [32 // (BLOCK_B // SJ), BLOCK_B // SJ], [W, 1], [1, 0])
    u_g = gl.arange(0, UQ, layout=gl.SliceLayout(1, lg))
    j_g = gl.arange(0, BLOCK_B, layout=gl.SliceLayout(0, lg))
    return own, own_t, gate_t, rows < B, gl.expand_dims(u0 + u_g, 1) * BLOCK_B + gl.expand_dims(j_g, 0)


@gluon.jit
def _inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, gate_t, own_t, own, ok, t, HD, B, c_stride):
    """Step t's inputs of a piece (16-bit): the saved pre-activations, c_{t-1} (the initial c at t = 0), dL/dh_t and
    dL/dc_t."""
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


@gluon.jit
def _cell_backward(x_i, x_f, x_z, x_o, x_c, dh, dc, FAST: gl.constexpr, dt: gl.constexpr):
    """b4's cell backward on a piece: the activations recomputed from the pre-activations; returns dG (16-bit, as
    stored) and the carried dc."""
    i = sigmoid(x_i.to(gl.float32), FAST)
    f = sigmoid(x_f.to(gl.float32), FAST)
    z = tanh(x_z.to(gl.float32), FAST)
    o = sigmoid(x_o.to(gl.float32), FAST)
    c_prev = x_c.to(gl.float32)
    tc = tanh(f * c_prev + i * z, FAST)
    dc = dc + dh * o * (1.0 - tc * tc)
    d_i = (dc * z * i * (1.0 - i)).to(dt)
    d_f = (dc * c_prev * f * (1.0 - f)).to(dt)
    d_z = (dc * i * (1.0 - z * z)).to(dt)
    d_o = (dh * tc * o * (1.0 - o)).to(dt)
    return d_i, d_f, d_z, d_o, dc * f


@gluon.jit
def _store4(ptr, a, b, c, d, mask, HD):
    gl.store(ptr, a, mask=mask)
    gl.store(ptr + HD, b, mask=mask)
    gl.store(ptr + 2 * HD, c, mask=mask)
    gl.store(ptr + 3 * HD, d, mask=mask)


@gluon.jit(do_not_specialize=["B", "T", "NH", "n_programs"])
def split_backward_units_kernel(
    gates_ptr,  # [B, T, 4, NH, DH] pre-activations saved by the forward
    out_ptr,  # [2, B, T, NH, DH] the forward's (h, c)
    s0_ptr,  # [2, B, 1, NH, DH] initial states
    r_ptr,  # [4, NH, DH, DH]
    dout_ptr,  # [2, B, T, NH, DH] dL/d(all states)
    dlast_ptr,  # [2, B, 1, NH, DH] dL/d(last states) (HAS_LAST)
    dg_ptr,  # [B, T, 4, NH, DH] gate gradients (written)
    part_ptr,  # [2, tiles, NH, SPLIT, DH, BLOCK_B] the shares of dh, transposed (written and read)
    ds0_ptr,  # [2, B, 1, NH, DH] dL/d(initial states) (written)
    bar_ptr,  # int64 counters of the grid barrier
    B,
    T,
    NH,
    n_programs,
    DH: gl.constexpr,
    BLOCK_B: gl.constexpr,
    U1: gl.constexpr,  # the program's units as two power-of-two pieces: BLOCK_U = U1 + U2
    U2: gl.constexpr,
    W: gl.constexpr,  # warps: they split R_p^T's DH rows
    M1: gl.constexpr,  # DH as one or two power-of-two tiles: M1 + M2 = DH
    M2: gl.constexpr,
    SPLIT: gl.constexpr,  # programs per head and batch tile
    HAS_LAST: gl.constexpr,
    FAST: gl.constexpr,
    GROUP_STRIDE: gl.constexpr,
    POLL_LOADS: gl.constexpr,
):
    BLOCK_U: gl.constexpr = U1 + U2
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[W, 1], instr_shape=[16, 8])
    la: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    lb: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    TA: gl.constexpr = 32 if U1 > 32 else U1
    lpa: gl.constexpr = gl.BlockedLayout([1, 1], [TA, 32 // TA], [1, W], [0, 1])  # the cells' layouts
    lpb: gl.constexpr = gl.BlockedLayout([1, 1], [U2, 32 // U2], [1, W], [0, 1])
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
    dt: gl.constexpr = dg_ptr.dtype.element_ty

    p = gl.program_id(0)
    n = gl.program_id(1)
    tile = gl.program_id(2)
    HD = NH * DH
    ua = p * BLOCK_U
    ub = ua + U1

    # R_p^T in registers: [M piece][unit piece]
    a1a = _rt_piece(r_ptr, n, ua, 0, M1, NH, DH, U1, la)  # [M1, 4 U1]
    a1b = _rt_piece(r_ptr, n, ub, 0, M1, NH, DH, U2, la)  # [M1, 4 U2]
    a2a = a1a
    a2b = a1b
    if M2 > 0:
        a2a = _rt_piece(r_ptr, n, ua, M1, M2, NH, DH, U1, la)
        a2b = _rt_piece(r_ptr, n, ub, M1, M2, NH, DH, U2, la)

    own_a, own_ta, gate_ta, ok_a, slab_a = _piece(tile, n, ua, U1, BLOCK_B, B, T, DH, HD, W)
    own_b, own_tb, gate_tb, ok_b, slab_b = _piece(tile, n, ub, U2, BLOCK_B, B, T, DH, HD, W)
    c_stride = B.to(gl.int64) * T * HD
    PSLOT = gl.num_programs(2) * NH * SPLIT * DH * BLOCK_B
    slab0 = part_ptr + (tile * NH + n) * SPLIT * DH * BLOCK_B
    part_own = slab0 + p * DH * BLOCK_B

    dgs_a = gl.allocate_shared_memory(r_ptr.dtype.element_ty, [4 * U1, BLOCK_B], flat)
    dgs_b = gl.allocate_shared_memory(r_ptr.dtype.element_ty, [4 * U2, BLOCK_B], flat)
    dh_ca = gl.zeros([U1, BLOCK_B], gl.float32, lpa)  # the carried part of dh (d_last's at T - 1)
    dh_cb = gl.zeros([U2, BLOCK_B], gl.float32, lpb)
    dc_a = dh_ca
    dc_b = dh_cb
    if HAS_LAST:
        dh_ca = gl.load(dlast_ptr + own_a, mask=ok_a, other=0.0).to(gl.float32)
        dh_cb = gl.load(dlast_ptr + own_b, mask=ok_b, other=0.0).to(gl.float32)
        dc_a = gl.load(dlast_ptr + B * HD + own_a, mask=ok_a, other=0.0).to(gl.float32)
        dc_b = gl.load(dlast_ptr + B * HD + own_b, mask=ok_b, other=0.0).to(gl.float32)
    bar_ptr, base = ops.barrier_start(bar_ptr, n_programs, GROUP_STRIDE)
    xa = _inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, gate_ta, own_ta, own_a, ok_a, T - 1, HD, B, c_stride)
    xb = _inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, gate_tb, own_tb, own_b, ok_b, T - 1, HD, B, c_stride)
    for tt in range(T):
        t = T - 1 - tt
        dh_a = dh_ca + xa[5].to(gl.float32)
        dh_b = dh_cb + xb[5].to(gl.float32)
        dc_a += xa[6].to(gl.float32)
        dc_b += xb[6].to(gl.float32)
        dh_ca = gl.zeros([U1, BLOCK_B], gl.float32, lpa)
        dh_cb = gl.zeros([U2, BLOCK_B], gl.float32, lpb)
        if tt > 0:  # the shares of step t + 1, pushed by every program before the last barrier
            dh_a += ops.gather_shares(slab0 + ((t + 1) % 2) * PSLOT, slab_a, SPLIT, DH, BLOCK_B, lpa)
            dh_b += ops.gather_shares(slab0 + ((t + 1) % 2) * PSLOT, slab_b, SPLIT, DH, BLOCK_B, lpb)
        da_i, da_f, da_z, da_o, dc_a = _cell_backward(xa[0], xa[1], xa[2], xa[3], xa[4], dh_a, dc_a, FAST, dt)
        db_i, db_f, db_z, db_o, dc_b = _cell_backward(xb[0], xb[1], xb[2], xb[3], xb[4], dh_b, dc_b, FAST, dt)
        # each piece's dG^T [4 U_q, B] (row g U_q + u) through shared memory to every warp: the B operands
        both_a = gl.join(gl.join(da_i, da_f), gl.join(da_z, da_o))
        dgs_a.store(gl.reshape(gl.permute(both_a, _GATES_FIRST.value), [4 * U1, BLOCK_B]))
        both_b = gl.join(gl.join(db_i, db_f), gl.join(db_z, db_o))
        dgs_b.store(gl.reshape(gl.permute(both_b, _GATES_FIRST.value), [4 * U2, BLOCK_B]))
        ops.cta_barrier()
        bop_a = dgs_a.load(lb)
        bop_b = dgs_b.load(lb)
        own_slab = part_own + (t % 2) * PSLOT
        share1 = mma_v2(a1a, bop_a, gl.zeros([M1, BLOCK_B], gl.float32, mma))
        share1 = mma_v2(a1b, bop_b, share1)
        ops.push_share(share1, own_slab, 0, M1, BLOCK_B, W, mma, True)
        if M2 > 0:
            share2 = mma_v2(a2a, bop_a, gl.zeros([M2, BLOCK_B], gl.float32, mma))
            share2 = mma_v2(a2b, bop_b, share2)
            ops.push_share(share2, own_slab, M1, M2, BLOCK_B, W, mma, True)
        ops.grid_arrive(bar_ptr)  # (its CTA barrier also ends this step's reads of the dG buffers)
        _store4(dg_ptr + gate_ta + t * 4 * HD, da_i, da_f, da_z, da_o, ok_a, HD)
        _store4(dg_ptr + gate_tb + t * 4 * HD, db_i, db_f, db_z, db_o, ok_b, HD)
        prev = gl.maximum(t - 1, 0)  # the next step's inputs, in flight while this program waits
        xa = _inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, gate_ta, own_ta, own_a, ok_a, prev, HD, B, c_stride)
        xb = _inputs(gates_ptr, out_ptr, s0_ptr, dout_ptr, gate_tb, own_tb, own_b, ok_b, prev, HD, B, c_stride)
        ops.grid_wait(bar_ptr, base + (tt + 1) * n_programs, POLL_LOADS)
    dh0_a = ops.gather_shares(slab0, slab_a, SPLIT, DH, BLOCK_B, lpa)  # step 0's shares (slot 0): dL/dh_{-1}
    dh0_b = ops.gather_shares(slab0, slab_b, SPLIT, DH, BLOCK_B, lpb)
    gl.store(ds0_ptr + own_a, dh0_a.to(ds0_ptr.dtype.element_ty), mask=ok_a)
    gl.store(ds0_ptr + own_b, dh0_b.to(ds0_ptr.dtype.element_ty), mask=ok_b)
    gl.store(ds0_ptr + B * HD + own_a, dc_a.to(ds0_ptr.dtype.element_ty), mask=ok_a)
    gl.store(ds0_ptr + B * HD + own_b, dc_b.to(ds0_ptr.dtype.element_ty), mask=ok_b)


def _constexprs(head_dim: int, cfg: UnitsConfig, has_last: bool, fast: bool, config=None) -> dict:
    config = GluonConfig.of(config)
    (u1, u2), (m1, m2) = unit_pieces(cfg.block_u), k_pieces(head_dim)
    return dict(DH=head_dim, BLOCK_B=cfg.block_b, U1=u1, U2=u2, W=cfg.warps, M1=m1, M2=m2,
                SPLIT=head_dim // cfg.block_u, HAS_LAST=has_last, FAST=fast,
                **ops.barrier_constexprs(config.barrier, config.poll))  # fmt: skip


def split_backward_units(d_out, gates, out, states, R, d_last=None, cfg: UnitsConfig | None = None,
                         config: GluonConfig | None = None):  # fmt: skip
    """The two-piece backward on a GPU (LSTM, 16-bit): ``(dG [B, T, 4, NH, DH], d_states [2, B, 1, NH, DH])`` as
    :func:`gpulab.rnn.fused.split_gluon_backward.split_backward_b4` returns them (no in-kernel db); one cooperative
    launch. On a CPU it raises: run :func:`schedule_reference` there."""
    from gpulab.check import new_output  # noqa: PLC0415
    from gpulab.rnn.fused.tiles import fast_activations  # noqa: PLC0415

    _, B, T, NH, DH = _checked(d_out, gates, out, states, R, d_last)
    config = GluonConfig.of(config)
    tensors = (d_out, gates, out, states, R) + (() if d_last is None else (d_last,))
    if out.dtype not in (torch.float16, torch.bfloat16) or any(x.dtype != out.dtype for x in tensors):
        raise TypeError(f"the two-piece backward takes one 16-bit dtype for every input, got "
                        f"{[x.dtype for x in tensors]}: use gpulab.rnn.fused.split_backward."
                        "split_rnn_backward.")  # fmt: skip
    if out.device.type != "cuda" or runtime.INTERPRET:
        raise RuntimeError("the two-piece backward is a Gluon kernel: it runs on a CUDA GPU only; on a CPU run "
                           "gpulab.rnn.fused.split_gluon_backward_units.schedule_reference.")  # fmt: skip
    cfg = _tile(DH, cfg)
    d_out, gates, out, states, R = (x.contiguous() for x in (d_out, gates, out, states, R))
    dev, dt = out.device, out.dtype
    tiles = -(-B // cfg.block_b)
    grid = (DH // cfg.block_u, NH, tiles)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    if grid[0] * grid[1] * grid[2] > sms:
        raise ValueError(f"cfg runs {grid[0] * grid[1] * grid[2]} programs, more than this GPU's {sms} SMs hold at "
                         "once; run fewer rows per launch.")  # fmt: skip
    dG = new_output(B, T, 4, NH, DH, dtype=dt, device=dev)
    ds0 = new_output(2, B, 1, NH, DH, dtype=dt, device=dev)
    part = torch.empty(2, tiles, NH, grid[0], DH, cfg.block_b, dtype=dt, device=dev)  # written before it is read
    bar, per_group = ops.launch_counter(dev, grid[0] * grid[1] * grid[2], NH, tiles, config.barrier)
    has_last = d_last is not None
    args = in_order(split_backward_units_kernel, gates_ptr=gates, out_ptr=out, s0_ptr=states, r_ptr=R,
                    dout_ptr=d_out, dlast_ptr=d_last.contiguous() if has_last else d_out, dg_ptr=dG, part_ptr=part,
                    ds0_ptr=ds0, bar_ptr=bar, B=B, T=T, NH=NH, n_programs=per_group)  # fmt: skip
    tensors, ints = args[:-4], args[-4:]

    def make():
        return grid, dict(num_warps=cfg.warps, launch_cooperative_grid=True,
                          **_constexprs(DH, cfg, has_last, fast_activations(dt), config))  # fmt: skip

    launch = keyed_launch((split_backward_units_kernel, DH, cfg, dt, has_last, config) + ints, make)
    launch(direct_stream(dev) if aligned(*tensors) else None, *tensors, *ints)
    return dG, ds0


def compile_sm90(head_dim: int = 1536, cfg: UnitsConfig | None = None, dtype: str = "fp16", has_last: bool = True,
                 config: GluonConfig | None = None):  # fmt: skip
    """Triton's compiled two-piece backward for sm_90, nothing launched, no GPU needed (call outside the
    interpreter)."""
    dtype = runtime.one_of("dtype", dtype, ("bf16", "fp16"))
    cfg = _tile(head_dim, cfg)
    constexprs = _constexprs(head_dim, cfg, runtime.strict_bool("has_last", has_last), dtype == "bf16", config)
    return gluon_tiles.compile_sm90(split_backward_units_kernel, dtype, constexprs, cfg.warps)
