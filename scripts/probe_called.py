"""Probe (GPU): the tagged split forward against the barrier one bit for bit (launches, graph replays), and the
eager overhead of the main (B16 T1024 12x64) and tiny (B1 T4 2x64) problems as a loop calls them: wall per
iteration, CUDA graph, torch.profiler tables. Writes JSON and text to $OUT (or ./probe_out)."""

import json
import os
import sys
import time

import torch

import gpulab  # noqa: F401
from gpulab import bench
from gpulab.rnn.api import flashrnn
from gpulab.rnn.fused import plan, split
from gpulab.rnn.fused.benchmark import problem_inputs

OUT = os.environ.get("OUT", "probe_out")
os.makedirs(OUT, exist_ok=True)
res = {}


def emit(k, v):
    res[k] = v
    print(k, v, flush=True)


def tagged_check():
    for DH in (768, 1024, 512):
        x = problem_inputs(16, 256, 1, DH, torch.bfloat16, seed=1)
        cfg = plan.choose(16, 1, DH, "lstm", torch.bfloat16).tiling
        want = split.split_rnn_forward(*x, tiling=cfg, exchange="barrier")[0]
        bad = 0
        for _ in range(100):
            bad += not torch.equal(split.split_rnn_forward(*x, tiling=cfg, exchange="tagged")[0], want)
        g = bench.capture(lambda x=x, cfg=cfg: split.split_rnn_forward(*x, tiling=cfg, exchange="tagged")[0])
        gbad = 0
        for _ in range(30):
            g()
            torch.cuda.synchronize()
            gbad += not torch.equal(g.output, want)
        emit(f"tagged_vs_barrier_DH{DH}", {"launch_mismatch": bad, "graph_mismatch": gbad, "programs": cfg.programs})


def wall(fn, n):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e3


def called(B, T, NH, DH, name, n):
    x = [t.detach().requires_grad_(True) for t in problem_inputs(B, T, NH, DH, torch.bfloat16)]

    def loop_none():
        for t in x:
            t.grad = None
        out, _ = flashrnn(*x, function="lstm", backend="fused")
        out.sum().backward()

    def loop_acc():
        out, _ = flashrnn(*x, function="lstm", backend="fused")
        out.sum().backward()

    def grad():
        out, _ = flashrnn(*x, function="lstm", backend="fused")
        return torch.autograd.grad(out.sum(), x)

    def fwd():
        with torch.no_grad():
            return flashrnn(*x, function="lstm", backend="fused")[0]

    for f in (loop_none, loop_acc, grad, fwd):
        f()
    g = bench.capture(grad)
    r = {
        "loop_grad_none_wall_ms": min(wall(loop_none, n) for _ in range(3)),
        "loop_accumulate_wall_ms": min(wall(loop_acc, n) for _ in range(3)),
        "autograd_grad_wall_ms": min(wall(grad, n) for _ in range(3)),
        "graph_wall_ms": min(wall(g, n) for _ in range(3)),
        "fwd_wall_ms": min(wall(fwd, n) for _ in range(3)),
        "loop_grad_none_ms": bench.time_callable(loop_none).median_ms,
        "graph_ms": bench.time_callable(g).median_ms,
        "fwd_ms": bench.time_callable(fwd).median_ms,
    }
    # CPU-side time of the calls alone (no synchronize): how long Python + autograd + launches take
    torch.cuda.synchronize()
    t = time.perf_counter()
    loop_none()
    r["cpu_one_iter_ms"] = (time.perf_counter() - t) * 1e3
    torch.cuda.synchronize()
    emit(name, r)
    from torch.profiler import ProfilerActivity, profile

    for f in (loop_none, loop_none):
        f()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            loop_none()
        torch.cuda.synchronize()
    with open(f"{OUT}/{name}_profile.txt", "w") as fh:
        fh.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40))
        fh.write("\n\n")
        fh.write(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=30))
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15))


def main():
    which = sys.argv[1:] or ["tagged", "main", "tiny"]
    if "tagged" in which:
        tagged_check()
    if "main" in which:
        called(16, 1024, 12, 64, "main_12x64", 20)
    if "tiny" in which:
        called(1, 4, 2, 64, "tiny_2x64", 200)
    with open(f"{OUT}/probe_called.json", "w") as fh:
        json.dump(res, fh, indent=1)


def tagged_diff():
    """Where the tagged forward differs from the barrier one (GPU): elements, size, first step."""
    x = problem_inputs(16, 64, 1, 256, torch.bfloat16, seed=0)
    a = split.split_rnn_forward(*x, exchange="barrier")[0]
    b = split.split_rnn_forward(*x, exchange="tagged")[0]
    c = split.split_rnn_forward(*x, exchange="flags")[0]
    d = (a.float() - b.float()).abs()
    steps = (d.amax(dim=(0, 1, 3, 4)) > 0).nonzero().flatten().tolist()
    emit("tagged_diff", {"differ": int((d > 0).sum()), "max": float(d.max()), "first_steps": steps[:5],
                         "flags_equal": bool(torch.equal(a, c))})  # fmt: skip


def tiny_breakdown(n=300):
    """The tiny problem's wall time by piece (host timers, a synchronize after each timed loop) and a cProfile."""
    import cProfile
    import pstats

    x = [t.detach().requires_grad_(True) for t in problem_inputs(1, 4, 2, 64, torch.bfloat16)]
    out = {}

    def fwd_grad():
        return flashrnn(*x, function="lstm", backend="fused")[0]

    def full():
        for t in x:
            t.grad = None
        fwd_grad().sum().backward()

    y = fwd_grad().sum()
    out["forward_with_grad_ms"] = wall(fwd_grad, n)
    out["forward_and_sum_ms"] = wall(lambda: fwd_grad().sum(), n)
    out["full_ms"] = wall(full, n)
    ys = [fwd_grad().sum() for _ in range(n)]
    torch.cuda.synchronize()
    t = time.perf_counter()
    for y in ys:
        y.backward()
    torch.cuda.synchronize()
    out["backward_only_ms"] = (time.perf_counter() - t) / n * 1e3
    out["empty_launch_ms"] = wall(lambda: torch.empty(1, device="cuda").add_(1), n)
    emit("tiny_breakdown", out)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        full()
    torch.cuda.synchronize()
    pr.disable()
    with open(f"{OUT}/tiny_cprofile.txt", "w") as fh:
        st = pstats.Stats(pr, stream=fh).sort_stats("tottime")
        st.print_stats(40)
        st.sort_stats("cumulative").print_stats(40)


if __name__ == "__main__" and "diag" not in sys.argv:
    main()
elif __name__ == "__main__":
    tagged_diff()
    tiny_breakdown()
    with open(f"{OUT}/probe_diag.json", "w") as fh:
        json.dump(res, fh, indent=1)
