"""Lesson 4's kernels that are off by default: each one a module with its kernels, one frozen config, and an
``attention_backward`` that runs it. :mod:`gpulab.attention.plan` never imports them: an experiment builds its
launches and hands them to :func:`gpulab.attention.plan.run_backward` (``launches=``), or sets them as the backward of
a copied plan, so no cached plan changes.

- :mod:`.v1_backward_fused`: the one-pass backward (five products per block pair, dQ by fp32 atomic adds),
  :class:`.v1_backward_fused.FusedBackwardConfig`; slower than the two kernels on the H100 except on long causal
  problems (notes/attention.md, 'The one-pass backward');
- :mod:`.v2_backward`: version 1's two backward kernels with tiles through TMA, :class:`.v2_backward.V2BackwardConfig`;
  the same gradients, no faster (notes/attention-hopper.md, 'Version 2').
"""
