"""Lesson 5: the fused RNN, one persistent Triton kernel for the whole sequence (and one for the backward).

The kernels, each a leaf (it imports helpers, never another kernel):

- :mod:`.forward`, :mod:`.backward`: one program per (head, batch tile), R of the head on one SM for the whole
  sequence; the backward writes dG, and dR, db come from batched products beside it
  (:mod:`gpulab.rnn.backends.parameter_grads`);
- :mod:`.split`, :mod:`.split_backward`: one head over several SMs, a grid barrier per step, for heads whose R does
  not fit one SM;
- :mod:`.tiles`: the ``@triton.jit`` tiles and cell variants they share, and the split kernels' barrier counter.

Choosing:

- :mod:`.tiling` (one SM) and :mod:`.split_tiling` (several): does a kernel fit, and with which tile and warps;
- :mod:`.plan`: the one chooser between the kernels (one SM, split, or a clear refusal naming
  ``backend='alternating'``), the ``fused`` backend of :func:`gpulab.rnn.flashrnn`, and the dispatcher of the
  numbered versions (:mod:`.versions`: v1 ... v5 forward, b1 ... b3 backward).

Measuring and reading back: :mod:`.benchmark` (``python -m gpulab bench 05``), :mod:`.split_report` and
:mod:`.versions.report` (the stored records as tables and figures), :mod:`.sass` (the kernels' compiled loops,
counted without a GPU). Those import the package's API and are imported on use, not here.
"""

from __future__ import annotations

# the chooser (which imports the kernels: the only module that does) and the helpers; not the kernels themselves
from gpulab.rnn.fused import plan, split_tiling, tiles, tiling, versions

__all__ = ["plan", "split_tiling", "tiles", "tiling", "versions"]
