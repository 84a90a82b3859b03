"""Host cost of the fused RNN as a training loop calls it: eager wall time beside device time, and where the host
time goes (torch.profiler's CPU table and the CUDA kernels launched per call).

    python scripts/probe_rnn_host.py            (a GPU; --profile adds the profiler tables of the tiny problem)

Wall time per call: 50 calls back to back, one synchronize at the end, median of 5 such loops. Device time:
``triton.testing.do_bench``'s median. Peer: cuDNN (``nn.LSTM``) on a dense LSTM of the same width (the work differs:
NH heads of DH are 1/NH of a dense NH*DH recurrence), forward+backward the same way.
"""

from __future__ import annotations

import sys

import torch
import triton

import gpulab  # noqa: F401
from gpulab import bench, rnn


def wall_ms(fn):
    """Eager wall time per call (gpulab.bench.wall_time: calls back to back, one synchronize, median of 5 loops)."""
    return bench.wall_time(fn).median_ms


def gpulab_case(B, T, NH, DH, backward, dtype=torch.bfloat16):
    H = NH * DH
    Wx = torch.randn(B, T, 4, NH, DH, device="cuda", dtype=dtype, requires_grad=backward)
    R = (torch.randn(4, NH, DH, DH, device="cuda", dtype=dtype) / DH**0.5).requires_grad_(backward)
    b = torch.randn(4, NH, DH, device="cuda", dtype=dtype, requires_grad=backward)
    dh = torch.randn(B, T, H, device="cuda", dtype=dtype)

    def call():
        out, _ = rnn.flashrnn(Wx, R, b, function="lstm", backend="fused")
        if backward:
            torch.autograd.grad(out[0], (Wx, R, b), dh.view(B, T, NH, DH))

    return call


def cudnn_case(B, T, H, backward, dtype=torch.float16):
    lstm = torch.nn.LSTM(H, H, batch_first=True, device="cuda", dtype=dtype)
    x = torch.randn(B, T, H, device="cuda", dtype=dtype, requires_grad=backward)
    dy = torch.randn(B, T, H, device="cuda", dtype=dtype)
    params = (x, *lstm.parameters())

    def call():
        y, _ = lstm(x)
        if backward:
            torch.autograd.grad(y, params, dy)

    return call


PROBLEMS = [("tiny B1 T4 2x64", (1, 4, 2, 64)), ("main B16 T1024 12x64", (16, 1024, 12, 64))]


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    print(f"{'problem':28s} {'pass':8s} {'gpulab wall':>11s} {'dev':>7s} {'cudnn wall':>10s} {'dev':>7s}")
    for label, (B, T, NH, DH) in PROBLEMS:
        for backward in (False, True):
            g = gpulab_case(B, T, NH, DH, backward)
            c = cudnn_case(B, T, NH * DH, backward)
            gw, gd = wall_ms(g), triton.testing.do_bench(g)
            cw, cd = wall_ms(c), triton.testing.do_bench(c)
            print(f"{label:28s} {'fwd+bwd' if backward else 'fwd':8s} {gw:11.3f} {gd:7.3f} {cw:10.3f} {cd:7.3f}")
    if "--profile" in sys.argv:
        from torch.profiler import ProfilerActivity, profile

        for backward in (False, True):
            g = gpulab_case(1, 4, 2, 64, backward)
            for _ in range(5):
                g()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    g()
                torch.cuda.synchronize()
            print(f"\n=== tiny {'fwd+bwd' if backward else 'fwd'}: 20 calls, by self CPU time")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60))
        import cProfile
        import pstats

        g = gpulab_case(1, 4, 2, 64, True)
        g()
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(200):
            g()
        torch.cuda.synchronize()
        pr.disable()
        print("\n=== cProfile, tiny fwd+bwd, 200 calls (cumulative)")
        pstats.Stats(pr).sort_stats("cumulative").print_stats(35)


if __name__ == "__main__":
    main()
