"""The ``fused`` backend: :mod:`.forward` and :mod:`.backward` as one autograd op
(:class:`gpulab.rnn.backends.autograd.TritonRNN`).

- :mod:`.tiles`: the ``@triton.jit`` tiles and cell variants both kernels use (R as one all-gates tile, gate
  split/join, fast activations);
- :mod:`.forward`: one persistent kernel (R on chip, the time loop inside), saving the gates (LSTM: activations)
  only when a gradient will be needed;
- :mod:`.backward`: one reverse-time persistent kernel writing dG (it reads the incoming gradients as they are:
  dL/d(last states) is its initial carried gradient, no copy or zero-fill), with dR and db (one batched product per
  gate, :mod:`gpulab.rnn.backends.parameter_grads`) computed on a second stream beside it, piece by piece in time,
  on the SMs it leaves idle (:func:`.backward.fused_rnn_gradients`); dWx = dG;
- :mod:`.split` and :mod:`.split_backward`: one head over several SMs (a grid barrier per step) when R of a head
  does not fit one SM; where no split backward fits, training runs the ``alternating`` backward
  (:func:`gpulab.rnn.backends.alternating.alternating_rnn_gradients`) on the pre-activations the split forward saves;
- :mod:`.sass`: compile both kernels for sm_90 without a GPU and count the instructions of their time loops.

Which kernel, tile and warps: :func:`gpulab.rnn.split_tiling.plan` (one SM per head and batch tile whenever that
fits, else the split; a ValueError says why neither fits and suggests ``backend='alternating'``).
"""

from __future__ import annotations

import functools

import torch

from gpulab.rnn.backends.alternating import alternating_rnn_gradients
from gpulab.rnn.backends.autograd import TritonRNN
from gpulab.rnn.backends.fused import backward, forward, split, split_backward, tiles
from gpulab.rnn.backends.fused.backward import fused_rnn_gradients
from gpulab.rnn.backends.fused.forward import fused_rnn_forward
from gpulab.rnn.backends.fused.split import split_rnn_forward
from gpulab.rnn.backends.fused.split_backward import split_rnn_gradients
from gpulab.rnn.split_tiling import plan
from gpulab.rnn.tiling import fused_tiling

__all__ = ["fused_forward", "forward", "backward", "split", "split_backward", "tiles"]


def fused_forward(Wx, R, b, states, function="lstm"):
    """The ``fused`` backend of :func:`gpulab.rnn.flashrnn` (inputs validated, in one compute dtype).

    Plans first (:func:`gpulab.rnn.split_tiling.plan`) so an unsupported size fails before any work.
    """
    B, _, _, NH, DH = Wx.shape
    training = torch.is_grad_enabled() and (
        Wx.requires_grad or R.requires_grad or b.requires_grad or states.requires_grad
    )
    fwd, bwd = _tilings(B, NH, DH, function, Wx.dtype, Wx.device, training)
    return TritonRNN.apply(Wx, R, b, states, function, fwd.forward_call, bwd.backward_call if bwd else None)


class _Bound:
    """The forward or backward loop with its tiles bound (what :class:`TritonRNN` calls), made once per problem."""

    __slots__ = ("tiling",)

    def __init__(self, tiling):
        self.tiling = tiling

    def forward_call(self, Wx, R, b, states, function, save_gates):
        return fused_rnn_forward(Wx, R, b, states, function, save_gates, self.tiling)

    def backward_call(self, d_out, gates, out, states, R, function, d_last=None):
        return fused_rnn_gradients(d_out, gates, out, states, R, function, tiling=self.tiling, d_last=d_last)


class _Split:
    """The split-head forward and backward with their tiles bound (the alternating backward where no split
    backward fits: ``backward`` None)."""

    __slots__ = ("tiling", "backward")

    def __init__(self, tiling, backward):
        self.tiling, self.backward = tiling, backward

    def forward_call(self, Wx, R, b, states, function, save_gates):
        return split_rnn_forward(Wx, R, b, states, function, save_gates, self.tiling)

    def backward_call(self, d_out, gates, out, states, R, function, d_last=None):
        if self.backward is None:
            return alternating_rnn_gradients(d_out, gates, out, states, R, function, d_last)
        return split_rnn_gradients(d_out, gates, out, states, R, function, d_last, self.backward)


@functools.lru_cache(maxsize=256)
def _tilings(B, NH, DH, function, dtype, device, training):
    """The forward's and (when training) the backward's tiles for one problem, chosen once: the tile chooser weighs
    every candidate, too slow to repeat on every call."""
    chosen = plan(B, NH, DH, function, dtype, training=training)
    if chosen.kind == "split":
        bound = _Split(chosen.tiling, chosen.backward)
        return bound, bound
    fwd = fused_tiling(B, NH, DH, function, dtype, direction="forward")
    bwd = fused_tiling(B, NH, DH, function, dtype, direction="backward") if training else None
    return _Bound(fwd), (_Bound(bwd) if bwd is not None else None)
