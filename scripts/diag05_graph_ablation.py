"""Diagnosis (GPU): which change of the lean two-stream backward (branch rnn-host, commits a70160f, f2efeaa, reverted)
made the main problem's CUDA graph replay slower (H100, 2026-11-26: 3.17 ms device time against 2.12 ms; the eager
``autograd.grad`` step unchanged). Issue 40.

Each variant replaces :func:`gpulab.rnn.fused.backward.fused_rnn_gradients` (through the plan, whose chosen loops are
cleared) by the package's two-stream backward with some of the four changes on:

- ``manual``: the streams switched by ``torch.cuda.set_stream`` instead of the ``torch.cuda.stream`` context manager;
- ``event``: one event made once and recorded again for every wait, instead of ``wait_stream``'s new event per wait;
- ``kernel``: h_{t-1} with its column of ones built by one Triton launch (:func:`previous_h_kernel`, below) instead of
  ``previous_h_ones``' zeros, two copies and a column fill;
- ``add``: each piece's products added into the fp32 sums in place (``prod.add_(bf16)``), not ``prod += .float()``.

Per variant, in one process: the graph of the ``autograd.grad`` step (``bench.capture``) timed on the device clock, the
eager ``autograd.grad`` step and the loop step on the device clock, the loop's wall and host ms (20 calls back to back),
and whether one loop step's gradients equal the package's bit for bit. Usage: ``python scripts/diag05_graph_ablation.py
OUTDIR [variant ...]`` (default: every single change, then all four); prints one JSON line per variant and appends them
to ``OUTDIR/ablation.jsonl``. Variant 'attempt': the reverted code as it was (the four changes and per-gate views by
``unbind``).
"""

import json
import os
import sys
import time

import torch
import triton
import triton.language as tl

import gpulab  # noqa: F401
from gpulab import bench
from gpulab.check import new_output
from gpulab.launch import aligned, direct_stream, keyed_launch
from gpulab.rnn.api import flashrnn
from gpulab.rnn.backends.parameter_grads import PAD, gate_products, previous_h_ones, split_products
from gpulab.rnn.fused import backward, plan
from gpulab.rnn.fused.benchmark import problem_inputs

OUT = sys.argv[1] if len(sys.argv) > 1 else "diag_out"
backward.DG_LAYOUT = "time"  # the diagnosed code's layout (the package stores dG in Wx's layout since 2026-11-27)
VARIANTS = sys.argv[2:] or ["package", "manual", "event", "kernel", "add", "manual+event+kernel+add", "attempt"]
os.makedirs(OUT, exist_ok=True)
B, T, NH, DH = 16, 1024, 12, 64


@triton.jit
def previous_h_kernel(out_ptr, s0_ptr, h_ptr, B, T, NH, DH: tl.constexpr, W: tl.constexpr, TIME_MAJOR: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr):  # fmt: skip
    """Row k of [h_{t-1}, 1, 0 ...], all heads: [NH, W] (W = DH + PAD) at ``h_ptr + k * NH * W``; (t, b) with
    k = t * B + b if ``TIME_MAJOR``, else (b, t) with k = b * T + t. h_{-1} is the initial h (s0 [S, B, 1, NH, DH],
    index 0), h_{t-1} for t > 0 the outputs out [S, B, T, NH, DH] at step t - 1: copied, not computed."""
    k = tl.program_id(0)
    if TIME_MAJOR:
        t, b = k // B, k % B
    else:
        b, t = k // T, k % T
    n = tl.arange(0, BLOCK_N)[:, None]  # [BLOCK_N, 1] heads
    c = tl.arange(0, BLOCK_W)[None, :]  # [1, BLOCK_W] columns
    inside = (n < NH) & (c < DH)
    HD = NH * DH
    prev = tl.load(out_ptr + (b.to(tl.int64) * T + t - 1) * HD + n * DH + c, mask=inside & (t > 0), other=0.0)
    first = tl.load(s0_ptr + b * HD + n * DH + c, mask=inside & (t == 0), other=0.0)
    v = tl.where(c == DH, 1.0, tl.where(t > 0, prev, first).to(tl.float32))  # (16-bit to fp32 and back: exact)
    tl.store(h_ptr + k.to(tl.int64) * NH * W + n * W + c, v.to(h_ptr.dtype.element_ty), mask=(n < NH) & (c < W))


def previous_h_launched(out, states):
    """[h_{t-1}, 1, 0 ...] time-major [T, B, NH, DH + PAD] in one launch of :func:`previous_h_kernel`."""
    _, B_, T_, NH_, DH_ = out.shape
    h = new_output((T_, B_, NH_, DH_ + PAD), dtype=out.dtype, device=out.device)

    def make():
        return (B_ * T_,), dict(DH=DH_, W=DH_ + PAD, TIME_MAJOR=True, BLOCK_N=triton.next_power_of_2(NH_),
                                BLOCK_W=triton.next_power_of_2(DH_ + PAD), num_warps=4)  # fmt: skip

    ints = (B_, T_, NH_)
    launch = keyed_launch((previous_h_kernel, out.dtype, DH_, True) + ints, make)
    launch(direct_stream(out.device) if aligned(out, states, h) else None, out, states, h, *ints)
    return h


_SIDE, _EVENT = {}, {}


def gradients(changes):
    """fused_rnn_gradients (the two-stream path, time-major dG) with ``changes`` (a set of the four names) on."""

    def run(d_out, gates, out, states, R, function="lstm", tiling=None, d_last=None):
        # the package's own helpers (private names, read here for the diagnosis only)
        fn, tensors, d_last, cfg, dG = backward._inputs(d_out, gates, out, states, R, function, tiling, d_last)
        d_out, gates, out, states, R = tensors
        bounds = backward.pieces(out.shape[2])
        assert len(bounds) > 1 and out.is_cuda and backward.DG_LAYOUT == "time"
        main = torch.cuda.current_stream(out.device)
        prev = torch.cuda.current_stream()
        side = _SIDE.setdefault(out.device, torch.cuda.Stream(device=out.device))
        ready = _EVENT.setdefault(out.device, torch.cuda.Event())

        def wait(waiter, on):
            if "event" in changes:
                ready.record(on)
                waiter.wait_event(ready)
            else:
                waiter.wait_stream(on)

        def on_side(work):
            if "manual" in changes:
                torch.cuda.set_stream(side)
                try:
                    return work()
                finally:
                    torch.cuda.set_stream(main)
                    torch.cuda.set_stream(prev)
            with torch.cuda.stream(side):
                return work()

        wait(side, main)
        build = previous_h_launched if "kernel" in changes else (lambda o, s: previous_h_ones(o, s, time_major=True))
        h = on_side(lambda: build(out, states))
        prod = on_side(lambda: torch.zeros(fn.gates_b, NH, DH, DH + PAD, dtype=torch.float32, device=out.device))
        carry = d_last
        for t0, t1 in reversed(bounds):
            carry = backward._launch(d_out, gates, out, states, R, fn, cfg, dG, t0, t1, carry, True)
            wait(side, main)
            rows = (t1 - t0) * B

            def products(t0=t0, t1=t1, rows=rows):
                dg_rows = dG[t0:t1].reshape(rows, fn.gates_b, NH, DH)
                p = gate_products(dg_rows, h[t0:t1].view(rows, NH, DH + PAD))  # fp32 (.float() inside)
                return p

            if "add" in changes:  # the bf16 products added in place: the same bmm calls, no fp32 copy

                def products_add(t0=t0, t1=t1, rows=rows):
                    dg_rows = dG[t0:t1].reshape(rows, fn.gates_b, NH, DH)
                    hh = h[t0:t1].view(rows, NH, DH + PAD).transpose(0, 1)
                    o = torch.empty(fn.gates_b, NH, DH, DH + PAD, dtype=dg_rows.dtype, device=dg_rows.device)
                    for g in range(fn.gates_b):
                        torch.bmm(dg_rows[:, g].permute(1, 2, 0), hh, out=o[g])
                    prod.add_(o)

                on_side(products_add)
            else:
                on_side(lambda: prod.add_(products()))
        wait(main, side)
        for t in (dG, prod, h):
            t.record_stream(side)
        dR, db = split_products(prod, fn, out.dtype)
        return dG.transpose(0, 1)[:, :, fn.w_gates], dR, db, carry

    return run


def attempt(d_out, gates, out, states, R, function="lstm", tiling=None, d_last=None):
    """The two-stream path exactly as commit a70160f + f2efeaa had it (variant 'attempt')."""
    fn, tensors, d_last, cfg, dG = backward._inputs(d_out, gates, out, states, R, function, tiling, d_last)
    d_out, gates, out, states, R = tensors
    bounds = backward.pieces(out.shape[2])
    main = torch.cuda.current_stream(out.device)
    prev = torch.cuda.current_stream()
    side = _SIDE.setdefault(out.device, torch.cuda.Stream(device=out.device))
    ready = _EVENT.setdefault(out.device, torch.cuda.Event())
    carry = d_last
    try:
        ready.record(main)
        side.wait_event(ready)
        torch.cuda.set_stream(side)
        h = previous_h_launched(out, states)
        prod = torch.zeros(fn.gates_b, NH, DH, DH + PAD, dtype=torch.float32, device=out.device)
        for t0, t1 in reversed(bounds):
            torch.cuda.set_stream(main)
            carry = backward._launch(d_out, gates, out, states, R, fn, cfg, dG, t0, t1, carry, True)
            ready.record(main)
            side.wait_event(ready)
            torch.cuda.set_stream(side)
            rows = (t1 - t0) * B
            dg_rows = dG[t0:t1].reshape(rows, fn.gates_b, NH, DH)
            hh = h[t0:t1].view(rows, NH, DH + PAD).transpose(0, 1)
            o = torch.empty(fn.gates_b, NH, DH, DH + PAD, dtype=dg_rows.dtype, device=dg_rows.device)
            for a, r in zip(dg_rows.permute(1, 2, 3, 0).unbind(0), o.unbind(0)):
                torch.bmm(a, hh, out=r)
            prod.add_(o)
    finally:
        torch.cuda.set_stream(main)
        torch.cuda.set_stream(prev)
    ready.record(side)
    main.wait_event(ready)
    for t in (dG, prod, h):
        t.record_stream(side)
    dR, db = split_products(prod, fn, out.dtype)
    return dG.transpose(0, 1)[:, :, fn.w_gates], dR, db, carry


x = [t.detach().requires_grad_(True) for t in problem_inputs(B, T, NH, DH, torch.bfloat16)]


def loop():
    for t in x:
        t.grad = None
    flashrnn(*x, function="lstm", backend="fused")[0].sum().backward()


def grad():
    return torch.autograd.grad(flashrnn(*x, function="lstm", backend="fused")[0].sum(), x)


def clocks(fn, n=20):
    best = (float("inf"), float("inf"))
    for _ in range(3):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        h = time.perf_counter()
        torch.cuda.synchronize()
        best = min(best, ((time.perf_counter() - t) / n * 1e3, (h - t) / n * 1e3))
    return best


reference = None
for name in VARIANTS:
    changes = set() if name in ("package", "attempt") else set(name.split("+"))
    plan.fused_rnn_gradients = (
        attempt if name == "attempt" else gradients(changes) if changes else backward.fused_rnn_gradients
    )
    plan.clear_cache()
    x[:] = [t.detach().requires_grad_(True) for t in x]  # fresh leaves: no AccumulateGrad kept by an earlier graph
    try:
        for _ in range(3):
            loop()
        grads = [t.grad.clone() for t in x]
        if reference is None:
            reference = grads
        graph = bench.capture(grad)
        res = {
            "variant": name,
            "device": torch.cuda.get_device_name(),
            "graph ms": bench.time_callable(graph).median_ms,
            "autograd.grad ms": bench.time_callable(grad).median_ms,
            "loop ms": bench.time_callable(loop).median_ms,
            "loop wall, host ms": clocks(loop),
            "graph wall ms": clocks(graph)[0],
            "grads equal the first variant's": all(torch.equal(a, b) for a, b in zip(grads, reference)),
        }
        del graph
    except Exception as exc:  # noqa: BLE001 - a variant that fails is a finding
        res = {"variant": name, "failed": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(res), flush=True)
    with open(os.path.join(OUT, "ablation.jsonl"), "a") as f:
        f.write(json.dumps(res) + "\n")
