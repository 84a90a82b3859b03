"""Lesson 4, version 3: FlashAttention-3's forward and backward in Gluon (explicit warp specialization on Hopper).

- :mod:`.forward`: the Gluon kernel, :func:`.forward.attention_forward` (the entry point) and
  :func:`.forward.supported` (when it may be chosen);
- :mod:`.launch`: the host side's cached launch (bounded caches of launch plans and TMA tensor maps, Triton's C
  launcher called directly after a plan's first call);
- :mod:`.schedule_model`: the kernel's block order, rescaling points and ping-pong turns replayed in PyTorch;
- :mod:`.compile_check`: the kernel compiled for sm_90 without a GPU, and what its PTX and ``ptxas -v`` say;
- :mod:`.backward`: the backward (one pass per key block, producer warp, two consumer warpgroups, dQ by fp32
  atomic additions) and :func:`.backward.attention_backward`; :mod:`.backward_model` replays its order in PyTorch.

Version 3 is a leaf: nothing else in gpulab imports it except the plan that chooses a version and its benchmark
parts (:mod:`gpulab.attention.v3_bench`: ``python -m gpulab bench 04 v3|v3-check|v3-race|v3-tune``; the
backward's GPU script is ``scripts/gpu_v3_backward.py``, its records read by
:mod:`gpulab.attention.v3_backward_report`).
"""
