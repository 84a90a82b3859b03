"""The Triton RNN backends as PyTorch custom ops, so ``torch.compile`` (``fullgraph=True``) and CUDA graphs accept
:func:`gpulab.rnn.flashrnn` and :class:`gpulab.rnn.LSTM`.

- ``gpulab::rnn_forward(Wx, R, b, states, function, backend, save_gates) -> (states_all, states_last, gates)``
- ``gpulab::rnn_backward(d_states_all, d_last, gates, states_all, states, R, function, backend)
  -> (dWx, dR, db, d_states)``

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

__all__ = ["rnn_forward_op", "rnn_backward_op", "rnn_op", "BACKENDS"]

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


@rnn_forward_op.register_fake
def _(Wx, R, b, states, function, backend, save_gates):
    fn = get_function(function)
    B, T, _, NH, DH = Wx.shape
    out = Wx.new_empty((fn.states, B, T, NH, DH))
    last = Wx.new_empty((fn.states, B, 1, NH, DH))
    if not save_gates:
        return out, last, Wx.new_empty(0)
    dtype = saved_gates_dtype(B, NH, DH, fn.name, Wx.dtype) if backend == "fused" else Wx.dtype
    return out, last, Wx.new_empty((B, T, fn.gates_b, NH, DH), dtype=dtype)


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
