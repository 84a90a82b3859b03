"""A large batch, one launch per step: the step's product and its cell in one kernel, R read from L2.

What you will learn: the split kernels (:mod:`.split`, :mod:`.split_gluon`) keep R on chip for the whole sequence
and pay for it with residency: every program of every batch tile must be resident at once, so at one head of 768
or 1024 a batch of 256 runs as 16 launches of 16 rows, one after another, each T steps long. At such a batch the
step is no longer a latency problem. Its product is a real GEMM,

    G_t[b, g, j] = Wx_t[b, g, j] + b[g, j] + sum_k h_{t-1}[b, k] R[g, j, k]      [B, 4, DH] from [B, DH] x [DH, 4DH]

(2 B DH 4DH FLOP: 2.1 GFLOP at B 256, DH 1024), and the tensor cores can be fed from L2 (R of one head of 1024 in
16 bits is 8 MB; an H200's L2 holds 50 MB). So here each step is one launch of an ordinary tiled GEMM whose epilogue
is the cell: program (m, u, n) owns batch rows [m BLOCK_M, (m + 1) BLOCK_M) and units [u BLOCK_U, (u + 1) BLOCK_U)
of head n, accumulates the four gates' [BLOCK_M, BLOCK_U] tiles over K = DH in chunks of BLOCK_K (h_{t-1} and R
streamed through shared memory, software-pipelined), then adds Wx_t and b, runs the cell and writes h_t, c_t (and
the pre-activations for the backward). h_t goes to the output tensor; the next launch reads it from there: the
stream orders the steps, no barrier is needed.

Backward, one launch per step in reverse, the same tiles: program (m, u, n) gathers the gradient reaching its
h_t, dh_t = dL/dh_t + sum_{g, j} dG_{t+1}[b, g, j] R[g, j, k] (a GEMM over K = 4 DH of the previous launch's dG),
adds dL/dc_t to the carried dc (fp32, in place), and runs the cell's backward: dG_t [BLOCK_M, 4, BLOCK_U] and
dc_{t-1}. The gradient of h_{-1} is one more product after the loop; dR, db and dWx are the parameter products of
:mod:`gpulab.rnn.backends.parameter_grads`, as for every backend.

What each launch costs: a few microseconds of the GPU's time and of the host's (a direct launch, :mod:`gpulab.launch`),
so T steps cost 2T launches per layer. That pays where a step is a GEMM of many rows; at a small batch the on-chip
kernels win (:func:`gpulab.rnn.fused.plan.choose` decides). LSTM only, any of fp32, fp16 and bf16.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from gpulab import dtypes, runtime
from gpulab.check import new_output
from gpulab.launch import aligned, direct_stream, keyed_launch
from gpulab.rnn.backends.parameter_grads import gate_gradients_to_parameters
from gpulab.rnn.cells import lstm_cell, lstm_cell_backward
from gpulab.rnn.fused.tiles import gate_columns, split_gates
from gpulab.triton_ops import dot

__all__ = ["StepTiles", "step_tiles", "step_forward_kernel", "step_backward_kernel", "step_rnn_forward",
           "step_rnn_backward", "step_rnn_gradients"]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class StepTiles:
    """One launch's tiles: ``block_m`` batch rows x ``block_u`` units (each with its four gates) per program, K in
    chunks of ``block_k``; ``warps`` and ``stages`` (software pipelining of the K loop)."""

    block_m: int
    block_u: int
    block_k: int
    warps: int = 4
    stages: int = 3

    def __post_init__(self):
        for name in ("block_m", "block_u", "block_k"):
            v = runtime.positive_int(name, getattr(self, name))
            if v < 16 or v & (v - 1):
                raise ValueError(f"{name}={v}: a tile side must be a power of two of at least 16 (a tensor-core "
                                 "product's side); e.g. 16, 32 or 64.")  # fmt: skip
        if runtime.positive_int("warps", self.warps) not in (1, 2, 4, 8, 16):
            raise ValueError(f"warps={self.warps}: use 1, 2, 4, 8 or 16.")
        runtime.positive_int("stages", self.stages)

    def grid(self, batch: int, num_heads: int, head_dim: int) -> tuple:
        return (triton.cdiv(batch, self.block_m), triton.cdiv(head_dim, self.block_u), num_heads)


def step_tiles(batch: int, head_dim: int, num_heads: int = 1, sm_count: int = 132) -> StepTiles:
    """The tiles of one step's launch: 64 batch rows (the smallest tile Hopper's warpgroup MMA takes; fewer where the
    batch is smaller, at least 16), the four gates as one product, and the wider unit tile (32 in 8 warps, else 16 in
    4) where it still makes at least half as many programs as ``sm_count``; K in chunks of 64 (fewer where the head is
    narrower).
    What the tiles measured (H200, one layer, T 256): ``notes/rnn-split.md``."""
    batch, head_dim = runtime.positive_int("batch", batch), runtime.positive_int("head_dim", head_dim)
    num_heads, sm_count = runtime.positive_int("num_heads", num_heads), runtime.positive_int("sm_count", sm_count)
    block_m = min(64, max(16, runtime.next_power_of_2(batch)))
    block_k = min(64, max(16, runtime.next_power_of_2(head_dim)))
    rows = triton.cdiv(batch, block_m) * num_heads
    block_u = min(32 if 2 * rows * triton.cdiv(head_dim, 32) >= sm_count else 16,
                  max(16, runtime.next_power_of_2(head_dim)))  # fmt: skip
    return StepTiles(block_m, block_u, block_k, warps=8 if block_u == 32 else 4)


@triton.jit(do_not_specialize=["t"])
def step_forward_kernel(
    wx_ptr,  # [B, T, 4, NH, DH] the input projections (b_ih included)
    r_ptr,  # [4, NH, DH, DH] R[g, n, j, k]: gate g of unit j from h_{t-1}[k]
    b_ptr,  # [4, NH, DH]
    s0_ptr,  # [2, B, 1, NH, DH] the initial (h, c)
    c_ptr,  # [B, NH, DH] fp32: c_{t-1} in, c_t out (in place)
    out_ptr,  # [2, B, T, NH, DH] (h, c) of every step; h_{t-1} is read from here
    gates_ptr,  # [B, T, 4, NH, DH] pre-activations, written if SAVE_GATES
    t,
    B,
    T,
    NH,
    DH: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_U: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SAVE_GATES: tl.constexpr,
    IS_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Step t, program (m, u, n): G [BLOCK_M, BLOCK_U] per gate = h_{t-1} [BLOCK_M, DH] @ R_g[units, :]^T, then
    the cell on Wx_t + G + b."""
    pid_m, pid_u, n = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    HD = NH * DH
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # [BLOCK_M]
    units = pid_u * BLOCK_U + tl.arange(0, BLOCK_U)  # [BLOCK_U]
    ks = tl.arange(0, BLOCK_K)  # [BLOCK_K]
    row_ok, unit_ok = rows < B, units < DH
    if t > 0:
        h_rows = out_ptr + (rows * T + t - 1) * HD + n * DH  # [BLOCK_M] h_{t-1}[b, :] = out[0, b, t-1, n, :]
    else:
        h_rows = s0_ptr + rows * HD + n * DH  # s0[0, b, 0, n, :]
    # R_all^T [BLOCK_K, 4 BLOCK_U], column g BLOCK_U + u = gate g of unit u: the four gates as one product, then split
    slot, u = gate_columns(4, BLOCK_U)
    r_all = r_ptr + slot[None, :] * (NH * DH * DH) + (n * DH + pid_u * BLOCK_U + u[None, :]) * DH + ks[:, None]
    all_ok = (pid_u * BLOCK_U + u < DH)[None, :]
    acc = tl.zeros((BLOCK_M, 4 * BLOCK_U), dtype=tl.float32)
    for k0 in range(0, DH, BLOCK_K):
        k_ok = k0 + ks < DH
        h = tl.load(h_rows[:, None] + k0 + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        acc += dot(h, tl.load(r_all + k0, mask=k_ok[:, None] & all_ok, other=0.0), IS_FP32, PRECISION)
    acc_i, acc_f, acc_z, acc_o = split_gates(acc, BLOCK_M, BLOCK_U, 4)
    ok = row_ok[:, None] & unit_ok[None, :]  # [BLOCK_M, BLOCK_U]
    at = (rows[:, None] * T + t) * (4 * HD) + n * DH + units[None, :]  # Wx_t[b, 0, n, j] (and the saved gates)
    bias = b_ptr + n * DH + units  # [BLOCK_U]
    gi = acc_i + tl.load(wx_ptr + at, mask=ok, other=0.0).to(tl.float32)
    gf = acc_f + tl.load(wx_ptr + at + HD, mask=ok, other=0.0).to(tl.float32)
    gz = acc_z + tl.load(wx_ptr + at + 2 * HD, mask=ok, other=0.0).to(tl.float32)
    go = acc_o + tl.load(wx_ptr + at + 3 * HD, mask=ok, other=0.0).to(tl.float32)
    gi += tl.load(bias, mask=unit_ok, other=0.0).to(tl.float32)[None, :]
    gf += tl.load(bias + HD, mask=unit_ok, other=0.0).to(tl.float32)[None, :]
    gz += tl.load(bias + 2 * HD, mask=unit_ok, other=0.0).to(tl.float32)[None, :]
    go += tl.load(bias + 3 * HD, mask=unit_ok, other=0.0).to(tl.float32)[None, :]
    own = rows[:, None] * HD + n * DH + units[None, :]  # [BLOCK_M, BLOCK_U] in [B, NH, DH]
    h, c = lstm_cell(gi, gf, gz, go, tl.load(c_ptr + own, mask=ok, other=0.0))
    tl.store(c_ptr + own, c, mask=ok)
    step = (rows[:, None] * T + t) * HD + n * DH + units[None, :]  # out[0, b, t, n, j]
    tl.store(out_ptr + step, h.to(out_ptr.dtype.element_ty), mask=ok)
    tl.store(out_ptr + B * T * HD + step, c.to(out_ptr.dtype.element_ty), mask=ok)
    if SAVE_GATES:
        dt = gates_ptr.dtype.element_ty
        tl.store(gates_ptr + at, gi.to(dt), mask=ok)
        tl.store(gates_ptr + at + HD, gf.to(dt), mask=ok)
        tl.store(gates_ptr + at + 2 * HD, gz.to(dt), mask=ok)
        tl.store(gates_ptr + at + 3 * HD, go.to(dt), mask=ok)


@triton.jit(do_not_specialize=["t"])
def step_backward_kernel(
    gates_ptr,  # [B, T, 4, NH, DH] the forward's pre-activations
    out_ptr,  # [2, B, T, NH, DH]
    s0_ptr,  # [2, B, 1, NH, DH]
    dout_ptr,  # [2, B, T, NH, DH] dL/d(h, c) of every step
    dlast_ptr,  # [2, B, 1, NH, DH] dL/d(h_T, c_T) (read if HAS_LAST)
    r_ptr,  # [4, NH, DH, DH]
    dc_ptr,  # [B, NH, DH] fp32: dc reaching c_t in, reaching c_{t-1} out (in place)
    dg_ptr,  # [B, T, 4, NH, DH] gate gradients: step t+1's read, step t's written
    t,
    B,
    T,
    NH,
    DH: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_U: tl.constexpr,
    BLOCK_K: tl.constexpr,
    HAS_LAST: tl.constexpr,
    IS_FP32: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """Step t in reverse, program (m, u, n): dh_t [BLOCK_M, BLOCK_U] = dL/dh_t + sum_g dG_{t+1, g} [BLOCK_M, DH] @
    R_g[:, units], then the cell's backward: dG_t and dc_{t-1}."""
    pid_m, pid_u, n = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    HD = NH * DH
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    units = pid_u * BLOCK_U + tl.arange(0, BLOCK_U)
    row_ok, unit_ok = rows < B, units < DH
    ok = row_ok[:, None] & unit_ok[None, :]
    step = (rows[:, None] * T + t) * HD + n * DH + units[None, :]  # [BLOCK_M, BLOCK_U] in [B, T, NH, DH]
    dh = tl.load(dout_ptr + step, mask=ok, other=0.0).to(tl.float32)
    dc = tl.load(dc_ptr + rows[:, None] * HD + n * DH + units[None, :], mask=ok, other=0.0)
    dc += tl.load(dout_ptr + B * T * HD + step, mask=ok, other=0.0).to(tl.float32)
    if HAS_LAST:
        if t == T - 1:
            last = rows[:, None] * HD + n * DH + units[None, :]
            dh += tl.load(dlast_ptr + last, mask=ok, other=0.0).to(tl.float32)
            dc += tl.load(dlast_ptr + B * HD + last, mask=ok, other=0.0).to(tl.float32)
    if t < T - 1:  # the recurrent part: dG_{t+1} [BLOCK_M, 4 DH] @ R [4 DH, units]
        acc = tl.zeros((BLOCK_M, BLOCK_U), dtype=tl.float32)
        g_rows = dg_ptr + (rows * T + t + 1) * (4 * HD) + n * DH  # [BLOCK_M] dG_{t+1}[b, 0, n, :]
        # K in chunks of 4 BLOCK_K: column g BLOCK_K + j of a chunk = gate g, unit k0 + j
        slot, j = gate_columns(4, BLOCK_K)
        a_all = g_rows[:, None] + slot[None, :] * HD + j[None, :]  # [BLOCK_M, 4 BLOCK_K]
        w_all = r_ptr + ((slot[:, None] * NH + n) * DH + j[:, None]) * DH + units[None, :]  # [4 BLOCK_K, BLOCK_U]
        for k0 in range(0, DH, BLOCK_K):
            k_ok = k0 + j < DH
            a = tl.load(a_all + k0, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w_all + k0 * DH, mask=k_ok[:, None] & unit_ok[None, :], other=0.0)
            acc += dot(a, w, IS_FP32, PRECISION)
        dh += acc
    if t > 0:
        c_prev = tl.load(out_ptr + B * T * HD + step - HD, mask=ok, other=0.0).to(tl.float32)  # c_{t-1}
    else:
        c_prev = tl.load(s0_ptr + B * HD + rows[:, None] * HD + n * DH + units[None, :], mask=ok, other=0.0)
        c_prev = c_prev.to(tl.float32)
    at = (rows[:, None] * T + t) * (4 * HD) + n * DH + units[None, :]
    gi = tl.load(gates_ptr + at, mask=ok, other=0.0).to(tl.float32)
    gf = tl.load(gates_ptr + at + HD, mask=ok, other=0.0).to(tl.float32)
    gz = tl.load(gates_ptr + at + 2 * HD, mask=ok, other=0.0).to(tl.float32)
    go = tl.load(gates_ptr + at + 3 * HD, mask=ok, other=0.0).to(tl.float32)
    di, df, dz, do, dc = lstm_cell_backward(gi, gf, gz, go, c_prev, dh, dc)
    tl.store(dc_ptr + rows[:, None] * HD + n * DH + units[None, :], dc, mask=ok)
    dt = dg_ptr.dtype.element_ty
    tl.store(dg_ptr + at, di.to(dt), mask=ok)
    tl.store(dg_ptr + at + HD, df.to(dt), mask=ok)
    tl.store(dg_ptr + at + 2 * HD, dz.to(dt), mask=ok)
    tl.store(dg_ptr + at + 3 * HD, do.to(dt), mask=ok)


def _check_lstm(function, tiles) -> None:
    if tiles is not None and not isinstance(tiles, StepTiles):
        raise TypeError(f"tiles must be a gpulab.rnn.fused.stepwise.StepTiles or None (step_tiles chooses), got "
                        f"{tiles!r}.")  # fmt: skip
    if function != "lstm":
        raise ValueError(f"function={function!r}: the stepwise kernels run the LSTM only; use backend='alternating' "
                         "for 'gru' and 'elman' at this size.")  # fmt: skip


def _constexprs(tiles: StepTiles, DH: int, dtype) -> dict:
    return dict(DH=DH, BLOCK_M=tiles.block_m, BLOCK_U=tiles.block_u, BLOCK_K=tiles.block_k,
                IS_FP32=dtype == torch.float32, PRECISION=runtime.dot_precision(dtype),
                num_warps=tiles.warps, num_stages=tiles.stages)  # fmt: skip


def step_rnn_forward(Wx, R, b, states, function="lstm", save_gates=True, tiles: StepTiles | None = None):
    """The forward loop, one launch of :func:`step_forward_kernel` per step: ``(states_all [2, B, T, NH, DH],
    states_last [2, B, 1, NH, DH], gates [B, T, 4, NH, DH] or None)``, as every backend's forward returns them (inputs
    validated, one dtype). ``tiles``: a :class:`StepTiles` (None: :func:`step_tiles`)."""
    _check_lstm(function, tiles)
    Wx, R, b, states = (x.contiguous() for x in (Wx, R, b, states))
    B, T, _, NH, DH = Wx.shape
    dtype, dev = Wx.dtype, Wx.device
    cfg = tiles or step_tiles(B, DH, NH)
    out = new_output(2, B, T, NH, DH, dtype=dtype, device=dev)
    gates = new_output(B, T, 4, NH, DH, dtype=dtype, device=dev) if save_gates else None
    c = states[1, :, 0].to(torch.float32, copy=True)  # [B, NH, DH], updated in place
    key = (step_forward_kernel, dtypes.name(dtype), B, T, NH, DH, cfg, save_gates)
    launch = keyed_launch(
        key, lambda: (cfg.grid(B, NH, DH), dict(SAVE_GATES=save_gates, **_constexprs(cfg, DH, dtype)))
    )
    tensors = (Wx, R, b, states, c, out, gates if save_gates else out)
    stream = direct_stream(dev) if aligned(*tensors) else None
    for t in range(T):
        launch(stream, *tensors, t, B, T, NH)
    return out, out[:, :, -1:].clone(), gates


def step_rnn_backward(d_out, gates, out, states, R, function="lstm", d_last=None, tiles: StepTiles | None = None):
    """The reverse loop, one launch of :func:`step_backward_kernel` per step, then dL/dh_{-1} as one product: ``(dG
    [B, T, 4, NH, DH], d_states [2, B, 1, NH, DH])``. ``d_last`` [2, B, 1, NH, DH] or None: the gradient of the last
    states."""
    _check_lstm(function, tiles)
    d_out, gates, out, states, R = (x.contiguous() for x in (d_out, gates, out, states, R))
    _, B, T, NH, DH = out.shape
    dtype, dev = out.dtype, out.device
    cfg = tiles or step_tiles(B, DH, NH)
    has_last = d_last is not None
    d_last = d_last.to(dtype).contiguous() if has_last else out
    dc = torch.zeros((B, NH, DH), dtype=torch.float32, device=dev)
    dG = new_output(B, T, 4, NH, DH, dtype=dtype, device=dev)
    key = (step_backward_kernel, dtypes.name(dtype), B, T, NH, DH, cfg, has_last)
    launch = keyed_launch(key, lambda: (cfg.grid(B, NH, DH), dict(HAS_LAST=has_last, **_constexprs(cfg, DH, dtype))))
    tensors = (gates, out, states, d_out, d_last, R, dc, dG)
    stream = direct_stream(dev) if aligned(*tensors) else None
    for t in reversed(range(T)):
        launch(stream, *tensors, t, B, T, NH)
    # dL/dh_{-1}[b, n, k] = sum_{g, j} dG_0[b, g, n, j] R[g, n, j, k]: per head [B, 4 DH] @ [4 DH, DH]
    dg0 = dG[:, 0].permute(2, 0, 1, 3).reshape(NH, B, 4 * DH)
    dh0 = torch.bmm(dg0, R.permute(1, 0, 2, 3).reshape(NH, 4 * DH, DH)).transpose(0, 1)  # [B, NH, DH]
    ds0 = torch.stack((dh0.to(torch.float32), dc)).unsqueeze(2).to(states.dtype)
    return dG, ds0


def step_rnn_gradients(d_out, gates, out, states, R, function="lstm", d_last=None, tiles: StepTiles | None = None,
                       small_rows=None):  # fmt: skip
    """The whole backward: :func:`step_rnn_backward`, then dR and db
    (:func:`gpulab.rnn.backends.parameter_grads.gate_gradients_to_parameters`): ``(dWx, dR, db, d_states)``."""
    dG, ds0 = step_rnn_backward(d_out, gates, out, states, R, function, d_last, tiles)
    return (*gate_gradients_to_parameters(dG, out, states, function, small_rows=small_rows), ds0)
