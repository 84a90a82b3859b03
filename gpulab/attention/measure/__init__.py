"""Lesson 4's measuring and diagnosing code: benchmarks, record readers, CPU replays and compile checks. Nothing of
the shipped path (:func:`gpulab.attention.flash_attention` and what it imports) imports this package; it imports the
shipped path.

- :mod:`.benchmark`: ``python -m gpulab bench 04``, every implementation checked against SDPA's math backend, then
  timed on both clocks; :mod:`.report` reads its records (tables, plots, the ratios the lesson's claims read);
- :mod:`.hopper_bench`: the parts ``hopper``, ``cs336`` and ``fused`` (version 2 tuned and timed, the CS336 problem,
  the one-pass backward's tiles);
- :mod:`.v3_bench`: version 3's parts ``v3``, ``v3-headline``, ``v3-check``, ``v3-race``, ``v3-tune``;
  :mod:`.v3_report` and :mod:`.v3_backward_report` read their records;
- :mod:`.v3_schedule_model` and :mod:`.v3_backward_model`: version 3's block order, masks, rescaling and roundings
  replayed in PyTorch (Gluon has no interpreter);
- :mod:`.v3_compile_check`: version 3 compiled for sm_90 without a GPU, and what its PTX and ``ptxas -v`` say.
"""
