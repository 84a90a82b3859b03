"""Recurrent networks in gpulab (lessons 3 and 5).

- :mod:`.functions`: the recurrent functions (lstm, gru, elman) and their gate and state counts;
- :mod:`.cells`: the cells' math as ``@triton.jit`` functions, PyTorch twins, the fused LSTM pointwise kernel;
- :mod:`.weights`: an ``nn.LSTM``'s weights (:class:`LSTMWeights`, :func:`from_torch_lstm`);
- :mod:`.ladder` (lesson 3): the cuDNN 5 optimization ladder, numbered steps and their benchmark;
- :mod:`.api` (lesson 5): :func:`flashrnn`, one entry point with the backends of :mod:`.backends` (``vanilla``,
  ``alternating``, ``fused``); :mod:`.tiling`: does the fused kernel fit, with which tile;
- :mod:`.module`: the :class:`LSTM` module; :mod:`.benchmark`: lesson 5's measurement.

The modules of the backends keep their old names here: ``gpulab.rnn.fused_forward``, ``fused_backward``, ``fused``,
``alternating``, ``vanilla`` and ``autograd`` are :mod:`gpulab.rnn.backends`' modules.
"""

from __future__ import annotations

import sys

from gpulab.rnn import api, backends, cells, functions, module, tiling, weights
from gpulab.rnn.api import BACKENDS, flashrnn
from gpulab.rnn.backends import alternating, autograd, fused, parameter_grads, vanilla
from gpulab.rnn.backends.fused import backward as fused_backward
from gpulab.rnn.backends.fused import forward as fused_forward
from gpulab.rnn.cells import lstm_cell_torch, lstm_pointwise, lstm_pointwise_reference
from gpulab.rnn.functions import FUNCTIONS
from gpulab.rnn.module import LSTM
from gpulab.rnn.weights import LSTMWeights, from_torch_lstm

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
    "api",
    "backends",
    "cells",
    "functions",
    "module",
    "tiling",
    "weights",
    "alternating",
    "autograd",
    "fused",
    "fused_backward",
    "fused_forward",
    "parameter_grads",
    "vanilla",
]

# The backends' old module paths (``from gpulab.rnn.fused_forward import ...``, ``import gpulab.rnn.fused``) name
# the moved modules themselves, so a monkeypatch or an attribute set through either path reaches the same module.
for _old, _module in {
    "fused_forward": fused_forward,
    "fused_backward": fused_backward,
    "fused": fused,
    "alternating": alternating,
    "vanilla": vanilla,
    "autograd": autograd,
}.items():
    sys.modules.setdefault(f"{__name__}.{_old}", _module)
del _old, _module
