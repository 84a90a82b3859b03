"""Diagnosis (GPU), issue 40: why version 6's step as a training loop calls it (one head of 768, B16) shows more
wall time than device time. Prints, for the loop step and for each kernel launched alone back to back: the host's
time per call (until the last call returns) beside the wall time (until the synchronize returns); any call PyTorch
reports as synchronizing (``torch.cuda.set_sync_debug_mode('warn')``); and the step's host-side profile.

    python scripts/diag05_v6_host.py
"""

import functools
import time
import warnings

import torch
from v6_runs import loop_step

from gpulab.rnn.fused.benchmark import problem_inputs
from gpulab.rnn.fused.versions import b4_gluon_split_backward as b4
from gpulab.rnn.fused.versions import v6_gluon_split as v6


def clocks(fn, n=20):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    h = time.perf_counter()
    torch.cuda.synchronize()
    return (h - t) / n * 1e3, (time.perf_counter() - t) / n * 1e3


def main():
    x = problem_inputs(16, 1024, 1, 768, torch.bfloat16)
    step, _ = loop_step(x)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        step()
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    print("synchronizing calls in one step:", [str(w.message)[:160] for w in caught] or "none", flush=True)
    out, _, gates = v6.split_forward_v6(*x, save_gates=True, cfg=v6.v6_config(768, 16, 8, 8))
    d_out = torch.randn_like(out)
    cases = {
        "loop step": step,
        "v6 forward alone": functools.partial(
            v6.split_forward_v6, *x, save_gates=True, cfg=v6.v6_config(768, 16, 8, 8)
        ),
        "b4 alone": functools.partial(
            b4.split_backward_b4, d_out, gates, out, x[3], x[1], cfg=b4.b4_config(768, 16, 8)
        ),
    }
    for name, fn in cases.items():
        host, wall = clocks(fn)
        print(f"{name:18s} host {host:7.3f} ms per call, wall {wall:7.3f}", flush=True)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=22), flush=True)


if __name__ == "__main__":
    main()
