"""The ``fused`` backend: :mod:`gpulab.rnn.fused_forward` and :mod:`gpulab.rnn.fused_backward` as one autograd op
(:class:`gpulab.rnn.autograd.TritonRNN`).

Forward: one persistent kernel (R on chip, the time loop inside), saving the gate pre-activations only when a
gradient will be needed. Backward: one reverse-time persistent kernel writing dG (it reads the incoming gradients
as they are: dL/d(last states) is its initial carried gradient, no copy or zero-fill), then dR as one batched
product, db as one reduction, dWx = dG.

The tile, warps and whether the kernels fit at all come from :func:`gpulab.rnn.tiling.fused_tiling` (a ValueError
says why not and suggests ``backend='alternating'``).
"""

from __future__ import annotations

import torch

from gpulab.rnn.autograd import TritonRNN
from gpulab.rnn.fused_backward import fused_rnn_backward
from gpulab.rnn.fused_forward import fused_rnn_forward
from gpulab.rnn.tiling import fused_tiling

__all__ = ["fused_forward"]


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
    return TritonRNN.apply(Wx, R, b, states, function, fused_rnn_forward, fused_rnn_backward)
