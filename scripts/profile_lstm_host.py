"""Where the eager wall clock of one ``gpulab.rnn.LSTM`` training step goes, on the host (GPU machine).

    python scripts/profile_lstm_host.py [--calls 200] [--top 30]

For each case (the tiny call: B 1, T 4, 2 heads of 64; one head of 256 at B 16, T 256; one of 1024 at B 64, T 256)
prints: the device time and the eager wall time per forward+backward (calls back to back, one synchronize), the
CUDA kernels launched per call (torch.profiler), the same for cuDNN's ``nn.LSTM`` of the same size, and the host
functions that take the wall time (cProfile, sorted by own time). A wall time well above the device time is host
work: Python, allocations, launches; this names which.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch
from torch import nn

from gpulab.rnn.module import LSTM

CASES = {  # name -> (input size, hidden, heads, layers, B, T)
    "tiny B1 T4 2x64": (128, 128, 2, 1, 1, 4),
    "H256 L1 B16 T256": (256, 256, 1, 1, 16, 256),
    "H1024 L1 B64 T256": (1024, 1024, 1, 1, 64, 256),
}


def _step(module, x, leaves):
    def step():
        for t in leaves:
            t.grad = None
        module(x)[0].sum().backward()

    return step


def _wall(step, calls):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e3


def _device(step, calls):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    step()
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def _kernels(step):
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(names), sorted(set(names))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    torch.manual_seed(0)
    for name, (i, h, heads, layers, b, t) in CASES.items():
        x = torch.randn(b, t, i, device="cuda", dtype=torch.float16, requires_grad=True)
        ours = LSTM(i, h, layers, batch_first=True, num_heads=heads).to("cuda", torch.float16)
        ref = nn.LSTM(i, h, layers, batch_first=True).to("cuda", torch.float16)
        for label, mod in (("gpulab", ours), ("cuDNN", ref)):
            step = _step(mod, x, [x, *mod.parameters()])
            calls = args.calls if t < 64 else max(20, args.calls // 10)
            wall, dev = _wall(step, calls), _device(step, calls)
            n, kinds = _kernels(step)
            print(f"== {name} {label}: wall {wall:.3f} ms, device {dev:.3f} ms per call, {n} kernels per call")
            print("   kernels:", "; ".join(k[:60] for k in kinds[:25]))
            if label == "gpulab":
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(calls):
                    step()
                torch.cuda.synchronize()
                prof.disable()
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(args.top)
                print("\n".join(line for line in s.getvalue().splitlines() if line.strip())[:6000])


if __name__ == "__main__":
    main()
