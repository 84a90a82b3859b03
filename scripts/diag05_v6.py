"""Lesson 5, issue 40: where version 6's step goes, and b4's error located (one call, about 3 minutes).

    python scripts/diag05_v6.py OUT_DIR

Part 1, the forward (one head of 768, B16, T1024, bf16): each version-6 tile with h_{t-1} read straight into the
operand layout (4-byte loads) and in 16-byte rows (``coalesced``), checked against float64, timed on both clocks,
then launched with clock stamps (gpulab.rnn.fused.clocks.step_parts: ns per step of each part); version 5 as the
package runs it, stamped the same way. Part 2, b4 against float64's schedule (``schedule_reference`` on the GPU's
inputs): the gate gradients of the last step (no exchange), of every step, and d_states, per gate and per DH piece
(which part of the kernel is wrong). Records: OUT_DIR/<gpu>-<date>-diag.jsonl.
"""

import functools
import json
import math
import os
import sys
import time

import torch
from v6_runs import checked_and_stamped

from gpulab import bench, check, hardware
from gpulab.rnn.fused import clocks, plan
from gpulab.rnn.fused.benchmark import problem_inputs, states_reference
from gpulab.rnn.fused.versions import b4_gluon_split_backward as b4
from gpulab.rnn.fused.versions import v6_gluon_split as v6

B, T, DH = 16, 1024, 768


def forward_rows(common, t0):
    rows = []
    x = problem_inputs(B, T, 1, DH, torch.bfloat16)
    ref = states_reference(*x)
    variants = [(kw, h, True) for kw in (dict(block_u=8, warps=4), dict(block_u=16, warps=8)) for h in v6.H_LOADS]
    variants.append((dict(block_u=8, warps=4), "coalesced", False))  # arriving after every store (the A/B)
    for kw, h_loads, early in variants:
        cfg = v6.v6_config(DH, **kw)
        v6.EARLY_ARRIVE = early
        tag = f"v6 gluon {h_loads} bu{cfg.block_u} w{cfg.warps} 1x{DH}" + ("" if early else " arriving late")
        try:
            err, parts = checked_and_stamped(functools.partial(v6.split_forward_v6, *x, cfg=cfg, h_loads=h_loads), ref,
                                             cfg.programs(B, 1, DH))  # fmt: skip
            fn = functools.partial(v6.split_forward_v6, *x, save_gates=True, cfg=cfg, h_loads=h_loads)
            r = bench.measure(fn, case=tag + " saving gates", rel_err=err, version="v6", h_loads=h_loads,
                              block_u=cfg.block_u, warps=cfg.warps, save_gates=True, parts=parts,
                              early_arrive=early, programs=cfg.programs(B, 1, DH), **common)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - recorded; the next variant still runs
            r = bench.record(case=f"error {tag}", **{k: v for k, v in common.items() if k != "dtype"})
            r.status = f"error: {type(exc).__name__}: {str(exc)[:600]}"
        rows.append(r)
        print(f"{r.case:55s} {r.ms or math.nan:8.3f} ms wall {r.wall_ms or math.nan:8.3f} {r.status[:300]} "
              f"{json.dumps(r.params.get('parts'))} {time.time() - t0:.0f}s", flush=True)  # fmt: skip
    v6.EARLY_ARRIVE = True
    chosen = plan.choose(B, 1, DH, training=True).tiling
    stamps = clocks.clock_buffer(chosen.programs, T, x[0].device)
    plan.split_forward_at(*x, chosen, save_gates=True, clocks=stamps)
    torch.cuda.synchronize()
    parts = {k: round(v, 1) for k, v in clocks.step_parts(stamps).items()}
    fn = functools.partial(plan.split_forward_at, *x, chosen, save_gates=True)
    r = bench.measure(fn, case=f"v5 split {chosen.exchange} bu{chosen.block_u} w{chosen.num_warps} 1x{DH} saving "
                      "gates", version="v5", parts=parts, **common)  # fmt: skip
    rows.append(r)
    print(f"{r.case:55s} {r.ms:8.3f} ms wall {r.wall_ms:8.3f} {json.dumps(parts)}", flush=True)
    rows += arrive_rows(x, common)
    return rows


def arrive_rows(x, common):
    """b4 arriving right after its shares (dG stored while it waits) against arriving after every store: checked
    against b3 on the same saved gates, then timed."""
    from gpulab.rnn.fused import split_backward  # noqa: PLC0415

    rows = []
    chosen = plan.choose(B, 1, DH, training=True)
    out, _, gates = plan.split_forward_at(*x, chosen.tiling, save_gates=True)
    torch.manual_seed(2)
    bargs = (torch.randn_like(out), gates, out, x[3], x[1])
    dG3, _ = split_backward.split_rnn_backward(*bargs, "lstm", tiling=chosen.backward)
    for early in (True, False):
        b4.EARLY_ARRIVE = early
        dG, _ = b4.split_backward_b4(*bargs)
        err = check.relative_error(dG, dG3)
        assert err < 1e-2 and torch.equal(b4.split_backward_b4(*bargs)[0], dG), f"b4 differs from b3: {err}"
        r = bench.measure(functools.partial(b4.split_backward_b4, *bargs), case="b4 gluon backward coalesced bu16 w8 "
                          f"1x{DH}" + ("" if early else " arriving late"), rel_err=err, version="b4",
                          early_arrive=early, **common)  # fmt: skip
        rows.append(r)
        print(f"{r.case:55s} {r.ms:8.3f} ms wall {r.wall_ms:8.3f}", flush=True)
    b4.EARLY_ARRIVE = True
    return rows


def _err(a, b):
    return round(float(check.relative_error(a, b)), 4)


def backward_rows(common, t0):
    """b4 against its float64 schedule on the same (bf16) inputs: where the error is."""
    rows = []
    for dh, steps, kw in ((256, 1, dict(warps=4)), (256, 3, dict(warps=4)), (768, 4, {})):
        x = problem_inputs(16, steps, 1, dh, torch.bfloat16)
        out, _, gates = plan.split_forward_at(*x, plan.choose(16, 1, dh, training=True).tiling, save_gates=True)
        torch.manual_seed(1)
        d_out = torch.randn_like(out)
        for last in (False, True):
            d_last = torch.randn(2, 16, 1, 1, dh, dtype=out.dtype, device=out.device) if last else None
            cfg = b4.b4_config(dh, **kw)
            row = dict(kind="b4 diag", DH=dh, T=steps, block_u=cfg.block_u, warps=cfg.warps, d_last=last)
            try:
                dG, ds0 = b4.split_backward_b4(d_out, gates, out, x[3], x[1], d_last, cfg=cfg)
                cpu = [None if v is None else v.cpu() for v in (d_out, gates, out, x[3], x[1], d_last)]
                rG, rs0 = b4.schedule_reference(*cpu, cfg=cfg)
                rG, rs0 = rG.to(dG.device), rs0.to(dG.device)
                row["dG"] = _err(dG, rG)
                row["dG last step per gate"] = [_err(dG[-1, :, g], rG[-1, :, g]) for g in range(4)]
                row["dG per step"] = [_err(dG[t], rG[t]) for t in range(min(steps, 6))]
                row["ds0 h, c"] = [_err(ds0[0], rs0[0]), _err(ds0[1], rs0[1])]
                m1 = b4.k_pieces(dh)[0]
                tail = _err(ds0[0, ..., m1:], rs0[0, ..., m1:]) if m1 < dh else None
                row["ds0 h per piece"] = [_err(ds0[0, ..., :m1], rs0[0, ..., :m1]), tail]
                row["ds0 h norm ratio"] = round(float(ds0[0].double().norm() / rs0[0].norm()), 4)
                d = (ds0[0].double() - rs0[0])[:, 0, 0]  # [16, dh]
                row["ds0 h err by 16 cols"] = [round(float(d[:, i:i + 16].norm() / rs0[0][:, 0, 0, i:i + 16].norm()), 3)
                                               for i in range(0, min(dh, 256), 16)]  # fmt: skip
                row["ds0 h err by row"] = [round(float(d[j].norm() / rs0[0][j, 0, 0].norm()), 3) for j in range(16)]
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main(out_dir):
    t0 = time.time()
    common = dict(lesson="05", dtype=torch.bfloat16, kind="v6 parts", B=B, T=T, NH=1, DH=DH)
    rows = backward_rows(common, t0) if os.environ.get("DIAG_BACKWARD", "1") == "1" else []
    recs = forward_rows(common, t0)
    path = os.path.join(out_dir, f"{hardware.gpu_slug(recs[0].device)}-{recs[0].date}-diag.jsonl")
    bench.save(recs, "05", path=path)
    with open(path, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(path)


if __name__ == "__main__":
    main(sys.argv[1])
