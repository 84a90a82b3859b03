"""Lesson 6's fused RNN: one persistent kernel for the whole sequence (and one for the backward), on one SM per head
or split over several.

The kernels, each a leaf (it imports helpers, never another kernel):

- :mod:`.forward`, :mod:`.backward`: one program per (head, batch tile), R of the head on one SM for the whole
  sequence; the backward writes dG, and dR, db come from batched products beside it
  (:mod:`gpulab.rnn.backends.parameter_grads`);
- :mod:`.split`, :mod:`.split_backward`: one head over several SMs, a grid barrier per step, for heads whose R does
  not fit one SM (Triton); :mod:`.split_gluon`, :mod:`.split_gluon_backward`: the same with each program's slice of R
  in registers (Gluon, LSTM in 16 bits on a GPU), which the plan runs where they apply;
- :mod:`.stepwise`: an LSTM batch too large for any of those to hold in one launch: one launch per step, the step's
  GEMM (R read from L2) with the cell as its epilogue;
- :mod:`.tiles`, :mod:`.exchange`, :mod:`.clocks`, :mod:`.gluon_ops`, :mod:`.gluon_tiles`: the ``@jit`` tiles, cell
  variants, barriers and step stamps they share.

Choosing:

- :mod:`.tiling` (one SM) and :mod:`.split_tiling` (several): does a kernel fit, and with which tile and warps;
- :mod:`.config`: the family's switches as one frozen :class:`~gpulab.rnn.fused.config.FusedConfig` (what ships is
  its default);
- :mod:`.plan`: the one chooser between the kernels (one SM, split, or a clear refusal naming
  ``backend='alternating'``) and the ``fused`` backend of :func:`gpulab.rnn.flashrnn`.

Beside the shipped path, imported on use and never by it: :mod:`.versions` (the lesson's numbered ladder),
:mod:`.measure` (benchmarks, record reports, compiled-code counts) and :mod:`.experiments` (the off-by-default
configurations). Lab notes: ``notes/rnn-fused.md`` (one SM) and ``notes/rnn-split.md`` (several SMs).
"""

from __future__ import annotations

# the chooser (which imports the kernels: the only module that does) and the helpers; not the kernels themselves
from gpulab.rnn.fused import config, plan, split_tiling, tiles, tiling

__all__ = ["config", "plan", "split_tiling", "tiles", "tiling"]
