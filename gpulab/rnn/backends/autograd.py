"""The autograd op of the two Triton backends, ``alternating`` and ``fused``: they differ in their loops, not here.

Forward: the backend's forward loop, saving what its backward needs of the gates only when a gradient will be
needed. Backward: the backend's reverse-time loop writes the gate gradients dG (it reads the incoming gradients as
they are; dL/d(last states) is its initial carried gradient), then the parameter gradients that need no recurrence:
dR as one batched product per gate (which also gives db), dWx = dG
(:func:`gpulab.rnn.backends.parameter_grads.parameter_grads`). Saved for the backward: R, the initial states, the
outputs and the gates; no per-step intermediates.
"""

from __future__ import annotations

import torch

from gpulab import runtime

__all__ = ["TritonRNN"]


class TritonRNN(torch.autograd.Function):
    """``TritonRNN.apply(Wx, R, b, states, function, run_forward, run_backward) -> (states_all, states_last)``.

    ``run_forward(Wx, R, b, states, function, save_gates) -> (states_all, states_last, gates or None)`` and
    ``run_backward(d_states_all, gates, states_all, states, R, function, d_last=None) -> (dWx, dR, db, d_states)``
    are a backend's two loops (the backward's parameter gradients included); shapes as in :func:`gpulab.rnn.flashrnn`.
    ``run_backward`` is None when the caller runs without gradients (``torch.no_grad()``): then nothing is saved
    even for inputs that require grad, since ``ctx.needs_input_grad`` inside a Function's forward still says True
    for them (the module's parameters in evaluation: the forward would write the gates for a backward that never
    runs, a quarter of the forward's device time at lesson 6's problem).
    """

    @staticmethod
    def forward(ctx, Wx, R, b, states, function, run_forward, run_backward):
        ctx.set_materialize_grads(False)  # an output without a gradient comes as None, not a zero-filled tensor
        need_grad = run_backward is not None and any(ctx.needs_input_grad[:4])
        out, last, gates = run_forward(Wx, R, b, states, function, save_gates=need_grad)
        ctx.function, ctx.run_backward = function, run_backward
        if need_grad:
            ctx.save_for_backward(R, states, out, gates)
        return out, last

    @staticmethod
    @runtime.once_differentiable  # the backward is kernels, not a graph: a second derivative raises, never a silent 0
    def backward(ctx, d_out, d_last):
        R, states, out, gates = ctx.saved_tensors
        d = torch.zeros_like(out) if d_out is None else d_out.to(out.dtype)  # not copied: the loops only read it
        d_last = None if d_last is None else d_last.to(out.dtype)
        dWx, dR, db, ds0 = ctx.run_backward(d, gates, out, states, R, ctx.function, d_last=d_last)
        return dWx, dR, db, ds0, None, None, None
