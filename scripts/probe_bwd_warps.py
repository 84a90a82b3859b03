"""The split backward kernel alone at 1, 2 and 4 warps (LSTM, B = 16, T = 1024, bf16, the chooser's block_u):
device time, and whether every warp count gives the same dG.

    python scripts/probe_bwd_warps.py        (a GPU; prints JSON lines)
"""

from __future__ import annotations

import dataclasses
import json

import torch
import triton

import gpulab  # noqa: F401
from gpulab.rnn.fused import split as S
from gpulab.rnn.fused import split_backward as SB
from gpulab.rnn.fused import split_tiling

B, T = 16, 1024


def inputs(DH):
    g = torch.Generator(device="cuda").manual_seed(0)
    r = lambda *s, sc=1.0: (torch.randn(*s, device="cuda", generator=g) * sc).to(torch.bfloat16)
    return r(B, T, 4, 1, DH), r(4, 1, DH, DH, sc=0.5 / DH**0.5), r(4, 1, DH), r(2, B, 1, 1, DH)


def sweep(DH):
    x = inputs(DH)
    out, last, gates = S.split_rnn_forward(*x, save_gates=True)
    d_out = torch.randn_like(out)
    base = split_tiling.split_tiling(B, 1, DH, "lstm", torch.bfloat16, direction="backward")
    ref = None
    for w in (1, 2, 4):
        c = dataclasses.replace(base, num_warps=w)
        f = lambda c=c: SB.split_rnn_backward(d_out, gates, out, x[3], x[1], "lstm", tiling=c)
        try:
            dG, _ = f()
            ref = dG if ref is None else ref
            ms = triton.testing.do_bench(f, warmup=25, rep=100)
            rec = dict(kind="bsweep2", DH=DH, block_u=c.block_u, warps=w, ms=ms, same=bool(torch.equal(dG, ref)))
            print(json.dumps(rec))
        except Exception as exc:  # noqa: BLE001
            print(json.dumps(dict(kind="bsweep2", DH=DH, warps=w, error=f"{exc}"[:300])))


for DH in (512, 768):
    sweep(DH)
