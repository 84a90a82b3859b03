# ruff: noqa: B023 (each lambda is timed before its loop variables move on)
"""Lesson 5 probe (one device call): the fused kernels at the issue's size, checked and timed side by side.

Usage on the GPU machine: PYTHONPATH=. python scripts/rnn_probe.py. Prints a table: ms and ns per step of the forward
(inference: no gates saved; training: gates saved) and backward kernels for num_warps variants, the pieces of the
backward (kernel, dR/db products), forward+backward through autograd, and relative errors against float64.
"""

import dataclasses
import sys
import traceback

import torch

from gpulab import bench, check
from gpulab.rnn import api, flashrnn, fused_backward, fused_forward, tiling
from gpulab.rnn.benchmark import problem_inputs

ROWS = []


def timed(name, fn, T, note=""):
    try:
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = bench.time_callable(fn, warmup_ms=20, rep_ms=60)
        ROWS.append((name, t.median_ms, t.median_ms * 1e6 / T, note))
        print(f"{name:48s} {t.median_ms:8.3f} ms {t.median_ms * 1e6 / T:7.0f} ns/step {note}", flush=True)
    except Exception as exc:  # noqa: BLE001
        ROWS.append((name, float("nan"), float("nan"), f"FAILED {type(exc).__name__}: {str(exc)[:120]}"))
        print(f"{name}: FAILED", flush=True)
        traceback.print_exc(limit=2)


def grads_check(B, T, NH, DH, dtype=torch.bfloat16):
    """fused forward + every gradient vs the float64 vanilla backend (norm-wise relative errors)."""
    inputs = problem_inputs(B, T, NH, DH, dtype)
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = flashrnn(*leaves, function="lstm", backend="fused")
    g = torch.Generator(device="cpu").manual_seed(1)
    w = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(out[0].device) for o in out]
    grads = torch.autograd.grad(sum((o.double() * wi).sum() for o, wi in zip(out, w)), leaves)
    ref_in = [t.detach().double().requires_grad_() for t in inputs]
    ref = flashrnn(*ref_in, function="lstm", backend="vanilla")
    ref_grads = torch.autograd.grad(sum((o * wi).sum() for o, wi in zip(ref, w)), ref_in)
    names = ["states", "last", "dWx", "dR", "db", "dstates"]
    errs = {n: check.relative_error(a, b) for n, a, b in zip(names, tuple(out) + grads, tuple(ref) + ref_grads)}
    line = " ".join(f"{k}={v:.2e}" for k, v in errs.items())
    print(f"check B={B} T={T} NH={NH} DH={DH}: {line}", flush=True)
    ROWS.append((f"check DH={DH}", 0.0, 0.0, line))


def main():
    sys.path.insert(0, "scripts/probe_old")  # optional: copies of an older version's two kernel modules, to compare
    try:
        import old_backward
        import old_forward
    except ImportError:
        old_backward = old_forward = None

    api.POISON = False
    small = not torch.cuda.is_available()  # CPU dry run of the script itself (interpreter, fp32)
    B, T = (2, 4) if small else (16, 1024)
    for NH, DH in ((2, 16),) if small else ((12, 64), (6, 128)):
        dt = torch.float32 if small else torch.bfloat16
        Wx, R, b, s0 = problem_inputs(B, T, NH, DH, dt)
        base_f = tiling.fused_tiling(B, NH, DH, "lstm", dt, direction="forward")
        base_b = tiling.fused_tiling(B, NH, DH, "lstm", dt, direction="backward")
        print(
            f"--- DH={DH}: tiling fwd {base_f.num_warps}w r_on_chip={base_f.r_on_chip}, "
            f"bwd {base_b.num_warps}w r_on_chip={base_b.r_on_chip}",
            flush=True,
        )
        ref_out, _, ref_gates = fused_forward.fused_rnn_forward(Wx, R, b, s0, "lstm", save_gates=True)
        d_out = torch.randn_like(ref_out)
        d_last = torch.randn_like(s0)
        ref_dG, _ = fused_backward.fused_rnn_backward(d_out, ref_gates, ref_out, s0, R, "lstm", d_last=d_last)
        on_chip = (base_f.r_on_chip, True) if not base_f.r_on_chip else (True,)
        for roc in on_chip:
            for w in (4, 8, 16):
                cf = dataclasses.replace(base_f, num_warps=w, r_on_chip=roc)
                cb = dataclasses.replace(base_b, num_warps=w, r_on_chip=roc)
                tag = f"w{w}{'' if roc == base_f.r_on_chip else ' R on chip'}"
                try:
                    o, _, gt = fused_forward.fused_rnn_forward(Wx, R, b, s0, "lstm", save_gates=True, tiling=cf)
                    dG, _ = fused_backward.fused_rnn_backward(d_out, gt, o, s0, R, "lstm", tiling=cb, d_last=d_last)
                    e_out, e_dg = check.relative_error(o, ref_out), check.relative_error(dG, ref_dG)
                    note = f"err vs default: out {e_out:.1e} dG {e_dg:.1e}"
                except Exception as exc:  # noqa: BLE001
                    print(f"DH={DH} {tag}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                    continue
                timed(
                    f"new fwd infer DH={DH} {tag}",
                    lambda cf=cf: fused_forward.fused_rnn_forward(Wx, R, b, s0, "lstm", save_gates=False, tiling=cf),
                    T,
                    note,
                )
                timed(
                    f"new fwd train DH={DH} {tag}",
                    lambda cf=cf: fused_forward.fused_rnn_forward(Wx, R, b, s0, "lstm", save_gates=True, tiling=cf),
                    T,
                )
                timed(
                    f"new bwd kernel DH={DH} {tag}",
                    lambda cb=cb: fused_backward.fused_rnn_backward(
                        d_out, ref_gates, ref_out, s0, R, "lstm", tiling=cb, d_last=d_last
                    ),
                    T,
                )
        if old_forward is not None:  # the old kernels, same inputs
            timed(
                f"OLD fwd infer DH={DH}",
                lambda: old_forward.fused_rnn_forward(Wx, R, b, s0, "lstm", save_gates=False),
                T,
            )
            old_o, _, old_g = old_forward.fused_rnn_forward(Wx, R, b, s0, "lstm", save_gates=True)
            print(f"old vs new out: {check.relative_error(old_o, ref_out):.2e}", flush=True)
            timed(
                f"OLD bwd kernel DH={DH}",
                lambda: old_backward.fused_rnn_backward(d_out, old_g, old_o, s0, R, "lstm"),
                T,
            )
        timed(f"parameter_grads DH={DH}", lambda: fused_backward.parameter_grads(ref_dG, ref_out, s0, "lstm"), T)
        leaves = [t.detach().clone().requires_grad_() for t in (Wx, R, b, s0)]

        def fwd_bwd():
            out, last = flashrnn(*leaves, function="lstm", backend="fused")
            return torch.autograd.grad((out, last), leaves, (torch.ones_like(out), torch.ones_like(last)))

        timed(f"new fwd+bwd autograd DH={DH}", fwd_bwd, T)
        with torch.no_grad():
            timed(f"new fwd flashrnn() DH={DH}", lambda: flashrnn(Wx, R, b, s0, function="lstm", backend="fused"), T)
        grads_check(B, T, NH, DH, dt)
    print("\nSUMMARY")
    for name, ms, ns, note in ROWS:
        print(f"{name:48s} {ms:8.3f} {ns:7.0f}  {note}")


if __name__ == "__main__":
    main()
