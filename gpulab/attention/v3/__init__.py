"""Lesson 4, version 3: FlashAttention-3's forward and backward in Gluon (explicit warp specialization on Hopper).

- :mod:`.forward`: the Gluon kernel, :func:`.forward.attention_forward` (the entry point) and
  :func:`.forward.supported` (when it may be chosen);
- :mod:`.launch`: the host side's cached launch (bounded caches of launch plans and TMA tensor maps, Triton's C
  launcher called directly after a plan's first call);
- :mod:`.backward`: the backward (one pass per key block, producer warp, two consumer warpgroups, dQ by fp32
  atomic additions) and :func:`.backward.attention_backward`, with :mod:`.backward_configs` (its steps and measured
  defaults), :mod:`.backward_launch`, :mod:`.backward_pair`, :mod:`.backward_dq`, :mod:`.backward_persistent`;
- :mod:`.configs`: the forward's steps and measured defaults; :mod:`.tiles`: its tiles' rows and key bounds.

Version 3 is a leaf: nothing else in gpulab imports it except the plan that chooses a version and the measuring
code of :mod:`gpulab.attention.measure` (the benchmark parts ``python -m gpulab bench 05 v3|v3-check|v3-race|v3-tune``,
the CPU replays of the kernels' order, ``v3_schedule_model`` and ``v3_backward_model``, and the sm_90 compile checks,
``v3_compile_check``).
"""
