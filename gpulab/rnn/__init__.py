"""Recurrent networks in gpulab: the cells (:mod:`gpulab.rnn.cells`), lesson 3's cuDNN ladder
(:mod:`gpulab.rnn.ladder`), the weights of a ``torch.nn.LSTM`` in the layouts gpulab uses, and lesson 5's
FlashRNN-style recurrences: :func:`flashrnn` (backends ``vanilla``, ``alternating``, ``fused``; see
:mod:`gpulab.rnn.api`), the tile chooser :mod:`gpulab.rnn.tiling`, and the :class:`LSTM` module
(:mod:`gpulab.rnn.module`).

:func:`from_torch_lstm` reads every layer of an ``nn.LSTM`` into an :class:`LSTMWeights`:

- ``w_ih[l]``: [4H, I_l] (I_0 = input size, I_l = H above), ``w_hh[l]``: [4H, H], rows in nn.LSTM's gate order
  i, f, g (= z), o, each block H rows;
- ``bias[l]``: [4H] = ``b_ih + b_hh`` (summed in float64, then rounded once to the weights' dtype; zeros for
  ``bias=False``): the two biases always appear as a sum, so one add suffices;
- ``batch_first`` is kept: the ladder's steps then take and return [B, T, ...] like the module.

Dropout between layers only acts in training mode; the ladder computes the forward pass of the module in eval mode,
so a module with ``dropout > 0`` is read the same way (its output in train mode would differ, by design).
Bidirectional LSTMs and projected LSTMs (``proj_size > 0``) are not supported and raise a ValueError.
"""

from __future__ import annotations

import dataclasses

import torch

from gpulab.rnn.cells import lstm_cell_torch, lstm_pointwise, lstm_pointwise_reference

__all__ = [
    "LSTMWeights",
    "from_torch_lstm",
    "lstm_pointwise",
    "lstm_pointwise_reference",
    "lstm_cell_torch",
    "flashrnn",
    "BACKENDS",
    "FUNCTIONS",
    "LSTM",
    "tiling",
]


@dataclasses.dataclass
class LSTMWeights:
    """A stacked LSTM's weights, per layer, in nn.LSTM's gate order (i, f, g, o). Shapes in the module docstring."""

    w_ih: tuple
    w_hh: tuple
    bias: tuple
    input_size: int
    hidden_size: int
    num_layers: int
    batch_first: bool = False
    cache: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)  # derived layouts (ladder)

    @property
    def dtype(self) -> torch.dtype:
        return self.w_ih[0].dtype

    @property
    def device(self) -> torch.device:
        return self.w_ih[0].device

    def to(self, dtype=None, device=None) -> LSTMWeights:
        """A copy in another dtype and/or on another device (derived layouts are rebuilt on first use)."""
        conv = lambda ts: tuple(t.to(device=device or t.device, dtype=dtype or t.dtype).contiguous() for t in ts)
        return dataclasses.replace(self, w_ih=conv(self.w_ih), w_hh=conv(self.w_hh), bias=conv(self.bias), cache={})


def from_torch_lstm(module, dtype=None, device=None) -> LSTMWeights:
    """Read a ``torch.nn.LSTM``'s weights (all layers, both biases summed, ``batch_first``) into :class:`LSTMWeights`.

    ``dtype``/``device`` default to the module's. Raises ValueError for anything that is not a unidirectional,
    unprojected ``nn.LSTM``.
    """
    if not isinstance(module, torch.nn.LSTM):
        raise ValueError(
            f"module must be a torch.nn.LSTM, got {type(module).__name__}; gpulab's ladder reproduces nn.LSTM only."
        )
    if module.bidirectional:
        raise ValueError("module is bidirectional; the ladder supports unidirectional LSTMs (bidirectional=False).")
    if getattr(module, "proj_size", 0):
        raise ValueError(f"module has proj_size={module.proj_size}; projected LSTMs are not supported (proj_size=0).")
    w_ih, w_hh, bias = [], [], []
    for layer in range(module.num_layers):
        wi = getattr(module, f"weight_ih_l{layer}").detach()
        wh = getattr(module, f"weight_hh_l{layer}").detach()
        dt, dev = dtype or wi.dtype, device or wi.device
        if module.bias:
            b = getattr(module, f"bias_ih_l{layer}").detach().double() + getattr(module, f"bias_hh_l{layer}").detach()
        else:
            b = torch.zeros(4 * module.hidden_size, dtype=torch.float64, device=wi.device)
        w_ih.append(wi.to(dev, dt).contiguous())
        w_hh.append(wh.to(dev, dt).contiguous())
        bias.append(b.to(dev, dt).contiguous())
    return LSTMWeights(
        tuple(w_ih),
        tuple(w_hh),
        tuple(bias),
        module.input_size,
        module.hidden_size,
        module.num_layers,
        bool(module.batch_first),
    )


# Lesson 5 (imported last: module.py reads from_torch_lstm from this package).
from gpulab.rnn.api import BACKENDS, flashrnn  # noqa: E402
from gpulab.rnn.functions import FUNCTIONS  # noqa: E402
from gpulab.rnn.module import LSTM  # noqa: E402

from gpulab.rnn import tiling  # noqa: E402  isort: skip
