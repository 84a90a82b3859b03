"""Lesson 5's benchmark (`python -m gpulab bench 05`) one case at a time under a time budget, for a device call's
10-minute limit: prints how long each (benchmark, case) took to check and time, writes the records after every
case (so a cut-off run keeps what it measured), and records what the budget cannot fit as not run.

Usage (device): PYTHONPATH=$PWD python3 scripts/bench05_parts.py [BUDGET_S] [OUT]   (default 500 s, $OUT or out/)
"""

import dataclasses
import os
import sys
import time
from pathlib import Path

from gpulab import bench
from gpulab.rnn.fused import benchmark as b05

budget = float(sys.argv[1]) if len(sys.argv) > 1 else 500.0
out = Path(sys.argv[2] if len(sys.argv) > 2 else os.environ.get("OUT", "out"))
start = time.perf_counter()
results, path = [], None
ORDER = {"main": 0, "same_flops": 1, "dense": 2, "head_dim": 3, "batch": 4}  # what the lesson reads first
steps = [(bm, x) for bm in b05.benchmarks() for x in bm.cases]
steps.sort(key=lambda s: ORDER.get(s[1].get("sweep", s[0].params.get("sweep")), 5))
for bm, x in steps:
    elapsed = time.perf_counter() - start
    if elapsed > budget:
        print(f"SKIPPED (budget {budget:.0f} s spent): {bm.name} {bm.case_name(x)}", flush=True)
        why = f"unavailable: not run (this run's time budget of {budget:.0f} s was spent)"
        results += [bm.new_record(x, (), p, why) for p in bm.providers]
        continue
    one = dataclasses.replace(bm, cases=[x])
    t0 = time.perf_counter()
    rs = bench.run(one)
    results += rs
    print(f"{time.perf_counter() - t0:7.1f} s  {bm.name}  {bm.case_name(x)}", flush=True)
    path = bench.save(results, "05", root=out)
results, figure = b05.report(results)
path = bench.save(results, "05", root=out)
figure.savefig(path.with_suffix(".png"), dpi=120, bbox_inches="tight")
print(f"wrote {path} ({len(results)} records) in {time.perf_counter() - start:.0f} s")
