"""Lesson 5, issue 40: version 6 of the split forward (Gluon, R in registers) beside version 5 and cuDNN (one call).

    python scripts/bench05_v6.py OUT_DIR

One head of 768, B16, T1024, bf16 (the issue's problem). For each version-6 tile (8 units x 4 warps, 16 units x 8
warps): the forward checked against float64 (outputs poisoned: NaN fails), launched twice more for identical bits,
then timed on both clocks without and with saved gates; version 5 as the package runs it (the chooser's hinted
split forward) and cuDNN's fp16 nn.LSTM (dense 768) in the same run. Records: OUT_DIR/<gpu>-<date>-v6.jsonl
(``TAG`` changes the last part).
"""

import functools
import math
import os
import sys
import time

import torch

from gpulab import bench, check, hardware
from gpulab.rnn.fused import plan
from gpulab.rnn.fused.benchmark import dense_run, problem_inputs, states_reference
from gpulab.rnn.fused.versions import v6_gluon_split as v6

B, T, DH = 16, 1024, 768
TILES = [dict(block_u=8, warps=4), dict(block_u=16, warps=8)]


def main(out_dir):
    rows, t0 = [], time.time()
    x = problem_inputs(B, T, 1, DH, torch.bfloat16)
    ref = states_reference(*x)
    common = dict(lesson="05", dtype=torch.bfloat16, kind="v6", B=B, T=T, NH=1, DH=DH)
    for kw in TILES:
        cfg = v6.v6_config(DH, **kw)
        tag = f"v6 gluon bu{cfg.block_u} w{cfg.warps} 1x{DH}"
        try:
            out, _, gates = v6.split_forward_v6(*x, cfg=cfg)
            err = check.assert_close_drifting(out, ref, name="states")
            for _ in range(2):
                assert torch.equal(v6.split_forward_v6(*x, cfg=cfg)[0], out), "a second launch differs"
            for saving in (False, True):
                fn = functools.partial(v6.split_forward_v6, *x, save_gates=saving, cfg=cfg)
                r = bench.measure(fn, case=f"{tag}{' saving gates' if saving else ''}", rel_err=err,
                                  block_u=cfg.block_u, warps=cfg.warps, save_gates=saving, version="v6",
                                  programs=cfg.programs(B, 1, DH), **common)  # fmt: skip
                rows.append(r)
        except Exception as exc:  # noqa: BLE001 - recorded; the next tile still runs
            r = bench.record(case=f"error {tag}", **{k: v for k, v in common.items() if k != "dtype"})
            r.status = f"error: {type(exc).__name__}: {str(exc)[:400]}"
            rows.append(r)
        print(f"{r.case:50s} {r.ms or math.nan:8.3f} ms  wall {r.wall_ms or math.nan:8.3f}  {r.status} "
              f"{time.time() - t0:.0f}s", flush=True)  # fmt: skip
    chosen = plan.choose(B, 1, DH, training=True).tiling
    out, _, _ = plan.split_forward_at(*x, chosen, save_gates=False)
    err = check.assert_close_drifting(out, ref, name="states")
    for saving in (False, True):
        fn = functools.partial(plan.split_forward_at, *x, chosen, save_gates=saving)
        r = bench.measure(fn, case=f"v5 split {chosen.exchange} bu{chosen.block_u} w{chosen.num_warps} 1x{DH}"
                          f"{' saving gates' if saving else ''}", rel_err=err, version="v5", save_gates=saving,
                          block_u=chosen.block_u, warps=chosen.num_warps, exchange=chosen.exchange,
                          **common)  # fmt: skip
        rows.append(r)
        print(f"{r.case:50s} {r.ms:8.3f} ms  wall {r.wall_ms:8.3f}", flush=True)
    m = torch.nn.LSTM(DH, DH).to(x[0].device, torch.float16)
    xi = torch.randn(T, B, DH, device=x[0].device, dtype=torch.float16)
    r = bench.measure(lambda: dense_run(xi, m, False), lesson="05", case=f"cuDNN fp16 forward B{B} dense {DH}",
                      dtype=torch.float16, kind="v6", B=B, T=T, NH=1, DH=DH, training=False)  # fmt: skip
    rows.append(r)
    print(f"{r.case:50s} {r.ms:8.3f} ms  wall {r.wall_ms:8.3f}", flush=True)
    path = os.path.join(
        out_dir, f"{hardware.gpu_slug(rows[0].device)}-{rows[0].date}-{os.environ.get('TAG', 'v6')}.jsonl"
    )
    bench.save(rows, "05", path=path)
    print(path)


if __name__ == "__main__":
    main(sys.argv[1])
