"""Version 6's forward for large batches: one program loops over several batch tiles in every step.

Version 6 (:mod:`gpulab.rnn.fused.split_gluon`) gives every (head, batch tile) its own P programs, so a launch is
P x heads x batch tiles programs, all resident at once (each waits for the others every step): at one head of 1024
in 16 units that is 64 programs per 16 rows, and 64 rows already exceed an H200's 132 SMs. Here program (p, n, g)
keeps version 6's slice R_p in registers and runs ``TILES`` batch tiles of ``BLOCK_B`` rows in turn within each step,
so a launch is P x heads x ceil(tiles / TILES) programs for any batch:

- R_p is loaded once and multiplies every tile's h_{t-1};
- each tile's cell state c lives in shared memory ([TILES, BLOCK_U, BLOCK_B] fp32; each thread reads back what it
  wrote, no barrier); the next tile's inputs and h_{t-1} are loaded before this tile's cell runs (their trip to L2
  overlaps it);
- the tiles are a loop in the kernel, not unrolled: each tile's addresses are computed afresh (unrolled, the compiler
  kept every tile's in registers and spilled past 2 tiles at a head of 768);
- the grid barrier is once per step, after the last tile (the group's programs wait for the group's programs: all of
  h_t of every tile of the group stored).

Per step t, program (p, n, g), for k = 0 .. TILES - 1 (rows (g TILES + k) BLOCK_B ..), as version 6:

    pre^T = sum_s R_p[:, s KC : (s+1) KC] @ h_{t-1}[rows, s KC : (s+1) KC]^T + Wx_t[rows, :, units]^T + b
    c_t[k] = sigmoid(f) c_{t-1}[k] + sigmoid(i) tanh(z);  h_t = sigmoid(o) tanh(c_t[k]);  store h_t, c_t, pre
  then arrive and wait (once for all tiles).

Checked as version 6 is: :func:`schedule_reference` (float64, the same programs, groups, tiles and chunks) against the
vanilla backend; :func:`compile_sm90` (registers, spills; no GPU); the GPU tests (``tests/rnn/fused/
test_split_gluon_tiles.py``) run it against the float64 schedule.
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
from gpulab.rnn.fused.gluon_tiles import V6Config, k_pieces

__all__ = ["schedule_reference", "split_forward_tiles", "compile_sm90"]


def _checked(Wx, R, b, states) -> tuple[int, ...]:
    for name, x in (("Wx", Wx), ("R", R), ("b", b), ("states", states)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}.")
    if Wx.dim() != 5 or Wx.shape[2] != 4 or min(Wx.shape) < 1:
        raise ValueError(f"Wx must be a non-empty [B, T, 4, NH, DH] (the LSTM's gates), got {list(Wx.shape)}.")
    B, T, _, NH, DH = Wx.shape
    want = {"R": (4, NH, DH, DH), "b": (4, NH, DH), "states": (2, B, 1, NH, DH)}
    for name, x in (("R", R), ("b", b), ("states", states)):
        if tuple(x.shape) != want[name]:
            raise ValueError(f"{name} must have shape {list(want[name])} for Wx {list(Wx.shape)}, got {list(x.shape)}.")
    return tuple(Wx.shape)


def _tile(head_dim: int, cfg):
    """``cfg`` checked against the head dim as version 6's forward tile is (DH a multiple of ``block_u`` and of
    16 * warps, each warp's K chunk one or two power-of-two pieces)."""
    head_dim = runtime.positive_int("head_dim", head_dim)
    if not isinstance(cfg, V6Config):
        raise TypeError(f"cfg must be a V6Config (split_gluon.v6_config(head_dim, ..., tiles=...)), got {cfg!r}.")
    if head_dim % cfg.block_u or head_dim % (16 * cfg.warps) or k_pieces(head_dim // cfg.warps) is None:
        raise ValueError(f"head_dim={head_dim} does not fit {cfg}: it must be a multiple of block_u and of 16 * "
                         "warps, each warp's K chunk one or two powers of two; check it with "
                         "split_gluon.v6_config.")  # fmt: skip
    return cfg


def schedule_reference(Wx, R, b, states, cfg: V6Config):
    """The kernel's arithmetic in float64, program by program: ``(states_all, states_last, gates)`` as
    :func:`split_forward_tiles` returns them. Program (p, n, g) runs tiles k = 0 .. TILES - 1 of its group, rows
    ``(g TILES + k) BLOCK_B ..`` (those past B skipped, as the kernel masks them), each from the chunks' partial
    products summed in chunk order and its own c; every tile of a step reads h_{t-1} of the step before (the barrier
    comes after the group's last tile). A row's arithmetic does not depend on which tile or group holds it, so the
    reference steps every row of a program at once (the same float64 operations per row)."""
    B, T, _, NH, DH = _checked(Wx, R, b, states)
    cfg = _tile(DH, cfg)
    bu, kc = cfg.block_u, DH // cfg.warps
    f64 = dict(dtype=torch.float64)
    Wx, R, b, s = Wx.to(**f64), R.to(**f64), b.to(**f64), states.to(**f64)
    h, c = s[0, :, 0].clone(), s[1, :, 0].clone()  # [B, NH, DH]
    out = torch.full((2, B, T, NH, DH), float("nan"), **f64)
    gates = torch.full((B, T, 4, NH, DH), float("nan"), **f64)
    for t in range(T):
        h_new, c_new = torch.full_like(h, float("nan")), torch.full_like(c, float("nan"))
        for n in range(NH):
            for p in range(DH // bu):
                units = slice(p * bu, (p + 1) * bu)
                rp = R[:, n, units, :].reshape(4 * bu, DH)
                # the program's tiles, rows (g TILES + k) BLOCK_B onwards (past B masked), cover every row once; a
                # row's arithmetic is the same in whichever tile holds it: all of them are one step here
                pre = torch.zeros(4 * bu, B, **f64)
                for ch in range(cfg.warps):
                    ks = slice(ch * kc, (ch + 1) * kc)
                    pre = pre + rp[:, ks] @ h[:, n, ks].T
                pre = pre.reshape(4, bu, -1) + Wx[:, t, :, n, units].permute(1, 2, 0) + b[:, n, units, None]
                gates[:, t, :, n, units] = pre.permute(2, 0, 1)
                i, f = torch.sigmoid(pre[0]), torch.sigmoid(pre[1])
                z, o = torch.tanh(pre[2]), torch.sigmoid(pre[3])
                cn = f * c[:, n, units].T + i * z
                c_new[:, n, units] = cn.T
                h_new[:, n, units] = (o * torch.tanh(cn)).T
        h, c = h_new, c_new
        out[0, :, t], out[1, :, t] = h, c
    return out, torch.stack((h, c))[:, :, None], gates


@gluon.jit
def _h_prev(s0_ptr, out_ptr, t, r0, n, K0: gl.constexpr, KP: gl.constexpr, KC: gl.constexpr, KS: gl.constexpr, B,
            T, HD, DH: gl.constexpr, BLOCK_B: gl.constexpr, lb: gl.constexpr):  # fmt: skip
    """A piece [KS, KP, BLOCK_B] of h_{t-1} for rows r0 .. in 16-byte rows: out[0] at step t - 1, or the initial
    state at t = 0."""
    if t > 0:
        ptr, mask = ops.h_pointers(out_ptr, r0, n, K0, KP, KC, KS, B, T * HD, DH, BLOCK_B, lb, True)
        ptr = ptr + (t - 1) * HD
    else:
        ptr, mask = ops.h_pointers(s0_ptr, r0, n, K0, KP, KC, KS, B, HD, DH, BLOCK_B, lb, True)
    return gl.load(ptr, mask=mask, other=0.0, cache_modifier=".cg")


@gluon.jit(do_not_specialize=["B", "T", "NH", "n_programs"])
def split_forward_tiles_kernel(
    wx_ptr,  # [B, T, 4, NH, DH]
    r_ptr,  # [4, NH, DH, DH]
    b_ptr,  # [4, NH, DH]
    s0_ptr,  # [2, B, 1, NH, DH] initial (h, c)
    out_ptr,  # [2, B, T, NH, DH] all (h, c) (written); out[0] is the exchange buffer of h
    last_ptr,  # [2, B, 1, NH, DH] (h, c) after the last step (written)
    gates_ptr,  # [B, T, 4, NH, DH] pre-activations (SAVE_GATES)
    bar_ptr,  # int64 counter of the grid barrier
    B,
    T,
    NH,
    n_programs,
    DH: gl.constexpr,
    BLOCK_B: gl.constexpr,
    BLOCK_U: gl.constexpr,
    KS: gl.constexpr,  # K chunks = warps
    K1: gl.constexpr,  # a chunk's K as one or two power-of-two pieces: K1 + K2 = DH / KS
    K2: gl.constexpr,
    TILES: gl.constexpr,  # batch tiles per program, run in turn every step
    SAVE_GATES: gl.constexpr,
    FAST: gl.constexpr,
    EARLY: gl.constexpr,  # arrive right after the last tile's h is stored
    GROUP_STRIDE: gl.constexpr,
    POLL_LOADS: gl.constexpr,
):
    M: gl.constexpr = 4 * BLOCK_U
    KC: gl.constexpr = DH // KS
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[KS, 1, 1], instr_shape=[1, 16, 8])
    la: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    lb: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    lp3: gl.constexpr = gl.BlockedLayout([KS, 1, 1], [1, BLOCK_U, 32 // BLOCK_U], [1, 1, KS], [1, 2, 0])
    lp: gl.constexpr = gl.SliceLayout(0, lp3)  # [BLOCK_U, BLOCK_B]
    SW_VEC: gl.constexpr = 32 // BLOCK_U if BLOCK_U < 32 else 1
    SW_PHASE: gl.constexpr = 32 // BLOCK_B if BLOCK_B < 32 else 1
    flat: gl.constexpr = gl.SwizzledSharedLayout(SW_VEC, SW_PHASE, BLOCK_B // SW_VEC, order=[2, 1, 0])
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])  # of each tile's [BLOCK_U, BLOCK_B]

    p = gl.program_id(0)
    n = gl.program_id(1)
    g0 = gl.program_id(2) * TILES * BLOCK_B  # the group's first row
    HD = NH * DH
    dt: gl.constexpr = out_ptr.dtype.element_ty

    r1 = gl.load(r_ptr + ops.r_offsets(n, p, 0, K1, KC, NH, DH, BLOCK_U, KS, M, la))  # [KS, M, K1]
    r2 = r1
    if K2 > 0:
        r2 = gl.load(r_ptr + ops.r_offsets(n, p, K1, K2, KC, NH, DH, BLOCK_U, KS, M, la))  # [KS, M, K2]

    # tile 0's elements (tile k: rows k BLOCK_B further)
    u_p = gl.arange(0, BLOCK_U, layout=gl.SliceLayout(1, lp))
    j_p = gl.arange(0, BLOCK_B, layout=gl.SliceLayout(0, lp))
    rows_p = gl.expand_dims(g0 + j_p, 0)  # [1, BLOCK_B]
    units = gl.expand_dims(p * BLOCK_U + u_p, 1)  # [BLOCK_U, 1]
    own = rows_p * HD + n * DH + units  # in [B, 1, NH, DH]
    out_own = out_ptr + rows_p.to(gl.int64) * T * HD + n * DH + units
    c_stride = B.to(gl.int64) * T * HD
    wx_own = wx_ptr + rows_p.to(gl.int64) * T * 4 * HD + n * DH + units
    gate_own = gates_ptr + rows_p.to(gl.int64) * T * 4 * HD + n * DH + units
    b_own = b_ptr + n * DH + units
    bias_i = gl.load(b_own).to(gl.float32)
    bias_f = gl.load(b_own + HD).to(gl.float32)
    bias_z = gl.load(b_own + 2 * HD).to(gl.float32)
    bias_o = gl.load(b_own + 3 * HD).to(gl.float32)

    parts = gl.allocate_shared_memory(gl.float32, [KS, M, BLOCK_B], flat)
    cs = gl.allocate_shared_memory(gl.float32, [TILES, BLOCK_U, BLOCK_B], plain)  # each tile's c
    for k in gl.static_range(TILES):
        ok = rows_p + k * BLOCK_B < B
        cs.index(k).store(gl.load(s0_ptr + B * HD + own + k * BLOCK_B * HD, mask=ok, other=0.0).to(gl.float32))
    bar_ptr, base = ops.barrier_start(bar_ptr, n_programs, GROUP_STRIDE)

    x_i, x_f, x_z, x_o = ops.gate_inputs(wx_own, rows_p < B, HD)
    raw1 = _h_prev(s0_ptr, out_ptr, 0, g0, n, 0, K1, KC, KS, B, T, HD, DH, BLOCK_B, lb)
    raw2 = raw1
    if K2 > 0:
        raw2 = _h_prev(s0_ptr, out_ptr, 0, g0, n, K1, K2, KC, KS, B, T, HD, DH, BLOCK_B, lb)
    hb1 = gl.convert_layout(raw1, lb)
    hb2 = hb1
    if K2 > 0:
        hb2 = gl.convert_layout(raw2, lb)
    for t in range(T):
        for kk in range(TILES):  # a loop, not unrolled: each tile's addresses are made afresh, not kept in registers
            rk = kk * BLOCK_B
            ok = rows_p + rk < B
            part = mma_v2(r1, hb1, gl.zeros([KS, M, BLOCK_B], gl.float32, mma))  # [KS, M, BLOCK_B]
            if K2 > 0:
                part = mma_v2(r2, hb2, part)
            if kk > 0:  # every warp's reads of the previous tile's partials are done
                cta_barrier()
            parts.store(part)
            cta_barrier()
            pre_i = gl.sum(parts.slice(0, BLOCK_U, dim=1).load(lp3), axis=0) + x_i.to(gl.float32) + bias_i
            pre_f = gl.sum(parts.slice(BLOCK_U, BLOCK_U, dim=1).load(lp3), axis=0) + x_f.to(gl.float32) + bias_f
            pre_z = gl.sum(parts.slice(2 * BLOCK_U, BLOCK_U, dim=1).load(lp3), axis=0) + x_z.to(gl.float32) + bias_z
            pre_o = gl.sum(parts.slice(3 * BLOCK_U, BLOCK_U, dim=1).load(lp3), axis=0) + x_o.to(gl.float32) + bias_o
            if kk + 1 < TILES:  # the next tile's inputs and h_{t-1}, in flight while this tile's cell runs
                nk = rk + BLOCK_B
                x_i, x_f, x_z, x_o = ops.gate_inputs(wx_own + nk * T * 4 * HD + t * 4 * HD, rows_p + nk < B, HD)
                raw1 = _h_prev(s0_ptr, out_ptr, t, g0 + nk, n, 0, K1, KC, KS, B, T, HD, DH, BLOCK_B, lb)
                if K2 > 0:
                    raw2 = _h_prev(s0_ptr, out_ptr, t, g0 + nk, n, K1, K2, KC, KS, B, T, HD, DH, BLOCK_B, lb)
            else:  # the next step's inputs of tile 0
                x_i, x_f, x_z, x_o = ops.gate_inputs(wx_own + gl.minimum(t + 1, T - 1) * 4 * HD, rows_p < B, HD)
            c_k = cs.index(kk)
            c = sigmoid(pre_f, FAST) * c_k.load(lp) + sigmoid(pre_i, FAST) * tanh(pre_z, FAST)
            h = sigmoid(pre_o, FAST) * tanh(c, FAST)
            c_k.store(c)
            gl.store(out_own + rk * T * HD + t * HD, h.to(dt), mask=ok)
            if kk + 1 == TILES and EARLY and t < T - 1:
                ops.grid_arrive(bar_ptr)
            gl.store(out_own + rk * T * HD + t * HD + c_stride, c.to(dt), mask=ok)
            if SAVE_GATES:
                g_t = gate_own + rk * T * 4 * HD + t * 4 * HD
                gl.store(g_t, pre_i.to(gates_ptr.dtype.element_ty), mask=ok)
                gl.store(g_t + HD, pre_f.to(gates_ptr.dtype.element_ty), mask=ok)
                gl.store(g_t + 2 * HD, pre_z.to(gates_ptr.dtype.element_ty), mask=ok)
                gl.store(g_t + 3 * HD, pre_o.to(gates_ptr.dtype.element_ty), mask=ok)
            if t == T - 1:
                gl.store(last_ptr + own + rk * HD, h.to(last_ptr.dtype.element_ty), mask=ok)
                gl.store(last_ptr + B * HD + own + rk * HD, c.to(last_ptr.dtype.element_ty), mask=ok)
            if kk + 1 == TILES:
                if t < T - 1:  # every tile of the group stored h_t: wait once, then tile 0's h_t
                    if EARLY:
                        ops.grid_wait(bar_ptr, base + (t + 1) * n_programs, POLL_LOADS)
                    else:
                        ops.grid_barrier(bar_ptr, base + (t + 1) * n_programs, POLL_LOADS)
                    raw1 = _h_prev(s0_ptr, out_ptr, t + 1, g0, n, 0, K1, KC, KS, B, T, HD, DH, BLOCK_B, lb)
                    if K2 > 0:
                        raw2 = _h_prev(s0_ptr, out_ptr, t + 1, g0, n, K1, K2, KC, KS, B, T, HD, DH, BLOCK_B, lb)
            hb1 = gl.convert_layout(raw1, lb)
            if K2 > 0:
                hb2 = gl.convert_layout(raw2, lb)


def _constexprs(head_dim: int, cfg: V6Config, save_gates: bool, fast: bool, config: GluonConfig) -> dict:
    k1, k2 = k_pieces(head_dim // cfg.warps)
    return dict(DH=head_dim, BLOCK_B=cfg.block_b, BLOCK_U=cfg.block_u, KS=cfg.warps, K1=k1, K2=k2, TILES=cfg.tiles,
                SAVE_GATES=save_gates, FAST=fast, EARLY=config.early_arrive,
                **ops.barrier_constexprs(config.barrier, config.poll))  # fmt: skip


def split_forward_tiles(Wx, R, b, states, cfg: V6Config, save_gates: bool = True, config: GluonConfig | None = None):
    """The forward on a GPU (LSTM, 16-bit): ``(states_all, states_last, gates or None)`` as
    :func:`gpulab.rnn.fused.split_gluon.split_forward_v6` returns them, in one cooperative launch of
    ``cfg.programs(B, NH, DH)`` programs (``cfg.tiles`` batch tiles each). On a CPU it raises: run
    :func:`schedule_reference` there."""
    from gpulab.check import new_output  # noqa: PLC0415
    from gpulab.rnn.fused.tiles import fast_activations  # noqa: PLC0415

    B, T, _, NH, DH = _checked(Wx, R, b, states)
    cfg = _tile(DH, cfg)
    save_gates = runtime.strict_bool("save_gates", save_gates)
    config = GluonConfig.of(config)
    if Wx.dtype not in (torch.float16, torch.bfloat16) or any(x.dtype != Wx.dtype for x in (R, b, states)):
        raise TypeError(f"the forward takes one 16-bit dtype for Wx, R, b and states, got {Wx.dtype}, {R.dtype}, "
                        f"{b.dtype}, {states.dtype}: use gpulab.rnn.fused.split.split_rnn_forward.")  # fmt: skip
    if Wx.device.type != "cuda" or runtime.INTERPRET:
        raise RuntimeError("a Gluon kernel: it runs on a CUDA GPU only; on a CPU run "
                           "gpulab.rnn.fused.split_gluon_tiles.schedule_reference (float64).")  # fmt: skip
    Wx, R, b, states = (x.contiguous() for x in (Wx, R, b, states))
    dev, dt = Wx.device, Wx.dtype
    out = new_output(2, B, T, NH, DH, dtype=dt, device=dev)
    gates = new_output(B, T, 4, NH, DH, dtype=dt, device=dev) if save_gates else None
    last = new_output(2, B, 1, NH, DH, dtype=dt, device=dev)
    grid = (DH // cfg.block_u, NH, cfg.groups(B))
    gluon_tiles.check_resident(grid, cfg, dev)
    bar, per_group = ops.launch_counter(dev, grid[0] * grid[1] * grid[2], NH, grid[2], config.barrier)
    split_forward_tiles_kernel[grid](
        wx_ptr=Wx, r_ptr=R, b_ptr=b, s0_ptr=states, out_ptr=out, last_ptr=last,
        gates_ptr=gates if save_gates else out, bar_ptr=bar, B=B, T=T, NH=NH, n_programs=per_group,
        num_warps=cfg.warps, **_constexprs(DH, cfg, save_gates, fast_activations(dt), config),
        launch_cooperative_grid=True,
    )  # fmt: skip
    return out, last, gates


def compile_sm90(head_dim: int, cfg: V6Config, dtype: str = "bf16", save_gates: bool = True,
                 config: GluonConfig | None = None):  # fmt: skip
    """Triton's compiled kernel for sm_90, nothing launched, no GPU needed (``metadata`` holds the registers and
    shared memory). Call from a process outside the interpreter."""
    dtype = runtime.one_of("dtype", dtype, ("bf16", "fp16"))
    cfg = _tile(head_dim, cfg)
    constexprs = _constexprs(head_dim, cfg, runtime.strict_bool("save_gates", save_gates), dtype == "bf16",
                             GluonConfig.of(config))  # fmt: skip
    return gluon_tiles.compile_sm90(split_forward_tiles_kernel, dtype, constexprs, cfg.warps)
