"""Host cost of gpulab.attention.flash_attention next to SDPA, on the clock eager callers get (issue #16).

On a GPU, for each problem (default: the tiny B1 H1 N128 d64, and N=1024 bf16 at d64/d128, causal and not, with
the lesson's 16k tokens: B16 H16 at d64, B16 H8 at d128), forward and forward+backward:

- ``wall``: eager wall time per call, calls back to back as a training loop makes them, one synchronize at the end
  (median of 5 repeats);
- ``device``: ``triton.testing.do_bench`` (the GPU's clock, what CUDA graphs or compile can reach);

for gpulab (kernels launched straight to the compiled kernel, the default), gpulab with every launch through
Triton's ``JITFunction.run`` (``launch.DIRECT = False``), SDPA with PyTorch's choice of backend and SDPA restricted
to FLASH_ATTENTION (FlashAttention-2); then the ratios. Every output is checked against SDPA before timing.

    python scripts/probe_attention_host.py              # the default problems, < 2 minutes on an H100
    python scripts/probe_attention_host.py --grid       # also the lesson's 24 problems (fp16/bf16, N 1024-16384)
    python scripts/probe_attention_host.py --profile    # cProfile of the tiny forward+backward, gpulab only
    python scripts/probe_attention_host.py --stub       # CPU or GPU: Python-side cost with the launches as no-ops

``--stub`` replaces the Triton kernels with no-ops, so it runs anywhere (in the interpreter too) and measures what
gpulab's Python costs per call apart from the launches themselves.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from gpulab import runtime
from gpulab.attention import flash_attention
from gpulab.attention import plan as attn_backward
from gpulab.attention import plan as attn_forward

try:  # the lean host path (absent before it: --stub still runs, to compare)
    from gpulab import launch as attn_launch
    from gpulab.attention import plan as attn_plan
except ImportError:  # pragma: no cover
    attn_launch = attn_plan = None

TINY = dict(name="tiny B1 H1 N128 d64 causal", b=1, h=1, n=128, d=64, causal=True, dtype=torch.bfloat16)


def problems(full_grid: bool) -> list[dict]:
    out = [TINY]
    dtypes = (torch.bfloat16, torch.float16) if full_grid else (torch.bfloat16,)
    seqs = (1024, 4096, 16384) if full_grid else (1024,)
    for dtype in dtypes:
        for d in (64, 128):
            for n in seqs:
                for causal in (False, True):
                    b, h = max(1, 16384 // n), 1024 // d
                    name = f"{str(dtype)[6:]} B{b} H{h} N{n} d{d}{' causal' if causal else ''}"
                    out.append(dict(name=name, b=b, h=h, n=n, d=d, causal=causal, dtype=dtype))
    return out


def providers():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def gpulab_direct():
        attn_launch.DIRECT = True
        return contextlib.nullcontext()

    def gpulab_jit():
        attn_launch.DIRECT = False
        return contextlib.nullcontext()

    def gpulab_fn(q, k, v, causal):
        return flash_attention(q, k, v, is_causal=causal)

    def sdpa_fn(q, k, v, causal):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return [
        ("gpulab", gpulab_fn, gpulab_direct),
        ("gpulab-jit-launch", gpulab_fn, gpulab_jit),
        ("sdpa", sdpa_fn, contextlib.nullcontext),
        ("sdpa-flash2", sdpa_fn, lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
    ]


def inputs(p, requires_grad):
    g = torch.Generator(device="cuda").manual_seed(0)
    shape = (p["b"], p["h"], p["n"], p["d"])
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=p["dtype"], generator=g) for _ in range(4))
    if requires_grad:
        q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    return q, k, v, do


def step(fn, q, k, v, do, causal, backward):
    if not backward:
        return lambda: fn(q, k, v, causal)

    def run():
        o = fn(q, k, v, causal)
        return torch.autograd.grad(o, (q, k, v), do)

    return run


def wall_ms(run, repeats=5) -> float:
    """Eager wall time per call: calls back to back, one synchronize at the end; median of ``repeats``."""
    run()
    torch.cuda.synchronize()
    t = time.perf_counter()
    run()
    torch.cuda.synchronize()
    once = time.perf_counter() - t
    n = max(5, min(400, int(0.04 / max(once, 1e-6))))
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            run()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) / n * 1e3)
    return statistics.median(times)


def check(p, backward) -> str:
    """Relative max error of gpulab against SDPA (output, and dQ with ``backward``); the second call of gpulab,
    which runs through the direct launch."""
    q, k, v, do = inputs(p, backward)
    attn_launch.DIRECT = True
    for _ in range(2):
        o = flash_attention(q, k, v, is_causal=p["causal"])
        grads = torch.autograd.grad(o, (q, k, v), do) if backward else ()
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=p["causal"])
    ref_grads = torch.autograd.grad(ref, (q, k, v), do) if backward else ()
    errs = [((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6)).item()
            for a, b in zip((o, *grads), (ref, *ref_grads))]  # fmt: skip
    worst = max(errs)
    return f"max rel err vs SDPA {worst:.1e}" + ("" if worst < 3e-2 else "  <-- MISMATCH")


def run_gpu(args):
    import triton.testing

    rows = []
    for p in problems(args.grid):
        for backward in (False, True):
            label = f"{p['name']:34s} {'fwd+bwd' if backward else 'fwd':7s}"
            try:
                print(f"{label} {check(p, backward)}", flush=True)
            except Exception as exc:  # noqa: BLE001 - a probe: report and go on
                print(f"{label} check failed: {type(exc).__name__}: {exc}", flush=True)
                continue
            res = {}
            for name, fn, ctx in providers():
                try:
                    q, k, v, do = inputs(p, backward)
                    run = step(fn, q, k, v, do, p["causal"], backward)
                    with ctx():
                        w = wall_ms(run)
                        dev = triton.testing.do_bench(run, warmup=10, rep=40)
                    res[name] = (w, dev)
                except Exception as exc:  # noqa: BLE001
                    res[name] = None
                    print(f"    {name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            attn_launch.DIRECT = True
            rows.append((label, res))
            print("    " + "  ".join(f"{n} wall {r[0]:.3f} dev {r[1]:.3f}" for n, r in res.items() if r), flush=True)
    print("\nms per call (wall = eager, back to back; dev = do_bench) and ratios (> 1: gpulab faster)")
    print(f"{'problem':42s} {'gpulab wall':>11s} {'dev':>7s} {'jit wall':>9s} {'sdpa wall':>9s} {'fa2 wall':>9s} "
          f"{'fa2 dev':>8s} {'fa2/gl wall':>11s} {'fa2/gl dev':>10s} {'gl/sdpa wall':>12s}")  # fmt: skip
    for label, res in rows:
        g, j, s, f = (res.get(n) for n in ("gpulab", "gpulab-jit-launch", "sdpa", "sdpa-flash2"))

        def cell(r, i, w=9):
            return f"{r[i]:{w}.3f}" if r else f"{'-':>{w}s}"

        ratio_w = f"{f[0] / g[0]:11.2f}" if g and f else f"{'-':>11s}"
        ratio_d = f"{f[1] / g[1]:10.2f}" if g and f else f"{'-':>10s}"
        # the tiny problem's target: gpulab's eager wall time over SDPA's (host cost per call, <= 1.5)
        host = f"{g[0] / s[0]:12.2f}" if g and s else f"{'-':>12s}"
        print(f"{label:42s} {cell(g, 0, 11)} {cell(g, 1, 7)} {cell(j, 0)} {cell(s, 0)} {cell(f, 0)} {cell(f, 1, 8)} "
              f"{ratio_w} {ratio_d} {host}")  # fmt: skip
    print(f"\nlaunch counts: {attn_launch.launch_counts()}; plan cache: {attn_plan.plan_cache_info()}")
    print("targets (issue #16): tiny wall <= 1.5x SDPA's; fa2/gl wall >= 1.0 on every problem")


def run_profile():
    p = TINY
    q, k, v, do = inputs(p, True)
    run = step(lambda q, k, v, c: flash_attention(q, k, v, is_causal=c), q, k, v, do, True, True)
    for _ in range(5):
        run()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(200):
        run()
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


class _NoLaunch:
    """Stands in for a Triton kernel: ``kernel[grid](*args, **kwargs)`` does nothing."""

    arg_names = ()

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def run_stub():
    """Python-side cost per call with every kernel launch a no-op (works in the interpreter too)."""
    kernels = {
        attn_forward: ["attention_forward_kernel"],
        attn_backward: ["attention_preprocess_kernel", "attention_dkdv_kernel", "attention_dq_kernel"],
    }
    for mod, names in kernels.items():
        for name in names:
            if hasattr(mod, name):
                setattr(mod, name, _NoLaunch())
    if attn_plan is not None:
        attn_plan.clear_plan_cache()
    dtype = torch.float32 if runtime.INTERPRET else torch.bfloat16
    dev = runtime.device
    q, k, v, do = (torch.randn(1, 1, 128, 64, device=dev, dtype=dtype) for _ in range(4))
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))

    def fwd():
        return flash_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        o = flash_attention(qg, kg, vg, is_causal=True)
        return torch.autograd.grad(o, (qg, kg, vg), do)

    class Empty(torch.autograd.Function):  # the floor: an autograd Function that allocates and launches nothing
        @staticmethod
        def forward(ctx, q, k, v):
            o = torch.empty_like(q)
            ctx.save_for_backward(q, k, v, o)
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, _ = ctx.saved_tensors
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def floor():
        o = Empty.apply(qg, kg, vg)
        return torch.autograd.grad(o, (qg, kg, vg), do)

    def per_call_us(fn, n=2000, repeats=5):
        fn()
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(n):
                fn()
            times.append((time.perf_counter() - t) / n * 1e6)
        return statistics.median(times)

    with runtime.poisoning(False):
        print(f"launches as no-ops, {dev}, {dtype}, B1 H1 N128 d64 causal; microseconds per call (median of 5)")
        cases = (("forward", fwd), ("forward+backward", fwd_bwd), ("floor: empty autograd.Function fwd+bwd", floor))
        for name, fn in cases:
            print(f"  {name:40s} {per_call_us(fn):8.1f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--grid", action="store_true", help="also the lesson's 24 problems")
    parser.add_argument("--profile", action="store_true", help="cProfile of the tiny forward+backward")
    parser.add_argument("--stub", action="store_true", help="Python-side cost with no-op launches (CPU too)")
    args = parser.parse_args(argv)
    if args.stub:
        return run_stub()
    if not runtime.on_gpu():
        print("no CUDA GPU: only --stub runs here", file=sys.stderr)
        return 1
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, direct launch default {attn_launch.DIRECT}")
    if args.profile:
        return run_profile()
    return run_gpu(args)


if __name__ == "__main__":
    sys.exit(main())
