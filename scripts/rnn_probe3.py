# ruff: noqa: B023
"""Lesson 5 probe 3 (one device call): forward+backward through autograd at the issue's size with the backward cut
into pieces in time at several places (parameter products overlapped on a second stream), and every gradient checked
against the float64 vanilla backend."""

import torch

from gpulab import bench, check
from gpulab.rnn import api, flashrnn, fused_backward
from gpulab.rnn.benchmark import problem_inputs


def main():
    api.POISON = False
    B, T, NH, DH = 16, 1024, 12, 64
    inputs = problem_inputs(B, T, NH, DH, torch.bfloat16)
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    g = torch.Generator(device="cpu").manual_seed(1)
    out_shapes = [(2, B, T, NH, DH), (2, B, 1, NH, DH)]
    w = [torch.randn(s, generator=g, dtype=torch.float64).cuda() for s in out_shapes]
    ref_in = [t.detach().double().requires_grad_() for t in inputs]
    ref = flashrnn(*ref_in, function="lstm", backend="vanilla")
    ref_grads = torch.autograd.grad(sum((o * wi).sum() for o, wi in zip(ref, w)), ref_in)
    for cuts in ((), (0.0625,), (0.125,), (0.25,)):
        fused_backward.CUTS = cuts
        out = flashrnn(*leaves, function="lstm", backend="fused")
        grads = torch.autograd.grad(sum((o.double() * wi).sum() for o, wi in zip(out, w)), leaves)
        errs = " ".join(
            f"{n}={check.relative_error(a, b):.2e}"
            for n, a, b in zip(["out", "last", "dWx", "dR", "db", "ds0"], tuple(out) + grads, tuple(ref) + ref_grads)
        )

        def fwd_bwd():
            o, la = flashrnn(*leaves, function="lstm", backend="fused")
            return torch.autograd.grad((o, la), leaves, (torch.ones_like(o), torch.ones_like(la)))

        t = bench.time_callable(fwd_bwd, warmup_ms=30, rep_ms=150)
        print(f"cuts={cuts}: fwd+bwd {t.median_ms:.3f} ms   {errs}", flush=True)
    with torch.no_grad():
        t = bench.time_callable(lambda: flashrnn(*inputs, function="lstm", backend="fused"), warmup_ms=30, rep_ms=150)
    print(f"forward {t.median_ms:.3f} ms")


if __name__ == "__main__":
    main()
