"""Lesson 4, version 3: FlashAttention-3's forward in Gluon (explicit warp specialization on Hopper).

- :mod:`.forward`: the Gluon kernel, :func:`.forward.attention_forward` (the entry point) and
  :func:`.forward.supported` (when it may be chosen);
- :mod:`.launch`: the host side's cached launch (bounded caches of launch plans and TMA tensor maps, Triton's C
  launcher called directly after a plan's first call);
- :mod:`.schedule_model`: the kernel's block order, rescaling points and ping-pong turns replayed in PyTorch;
- :mod:`.compile_check`: the kernel compiled for sm_90 without a GPU, and what its PTX and ``ptxas -v`` say.

Version 3 is a leaf: nothing else in gpulab imports it except the plan that chooses a version and its benchmark
parts (:mod:`gpulab.attention.v3_bench`: ``python -m gpulab bench 04 v3|v3-check|v3-race|v3-tune``).
"""
