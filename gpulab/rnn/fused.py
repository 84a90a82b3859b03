"""The ``fused`` backend: :mod:`gpulab.rnn.fused_forward` and :mod:`gpulab.rnn.fused_backward` as one autograd op.

Forward: one persistent kernel (R on chip, the time loop inside), saving the gate pre-activations only when a
gradient will be needed. Backward: one reverse-time persistent kernel writing dG (it reads the incoming gradients
as they are: dL/d(last states) is its initial carried gradient, no copy or zero-fill), then dR as one batched
product, db as one reduction, dWx = dG. Saved for the backward: R, the initial states, the outputs and the gates; no
per-step intermediates.

The tile, warps and whether the kernels fit at all come from :func:`gpulab.rnn.tiling.fused_tiling` (a ValueError
says why not and suggests ``backend='alternating'``).
"""

from __future__ import annotations

import torch

from gpulab.rnn.fused_backward import fused_rnn_backward, parameter_grads
from gpulab.rnn.fused_forward import fused_rnn_forward
from gpulab.rnn.tiling import fused_tiling

__all__ = ["FusedRNN", "fused_forward"]


class FusedRNN(torch.autograd.Function):
    """``FusedRNN.apply(Wx, R, b, states, function) -> (states_all, states_last)``, shapes as in flashrnn."""

    @staticmethod
    def forward(ctx, Wx, R, b, states, function):
        need_grad = any(ctx.needs_input_grad[:4])
        out, last, gates = fused_rnn_forward(Wx, R, b, states, function, save_gates=need_grad)
        ctx.function = function
        if need_grad:
            ctx.save_for_backward(R, states, out, gates)
        return out, last

    @staticmethod
    def backward(ctx, d_out, d_last):
        R, states, out, gates = ctx.saved_tensors
        d = torch.zeros_like(out) if d_out is None else d_out.to(out.dtype)  # no copy: the kernel only reads it
        d_last = None if d_last is None else d_last.to(out.dtype)  # the kernel's initial dh (dc)
        dG, ds0 = fused_rnn_backward(d, gates, out, states, R, ctx.function, d_last=d_last)
        dWx, dR, db = parameter_grads(dG, out, states, ctx.function)
        return dWx, dR, db, ds0, None


def fused_forward(Wx, R, b, states, function="lstm"):
    """The ``fused`` backend of :func:`gpulab.rnn.flashrnn` (inputs validated, in one compute dtype).

    Checks first that both kernels fit (:mod:`gpulab.rnn.tiling`) so an unsupported size fails before any work.
    """
    B, _, _, NH, DH = Wx.shape
    direction = (
        "forward" if not (torch.is_grad_enabled() and any(t.requires_grad for t in (Wx, R, b, states))) else None
    )
    for d in (direction,) if direction else ("forward", "backward"):
        fused_tiling(B, NH, DH, function, Wx.dtype, direction=d)
    return FusedRNN.apply(Wx, R, b, states, function)
