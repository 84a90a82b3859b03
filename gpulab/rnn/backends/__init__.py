"""The backends of :func:`gpulab.rnn.flashrnn`, one module each, and what they share.

- :mod:`.vanilla`: a PyTorch time loop (any device and float dtype; in float64 the reference);
- :mod:`.alternating`: per step one batched product over heads + one Triton pointwise kernel;
- ``fused`` (lesson 6, its own package :mod:`gpulab.rnn.fused`): one persistent Triton kernel for the whole
  sequence, and one for the backward;
- :mod:`.autograd`: the autograd op of the two Triton backends; :mod:`.parameter_grads`: their dR, db, dWx from dG.
"""
