"""The ``alternating`` backend: per step, one batched product over all heads, then one fused pointwise kernel.

What you will learn: this is FlashRNN's non-fused baseline (its ``cuda`` backend) and what cuDNN-style RNNs do.
Each step alternates between

    Ry_t = h_{t-1} @ R^T           torch.bmm over heads: [NH, B, DH] x [NH, DH, G_r*DH] (cuBLAS)
    states_t = cell(Wx_t + Ry_t + b, states_{t-1})   one Triton kernel (:func:`pointwise_forward_kernel`)

so the recurrence costs 2 launches per step (the pointwise kernel's straight to its compiled kernel after the first,
:mod:`gpulab.launch`) and R is read from memory (L2 at best) at every step. No on-chip
limit on the head dim applies: this backend runs wherever the fused one does not fit. Under a CUDA graph the
launch cost mostly disappears; what remains is the round trip of h through memory between the two kernels.

Backward, per step in reverse: one pointwise-backward kernel (:func:`pointwise_backward_kernel`: dG_t from the
saved pre-activations, dh_t and dc) and one batched product ``dh_{t-1} = dG_t @ R`` over heads. dR is not built per
step: like the fused backend, dG of all steps is kept and dR = sum_t dG_t^T h_{t-1} is one big product at the end
(:func:`gpulab.rnn.backends.parameter_grads.gate_gradients_to_parameters`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import runtime
from gpulab.check import new_output
from gpulab.launch import aligned, direct_stream, keyed_launch
from gpulab.rnn.backends.autograd import TritonRNN
from gpulab.rnn.backends.parameter_grads import gate_gradients_to_parameters
from gpulab.rnn.cells import (
    elman_cell,
    elman_cell_backward,
    gru_cell,
    gru_cell_backward,
    lstm_cell,
    lstm_cell_backward,
)
from gpulab.rnn.functions import get_function

__all__ = ["pointwise_forward_kernel", "pointwise_backward_kernel", "alternating_forward", "alternating_rnn_gradients"]


@triton.jit(do_not_specialize=["t"])  # one compile for every step
def pointwise_forward_kernel(
    wx_ptr,  # [B, T, G_W, NH, DH]
    ry_ptr,  # [NH, B, G_R, DH] this step's recurrent products
    b_ptr,  # [G_B, NH, DH]
    h_ptr,  # [NH, B, DH] h_{t-1} in, h_t out (the next product's input)
    c_ptr,  # [B, NH, DH] fp32 cell state, updated in place (lstm)
    out_ptr,  # [S, B, T, NH, DH]
    gates_ptr,  # [B, T, G_B, NH, DH] saved pre-activations (if SAVE_GATES)
    t,
    B,
    T,
    NH,
    state_stride,
    FUNCTION: tl.constexpr,
    G_W: tl.constexpr,
    G_R: tl.constexpr,
    G_B: tl.constexpr,
    DH: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SAVE_GATES: tl.constexpr,
):
    """Program (b, n): step t of batch row b, head n. Each element is read before the same lane writes it."""
    row = tl.program_id(0)
    n = tl.program_id(1)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < DH
    HD = NH * DH
    wx = wx_ptr + (row.to(tl.int64) * T + t) * G_W * HD + n * DH + cols
    ry = ry_ptr + (n * B + row) * G_R * DH + cols
    bp = b_ptr + n * DH + cols
    w0 = tl.load(wx, mask=mask, other=0.0).to(tl.float32)
    r0 = tl.load(ry, mask=mask, other=0.0).to(tl.float32)
    b0 = tl.load(bp, mask=mask, other=0.0).to(tl.float32)
    h_at = h_ptr + (n * B + row) * DH + cols
    c_at = c_ptr + row * HD + n * DH + cols
    if FUNCTION == 0:  # lstm
        g0 = w0 + r0 + b0
        g1 = tl.load(wx + HD, mask=mask).to(tl.float32) + tl.load(ry + DH, mask=mask).to(tl.float32)
        g2 = tl.load(wx + 2 * HD, mask=mask).to(tl.float32) + tl.load(ry + 2 * DH, mask=mask).to(tl.float32)
        g3 = tl.load(wx + 3 * HD, mask=mask).to(tl.float32) + tl.load(ry + 3 * DH, mask=mask).to(tl.float32)
        g1 += tl.load(bp + HD, mask=mask).to(tl.float32)
        g2 += tl.load(bp + 2 * HD, mask=mask).to(tl.float32)
        g3 += tl.load(bp + 3 * HD, mask=mask).to(tl.float32)
        h, c = lstm_cell(g0, g1, g2, g3, tl.load(c_at, mask=mask))
        tl.store(c_at, c, mask=mask)
    elif FUNCTION == 1:  # gru
        g0 = r0 + b0
        g1 = w0 + tl.load(ry + DH, mask=mask).to(tl.float32) + tl.load(bp + HD, mask=mask).to(tl.float32)
        g2 = tl.load(wx + HD, mask=mask).to(tl.float32) + tl.load(ry + 2 * DH, mask=mask).to(tl.float32)
        g2 += tl.load(bp + 2 * HD, mask=mask).to(tl.float32)
        g3 = tl.load(wx + 2 * HD, mask=mask).to(tl.float32) + tl.load(bp + 3 * HD, mask=mask).to(tl.float32)
        h = gru_cell(g0, g1, g2, g3, tl.load(h_at, mask=mask).to(tl.float32))
    else:  # elman
        g0 = w0 + r0 + b0
        g1, g2, g3 = g0, g0, g0
        h = elman_cell(g0)
    tl.store(h_at, h.to(h_ptr.dtype.element_ty), mask=mask)
    out = out_ptr + (row.to(tl.int64) * T + t) * HD + n * DH + cols
    tl.store(out, h.to(out_ptr.dtype.element_ty), mask=mask)
    if FUNCTION == 0:
        tl.store(out + state_stride, c.to(out_ptr.dtype.element_ty), mask=mask)
    if SAVE_GATES:
        gp = gates_ptr + (row.to(tl.int64) * T + t) * G_B * HD + n * DH + cols
        tl.store(gp, g0.to(gates_ptr.dtype.element_ty), mask=mask)
        if G_B > 1:
            tl.store(gp + HD, g1.to(gates_ptr.dtype.element_ty), mask=mask)
            tl.store(gp + 2 * HD, g2.to(gates_ptr.dtype.element_ty), mask=mask)
            tl.store(gp + 3 * HD, g3.to(gates_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["t"])
def pointwise_backward_kernel(
    gates_ptr,  # [B, T, G_B, NH, DH] saved pre-activations
    out_ptr,  # [S, B, T, NH, DH]
    s0_ptr,  # [S, B, 1, NH, DH]
    dout_ptr,  # [S, B, T, NH, DH] dL/d(states)
    rec_ptr,  # [NH, B, DH] dG_{t+1} @ R (the last product; zeros at the first step)
    direct_ptr,  # [B, NH, DH] fp32: the GRU's dh_{t} through the cell (not R); in place
    dc_ptr,  # [B, NH, DH] fp32: dc carried (lstm); in place
    dg_ptr,  # [B, T, G_B, NH, DH] gate gradients (written)
    dgr_ptr,  # [NH, B, G_R, DH] this step's recurrent gate gradients, the next product's input (written)
    t,
    B,
    T,
    NH,
    state_stride,
    FUNCTION: tl.constexpr,
    G_R: tl.constexpr,
    G_B: tl.constexpr,
    DH: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Program (b, n): the backward of step t for batch row b, head n."""
    row = tl.program_id(0)
    n = tl.program_id(1)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < DH
    HD = NH * DH
    step = (row.to(tl.int64) * T + t) * HD + n * DH + cols
    gp = gates_ptr + (row.to(tl.int64) * T + t) * G_B * HD + n * DH + cols
    g0 = tl.load(gp, mask=mask, other=0.0).to(tl.float32)
    g1, g2, g3 = g0, g0, g0
    if G_B > 1:
        g1 = tl.load(gp + HD, mask=mask, other=0.0).to(tl.float32)
        g2 = tl.load(gp + 2 * HD, mask=mask, other=0.0).to(tl.float32)
        g3 = tl.load(gp + 3 * HD, mask=mask, other=0.0).to(tl.float32)
    own = row * HD + n * DH + cols
    dh = tl.load(dout_ptr + step, mask=mask, other=0.0).to(tl.float32)
    dh += tl.load(rec_ptr + (n * B + row) * DH + cols, mask=mask, other=0.0).to(tl.float32)
    if FUNCTION == 0:  # lstm
        prev = tl.where(t > 0, out_ptr + step - HD + state_stride, s0_ptr + B * HD + own)
        dc = tl.load(dc_ptr + own, mask=mask) + tl.load(dout_ptr + step + state_stride, mask=mask).to(tl.float32)
        d0, d1, d2, d3, dc = lstm_cell_backward(g0, g1, g2, g3, tl.load(prev, mask=mask).to(tl.float32), dh, dc)
        tl.store(dc_ptr + own, dc, mask=mask)
    elif FUNCTION == 1:  # gru
        prev = tl.where(t > 0, out_ptr + step - HD, s0_ptr + own)
        dh += tl.load(direct_ptr + own, mask=mask)
        d0, d1, d2, d3, direct = gru_cell_backward(g0, g1, g2, g3, tl.load(prev, mask=mask).to(tl.float32), dh)
        tl.store(direct_ptr + own, direct, mask=mask)
    else:  # elman
        d0 = elman_cell_backward(g0, dh)
        d1, d2, d3 = d0, d0, d0
    dg = dg_ptr + (row.to(tl.int64) * T + t) * G_B * HD + n * DH + cols
    tl.store(dg, d0.to(dg_ptr.dtype.element_ty), mask=mask)
    if G_B > 1:
        tl.store(dg + HD, d1.to(dg_ptr.dtype.element_ty), mask=mask)
        tl.store(dg + 2 * HD, d2.to(dg_ptr.dtype.element_ty), mask=mask)
        tl.store(dg + 3 * HD, d3.to(dg_ptr.dtype.element_ty), mask=mask)
    dgr = dgr_ptr + (n * B + row) * G_R * DH + cols  # the recurrent gates, in the product's layout
    tl.store(dgr, d0.to(dgr_ptr.dtype.element_ty), mask=mask)
    if G_R > 1:
        tl.store(dgr + DH, d1.to(dgr_ptr.dtype.element_ty), mask=mask)
        tl.store(dgr + 2 * DH, d2.to(dgr_ptr.dtype.element_ty), mask=mask)
    if G_R > 3:
        tl.store(dgr + 3 * DH, d3.to(dgr_ptr.dtype.element_ty), mask=mask)


def _launch_args(DH):
    block = runtime.next_power_of_2(DH)
    return block, {"num_warps": 1 if block <= 128 else 4}


def alternating_rnn_forward(Wx, R, b, states, function="lstm", save_gates=True):
    """The step loop: returns ``(states_all, states_last, gates or None)``; inputs validated, one dtype."""
    fn = get_function(function)
    Wx, R, b, states = (t.contiguous() for t in (Wx, R, b, states))
    B, T, _, NH, DH = Wx.shape
    dev, dt = Wx.device, Wx.dtype
    rt = R.permute(1, 3, 0, 2).reshape(NH, DH, fn.gates_r * DH)  # [NH, DH_k, G_r*DH_j]: h @ rt = R h per gate
    h = states[0, :, 0].transpose(0, 1).clone(memory_format=torch.contiguous_format)  # [NH, B, DH], a new buffer
    c = states[1, :, 0].to(torch.float32, copy=True) if fn.name == "lstm" else h  # [B, NH, DH] fp32, a new buffer
    ry = torch.empty((NH, B, fn.gates_r * DH), dtype=dt, device=dev)
    out = new_output(fn.states, B, T, NH, DH, dtype=dt, device=dev)
    gates = new_output(B, T, fn.gates_b, NH, DH, dtype=dt, device=dev) if save_gates else out
    block, options = _launch_args(DH)
    key = (pointwise_forward_kernel, fn.code, str(dt), B, T, NH, DH, save_gates)
    launch = keyed_launch(key, lambda: ((B, NH), dict(FUNCTION=fn.code, G_W=fn.gates_w, G_R=fn.gates_r,
                                                      G_B=fn.gates_b, DH=DH, BLOCK_D=block, SAVE_GATES=save_gates,
                                                      **options)))  # fmt: skip
    tensors = (Wx, ry, b, h, c, out, gates)
    stream = direct_stream(dev) if aligned(*tensors) else None  # a direct launch per step (gpulab.launch)
    for t in range(T):
        torch.bmm(h, rt, out=ry)
        launch(stream, *tensors, t, B, T, NH, B * T * NH * DH)
    last = out[:, :, -1:].clone()
    return out, last, gates if save_gates else None


def alternating_rnn_backward(d_out, gates, out, states, R, function="lstm", d_last=None):
    """The reverse step loop: returns ``(dG [B, T, G_b, NH, DH], d_states [S, B, 1, NH, DH])``. ``d_last``
    ([S, B, 1, NH, DH] or None): the gradient of the last states, added to that of the last step's outputs."""
    fn = get_function(function)
    if d_last is not None:
        d_out = d_out.clone()
        d_out[:, :, -1:] += d_last
    d_out, gates, out, states, R = (t.contiguous() for t in (d_out, gates, out, states, R))
    S, B, T, NH, DH = out.shape
    dev, dt = out.device, out.dtype
    rm = R.permute(1, 0, 2, 3).reshape(NH, fn.gates_r * DH, DH)  # [NH, G_r*DH_j, DH_k]: dG @ rm = dh
    rec = torch.zeros((NH, B, DH), dtype=dt, device=dev)
    direct = torch.zeros((B, NH, DH), dtype=torch.float32, device=dev)
    dc = torch.zeros((B, NH, DH), dtype=torch.float32, device=dev)
    dgr = torch.empty((NH, B, fn.gates_r * DH), dtype=dt, device=dev)
    dG = new_output(B, T, fn.gates_b, NH, DH, dtype=dt, device=dev)
    block, options = _launch_args(DH)
    key = (pointwise_backward_kernel, fn.code, str(dt), B, T, NH, DH)
    launch = keyed_launch(key, lambda: ((B, NH), dict(FUNCTION=fn.code, G_R=fn.gates_r, G_B=fn.gates_b, DH=DH,
                                                      BLOCK_D=block, **options)))  # fmt: skip
    tensors = (gates, out, states, d_out, rec, direct, dc, dG, dgr)
    stream = direct_stream(dev) if aligned(*tensors) else None
    for t in reversed(range(T)):
        launch(stream, *tensors, t, B, T, NH, B * T * NH * DH)
        torch.bmm(dgr, rm, out=rec)
    dh0 = rec.transpose(0, 1).float() + direct
    ds0 = torch.stack((dh0, dc)) if fn.name == "lstm" else dh0.unsqueeze(0)
    return dG, ds0.unsqueeze(2).to(states.dtype)


def alternating_rnn_gradients(d_out, gates, out, states, R, function="lstm", d_last=None):
    """The whole backward: the reverse step loop, then dR and db as one batched product per gate
    (:func:`gpulab.rnn.backends.parameter_grads.gate_gradients_to_parameters`): ``(dWx, dR, db, d_states)``."""
    dG, ds0 = alternating_rnn_backward(d_out, gates, out, states, R, function, d_last)
    return (*gate_gradients_to_parameters(dG, out, states, function), ds0)


def alternating_forward(Wx, R, b, states, function="lstm"):
    """The ``alternating`` backend of :func:`gpulab.rnn.flashrnn` (inputs validated, in one compute dtype)."""
    backward = alternating_rnn_gradients if torch.is_grad_enabled() else None  # no_grad: nothing saved
    return TritonRNN.apply(Wx, R, b, states, function, alternating_rnn_forward, backward)
