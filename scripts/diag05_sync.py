"""Diagnosis (GPU): why lesson 5's main problem as a loop calls it (``p.grad = None``, forward,
``out.sum().backward()``) takes more wall time than device time while ``torch.autograd.grad`` does not.

For each setting: device ms (``bench.time_callable``), eager wall ms (20 calls back to back, one synchronize, best
of 3), host ms (the same loop's time until the last call returns, before the synchronize: a host that waits for the
GPU inside a step shows host ~ wall) and the caching allocator's counters over the wall loops (cudaMalloc/cudaFree
calls, syncs of all streams, retries). Then ``torch.cuda.set_sync_debug_mode('warn')`` around three loop steps, and
torch.profiler over three loop steps: CUDA runtime calls by total time, the GPU's idle gaps between kernels and the
runtime calls that overlap each long gap. Usage: ``python scripts/diag05_sync.py OUTDIR``; prints a summary, writes
``diag05.json`` and the profiler's trace there. ``python scripts/diag05_sync.py OUTDIR profiler``: in a fresh process,
the loop, autograd.grad and the CUDA graph's replay in interleaved rounds before and after one torch.profiler session
(``diag05-profiler.json``).
"""

import contextlib
import json
import os
import sys
import time
import traceback
import warnings

import torch

import gpulab  # noqa: F401
from gpulab import bench
from gpulab.rnn.api import flashrnn
from gpulab.rnn.fused import backward, plan
from gpulab.rnn.fused.benchmark import problem_inputs

OUT = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "diag_out")
os.makedirs(OUT, exist_ok=True)
B, T, NH, DH = 16, 1024, 12, 64
res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}


def emit(k, v):
    res[k] = v
    print(k, json.dumps(v, default=str) if not isinstance(v, str) else v, flush=True)


def leaves():
    return [t.detach().requires_grad_(True) for t in problem_inputs(B, T, NH, DH, torch.bfloat16)]


def modes(x):
    def loop():
        for t in x:
            t.grad = None
        flashrnn(*x, function="lstm", backend="fused")[0].sum().backward()

    def grad():
        return torch.autograd.grad(flashrnn(*x, function="lstm", backend="fused")[0].sum(), x)

    def grad_assigned():  # what AccumulateGrad does, in Python: the gradients become .grad as they come
        for t in x:
            t.grad = None
        for t, g in zip(x, grad()):
            t.grad = g

    return {"loop": loop, "autograd.grad": grad, "grad assigned": grad_assigned}


_STATS = ("num_device_alloc", "num_device_free", "num_sync_all_streams", "num_alloc_retries")


def clocks(fn, n=20):
    dev = bench.time_callable(fn).median_ms
    s0 = torch.cuda.memory_stats()
    best_wall, best_host = float("inf"), float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        h = time.perf_counter()
        torch.cuda.synchronize()
        e = time.perf_counter()
        best_wall, best_host = min(best_wall, (e - t) / n * 1e3), min(best_host, (h - t) / n * 1e3)
    s1 = torch.cuda.memory_stats()
    alloc = {k: s1.get(k, 0) - s0.get(k, 0) for k in _STATS}
    return {"device_ms": round(dev, 4), "wall_ms": round(best_wall, 4), "host_ms": round(best_host, 4), **alloc}


def no_record_stream():
    saved = torch.Tensor.record_stream
    torch.Tensor.record_stream = lambda self, stream: None
    return saved


@contextlib.contextmanager
def patched_record_stream():
    saved = no_record_stream()
    try:
        yield
    finally:
        torch.Tensor.record_stream = saved


def settings_table(x, tag):
    m = modes(x)
    out = {}
    for name in ("loop", "autograd.grad", "grad assigned"):
        out[f"{tag} {name}"] = clocks(m[name])
    with plan.backward_as(layout="batch"):
        out[f"{tag} loop (dG batch layout)"] = clocks(m["loop"])
    saved, backward.MIN_PIECE_STEPS = backward.MIN_PIECE_STEPS, 1 << 62  # one piece: no second stream
    try:
        out[f"{tag} loop (one piece, one stream)"] = clocks(m["loop"])
        out[f"{tag} autograd.grad (one piece, one stream)"] = clocks(m["autograd.grad"])
    finally:
        backward.MIN_PIECE_STEPS = saved
    with patched_record_stream():
        out[f"{tag} loop (no record_stream)"] = clocks(m["loop"])
    for k, v in out.items():
        emit(k, v)
    return out


def sync_debug(fn):
    """Messages (and where in Python) of every synchronizing call under set_sync_debug_mode('warn')."""
    seen = []
    old = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        seen.append({"msg": str(message)[:300], "at": f"{filename}:{lineno}",
                     "stack": traceback.format_stack(limit=12)[:-1]})  # fmt: skip

    fn()
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(3):
                fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
            warnings.showwarning = old
    torch.cuda.synchronize()
    return seen


def profiled(fn, name):
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    path = os.path.join(OUT, f"trace-{name}.json")
    prof.export_chrome_trace(path)
    with open(path) as fh:
        ev = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    gpu = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    rt = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    by = {}
    for e in rt:
        c = by.setdefault(e["name"], [0, 0.0, 0.0])
        c[0] += 1
        c[1] += e["dur"]
        c[2] = max(c[2], e["dur"])
    calls = {k: [v[0], round(v[1], 1), round(v[2], 1)] for k, v in sorted(by.items(), key=lambda kv: -kv[1][1])}
    gaps, end = [], None
    for e in gpu:
        if end is not None and e["ts"] - end > 20:
            over = sorted((r for r in rt if r["ts"] < e["ts"] and r["ts"] + r["dur"] > end),
                          key=lambda r: -r["dur"])[:3]  # fmt: skip
            gaps.append({"gap_us": round(e["ts"] - end, 1), "next": e["name"][:60],
                         "runtime_calls_over_gap": [(r["name"], round(r["dur"], 1)) for r in over]})  # fmt: skip
        end = max(end or 0, e["ts"] + e["dur"])
    span = (gpu[-1]["ts"] + gpu[-1]["dur"] - gpu[0]["ts"]) / 1e3 if gpu else None
    ops = sorted((e for e in ev if e.get("cat") == "cpu_op"), key=lambda e: -e["dur"])[:12]
    return {"runtime_calls [count, total us, max us]": calls, "gpu_gaps_over_20us": gaps[:20],
            "n_gaps": len(gaps), "gap_total_ms": round(sum(g["gap_us"] for g in gaps) / 1e3, 3),
            "gpu_span_ms_3_steps": span, "longest_cpu_ops": [(e["name"], round(e["dur"], 1)) for e in ops]}  # fmt: skip


def guarded(name, fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a diagnosis that fails reports and the rest runs
        emit(f"{name} failed", f"{type(exc).__name__}: {exc}"[:400])
        return None


def main():
    t0 = time.perf_counter()
    x = leaves()
    m = modes(x)
    m["loop"]()  # compile
    m["autograd.grad"]()
    torch.cuda.synchronize()
    emit("compile_s", round(time.perf_counter() - t0, 1))
    guarded("settings", lambda: settings_table(x, "fresh"))
    guarded("sync_debug loop", lambda: emit("sync_debug loop", sync_debug(m["loop"])))
    guarded("sync_debug grad", lambda: emit("sync_debug autograd.grad", sync_debug(m["autograd.grad"])))
    guarded("profile loop", lambda: emit("profile loop", profiled(m["loop"], "loop")))
    guarded("profile grad", lambda: emit("profile autograd.grad", profiled(m["autograd.grad"], "grad")))
    with open(os.path.join(OUT, "diag05.json"), "w") as fh:
        json.dump(res, fh, indent=1, default=str)
    # what the bench does before its loop: a CUDA graph of autograd.grad on the same leaves; later
    # make_graphed_callables (before the variants): re-time after each
    g = guarded("capture", lambda: bench.capture(m["autograd.grad"]))
    if g is not None:
        g()
        emit("after capture loop", clocks(m["loop"]))
        emit("after capture autograd.grad", clocks(m["autograd.grad"]))
    try:
        graphed = torch.cuda.make_graphed_callables(lambda *a: flashrnn(*a, function="lstm", backend="fused")[0],
                                                    tuple(x))  # fmt: skip
        emit("after make_graphed_callables loop", clocks(m["loop"]))
        emit("after make_graphed_callables autograd.grad", clocks(m["autograd.grad"]))
        del graphed
    except Exception as exc:  # noqa: BLE001
        emit("make_graphed_callables", f"failed: {exc}")
    x2 = leaves()
    emit("new leaves after all loop", clocks(modes(x2)["loop"]))
    emit("new leaves after all autograd.grad", clocks(modes(x2)["autograd.grad"]))
    emit("total_s", round(time.perf_counter() - t0, 1))
    with open(os.path.join(OUT, "diag05.json"), "w") as fh:
        json.dump(res, fh, indent=1, default=str)


def one_loop(fn, n=20):
    """(wall, host) ms per call of one loop of ``n`` calls back to back and one synchronize."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    h = time.perf_counter()
    torch.cuda.synchronize()
    return round((time.perf_counter() - t) / n * 1e3, 4), round((h - t) / n * 1e3, 4)


def profiler_effect(rounds=3):
    """In a fresh process: the loop, autograd.grad and the graph's replay in interleaved rounds (wall and host ms),
    before and after one torch.profiler session of one loop step; device ms before."""
    x = leaves()
    m = modes(x)
    m["loop"]()
    m["autograd.grad"]()
    graph = bench.capture(m["autograd.grad"])
    fns = {"loop": m["loop"], "autograd.grad": m["autograd.grad"], "graph": graph}
    emit("device ms", {k: round(bench.time_callable(f).median_ms, 4) for k, f in fns.items()})
    for when in ("before profiler", "after profiler", "after profiler, later"):
        if when == "after profiler":
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
                m["loop"]()
                torch.cuda.synchronize()
        got = {k: [one_loop(f) for _ in range(rounds)] for k, f in fns.items()}
        emit(when, {k: {"wall": sorted(w for w, _ in v)[rounds // 2], "host": sorted(h for _, h in v)[rounds // 2]}
                    for k, v in got.items()})  # fmt: skip
    with open(os.path.join(OUT, "diag05-profiler.json"), "w") as fh:
        json.dump(res, fh, indent=1, default=str)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "profiler":
        profiler_effect()
    else:
        main()
