"""The split-head fused RNN forward on a GPU: correctness at full size, a barrier stress test, CUDA-graph replays,
then times (device and eager wall clock) beside cuDNN and the alternating backend, a block_u (P) sweep and the
barrier's share of a step.

    python scripts/probe_split.py [check] [stress] [time] [train] [bsweep] [cross]

(a GPU; default: all phases; prints JSON lines, writes $OUT/probe_split.jsonl when OUT is set)

Device time: triton.testing.do_bench's median; wall: gpulab.bench.wall_time (calls back to back, one synchronize).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import triton

import gpulab  # noqa: F401
from gpulab import bench, check, rnn
from gpulab.rnn.fused import split as S
from gpulab.rnn.fused import split_tiling

OUT = os.environ.get("OUT")
PHASES = set(sys.argv[1:]) or {"check", "stress", "time", "train", "bsweep", "cross"}
QUICK = False
rows = []


def emit(**rec):
    rows.append(rec)
    print(json.dumps(rec), flush=True)


def inputs(fn, B, T, DH, dtype, NH=1, seed=0):
    counts = {"lstm": (4, 4, 4, 2), "gru": (3, 3, 4, 1), "elman": (1, 1, 1, 1)}[fn]
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s, sc=1.0: (torch.randn(*s, device="cuda", generator=g) * sc).to(dtype)
    return (r(B, T, counts[0], NH, DH), r(counts[1], NH, DH, DH, sc=0.5 / DH**0.5), r(counts[2], NH, DH),
            r(counts[3], B, 1, NH, DH))  # fmt: skip


def times(f):
    ms = triton.testing.do_bench(f, warmup=25, rep=100)
    wall = bench.wall_time(f).median_ms
    return ms, wall


# 1. correctness against float64, persistent vs one-launch-per-step on the GPU
for fn in ("lstm", "gru", "elman") if "check" in PHASES else ():
    for DH, dtype, T in ((256, torch.bfloat16, 64), (300, torch.bfloat16, 33), (768, torch.bfloat16, 64),
                         (1024, torch.bfloat16, 16), (768, torch.float32, 16), (384, torch.float16, 16)):  # fmt: skip
        x = inputs(fn, 16, T, DH, dtype)
        t0 = time.time()
        try:
            cfg = split_tiling.split_tiling(16, 1, DH, fn, dtype)
            out, last, gates = S.split_rnn_forward(*x, function=fn, save_gates=True, tiling=cfg)
            step, slast, sg = S.split_rnn_forward(*x, function=fn, save_gates=True, tiling=cfg, persistent=False)
            ref = rnn.flashrnn(*(t.double() for t in x), function=fn, backend="vanilla")
            torch.cuda.synchronize()
            emit(kind="check", fn=fn, DH=DH, dtype=str(dtype), T=T, split=cfg.split, block_u=cfg.block_u,
                 err_out=check.relative_error(out, ref[0]), err_last=check.relative_error(last, ref[1]),
                 vs_steps=check.relative_error(out.float(), step.float()), finite=bool(out.isfinite().all()),
                 s=round(time.time() - t0, 1))  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            emit(kind="check", fn=fn, DH=DH, dtype=str(dtype), T=T, error=f"{type(exc).__name__}: {exc}"[:800])

# 2. stress: P at its maximum, many launches back to back, then CUDA-graph replays: every result identical
for DH in (768, 1024) if "stress" in PHASES else ():
    x = inputs("lstm", 16, 256, DH, torch.bfloat16, seed=1)
    cands = [c for c in split_tiling.split_candidates(16, 1, DH, "lstm", torch.bfloat16) if c.fits]
    cfg = max(cands, key=lambda c: (c.programs, -c.score))
    try:
        want, _, _ = S.split_rnn_forward(*x, save_gates=False, tiling=cfg)
        bad = 0
        for _ in range(200):
            got, _, _ = S.split_rnn_forward(*x, save_gates=False, tiling=cfg)
            bad += not torch.equal(got, want)
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            S.split_rnn_forward(*x, save_gates=False, tiling=cfg)
            torch.cuda.synchronize()
            with torch.cuda.graph(g, stream=s):
                gout, _, _ = S.split_rnn_forward(*x, save_gates=False, tiling=cfg)
        torch.cuda.current_stream().wait_stream(s)
        gbad = 0
        for _ in range(50):
            g.replay()
            torch.cuda.synchronize()
            gbad += not torch.equal(gout, want)
        emit(kind="stress", DH=DH, programs=cfg.programs, block_u=cfg.block_u, launches=200, mismatches=bad,
             graph_replays=50, graph_mismatches=gbad)  # fmt: skip
    except Exception as exc:  # noqa: BLE001
        emit(kind="stress", DH=DH, error=f"{type(exc).__name__}: {exc}"[:800])

# 3. times, B16 T1024 bf16, one head: split fused (chosen) vs alternating vs cuDNN (dense, input product included)
B, T = 16, 1024
HEAD_DIMS = [int(d) for d in os.environ.get("SPLIT_DH", "256,384,512,768,1024").split(",")]
SWEEP_DH = (512, 768, 1024)


def sweep_one(x, DH, c):
    """One tiling of the split kernel: both clocks, and the same launch without its barrier (wrong numbers, its
    time), with and without the chunks' products kept apart."""
    g = lambda: S.split_rnn_forward(*x, save_gates=False, tiling=c)
    ms, wall = times(g)
    rec = dict(kind="sweep", DH=DH, block_u=c.block_u, split=c.split, warps=c.num_warps, block_b=c.block_b, ms=ms,
               wall_ms=wall, est_ms=c.score * T * 1e-6)  # fmt: skip
    Wx, R, b, s0 = (t.contiguous() for t in x)
    out = torch.empty(2, B, T, 1, DH, device="cuda", dtype=torch.bfloat16)
    last = torch.empty(2, B, 1, 1, DH, device="cuda", dtype=torch.bfloat16)
    consts = dict(FUNCTION=0, G_W=4, G_R=4, G_B=4, DH=DH, BLOCK_B=c.block_b, BLOCK_U=c.block_u, BLOCK_K=c.block_k,
                  CHUNKS=c.chunks, SAVE_GATES=False, FAST=True, IS_FP32=False, PRECISION="ieee", BARRIER=False,
                  num_warps=c.num_warps, num_stages=1)  # fmt: skip
    args = (Wx, R, b, s0, s0, out, last, out, out, B, T, 1, B * T * DH, 0, T, c.programs)
    for name, apart in (("no_barrier_ms", True), ("no_barrier_one_chain_ms", False)):
        f = lambda apart=apart: S.split_forward_kernel[(c.split, 1, 1)](*args, APART=apart, **consts)
        rec[name] = triton.testing.do_bench(f, warmup=25, rep=100)
    emit(**rec)


def time_one(DH):
    x = inputs("lstm", B, T, DH, torch.bfloat16)
    with torch.no_grad():
        cfg = split_tiling.split_tiling(B, 1, DH, "lstm", torch.bfloat16)
        ms, wall = times(lambda: rnn.flashrnn(*x, function="lstm", backend="fused"))
        emit(kind="time", case="fused split (chosen)", DH=DH, split=cfg.split, block_u=cfg.block_u,
             warps=cfg.num_warps, ms=ms, wall_ms=wall, est_ms=cfg.score * T * 1e-6)  # fmt: skip
        ms, wall = times(lambda: rnn.flashrnn(*x, function="lstm", backend="alternating"))
        emit(kind="time", case="alternating", DH=DH, ms=ms, wall_ms=wall)
        for dt in (torch.float16, torch.bfloat16):
            m = torch.nn.LSTM(DH, DH).cuda().to(dt)
            m.flatten_parameters()
            xi = torch.randn(T, B, DH, device="cuda", dtype=dt)
            ms, wall = times(lambda m=m, xi=xi: m(xi))
            emit(kind="time", case=f"cuDNN nn.LSTM {str(dt)[6:]}", DH=DH, ms=ms, wall_ms=wall,
                 includes_input_product=True)  # fmt: skip
        if DH in SWEEP_DH:  # 4. the P sweep and the barrier's share
            for c in split_tiling.split_candidates(B, 1, DH, "lstm", torch.bfloat16):
                if c.fits and c.block_b == 16:
                    try:
                        sweep_one(x, DH, c)
                    except Exception as exc:  # noqa: BLE001
                        emit(kind="sweep", DH=DH, block_u=c.block_u, warps=c.num_warps, error=f"{exc}"[:400])
    torch.cuda.empty_cache()


for DH in HEAD_DIMS if "time" in PHASES else ():
    time_one(DH)


def train_phase():
    x = inputs("lstm", B, T, 64, torch.bfloat16, NH=12)
    with torch.no_grad():
        ms, wall = times(lambda: rnn.flashrnn(*x, function="lstm", backend="fused"))
    emit(kind="time", case="fused single-SM 12x64", DH=64, NH=12, ms=ms, wall_ms=wall)
    for DH in (256, 512, 768, 1024):
        x = [t.requires_grad_() for t in inputs("lstm", B, T, DH, torch.bfloat16)]
        for backend in ("fused", "alternating") if DH == 768 else ("fused",):

            def train(backend=backend, x=x):
                out, last = rnn.flashrnn(*x, function="lstm", backend=backend)
                return torch.autograd.grad(out.sum(), x)

            try:
                ms, wall = times(train)
                case = "fused split fwd+bwd" if backend == "fused" else "alternating fwd+bwd"
                emit(kind="time", case=case, DH=DH, ms=ms, wall_ms=wall, pass_="fwd+bwd")
            except Exception as exc:  # noqa: BLE001
                emit(kind="time", case=f"{backend} fwd+bwd", DH=DH, error=f"{type(exc).__name__}: {exc}"[:600])
        for dt in (torch.float16, torch.bfloat16):
            m = torch.nn.LSTM(DH, DH).cuda().to(dt)
            m.flatten_parameters()
            xi = torch.randn(T, B, DH, device="cuda", dtype=dt, requires_grad=True)
            params = [xi, *m.parameters()]

            def cudnn_train(m=m, xi=xi, params=params):
                y, _ = m(xi)
                return torch.autograd.grad(y.sum(), params)

            ms, wall = times(cudnn_train)
            emit(kind="time", case=f"cuDNN nn.LSTM {str(dt)[6:]} fwd+bwd", DH=DH, ms=ms, wall_ms=wall, pass_="fwd+bwd",
                 includes_input_product=True)  # fmt: skip
        torch.cuda.empty_cache()


if "train" in PHASES:
    train_phase()


def backward_sweep(DH):
    """Every fitting backward tiling (block_b 16) at one head of DH: the reverse-time kernel alone, device time."""
    from gpulab.rnn.fused import split_backward as SB

    x = inputs("lstm", B, T, DH, torch.bfloat16)
    out, last, gates = S.split_rnn_forward(*x, save_gates=True)
    d_out = torch.randn_like(out)
    for c in split_tiling.split_candidates(B, 1, DH, "lstm", torch.bfloat16, direction="backward"):
        if not (c.fits and c.block_b == 16):
            continue
        try:
            f = lambda c=c: SB.split_rnn_backward(d_out, gates, out, x[3], x[1], "lstm", tiling=c)
            ms = triton.testing.do_bench(f, warmup=25, rep=100)
            emit(kind="bsweep", DH=DH, block_u=c.block_u, split=c.split, warps=c.num_warps, ms=ms,
                 est_ms=c.score * T * 1e-6, regs_est=c.registers_per_thread)  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            emit(kind="bsweep", DH=DH, block_u=c.block_u, warps=c.num_warps, error=f"{exc}"[:400])


for DH in (512, 768) if "bsweep" in PHASES else ():
    backward_sweep(DH)


def crossover(DH, batch, T=1024):
    """Forward at one (head dim, batch), T = 1024: the split kernel (the chooser's tiling) beside the one-SM fused
    kernel where that fits, and alternating; both clocks."""
    from gpulab.rnn.fused import forward as F
    from gpulab.rnn.fused import tiling

    x = inputs("lstm", batch, T, DH, torch.bfloat16)
    with torch.no_grad():
        cfg = split_tiling.split_tiling(batch, 1, DH, "lstm", torch.bfloat16)
        ms, wall = times(lambda: S.split_rnn_forward(*x, save_gates=False, tiling=cfg))
        emit(kind="cross", DH=DH, B=batch, T=T, case="split", split=cfg.split, block_b=cfg.block_b, ms=ms, wall_ms=wall)
        if tiling.fits(batch, 1, DH, "lstm", torch.bfloat16, direction="forward"):
            ms, wall = times(lambda: F.fused_rnn_forward(*x, "lstm", save_gates=False))
            emit(kind="cross", DH=DH, B=batch, T=T, case="one-SM fused", ms=ms, wall_ms=wall)
        ms, wall = times(lambda: rnn.flashrnn(*x, function="lstm", backend="alternating"))
        emit(kind="cross", DH=DH, B=batch, T=T, case="alternating", ms=ms, wall_ms=wall)
    torch.cuda.empty_cache()


for DH, batch in [(d, b) for d in (128, 768) for b in (1, 4, 16, 64)] if "cross" in PHASES else ():
    crossover(DH, batch)

if OUT:
    with open(os.path.join(OUT, "probe_split.jsonl"), "w") as fh:
        env = bench.environment() if hasattr(bench, "environment") else {}
        fh.write(json.dumps({"kind": "env", **env, "date": time.strftime("%Y-%m-%d")}, default=str) + "\n")
        for r in rows:
            fh.write(json.dumps(r) + "\n")
