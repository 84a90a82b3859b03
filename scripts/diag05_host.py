"""Diagnosis (GPU): where the host's time goes in lesson 5's main problem as a training loop calls it (issue #40).

Main problem: LSTM, B 16, T 1024, 12 heads of 64, bf16, ``flashrnn(backend='fused')``; the loop's step is
``p.grad = None`` for the leaves, forward, ``out.sum().backward()``.

``python scripts/diag05_host.py OUTDIR timing`` (in a fresh process): the loop, ``autograd.grad`` and the CUDA
graph's replay in interleaved rounds (wall ms: calls back to back, one synchronize; host ms: until the last call
returns); the host's time per phase of the step (gradients cleared, forward, sum, backward), once with a synchronize
after every step (the host's own cost, nothing queued) and once back to back; the time the garbage collector takes
during the loop, and the loop with the collector off; cProfile of 100 loop steps (``cprofile-main.txt``).
``python scripts/diag05_host.py OUTDIR profiler`` (another process: a profiler session slows later host work):
torch.profiler's CPU-side table over 5 loop steps (``torchprof-main.txt``). ``python scripts/diag05_host.py OUTDIR
grads [OTHER.pt]``: one loop step's gradients saved to ``OUTDIR/grads.pt`` (and compared bit for bit, strides
included, with OTHER.pt: old and new code in two processes). Each appends to ``diag05-host.json``.
"""

import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import sys
import time

import torch

import gpulab  # noqa: F401
from gpulab import bench
from gpulab.rnn.api import flashrnn
from gpulab.rnn.fused import plan
from gpulab.rnn.fused.benchmark import problem_inputs

OUT = sys.argv[1] if len(sys.argv) > 1 else "diag_out"
PART = sys.argv[2] if len(sys.argv) > 2 else "timing"
os.makedirs(OUT, exist_ok=True)
B, T, NH, DH = 16, 1024, 12, 64
res = {"part": PART, "device": torch.cuda.get_device_name(), "torch": torch.__version__}


def emit(k, v):
    res[k] = v
    print(k, json.dumps(v, default=str), flush=True)


x = [t.detach().requires_grad_(True) for t in problem_inputs(B, T, NH, DH, torch.bfloat16)]
emit("plan", plan.choose(B, NH, DH, "lstm", torch.bfloat16, training=True).why)


def forward():
    return flashrnn(*x, function="lstm", backend="fused")[0]


def loop():
    for t in x:
        t.grad = None
    forward().sum().backward()


def grad():
    return torch.autograd.grad(forward().sum(), x)


def clocks(fn, n=20):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    h = time.perf_counter()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e3, (h - t) / n * 1e3


for _ in range(3):
    loop()
    grad()
torch.cuda.synchronize()

if PART == "timing":
    graph = bench.capture(grad)
    modes = {"loop": loop, "autograd.grad": grad, "graph": graph}
    rounds = {k: [] for k in modes}
    for _ in range(5):
        for k, fn in modes.items():
            rounds[k].append(clocks(fn))
    emit("fresh rounds", {k: {"wall": statistics.median(w for w, _ in v), "host": statistics.median(h for _, h in v)}
                          for k, v in rounds.items()})  # fmt: skip
    emit("device ms", {k: bench.time_callable(fn).median_ms for k, fn in modes.items()})

    def phases(sync, n=30):
        acc = {"clear": [], "forward": [], "sum": [], "backward": [], "step": []}
        torch.cuda.synchronize()
        for _ in range(n):
            t0 = time.perf_counter()
            for t in x:
                t.grad = None
            t1 = time.perf_counter()
            out = forward()
            t2 = time.perf_counter()
            s = out.sum()
            t3 = time.perf_counter()
            s.backward()
            t4 = time.perf_counter()
            if sync:
                torch.cuda.synchronize()
            for k, a, b in (("clear", t0, t1), ("forward", t1, t2), ("sum", t2, t3), ("backward", t3, t4),
                            ("step", t0, t4)):  # fmt: skip
                acc[k].append((b - a) * 1e3)
        torch.cuda.synchronize()
        return {k: round(statistics.median(v), 4) for k, v in acc.items()}

    emit("host phases, synchronize after each step", phases(True))
    emit("host phases, back to back", phases(False))

    gc_time = [0.0, 0, None]

    def cb(phase, info):
        if phase == "start":
            gc_time[2] = time.perf_counter()
        else:
            gc_time[0] += time.perf_counter() - gc_time[2]
            gc_time[1] += 1

    gc.callbacks.append(cb)
    w, h = clocks(loop, 100)
    gc.callbacks.remove(cb)
    emit("gc during 100 loop steps", {"gc_ms_total": gc_time[0] * 1e3, "collections": gc_time[1], "wall": w,
                                      "host": h, "tracked_objects": len(gc.get_objects())})  # fmt: skip
    gc.disable()
    emit("loop with gc off", dict(zip(("wall", "host"), clocks(loop, 100))))
    gc.enable()

    prof = cProfile.Profile()
    torch.cuda.synchronize()
    prof.enable()
    for _ in range(100):
        loop()
    torch.cuda.synchronize()
    prof.disable()
    s = io.StringIO()
    st = pstats.Stats(prof, stream=s)
    st.sort_stats("tottime").print_stats(60)
    st.sort_stats("cumulative").print_stats(60)
    with open(os.path.join(OUT, "cprofile-main.txt"), "w") as f:
        f.write(
            f"# cProfile of the main problem's loop step (B{B} T{T}, {NH} heads of {DH}, LSTM bf16, flashrnn fused, "
            f"p.grad = None; forward; out.sum().backward()), 100 steps\n# {res['device']}, torch {torch.__version__}, "
            f"made by scripts/diag05_host.py (the profiler's own cost included)\n"
        )
        f.write(s.getvalue())
    emit("after cProfile", dict(zip(("wall", "host"), clocks(loop, 20))))
elif PART == "grads":  # one loop step's gradients, saved to OUTDIR/grads.pt (or compared with a saved file)
    loop()
    grads = [t.grad.cpu() for t in x]
    if len(sys.argv) > 3:
        other = torch.load(sys.argv[3])
        emit("grads bitwise equal to " + sys.argv[3], [torch.equal(a, b) and a.stride() == b.stride()
                                                        and torch.equal(a.view(torch.int16), b.view(torch.int16))
                                                        for a, b in zip(grads, other)])  # fmt: skip
    torch.save(grads, os.path.join(OUT, "grads.pt"))
else:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            loop()
        torch.cuda.synchronize()
    table = p.key_averages().table(sort_by="self_cpu_time_total", row_limit=60)
    with open(os.path.join(OUT, "torchprof-main.txt"), "w") as f:
        f.write(f"# torch.profiler (CPU and CUDA), 5 loop steps of the main problem, {res['device']}, "
                f"torch {torch.__version__}; scripts/diag05_host.py profiler\n{table}\n")  # fmt: skip
    print(table)

with open(os.path.join(OUT, "diag05-host.json"), "a") as f:
    f.write(json.dumps(res, default=str) + "\n")
