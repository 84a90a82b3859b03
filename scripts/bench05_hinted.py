"""Lesson 5, issue 40: the split forward's exchange candidates on one LSTM head of 768 (B16, T1024, bf16), one call.

    python scripts/bench05_hinted.py OUT_DIR

For each (exchange, block_u, warps): the persistent forward checked against float64 at full size (outputs poisoned
before the run; NaN fails), timed on both clocks (do_bench median, eager wall per call), and stamped once
(:mod:`gpulab.rnn.fused.clocks`: ns per step of each part); cuDNN's fp16 ``nn.LSTM`` (with its input product)
timed in the same run. Then each backward candidate (``BACKWARD``): the reverse-time kernel on the chosen forward's
saved gates, equal bit for bit to the barrier kernel at the same tiling, stamped and timed. Records:
``OUT_DIR/<gpu>-<date>-hinted.jsonl`` (copied to benchmarks/05_fused_rnn/split/). ``CONFIGS`` / ``BACKWARD`` in the
environment (``exchange:units:warps,...``) replace the lists below; an empty one skips that direction.
"""

import json
import math
import os
import sys
import time

import torch

from gpulab import bench, check, hardware
from gpulab.rnn.fused import clocks, plan, split_tiling
from gpulab.rnn.fused.benchmark import dense_reference, dense_run, problem_inputs, states_reference

B, T, DH = 16, 1024, 768
CONFIGS = [(e, bu, w) for e, bu, w in (
    ("barrier", 8, 2), ("hinted", 8, 4), ("hinted", 8, 8), ("barrier", 8, 4),
    ("hinted", 16, 4), ("hinted", 16, 8), ("barrier", 16, 2),
)]  # fmt: skip
BACKWARD = [("barrier", 16, 8), ("hinted", 16, 8), ("hinted", 16, 4)]


def _configs(name, default):
    text = os.environ.get(name)
    if text is None:
        return default
    return [tuple(int(x) if x.isdigit() else x for x in c.split(":")) for c in text.split(",") if c]


CONFIGS = _configs("CONFIGS", CONFIGS)
BACKWARD = _configs("BACKWARD", BACKWARD)


def tiling(block_u, warps, direction="forward"):
    cands = split_tiling.split_candidates(B, 1, DH, "lstm", torch.bfloat16, gpu="H100", direction=direction)
    c = [c for c in cands if c.block_u == block_u and c.num_warps == warps and c.block_b == 16]
    return c[0] if c and c[0].fits else None


def main(out_dir):
    rows, t0 = [], time.time()
    x = problem_inputs(B, T, 1, DH, torch.bfloat16)
    ref = states_reference(*x)
    for exch, bu, w in CONFIGS:
        cfg = tiling(bu, w)
        name = f"split forward {exch} bu{bu} w{w} 1x{DH}"
        if cfg is None:
            r = bench.record(lesson="05", case=name, kind="hinted")
            r.status = "does not fit"
            rows.append(r)
            continue
        try:
            out = plan.split_forward_at(*x, cfg, save_gates=True, exchange=exch)[0]
            err = check.assert_close_drifting(out, ref, name="states")  # poisoned by new_output: NaN fails
            for _ in range(3):  # again: tags and counters continue across launches
                again = plan.split_forward_at(*x, cfg, save_gates=True, exchange=exch)[0]
                assert torch.equal(again, out), "a second launch differs"
            stamps = clocks.clock_buffer(cfg.programs, T, x[0].device)
            plan.split_forward_at(*x, cfg, save_gates=True, exchange=exch, clocks=stamps)
            torch.cuda.synchronize()
            parts = clocks.step_parts(stamps)

            def run(cfg=cfg, exch=exch):
                return plan.split_forward_at(*x, cfg, save_gates=True, exchange=exch)

            r = bench.measure(run, lesson="05", case=name, dtype=torch.bfloat16, kind="hinted", exchange=exch,
                              block_u=bu, warps=w, programs=cfg.programs, rel_err=err, check="ok",
                              parts={k: parts[k] for k in clocks.PARTS}, step_ns=parts["step_ns"],
                              cycles_per_ns=parts["cycles_per_ns"], B=B, T=T, DH=DH)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - recorded, and the next candidate still runs
            r = bench.record(lesson="05", case=name, kind="hinted", exchange=exch, block_u=bu, warps=w)
            r.status = f"error: {type(exc).__name__}: {str(exc)[:300]}"
        rows.append(r)
        print(f"{name:40s} {r.ms:8.3f} ms  wall {r.wall_ms or math.nan:8.3f}  {r.status}  "
              f"{json.dumps({k: round(v) for k, v in r.params.get('parts', {}).items()})}  {time.time() - t0:.0f}s",
              flush=True)  # fmt: skip
    rows += backward_rows(x, t0)
    torch.manual_seed(0)
    m = torch.nn.LSTM(DH, DH).to("cuda", torch.float16)
    xi = torch.randn(T, B, DH, device="cuda", dtype=torch.float16)
    err = check.assert_close_drifting(dense_run(xi, m, False), dense_reference(xi, m, False), name="cuDNN")
    r = bench.measure(
        lambda: dense_run(xi, m, False),
        lesson="05",
        case="cuDNN nn.LSTM float16",
        dtype=torch.float16,
        kind="hinted",
        training=False,
        rel_err=err,
        B=B,
        T=T,
        DH=DH,
    )
    rows.append(r)
    print(f"{r.case:40s} {r.ms:8.3f} ms  wall {r.wall_ms:8.3f}", flush=True)
    path = os.path.join(out_dir, f"{hardware.gpu_slug(rows[0].device)}-{rows[0].date}-hinted.jsonl")
    bench.save(rows, "05", path=path)
    print(path)


def backward_rows(x, t0):
    """The backward candidates on the chosen forward's states and gates (a fixed upstream gradient)."""
    rows = []
    if not BACKWARD:
        return rows
    states_all, _, gates = plan.split_forward_at(*x, plan.choose(B, 1, DH, training=True).tiling, save_gates=True)
    torch.manual_seed(1)
    d_out = torch.randn_like(states_all)
    args = (d_out, gates, states_all, x[3], x[1])
    for exch, bu, w in BACKWARD:
        cfg = tiling(bu, w, "backward")
        name = f"split backward {exch} bu{bu} w{w} 1x{DH}"
        if cfg is None:
            r = bench.record(lesson="05", case=name, kind="hinted", direction="backward", exchange=exch)
            r.status = "does not fit"
            rows.append(r)
            continue
        try:
            want = plan.split_backward_at(*args, cfg, exchange="barrier")
            for _ in range(3):  # bit for bit the barrier kernel's dG and d(initial states), launch after launch
                got = plan.split_backward_at(*args, cfg, exchange=exch)
                assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), "differs from the barrier kernel"
            stamps = clocks.clock_buffer(cfg.programs, T, x[0].device)
            plan.split_backward_at(*args, cfg, exchange=exch, clocks=stamps)
            torch.cuda.synchronize()
            parts = clocks.step_parts(stamps, backward=True)

            def run(cfg=cfg, exch=exch):
                return plan.split_backward_at(*args, cfg, exchange=exch)

            r = bench.measure(run, lesson="05", case=name, dtype=torch.bfloat16, kind="hinted", direction="backward",
                              exchange=exch, block_u=bu, warps=w, programs=cfg.programs, check="equal to barrier",
                              parts={k: parts[k] for k in clocks.BACKWARD_PARTS}, step_ns=parts["step_ns"],
                              cycles_per_ns=parts["cycles_per_ns"], B=B, T=T, DH=DH)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - recorded, and the next candidate still runs
            r = bench.record(lesson="05", case=name, kind="hinted", direction="backward", exchange=exch, block_u=bu,
                             warps=w)  # fmt: skip
            r.status = f"error: {type(exc).__name__}: {str(exc)[:300]}"
        rows.append(r)
        print(f"{name:40s} {r.ms:8.3f} ms  wall {r.wall_ms or math.nan:8.3f}  {r.status}  "
              f"{json.dumps({k: round(v) for k, v in r.params.get('parts', {}).items()})}  {time.time() - t0:.0f}s",
              flush=True)  # fmt: skip
    return rows


if __name__ == "__main__":
    main(sys.argv[1])
