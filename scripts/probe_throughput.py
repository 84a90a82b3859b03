"""Lesson 6's training throughput alone (``gpulab.tasks.experiments.throughput``, the GPU size: width 768, 2 layers,
B = 32, T = 1024, bf16): every LSTM head count on the fused backend (one SM per head, or a head split over several
SMs where it does not fit one) beside the Transformer, both clocks.

    python scripts/probe_throughput.py        (a GPU; prints the table; writes $OUT/throughput.jsonl when OUT is set)
"""

from __future__ import annotations

import os

import gpulab  # noqa: F401
from gpulab import bench
from gpulab.tasks import experiments

results = experiments.throughput()
print(experiments.throughput_table(results))
print("\n".join(experiments.throughput_summary(results)))
if os.environ.get("OUT"):
    bench.save(results, "06", path=os.path.join(os.environ["OUT"], "throughput.jsonl"))
