"""The one-pass attention backward (gpulab.attention.v1.backward_fused) on a GPU: its tiles swept against the two-kernel
backward, each checked before it is timed (backward only, ``triton.testing.do_bench``, device time).

    OUT=/some/folder python scripts/probe_backward_fused.py

Problems: lesson 4's grid shapes in bf16 (d 64 x 16 heads, d 128 x 8 heads; N 4k and 16k with 16k tokens; causal and
not). Writes ``$OUT/fused_sweep.jsonl`` (``kind='fused sweep'``, one record per config and problem, and
``kind='two kernels'`` for the baseline) and prints the best config per head dim (geometric mean over problems).
"""

# ruff: noqa: B023 - every closure below is timed before its loop variables change
from __future__ import annotations

import dataclasses
import math
import os
import time

import torch
import triton

from gpulab import attention as A
from gpulab import bench, check
from gpulab.attention import plan as attention_plan
from gpulab.attention.configs import AttentionConfig
from gpulab.attention.plan import backward_plan
from gpulab.attention.v1 import backward_fused

CANDIDATES = {  # (block_m, block_n, block_d, warps, stages) per padded head dim
    64: [(64, 128, 8, 2), (64, 128, 8, 3), (32, 128, 4, 2), (64, 64, 4, 2), (64, 64, 4, 3), (128, 128, 8, 2),
         (32, 64, 4, 2), (128, 64, 8, 2), (64, 128, 4, 2)],
    128: [(64, 128, 8, 2), (64, 128, 8, 1), (32, 128, 8, 2), (64, 64, 4, 2), (64, 64, 8, 2), (32, 64, 4, 2),
          (128, 64, 8, 2), (32, 128, 4, 2)],
}  # fmt: skip
results = []


def main():
    t0 = time.time()
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__}", flush=True)
    best = {}
    for d, h in ((64, 16), (128, 8)):
        times: dict = {}
        for n in (4096, 16384):
            b = 16384 // n
            for causal in (False, True):
                q, k, v = (check.random_tensor(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
                do = check.random_tensor(b, h, n, d, dtype=torch.bfloat16, device="cuda")
                o, lse = A.attention_forward(q, k, v, is_causal=causal)
                plan = backward_plan(do, q, k, v, o, lse, causal, None, False, None)
                flops = bench.attention_flops(b, h, n, n, d, causal=causal, backward=True) - bench.attention_flops(
                    b, h, n, n, d, causal=causal
                )
                attention_plan.FUSED_BACKWARD = False
                plan.backward = None
                ref = A.attention_backward(do, q, k, v, o, lse, is_causal=causal)
                ms2 = triton.testing.do_bench(lambda: A.attention_backward(do, q, k, v, o, lse, is_causal=causal))
                attention_plan.FUSED_BACKWARD = True
                tag = f"d{d} N{n} causal={causal}"
                print(f"{tag} two kernels: {ms2:.3f} ms {flops / ms2 / 1e9:.0f} TFLOP/s", flush=True)
                results.append(bench.record(lesson="04", case="two kernels", ms=ms2, flops=flops, kind="two kernels",
                                            dtype=torch.bfloat16, shape=[b, h, n, d], head_dim=d, seq=n,
                                            causal=causal, check="ok"))  # fmt: skip
                for bm, bn, w, st in CANDIDATES[d]:
                    cfg = AttentionConfig(block_m=bm, block_n=bn, block_d=d, num_warps=w, num_stages=st)
                    plan.backward = backward_fused.FusedBackward(
                        backward_fused.preprocess_launch(plan), backward_fused.fused_backward_launch(plan, cfg)
                    )
                    try:
                        got = A.attention_backward(do, q, k, v, o, lse, is_causal=causal)
                        err = max(float(check.relative_error(g, r)) for g, r in zip(got, ref))
                        if not err < 1e-2:
                            raise RuntimeError(f"relative error {err:.3g} against the two kernels")
                        ms = triton.testing.do_bench(
                            lambda: A.attention_backward(do, q, k, v, o, lse, is_causal=causal)
                        )
                    except Exception as exc:  # noqa: BLE001 - a config that cannot compile or run: recorded
                        print(f"{tag} {cfg}: {type(exc).__name__}: {str(exc).splitlines()[0][:150]}", flush=True)
                        results.append(bench.record(lesson="04", case="fused sweep", kind="fused sweep",
                                                    head_dim=d, seq=n, causal=causal, config=dataclasses.asdict(cfg),
                                                    check=f"failed: {type(exc).__name__}"))  # fmt: skip
                        continue
                    times.setdefault((bm, bn, w, st), []).append(ms / ms2)
                    print(f"{tag} {(bm, bn, w, st)}: {ms:.3f} ms {flops / ms / 1e9:.0f} TFLOP/s, "
                          f"{ms2 / ms:.2f}x the two kernels, err {err:.1e}", flush=True)  # fmt: skip
                    results.append(bench.record(lesson="04", case="fused sweep", ms=ms, flops=flops,
                                                kind="fused sweep", dtype=torch.bfloat16, shape=[b, h, n, d],
                                                head_dim=d, seq=n, causal=causal, config=dataclasses.asdict(cfg),
                                                vs_two_kernels=ms2 / ms, rel_err=err, check="ok"))  # fmt: skip
                plan.backward = None
        full = {c: t for c, t in times.items() if len(t) == 4}
        score = {c: math.exp(sum(math.log(x) for x in t) / len(t)) for c, t in full.items()}
        if score:
            best[d] = min(score, key=score.get)
            print(f"BEST d{d}: {best[d]}: {1 / score[best[d]]:.2f}x the two kernels (geomean)", flush=True)
            results.append(bench.record(lesson="04", case="fused choice", kind="fused choice", head_dim=d,
                                        chosen=list(best[d]), speedup=1 / score[best[d]]))  # fmt: skip
    print(f"done in {time.time() - t0:.0f} s", flush=True)
    if os.environ.get("OUT"):
        print("wrote", bench.save(results, "04", path=os.path.join(os.environ["OUT"], "fused_sweep.jsonl")))


if __name__ == "__main__":
    main()
