"""Where a short problem's forward+backward time goes (issue 39): per-kernel device time from torch.profiler for
version 3's backward at the given steps, one problem of lesson 4's grid.

    python scripts/profile_v3_backward.py OUT_FILE [--seq 1024] [--head-dim 64] [--causal] [--steps 5,7]
        [--kv-regs none] [--stats-smem] [--ncu-once]

``--ncu-once``: run the backward once (after a warm-up call) for Nsight Compute to profile (``ncu -k regex:...``).
Writes a text table per step (kernel name, calls, device microseconds per fwd+bwd) with the device and versions.
"""

from __future__ import annotations

import argparse
import datetime

import torch
import triton
from torch.profiler import ProfilerActivity, profile

from gpulab.attention import plan as P
from gpulab.attention.v3 import backward as v3b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--steps", default="5,7")
    ap.add_argument("--ncu-once", action="store_true")
    ap.add_argument("--kv-regs", default="none", help="step 10's setting (V3BackwardConfig.kv_regs)")
    ap.add_argument("--stats-smem", action="store_true", help="step 11 (V3BackwardConfig.stats_smem)")
    a = ap.parse_args()
    d, n = a.head_dim, a.seq
    b, h = max(1, 16384 // n), 1024 // d
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    o, lse = P.attention_forward(q, k, v, is_causal=a.causal)
    lines = [f"# {torch.cuda.get_device_name(0)} torch {torch.__version__} triton {triton.__version__} "
             f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
             f"# bf16 B{b} H{h} N{n} d{d} causal={a.causal}: backward only (forward excluded), per call"]  # fmt: skip
    for step in (int(s) for s in a.steps.split(",")):
        cfg = v3b.V3BackwardConfig(step=step, kv_regs=a.kv_regs, stats_smem=a.stats_smem)
        for _ in range(3):
            v3b.attention_backward(do, q, k, v, o, lse, a.causal, cfg=cfg)
        torch.cuda.synchronize()
        if a.ncu_once:
            torch.cuda.cudart().cudaProfilerStart()
            v3b.attention_backward(do, q, k, v, o, lse, a.causal, cfg=cfg)
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
            continue
        reps = 20
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                v3b.attention_backward(do, q, k, v, o, lse, a.causal, cfg=cfg)
            torch.cuda.synchronize()
        rows = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                r = rows.setdefault(e.name[:70], [0, 0.0])
                r[0] += 1
                r[1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        total = sum(t for _, t in rows.values()) / reps
        lines.append(f"## step {step}: {total:.1f} us of kernels per backward")
        for name, (calls, t) in sorted(rows.items(), key=lambda x: -x[1][1]):
            lines.append(f"{t / reps:9.1f} us {calls // reps:3d}x  {name}")
    text = "\n".join(lines)
    print(text)
    if not a.ncu_once:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
