"""Recurrent networks in gpulab (lessons 3 and 5).

- :mod:`.functions`: the recurrent functions (lstm, gru, elman) and their gate and state counts;
- :mod:`.cells`: the cells' math as ``@triton.jit`` functions, PyTorch twins, the fused LSTM pointwise kernel;
- :mod:`.weights`: an ``nn.LSTM``'s weights (:class:`LSTMWeights`, :func:`from_torch_lstm`);
- :mod:`.ladder` (lesson 3): the cuDNN 5 optimization ladder, numbered steps and their benchmark;
- :mod:`.api`: :func:`flashrnn`, one entry point with three backends: ``vanilla`` and ``alternating``
  (:mod:`.backends`, with the autograd op and the parameter gradients the Triton backends share) and ``fused``;
- :mod:`.fused` (lesson 6): the fused kernels, their tile choosers, their frozen config (:mod:`.fused.config`) and
  the one chooser between them (:mod:`.fused.plan`); beside them, off the package's path, the numbered versions
  (:mod:`.fused.versions`), the benchmarks and reports (:mod:`.fused.measure`) and the experiments
  (:mod:`.fused.experiments`);
- :mod:`.module`: the :class:`LSTM` module, ``torch.nn.LSTM``'s drop-in, with :mod:`.packed` (PackedSequence
  in and out), :mod:`.projected` (``proj_size``) and :mod:`.checkpoint` (parameter names, the earlier layout); its
  benchmark against cuDNN is :mod:`.fused.measure.lstm_grid` (``bench 06 lstm-grid``);
- :mod:`.ops`: the Triton backends as PyTorch custom ops.
"""

from __future__ import annotations

from gpulab.rnn import api, backends, cells, functions, fused, module, ops, weights
from gpulab.rnn.api import BACKENDS, flashrnn
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
    "fused",
    "module",
    "ops",
    "weights",
]
