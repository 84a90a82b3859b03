"""The Triton RNN backends as PyTorch custom ops, so ``torch.compile`` (``fullgraph=True``) and CUDA graphs accept
:func:`gpulab.rnn.flashrnn` and :class:`gpulab.rnn.LSTM`.

- ``gpulab::rnn_forward(Wx, R, b, states, function, backend, save_gates) -> (states_all, states_last, gates)``
- ``gpulab::rnn_backward(d_states_all, d_last, gates, states_all, states, R, function, backend)
  -> (dWx, dR, db, d_states)``
- ``gpulab::lstm_layer_forward(x, w_ih, b_ih, R, b, states, backend, save_gates) -> (states_all, states_last,
  gates)``: one LSTM layer as :mod:`gpulab.rnn.layer` runs it eagerly, the input projection ``Wx = x W_ih^T + b_ih``
  inside the op. Its backward is :func:`rnn_backward_op` and the projection's two GEMMs, and b_ih's gradient is the
  backend's db, as in the eager layer op (a traced ``nn.functional.linear`` would reduce dWx once more for it).

A custom op takes tensors and plain values, not callables: the backend's loops are looked up by name, and "no gates
saved" is an empty tensor. The outputs are contiguous and in the compute dtype (the fused LSTM keeps its gates in
:func:`gpulab.rnn.fused.forward.saved_dtype`), which the fakes state exactly.
:func:`gpulab.rnn.flashrnn` validates its arguments first (the same errors compiled or not) and calls
:func:`rnn_op` when it is being compiled.
"""

from __future__ import annotations

import torch

from gpulab.rnn.backends.alternating import alternating_rnn_forward, alternating_rnn_gradients
from gpulab.rnn.functions import get_function
from gpulab.rnn.fused.plan import problem_loops, saved_gates_dtype

__all__ = ["rnn_forward_op", "rnn_backward_op", "rnn_op", "lstm_layer_forward_op", "lstm_layer_op", "BACKENDS"]

BACKENDS = ("fused", "alternating")


def _forward_loop(backend, Wx, function, save_gates):
    """The backend's forward loop for this problem: the fused backend's as :func:`gpulab.rnn.fused.plan.fused_forward`
    chooses it (one SM, or the head split), chosen once per problem."""
    if backend == "alternating":
        return alternating_rnn_forward
    B, _, _, NH, DH = Wx.shape
    return problem_loops(B, NH, DH, function, Wx.dtype, Wx.device, save_gates)[0]


def _gradient_loop(backend, out, function):
    if backend == "alternating":
        return alternating_rnn_gradients
    _, B, _, NH, DH = out.shape
    return problem_loops(B, NH, DH, function, out.dtype, out.device, True)[1]


@torch.library.custom_op("gpulab::rnn_forward", mutates_args=())
def rnn_forward_op(
    Wx: torch.Tensor,
    R: torch.Tensor,
    b: torch.Tensor,
    states: torch.Tensor,
    function: str,
    backend: str,
    save_gates: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backend's forward loop: states_all [S, B, T, NH, DH], states_last [S, B, 1, NH, DH], gates
    [B, T, G_b, NH, DH] (an empty tensor when not saved)."""
    out, last, gates = _forward_loop(backend, Wx, function, save_gates)(Wx, R, b, states, function, save_gates)
    gates = gates.contiguous() if save_gates else out.new_empty(0)
    return out.contiguous(), last.contiguous(), gates


def _fake_forward(Wx, function, backend, save_gates):
    fn = get_function(function)
    B, T, _, NH, DH = Wx.shape
    out = Wx.new_empty((fn.states, B, T, NH, DH))
    last = Wx.new_empty((fn.states, B, 1, NH, DH))
    if not save_gates:
        return out, last, Wx.new_empty(0)
    dtype = saved_gates_dtype(B, NH, DH, fn.name, Wx.dtype) if backend == "fused" else Wx.dtype
    return out, last, Wx.new_empty((B, T, fn.gates_b, NH, DH), dtype=dtype)


@rnn_forward_op.register_fake
def _(Wx, R, b, states, function, backend, save_gates):
    return _fake_forward(Wx, function, backend, save_gates)


@torch.library.custom_op("gpulab::rnn_backward", mutates_args=())
def rnn_backward_op(
    d_out: torch.Tensor,
    d_last: torch.Tensor | None,
    gates: torch.Tensor,
    out: torch.Tensor,
    states: torch.Tensor,
    R: torch.Tensor,
    function: str,
    backend: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backend's reverse-time loop and parameter products: dWx, dR, db, d_states (contiguous, in out's dtype)."""
    grads = _gradient_loop(backend, out, function)(d_out, gates, out, states, R, function, d_last=d_last)
    return tuple(g.to(out.dtype).contiguous() for g in grads)


@rnn_backward_op.register_fake
def _(d_out, d_last, gates, out, states, R, function, backend):
    fn = get_function(function)
    S, B, T, NH, DH = out.shape
    return (
        out.new_empty((B, T, fn.gates_w, NH, DH)),
        out.new_empty(tuple(R.shape)),
        out.new_empty((fn.gates_b, NH, DH)),
        out.new_empty((S, B, 1, NH, DH)),
    )


def _setup_context(ctx, inputs, output):
    Wx, R, b, states, function, backend, save_gates = inputs
    out, last, gates = output
    ctx.save_for_backward(R, states, out, gates)
    ctx.function, ctx.backend = function, backend


def _backward(ctx, d_out, d_last, _d_gates):
    R, states, out, gates = ctx.saved_tensors
    d_out = torch.zeros_like(out) if d_out is None else d_out.to(out.dtype)
    d_last = None if d_last is None else d_last.to(out.dtype)
    dWx, dR, db, ds = rnn_backward_op(d_out, d_last, gates, out, states, R, ctx.function, ctx.backend)
    return dWx, dR, db, ds, None, None, None


rnn_forward_op.register_autograd(_backward, setup_context=_setup_context)


def rnn_op(Wx, R, b, states, function: str, backend: str):
    """:func:`gpulab.rnn.flashrnn`'s Triton backends through the custom ops (inputs validated, one dtype):
    ``(states_all, states_last)``."""
    save = torch.is_grad_enabled() and any(t.requires_grad for t in (Wx, R, b, states))
    out, last, _ = rnn_forward_op(Wx, R, b, states, function, backend, save)
    return out, last


def _projection(x, w_ih, b_ih, heads):
    """Wx [B, T, 4, NH, DH] = x [B, T, I] W_ih^T + b_ih: one GEMM, b_ih (or None) its addend."""
    B, T, I = x.shape
    x2 = x.reshape(B * T, I)
    wx = torch.mm(x2, w_ih.t()) if b_ih is None else torch.addmm(b_ih, x2, w_ih.t())
    return wx.view(B, T, 4, *heads)


@torch.library.custom_op("gpulab::lstm_layer_forward", mutates_args=())
def lstm_layer_forward_op(
    x: torch.Tensor,
    w_ih: torch.Tensor,
    b_ih: torch.Tensor | None,
    R: torch.Tensor,
    b: torch.Tensor,
    states: torch.Tensor,
    backend: str,
    save_gates: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One LSTM layer: x [B, T, I], w_ih [4 NH DH, I], b_ih [4 NH DH] or None, R [4, NH, DH, DH], b [4, NH, DH],
    states [2, B, 1, NH, DH] -> states_all [2, B, T, NH, DH], states_last [2, B, 1, NH, DH], gates (an empty tensor
    when not saved)."""
    wx = _projection(x, w_ih, b_ih, b.shape[1:])
    out, last, gates = _forward_loop(backend, wx, "lstm", save_gates)(wx, R, b, states, "lstm", save_gates)
    gates = gates.contiguous() if save_gates else out.new_empty(0)
    return out.contiguous(), last.contiguous(), gates


@lstm_layer_forward_op.register_fake
def _(x, w_ih, b_ih, R, b, states, backend, save_gates):
    B, T, _ = x.shape
    return _fake_forward(x.new_empty((B, T, 4, *b.shape[1:])), "lstm", backend, save_gates)


def _layer_setup_context(ctx, inputs, output):
    x, w_ih, b_ih, R, b, states, backend, save_gates = inputs
    out, last, gates = output
    ctx.save_for_backward(x, w_ih, R, states, out, gates)
    ctx.backend, ctx.has_b_ih = backend, b_ih is not None


def _layer_backward(ctx, d_out, d_last, _d_gates):
    x, w_ih, R, states, out, gates = ctx.saved_tensors
    d_out = torch.zeros_like(out) if d_out is None else d_out.to(out.dtype)
    d_last = None if d_last is None else d_last.to(out.dtype)
    dWx, dR, db, ds = rnn_backward_op(d_out, d_last, gates, out, states, R, "lstm", ctx.backend)
    need = ctx.needs_input_grad
    B, T, I = x.shape
    dG = dWx.view(B * T, w_ih.shape[0])  # [B*T, 4H]
    dx = torch.mm(dG, w_ih).view(B, T, I) if need[0] else None
    dw = torch.mm(dG.t(), x.reshape(B * T, I)) if need[1] else None
    db_ih = db.reshape(-1).clone() if ctx.has_b_ih and need[2] else None  # its own: optimizers scale it in place
    return dx, dw, db_ih, dR, db, ds if need[5] else None, None, None


lstm_layer_forward_op.register_autograd(_layer_backward, setup_context=_layer_setup_context)


def lstm_layer_op(x, w_ih, b_ih, R, b, states, backend: str):
    """:func:`gpulab.rnn.layer.lstm_layer` under ``torch.compile``: the layer through :func:`lstm_layer_forward_op`
    (inputs checked, R [4, NH, DH, DH], b [4, NH, DH], states given): ``(states_all, states_last)``."""
    save = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, w_ih, b_ih, R, b, states))
    out, last, _ = lstm_layer_forward_op(x, w_ih, b_ih, R, b, states, backend, save)
    return out, last
