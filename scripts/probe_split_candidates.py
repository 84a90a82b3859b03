"""Does the split chooser pick the fastest tiling for lesson 6's LSTM layers? Every fitting split tiling of
B32 T1024 bf16 LSTM, 4 heads of 192 and 1 head of 768 (the throughput's 4- and 1-head models), forward and
backward kernel, timed beside the chooser's pick and its estimate; each candidate's result compared with the pick's.

    python scripts/probe_split_candidates.py   (a GPU; writes $OUT/split_candidates.jsonl when OUT is set: stored as
                                               benchmarks/05_fused_rnn/split/<gpu>-<date>-candidates.jsonl)

Device time only (``triton.testing.do_bench`` median): kernels of milliseconds, where the host adds the same few
microseconds to every candidate. The backward is the reverse-time kernel alone (its parameter products do not
depend on the tiling).
"""

from __future__ import annotations

import json
import os
import time

import torch
import triton

import gpulab  # noqa: F401
from gpulab import check
from gpulab.rnn.fused import split as S
from gpulab.rnn.fused import split_backward as SB
from gpulab.rnn.fused import split_tiling

OUT = os.environ.get("OUT")
T, DT = 1024, torch.bfloat16
rows = []


def emit(**rec):
    rows.append(rec)
    print(json.dumps(rec), flush=True)


def inputs(B, NH, DH):
    g = torch.Generator(device="cuda").manual_seed(B + NH + DH)
    r = lambda *s, sc=1.0: (torch.randn(*s, device="cuda", generator=g) * sc).to(DT)  # noqa: E731
    return r(B, T, 4, NH, DH), r(4, NH, DH, DH, sc=0.5 / DH**0.5), r(4, NH, DH), r(2, B, 1, NH, DH)


def sweep(B, NH, DH):
    Wx, R, b, s0 = inputs(B, NH, DH)
    picks = {d: split_tiling.split_tiling(B, NH, DH, "lstm", DT, direction=d) for d in ("forward", "backward")}
    out, last, gates = S.split_rnn_forward(Wx, R, b, s0, "lstm", True, picks["forward"])
    d_out = torch.randn_like(out)
    want_dG, _ = SB.split_rnn_backward(d_out, gates, out, s0, R, "lstm", picks["backward"])
    for direction in ("forward", "backward"):
        cands = [c for c in split_tiling.split_candidates(B, NH, DH, "lstm", DT, direction=direction) if c.fits]
        for c in cands:
            rec = dict(kind="candidate", B=B, NH=NH, DH=DH, direction=direction, block_u=c.block_u, block_b=c.block_b,
                       warps=c.num_warps, split=c.split, programs=c.programs, est_ms=c.score * T * 1e-6,
                       chosen=c == picks[direction])  # fmt: skip
            try:
                if direction == "forward":
                    f = lambda c=c: S.split_rnn_forward(Wx, R, b, s0, "lstm", False, c)  # noqa: E731
                    got = f()[0]
                    rec["err_vs_pick"] = float(check.relative_error(got.float(), out.float()))
                else:
                    f = lambda c=c: SB.split_rnn_backward(d_out, gates, out, s0, R, "lstm", c)  # noqa: E731
                    got = f()[0]
                    rec["err_vs_pick"] = float(check.relative_error(got.float(), want_dG.float()))
                rec["ms"] = triton.testing.do_bench(f, warmup=10, rep=60)
            except Exception as exc:  # noqa: BLE001
                rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
            emit(**rec)


print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, flush=True)
emit(kind="env", device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
     date=time.strftime("%Y-%m-%d"), what="scripts/probe_split_candidates.py")  # fmt: skip
for shape in ((32, 4, 192), (32, 1, 768)):
    sweep(*shape)
for key in sorted({(r["B"], r["NH"], r["DH"], r["direction"]) for r in rows if r["kind"] == "candidate"}):
    mine = [r for r in rows if r["kind"] == "candidate" and (r["B"], r["NH"], r["DH"], r["direction"]) == key]
    mine = [r for r in mine if "ms" in r]
    if mine:
        best, pick = min(mine, key=lambda r: r["ms"]), next((r for r in mine if r["chosen"]), None)
        print(f"{key}: best {best['ms']:.3f} ms (block_u {best['block_u']}, block_b {best['block_b']}, "
              f"{best['warps']} warps); pick {pick['ms'] if pick else float('nan'):.3f} ms")  # fmt: skip
if OUT:
    with open(os.path.join(OUT, "split_candidates.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
