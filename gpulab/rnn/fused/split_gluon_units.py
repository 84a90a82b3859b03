"""Version 6's forward with a program's units in two pieces: a head too large for version 6's power-of-two splits.

Version 6 (:mod:`gpulab.rnn.fused.split_gluon`) gives each program ``block_u`` units, a power of two (a Gluon tile's
sides are). At one head of 1536 that leaves 96 programs of 16 units, whose slice of R (64 x 1536 in 16 bits, 192 KB)
is more than the registers of an SM hold beside the rest, or 192 programs of 8 units, more than an H200's 132 SMs.
Here a program owns ``BLOCK_U = U1 + U2`` units, both pieces powers of two (12 = 8 + 4: 128 programs of 144 KB),
and everything version 6 does with its units it does once per piece:

- R_p is held as two A tiles per K piece, one per unit piece: ``ra[s, m, k] = R[m // U1, n, p BLOCK_U + m % U1,
  s KC + k]`` [KS, 4 U1, KC] in registers, and ``rb`` the same for units ``p BLOCK_U + U1 ..`` [KS, 4 U2, KC] in
  shared memory, read into the operand layout every step (``SHARED_B``; 48 KB at 1536: compiled for sm_90 with both
  in registers, the step spilled 142 registers at 16 batch rows, with piece b in shared memory 9);
- h_{t-1} is read once per program as in version 6 (its K chunks, one per warp) and multiplies both pieces;
- each piece's partial sums go through its own swizzled buffer, and each piece runs its own cell.

Per step t, program (p, n, tile), piece q in (a, b) with its units U_q (fp32 accumulation; gates i, f, z, o):

    pre_q = sum_s R[:, U_q, s KC : (s+1) KC] @ h_{t-1}[rows, s KC : (s+1) KC]^T + Wx_t[rows, :, U_q]^T + b[:, U_q]
    c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(z);  h_t = sigmoid(o) tanh(c_t)
    store h_t; arrive; store c_t, the pre-activations (when training); wait

The barrier is version 6's counter (one per head and batch tile, release/acquire). Checked as version 6 is:
:func:`schedule_reference` (float64: the same programs, pieces and chunks) against the vanilla backend;
:func:`compile_sm90` (registers, spills; no GPU); the GPU tests run the kernel.
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
from gpulab.rnn.fused.gluon_tiles import UnitsConfig, k_pieces, unit_pieces, units_config

__all__ = ["schedule_reference", "split_forward_units", "compile_sm90"]


def _tile(head_dim, cfg, make):
    if cfg is None:
        return make(head_dim)
    if not isinstance(cfg, UnitsConfig):
        raise TypeError(f"cfg must be a UnitsConfig ({make.__name__}(head_dim, ...)) or None, got {cfg!r}.")
    return make(head_dim, cfg.block_u, cfg.block_b, cfg.warps)


def _checked(Wx, R, b, states) -> tuple[int, ...]:
    for name, x in (("Wx", Wx), ("R", R), ("b", b), ("states", states)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}.")
    if Wx.dim() != 5 or Wx.shape[2] != 4 or Wx.numel() == 0:
        raise ValueError(f"Wx must be [B, T, 4, NH, DH] (the LSTM's gates, non-empty), got shape {list(Wx.shape)}.")
    B, T, _, NH, DH = Wx.shape
    want = {"R": (4, NH, DH, DH), "b": (4, NH, DH), "states": (2, B, 1, NH, DH)}
    for name, x in (("R", R), ("b", b), ("states", states)):
        if tuple(x.shape) != want[name]:
            raise ValueError(f"{name} must have shape {list(want[name])} for Wx {list(Wx.shape)}, got {list(x.shape)}.")
    return tuple(Wx.shape)


def schedule_reference(Wx, R, b, states, cfg: UnitsConfig | None = None):
    """The kernel's arithmetic program by program, piece by piece and chunk by chunk, in float64 on any device:
    ``(states_all, states_last, gates)`` as :func:`split_forward_units` returns them."""
    B, T, _, NH, DH = _checked(Wx, R, b, states)
    cfg = _tile(DH, cfg, units_config)
    bu, kc, pieces = cfg.block_u, DH // cfg.warps, unit_pieces(cfg.block_u)
    f64 = dict(dtype=torch.float64)
    Wx, R, b, s = Wx.to(**f64), R.to(**f64), b.to(**f64), states.to(**f64)
    h, c = s[0, :, 0].clone(), s[1, :, 0].clone()
    out, gates = torch.empty(2, B, T, NH, DH, **f64), torch.empty(B, T, 4, NH, DH, **f64)
    for t in range(T):
        h_new, c_new = torch.empty_like(h), torch.empty_like(c)
        for n in range(NH):
            for p in range(DH // bu):
                u0 = p * bu
                for up in pieces:  # piece a, then piece b: its own A tile, partials and cell
                    units = slice(u0, u0 + up)
                    rp = R[:, n, units, :].reshape(4 * up, DH)  # row g * U_q + u
                    pre = torch.zeros(4 * up, B, **f64)
                    for ch in range(cfg.warps):
                        k = slice(ch * kc, (ch + 1) * kc)
                        pre = pre + rp[:, k] @ h[:, n, k].T
                    pre = pre.reshape(4, up, B) + Wx[:, t, :, n, units].permute(1, 2, 0) + b[:, n, units, None]
                    gates[:, t, :, n, units] = pre.permute(2, 0, 1)
                    i, f, z, o = torch.sigmoid(pre[0]), torch.sigmoid(pre[1]), torch.tanh(pre[2]), torch.sigmoid(pre[3])
                    cn = f * c[:, n, units].T + i * z
                    c_new[:, n, units], h_new[:, n, units] = cn.T, (o * torch.tanh(cn)).T
                    u0 += up
        h, c = h_new, c_new
        out[0, :, t], out[1, :, t] = h, c
    return out, torch.stack((h, c))[:, :, None], gates


@gluon.jit
def _r_piece(r_ptr, n, u0, K0: gl.constexpr, KP: gl.constexpr, KC: gl.constexpr, NH, DH: gl.constexpr,
             UP: gl.constexpr, KS: gl.constexpr, la: gl.constexpr):  # fmt: skip
    """A piece of R_p in the A layout ``la``, [KS, 4 UP, KP]: [s, m, k] = R[m // UP, n, u0 + m % UP, s KC + K0 + k]."""
    s_a = gl.arange(0, KS, layout=gl.SliceLayout(1, gl.SliceLayout(2, la)))
    m_a = gl.arange(0, 4 * UP, layout=gl.SliceLayout(0, gl.SliceLayout(2, la)))
    k_a = gl.arange(0, KP, layout=gl.SliceLayout(0, gl.SliceLayout(1, la)))
    row_a = ((m_a // UP) * NH + n) * DH + u0 + m_a % UP
    offs = (gl.expand_dims(gl.expand_dims(row_a, 0), 2) * DH + gl.expand_dims(gl.expand_dims(s_a * KC + K0, 1), 2)
            + gl.expand_dims(gl.expand_dims(k_a, 0), 1))  # fmt: skip
    return gl.load(r_ptr + offs)


@gluon.jit
def _own(r0, n, u0, UP: gl.constexpr, BLOCK_B: gl.constexpr, B, DH: gl.constexpr, HD, lp: gl.constexpr):
    """A piece's elements [UP, BLOCK_B] (unit u0 + u, batch row r0 + j): their offset in [B, 1, NH, DH], their row
    and unit offsets (``rows * HD`` and ``n * DH + unit``, to scale by a tensor's rows) and the rows' mask."""
    u = gl.arange(0, UP, layout=gl.SliceLayout(1, lp))
    j = gl.arange(0, BLOCK_B, layout=gl.SliceLayout(0, lp))
    rows = gl.expand_dims(r0 + j, 0)
    units = gl.expand_dims(u0 + u, 1) + n * DH
    return rows * HD + units, rows.to(gl.int64), units, rows < B


@gluon.jit
def _cell(parts, x_i, x_f, x_z, x_o, b_own, c, UP: gl.constexpr, HD, lp3: gl.constexpr, FAST: gl.constexpr):
    """A piece's cell: the KS partials of each gate summed (each thread its own elements), the inputs and the bias
    added; returns the pre-activations, c_t and h_t."""
    pre_i = gl.sum(parts.slice(0, UP, dim=1).load(lp3), axis=0) + x_i.to(gl.float32) + gl.load(b_own).to(gl.float32)
    pre_f = gl.sum(parts.slice(UP, UP, dim=1).load(lp3), axis=0) + x_f.to(gl.float32)
    pre_f += gl.load(b_own + HD).to(gl.float32)
    pre_z = gl.sum(parts.slice(2 * UP, UP, dim=1).load(lp3), axis=0) + x_z.to(gl.float32)
    pre_z += gl.load(b_own + 2 * HD).to(gl.float32)
    pre_o = gl.sum(parts.slice(3 * UP, UP, dim=1).load(lp3), axis=0) + x_o.to(gl.float32)
    pre_o += gl.load(b_own + 3 * HD).to(gl.float32)
    c = sigmoid(pre_f, FAST) * c + sigmoid(pre_i, FAST) * tanh(pre_z, FAST)
    return pre_i, pre_f, pre_z, pre_o, c, sigmoid(pre_o, FAST) * tanh(c, FAST)


@gluon.jit
def _store4(ptr, a, b, c, d, mask, HD):
    dt: gl.constexpr = ptr.dtype.element_ty
    gl.store(ptr, a.to(dt), mask=mask)
    gl.store(ptr + HD, b.to(dt), mask=mask)
    gl.store(ptr + 2 * HD, c.to(dt), mask=mask)
    gl.store(ptr + 3 * HD, d.to(dt), mask=mask)


@gluon.jit(do_not_specialize=["B", "T", "NH", "n_programs"])
def split_forward_units_kernel(
    wx_ptr,  # [B, T, 4, NH, DH]
    r_ptr,  # [4, NH, DH, DH]
    b_ptr,  # [4, NH, DH]
    s0_ptr,  # [2, B, 1, NH, DH] initial (h, c)
    out_ptr,  # [2, B, T, NH, DH] all (h, c) (written); out[0] is the exchange buffer of h
    last_ptr,  # [2, B, 1, NH, DH] (h, c) after the last step (written)
    gates_ptr,  # [B, T, 4, NH, DH] pre-activations (SAVE_GATES)
    bar_ptr,  # int64 counters of the grid barrier
    B,
    T,
    NH,
    n_programs,
    DH: gl.constexpr,
    BLOCK_B: gl.constexpr,
    U1: gl.constexpr,  # the program's units as two power-of-two pieces: BLOCK_U = U1 + U2
    U2: gl.constexpr,
    KS: gl.constexpr,  # K chunks = warps
    K1: gl.constexpr,  # a chunk's K as one or two power-of-two pieces: K1 + K2 = DH / KS
    K2: gl.constexpr,
    SAVE_GATES: gl.constexpr,
    FAST: gl.constexpr,
    SHARED_B: gl.constexpr,  # piece b's rows of R_p in shared memory (read every step), piece a's in registers
    COALESCED: gl.constexpr,  # h_{t-1} in 16-byte rows, then to the operand layout (else loaded in it, 4 bytes each)
    EARLY: gl.constexpr,  # arrive right after storing h (c and the gates stored while waiting)
    LATE_INPUTS: gl.constexpr,  # the next step's inputs loaded after the arrival (else before the cell)
    GROUP_STRIDE: gl.constexpr,
    POLL_LOADS: gl.constexpr,
):
    BLOCK_U: gl.constexpr = U1 + U2
    KC: gl.constexpr = DH // KS
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[KS, 1, 1], instr_shape=[1, 16, 8])
    la: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    lb: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    # each piece's cell layout [KS, U, BLOCK_B] (the KS partials of an element in one thread, units along the lanes)
    # and its partials' buffer, swizzled as version 6's (U2 < U1 <= 16 here: 32 // U lanes along a row)
    lp3a: gl.constexpr = gl.BlockedLayout([KS, 1, 1], [1, U1, 32 // U1], [1, 1, KS], [1, 2, 0])
    lp3b: gl.constexpr = gl.BlockedLayout([KS, 1, 1], [1, U2, 32 // U2], [1, 1, KS], [1, 2, 0])
    SW_PHASE: gl.constexpr = 32 // BLOCK_B if BLOCK_B < 32 else 1
    flata: gl.constexpr = gl.SwizzledSharedLayout(32 // U1, SW_PHASE, BLOCK_B * U1 // 32, order=[2, 1, 0])
    flatb: gl.constexpr = gl.SwizzledSharedLayout(32 // U2, SW_PHASE, BLOCK_B * U2 // 32, order=[2, 1, 0])
    lpa: gl.constexpr = gl.SliceLayout(0, lp3a)
    lpb: gl.constexpr = gl.SliceLayout(0, lp3b)

    p = gl.program_id(0)
    n = gl.program_id(1)
    r0 = gl.program_id(2) * BLOCK_B
    HD = NH * DH
    ua = p * BLOCK_U
    ub = ua + U1

    # R_p in registers: piece a's and piece b's rows, each in one or two K pieces (K1 + K2 = KC)
    ra1 = _r_piece(r_ptr, n, ua, 0, K1, KC, NH, DH, U1, KS, la)  # [KS, 4 U1, K1]
    rb1 = _r_piece(r_ptr, n, ub, 0, K1, KC, NH, DH, U2, KS, la)  # [KS, 4 U2, K1]
    ra2 = ra1
    rb2 = rb1
    if K2 > 0:
        ra2 = _r_piece(r_ptr, n, ua, K1, K2, KC, NH, DH, U1, KS, la)
        rb2 = _r_piece(r_ptr, n, ub, K1, K2, KC, NH, DH, U2, KS, la)
    # SHARED_B: piece b's rows kept in shared memory instead (read into the operand layout every step)
    rsw: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 8, order=[2, 1, 0])
    rb1_s = gl.allocate_shared_memory(r_ptr.dtype.element_ty, [KS, 4 * U2, K1], rsw, rb1)
    rb2_s = rb1_s
    if K2 > 0:
        rb2_s = gl.allocate_shared_memory(r_ptr.dtype.element_ty, [KS, 4 * U2, K2], rsw, rb2)
    cta_barrier()  # (the rows stored before any warp reads them)
    # h_{-1} in the B layout; the steps read h_{t-1} from out[0] in 16-byte rows
    s0_1, s0_1_mask = ops.h_pointers(s0_ptr, r0, n, 0, K1, KC, KS, B, HD, DH, BLOCK_B, lb, False)
    hb1 = gl.load(s0_1, mask=s0_1_mask, other=0.0)
    hb2 = hb1
    h1_ptr, h1_mask = ops.h_pointers(out_ptr, r0, n, 0, K1, KC, KS, B, T * HD, DH, BLOCK_B, lb, COALESCED)
    h2_ptr, h2_mask = h1_ptr, h1_mask
    if K2 > 0:
        s0_2, s0_2_mask = ops.h_pointers(s0_ptr, r0, n, K1, K2, KC, KS, B, HD, DH, BLOCK_B, lb, False)
        hb2 = gl.load(s0_2, mask=s0_2_mask, other=0.0)
        h2_ptr, h2_mask = ops.h_pointers(out_ptr, r0, n, K1, K2, KC, KS, B, T * HD, DH, BLOCK_B, lb, COALESCED)
    dt: gl.constexpr = out_ptr.dtype.element_ty

    # each piece's own elements
    own_a, rows_a, cols_a, ok_a = _own(r0, n, ua, U1, BLOCK_B, B, DH, HD, lpa)
    own_b, rows_b, cols_b, ok_b = _own(r0, n, ub, U2, BLOCK_B, B, DH, HD, lpb)
    out_a = out_ptr + rows_a * T * HD + cols_a  # h at step 0
    out_b = out_ptr + rows_b * T * HD + cols_b
    wx_a = wx_ptr + rows_a * T * 4 * HD + cols_a  # gate 0 at step 0
    wx_b = wx_ptr + rows_b * T * 4 * HD + cols_b
    g_a = gates_ptr + rows_a * T * 4 * HD + cols_a
    g_b = gates_ptr + rows_b * T * 4 * HD + cols_b
    bias_a = b_ptr + gl.expand_dims(gl.arange(0, U1, layout=gl.SliceLayout(1, lpa)), 1) + n * DH + ua
    bias_b = b_ptr + gl.expand_dims(gl.arange(0, U2, layout=gl.SliceLayout(1, lpb)), 1) + n * DH + ub
    c_stride = B.to(gl.int64) * T * HD  # from h to c in [2, B, T, NH, DH]
    c_a = gl.load(s0_ptr + B * HD + own_a, mask=ok_a, other=0.0).to(gl.float32)
    c_b = gl.load(s0_ptr + B * HD + own_b, mask=ok_b, other=0.0).to(gl.float32)
    h_a = c_a
    h_b = c_b

    parts_a = gl.allocate_shared_memory(gl.float32, [KS, 4 * U1, BLOCK_B], flata)
    parts_b = gl.allocate_shared_memory(gl.float32, [KS, 4 * U2, BLOCK_B], flatb)
    bar_ptr, base = ops.barrier_start(bar_ptr, n_programs, GROUP_STRIDE)
    xa_i, xa_f, xa_z, xa_o = ops.gate_inputs(wx_a, ok_a, HD)
    xb_i, xb_f, xb_z, xb_o = ops.gate_inputs(wx_b, ok_b, HD)
    for t in range(T):
        part_a = mma_v2(ra1, hb1, gl.zeros([KS, 4 * U1, BLOCK_B], gl.float32, mma))
        if SHARED_B:
            rb1 = rb1_s.load(la)
        part_b = mma_v2(rb1, hb1, gl.zeros([KS, 4 * U2, BLOCK_B], gl.float32, mma))
        if K2 > 0:
            part_a = mma_v2(ra2, hb2, part_a)
            if SHARED_B:
                rb2 = rb2_s.load(la)
            part_b = mma_v2(rb2, hb2, part_b)
        parts_a.store(part_a)
        parts_b.store(part_b)
        cta_barrier()
        pa_i, pa_f, pa_z, pa_o, c_a, h_a = _cell(parts_a, xa_i, xa_f, xa_z, xa_o, bias_a, c_a, U1, HD, lp3a, FAST)
        pb_i, pb_f, pb_z, pb_o, c_b, h_b = _cell(parts_b, xb_i, xb_f, xb_z, xb_o, bias_b, c_b, U2, HD, lp3b, FAST)
        nxt = gl.minimum(t + 1, T - 1) * 4 * HD
        if not LATE_INPUTS:
            xa_i, xa_f, xa_z, xa_o = ops.gate_inputs(wx_a + nxt, ok_a, HD)
            xb_i, xb_f, xb_z, xb_o = ops.gate_inputs(wx_b + nxt, ok_b, HD)
        gl.store(out_a + t * HD, h_a.to(dt), mask=ok_a)
        gl.store(out_b + t * HD, h_b.to(dt), mask=ok_b)
        if EARLY and t < T - 1:
            ops.grid_arrive(bar_ptr)  # (its CTA barrier also ends the partials' reads)
        if LATE_INPUTS:
            xa_i, xa_f, xa_z, xa_o = ops.gate_inputs(wx_a + nxt, ok_a, HD)
            xb_i, xb_f, xb_z, xb_o = ops.gate_inputs(wx_b + nxt, ok_b, HD)
        gl.store(out_a + t * HD + c_stride, c_a.to(dt), mask=ok_a)
        gl.store(out_b + t * HD + c_stride, c_b.to(dt), mask=ok_b)
        if SAVE_GATES:
            _store4(g_a + t * 4 * HD, pa_i, pa_f, pa_z, pa_o, ok_a, HD)
            _store4(g_b + t * 4 * HD, pb_i, pb_f, pb_z, pb_o, ok_b, HD)
        if t < T - 1:
            if EARLY:
                ops.grid_wait(bar_ptr, base + (t + 1) * n_programs, POLL_LOADS)
            else:
                grid_barrier(bar_ptr, base + (t + 1) * n_programs, POLL_LOADS)
            raw1 = gl.load(h1_ptr + t * HD, mask=h1_mask, other=0.0, cache_modifier=".cg")
            raw2 = raw1
            if K2 > 0:
                raw2 = gl.load(h2_ptr + t * HD, mask=h2_mask, other=0.0, cache_modifier=".cg")
            hb1 = gl.convert_layout(raw1, lb)
            if K2 > 0:
                hb2 = gl.convert_layout(raw2, lb)
    gl.store(last_ptr + own_a, h_a.to(dt), mask=ok_a)
    gl.store(last_ptr + own_b, h_b.to(dt), mask=ok_b)
    gl.store(last_ptr + B * HD + own_a, c_a.to(dt), mask=ok_a)
    gl.store(last_ptr + B * HD + own_b, c_b.to(dt), mask=ok_b)


def _constexprs(head_dim: int, cfg: UnitsConfig, save_gates: bool, fast: bool, config=None,
                coalesced: bool = True, shared_b: bool = True) -> dict:  # fmt: skip
    config = GluonConfig.of(config)
    (u1, u2), (k1, k2) = unit_pieces(cfg.block_u), k_pieces(head_dim // cfg.warps)
    return dict(DH=head_dim, BLOCK_B=cfg.block_b, U1=u1, U2=u2, KS=cfg.warps, K1=k1, K2=k2, SAVE_GATES=save_gates,
                FAST=fast, COALESCED=coalesced, SHARED_B=shared_b, EARLY=config.early_arrive,
                LATE_INPUTS=config.late_inputs_for(cfg.block_b),
                **ops.barrier_constexprs(config.barrier, config.poll))  # fmt: skip


def split_forward_units(Wx, R, b, states, save_gates: bool = True, cfg: UnitsConfig | None = None,
                        config: GluonConfig | None = None):  # fmt: skip
    """The two-piece forward on a GPU (LSTM, 16-bit): ``(states_all, states_last, gates or None)`` as
    :func:`gpulab.rnn.fused.split_gluon.split_forward_v6` returns them; one cooperative launch. On a CPU it raises:
    run :func:`schedule_reference` there."""
    from gpulab.check import new_output  # noqa: PLC0415
    from gpulab.rnn.fused.tiles import fast_activations  # noqa: PLC0415

    B, T, _, NH, DH = _checked(Wx, R, b, states)
    save_gates = runtime.strict_bool("save_gates", save_gates)
    config = GluonConfig.of(config)
    if Wx.dtype not in (torch.float16, torch.bfloat16) or any(x.dtype != Wx.dtype for x in (R, b, states)):
        raise TypeError(f"the two-piece forward takes one 16-bit dtype for Wx, R, b and states, got {Wx.dtype}, "
                        f"{R.dtype}, {b.dtype}, {states.dtype}: use gpulab.rnn.fused.split."
                        "split_rnn_forward.")  # fmt: skip
    if Wx.device.type != "cuda" or runtime.INTERPRET:
        raise RuntimeError("the two-piece forward is a Gluon kernel: it runs on a CUDA GPU only; on a CPU run "
                           "gpulab.rnn.fused.split_gluon_units.schedule_reference.")  # fmt: skip
    cfg = _tile(DH, cfg, units_config)
    Wx, R, b, states = (x.contiguous() for x in (Wx, R, b, states))
    dev, dt = Wx.device, Wx.dtype
    out = new_output(2, B, T, NH, DH, dtype=dt, device=dev)
    gates = new_output(B, T, 4, NH, DH, dtype=dt, device=dev) if save_gates else None
    last = new_output(2, B, 1, NH, DH, dtype=dt, device=dev)
    grid = (DH // cfg.block_u, NH, -(-B // cfg.block_b))
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    if grid[0] * grid[1] * grid[2] > sms:
        raise ValueError(f"cfg runs {grid[0] * grid[1] * grid[2]} programs, more than this GPU's {sms} SMs hold at "
                         "once; run fewer rows per launch (gpulab.rnn.fused.plan.batch_rows).")  # fmt: skip
    bar, per_group = ops.launch_counter(dev, grid[0] * grid[1] * grid[2], NH, grid[2], config.barrier)
    args = in_order(split_forward_units_kernel, wx_ptr=Wx, r_ptr=R, b_ptr=b, s0_ptr=states, out_ptr=out,
                    last_ptr=last, gates_ptr=gates if save_gates else out, bar_ptr=bar, B=B, T=T, NH=NH,
                    n_programs=per_group)  # fmt: skip
    tensors, ints = args[:-4], args[-4:]

    def make():
        return grid, dict(num_warps=cfg.warps, launch_cooperative_grid=True,
                          **_constexprs(DH, cfg, save_gates, fast_activations(dt), config))  # fmt: skip

    launch = keyed_launch((split_forward_units_kernel, DH, cfg, dt, save_gates, config) + ints, make)
    launch(direct_stream(dev) if aligned(*tensors) else None, *tensors, *ints)
    return out, last, gates


def compile_sm90(head_dim: int = 1536, cfg: UnitsConfig | None = None, dtype: str = "fp16", save_gates: bool = True,
                 config: GluonConfig | None = None):  # fmt: skip
    """Triton's compiled two-piece forward for sm_90, nothing launched, no GPU needed (call outside the
    interpreter)."""
    dtype = runtime.one_of("dtype", dtype, ("bf16", "fp16"))
    cfg = _tile(head_dim, cfg, units_config)
    constexprs = _constexprs(head_dim, cfg, runtime.strict_bool("save_gates", save_gates), dtype == "bf16", config)
    return gluon_tiles.compile_sm90(split_forward_units_kernel, dtype, constexprs, cfg.warps)
