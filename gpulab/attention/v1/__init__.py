"""Attention version 1: portable FlashAttention-2 in Triton (any GPU, and the CPU interpreter).

- :mod:`.forward`: one program per (Q block, batch*head), K/V streamed through an online softmax; O and the LSE;
- :mod:`.backward`: two kernels (dQ and D, then dK/dV summed over each KV head's group), P recomputed from the LSE,
  no atomics; the same features.

The one-pass backward (five products per block pair, dQ by fp32 atomic adds) is an experiment, off by default:
:mod:`gpulab.attention.experiments.v1_backward_fused`.

Each file is a leaf: kernels and their launch builders, no choice between versions
(:mod:`gpulab.attention.plan` makes it).
"""
