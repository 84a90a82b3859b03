"""Lesson 5, after the tiling fix: the head-dim-128 fused records of `python -m gpulab bench 05` re-measured.

Writes $OUT/dh128.jsonl (the benchmark's own records for the head_dim sweep at DH = 128, fused only) and prints
the timings of the main problem's fused forward and forward+backward for comparison with the full run.
"""

import os

import torch

from gpulab import bench
from gpulab.rnn import benchmark as b5

bm = b5._Bench(60)
b5._ours(bm, "head_dim", 16, 1024, 6, 128, torch.bfloat16, backends=("fused",))
b5._ours(bm, "main", 16, 1024, 12, 64, torch.bfloat16, backends=("fused",))
for r in bm.results:
    p = r.params
    print(r.case, p["sweep"], p["pass"], p["DH"], f"{r.ms:.3f} ms", p.get("check"), r.registers, r.spills)
bench.save(
    [r for r in bm.results if r.params["sweep"] == "head_dim"],
    "05",
    path=os.path.join(os.environ.get("OUT", "."), "dh128.jsonl"),
)
