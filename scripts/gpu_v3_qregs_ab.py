"""Run l (H100), issue 38: version 3's measured forward against the same launch with ``q_regs=True`` (Q read from
registers by every score product) on the headline problem (bf16, d=128, N = 16k, non-causal) and the other d=128 /
d=64 bf16 long problems, in alternating rounds beside cuDNN and FA-2 (``kind='ab'``). Writes
``<out>/<gpu>-<date>-l-qregs-ab.jsonl``. Usage: ``python scripts/gpu_v3_qregs_ab.py OUT_DIR [rounds]``."""

import dataclasses
import sys

from gpulab import bench, hardware
from gpulab.attention import v3_bench as vb
from gpulab.attention.v3 import forward as v3

out, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 9
problems = [vb.HEADLINE]
impls = {n: fn for n, fn in vb._bench_providers().items() if n in (vb.V3_TUNED, "SDPA cuDNN", "SDPA FlashAttention-2")}


def q_regs(q, k, v, causal):
    cfg = dataclasses.replace(v3.v3_config(q.shape[3], causal, seq=q.shape[2]), q_regs=True)
    return v3.attention_forward(q, k, v, causal, cfg=cfg)[0]


impls["gpulab v3 (tuned, q_regs)"] = vb.one_direction(q_regs)
results = vb._in_rounds("v3", problems, impls, rounds, "ab", None)
path = f"{out}/{hardware.gpu_slug(results[0].device)}-{results[0].date}-l-qregs-ab.jsonl"
print("saved", bench.save(results, "04", path=path))
for r in results:
    print(r.params["impl"], r.params["round"], r.ms, r.wall_ms, r.tflops, r.params.get("check"))
