"""Attention version 2: Hopper (sm_90), version 1's math with tiles through TMA descriptors and products on wgmma.

- :mod:`.forward`: the forward kernel, :func:`.forward.supports` (when it applies) and its sm_90 compile checks.

Version 1's two backward kernels with TMA loads are an experiment, off by default:
:mod:`gpulab.attention.experiments.v2_backward`.

Each file is a leaf: it imports helpers below it (:mod:`gpulab.attention.configs`, :mod:`gpulab.attention.shared`,
:mod:`gpulab.attention.sm90`), never another version; :mod:`gpulab.attention.plan` chooses.
"""
