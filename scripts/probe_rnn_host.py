"""Host cost of the fused RNN as a training loop calls it: eager wall time beside device time, and where the host
time goes (torch.profiler's CPU table and the CUDA kernels launched per call).

    python scripts/probe_rnn_host.py            (a GPU; --profile adds the profiler tables of the tiny problem;
                                                 --products compares the parameter gradients' two routes)

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
    if "--products" in sys.argv:
        compare_products()
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


def compare_products():
    """Forward+backward with the parameter gradients in one Triton launch (``small_parameter_grads``, the default up
    to ``SMALL_ROWS`` rows) against the PyTorch products (``SMALL_ROWS = 0``), same run, both clocks: the median of
    three alternating rounds."""
    from gpulab.rnn.backends import parameter_grads as pg

    default = pg.SMALL_ROWS
    print(f"\n=== parameter gradients: one launch (rows <= {default}) vs PyTorch products; fwd+bwd, bf16")
    print(f"{'problem':28s} {'rows':>6s} {'route':10s} {'wall':>8s} {'dev':>8s}")
    for label, (B, T, NH, DH) in [
        ("tiny B1 T4 2x64", (1, 4, 2, 64)),
        ("B16 T16 12x64", (16, 16, 12, 64)),
        ("B16 T64 12x64", (16, 64, 12, 64)),
        ("B64 T32 4x128", (64, 32, 4, 128)),
    ]:
        g = gpulab_case(B, T, NH, DH, True)
        times = {"one launch": [], "pytorch": []}
        for _ in range(3):  # the routes alternate, three rounds: the host's drift hits both alike
            for route, rows in (("one launch", default), ("pytorch", 0)):
                pg.SMALL_ROWS = rows
                times[route].append((wall_ms(g), triton.testing.do_bench(g)))
        for route, ts in times.items():
            wall, dev = (sorted(x)[1] for x in zip(*ts))
            print(f"{label:28s} {B * T:6d} {route:10s} {wall:8.3f} {dev:8.3f}")
        pg.SMALL_ROWS = default
    x = torch.randn(1, 4, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)

    def floor():  # the least a differentiable call costs: one elementwise op forward, its gradient backward
        torch.autograd.grad(x * 2, (x,), dy)

    floor_wall, floor_dev = wall_ms(floor), triton.testing.do_bench(floor)
    print(f"{'floor: y = 2x, autograd.grad':28s} {4:6d} {'pytorch':10s} {floor_wall:8.3f} {floor_dev:8.3f}")


if __name__ == "__main__":
    main()
