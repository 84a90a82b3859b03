"""Attention version 1: portable FlashAttention-2 in Triton (any GPU, and the CPU interpreter).

- :mod:`.forward`: one program per (Q block, batch*head), K/V streamed through an online softmax; O and the LSE;
  grouped-query heads, sliding windows and packed variable-length batches (one launch);
- :mod:`.backward`: two kernels (dQ and D, then dK/dV summed over each KV head's group), P recomputed from the LSE,
  no atomics; the same features;
- :mod:`.backward_fused`: the one-pass backward (five products per block pair, dQ by fp32 atomic adds), off by
  default (:data:`gpulab.attention.plan.FUSED_BACKWARD`).

Each file is a leaf: kernels and their launch builders, no choice between versions
(:mod:`gpulab.attention.plan` makes it).
"""
