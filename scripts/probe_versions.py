"""Lesson 5's forward versions on a GPU: each checked against float64, then timed on both clocks beside cuDNN.

    OUT=/some/folder python scripts/probe_versions.py [--forward-only]

Problem (the lesson's): LSTM, B = 16, T = 1024, 12 heads of 64, bf16, Wx given; v5 (the split kernel) runs one head
of 768, cuDNN's own problem, since 12 heads of 64 each fit one SM. Peers in the same run: cuDNN ``nn.LSTM`` fp16,
dense hidden 768 (it also computes the input product). Writes ``$OUT/versions.jsonl`` (gpulab.bench records: ``ms``
device time, ``wall_ms`` eager wall time per call; ``registers``/``spills`` of the Triton kernel). Then the backward
versions b1-b3 forward+backward (``params['direction']``), beside cuDNN's forward+backward (gradients of the input and
every weight).
"""

from __future__ import annotations

import os
import sys
import time

import torch

import gpulab  # noqa: F401
from gpulab import bench, check, rnn
from gpulab.rnn.fused import plan, versions

KERNELS = {**{v: plan.KERNELS[v] for v in ("v1", "v2", "v3")}, "v4": plan.KERNELS["forward"],
           "v5": plan.KERNELS["split"]}  # fmt: skip
B, T = 16, 1024
results = []


def inputs(NH, DH, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s, sc=1.0: (torch.randn(*s, device="cuda", generator=g) * sc).to(dtype)  # noqa: E731
    return r(B, T, 4, NH, DH), r(4, NH, DH, DH, sc=0.5 / DH**0.5), r(4, NH, DH), r(2, B, 1, NH, DH)


def run_version(v, NH, DH):
    x = inputs(NH, DH)
    out, last = plan.run_version(v, *x)
    ref = rnn.flashrnn(*(t.double() for t in x), function="lstm", backend="vanilla")
    err = max(check.relative_error(out, ref[0]), check.relative_error(last, ref[1]))
    ok = err <= check.tolerance(torch.bfloat16)
    print(f"{v} NH={NH} DH={DH}: relative error {err:.2e} {'ok' if ok else 'FAILED'}", flush=True)
    if not ok:
        results.append(bench.Result(lesson="05", case=f"{v} check", ms=None, status=f"failed: error {err:.3g}",
                                    params={"version": v, "NH": NH, "DH": DH}))  # fmt: skip
        return
    with torch.no_grad():
        r = bench.measure(lambda: plan.run_version(v, *x), lesson="05", case=f"{v}: {versions.VERSIONS[v]}",
                          dtype="bfloat16", shape=[B, T, NH, DH], kernel=KERNELS[v], version=v, NH=NH, DH=DH,
                          error=err)  # fmt: skip
    print(f"   {r.ms:.3f} ms device, {r.wall_ms:.3f} ms wall, registers {r.registers}, spills {r.spills}", flush=True)
    results.append(r)


def run_backward_version(v, NH, DH):
    """Forward+backward with backward version ``v`` (gradients of sum(states_all) w.r.t. Wx, R, b, states), checked
    against float64 autograd through the vanilla loop, then timed on both clocks."""
    x = inputs(NH, DH)
    grads = plan.run_training(v, *x)
    leaves = [t.double().requires_grad_(True) for t in x]
    refs = torch.autograd.grad(rnn.flashrnn(*leaves, function="lstm", backend="vanilla")[0].sum(), leaves)
    err = max(check.relative_error(g, r) for g, r in zip(grads, refs))
    ok = err <= check.tolerance(torch.bfloat16)
    print(f"{v} NH={NH} DH={DH}: gradients' relative error {err:.2e} {'ok' if ok else 'FAILED'}", flush=True)
    if not ok:
        results.append(bench.Result(lesson="05", case=f"{v} check", ms=None, status=f"failed: error {err:.3g}",
                                    params={"version": v, "NH": NH, "DH": DH}))  # fmt: skip
        return
    r = bench.measure(lambda: plan.run_training(v, *x), lesson="05", case=f"{v}: {versions.BACKWARD_VERSIONS[v]}",
                      dtype="bfloat16", shape=[B, T, NH, DH], version=v, NH=NH, DH=DH, error=err,
                      direction="forward+backward")  # fmt: skip
    print(f"   {r.ms:.3f} ms device, {r.wall_ms:.3f} ms wall", flush=True)
    results.append(r)


def cudnn_training(hidden):
    m = torch.nn.LSTM(hidden, hidden, batch_first=True).cuda().half()
    xi = torch.randn(B, T, hidden, device="cuda", dtype=torch.float16, requires_grad=True)
    params = [xi, *m.parameters()]

    def step():
        torch.autograd.grad(m(xi)[0].sum(), params)

    r = bench.measure(step, lesson="05", case=f"cuDNN nn.LSTM float16, hidden {hidden}, forward+backward",
                      dtype="float16", shape=[B, T, 1, hidden], version="cuDNN", NH=1, DH=hidden,
                      direction="forward+backward")  # fmt: skip
    print(f"cuDNN hidden {hidden} forward+backward: {r.ms:.3f} ms device, {r.wall_ms:.3f} ms wall", flush=True)
    results.append(r)


def cudnn(hidden):
    m = torch.nn.LSTM(hidden, hidden, batch_first=True).cuda().half()
    xi = torch.randn(B, T, hidden, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        r = bench.measure(lambda: m(xi), lesson="05", case=f"cuDNN nn.LSTM float16, hidden {hidden}", dtype="float16",
                          shape=[B, T, 1, hidden], version="cuDNN", NH=1, DH=hidden)  # fmt: skip
    print(f"cuDNN hidden {hidden}: {r.ms:.3f} ms device, {r.wall_ms:.3f} ms wall", flush=True)
    results.append(r)


t0 = time.time()
for v in ("v1", "v2", "v3", "v4"):
    run_version(v, 12, 64)
run_version("v5", 1, 768)
cudnn(768)
if "--forward-only" not in sys.argv:
    for v in ("b1", "b2"):
        run_backward_version(v, 12, 64)
    run_backward_version("b3", 1, 768)
    cudnn_training(768)
print(f"done in {time.time() - t0:.0f} s")
out = os.environ.get("OUT")
if out:
    path = bench.save(results, "05", path=os.path.join(out, "versions.jsonl"))
    print(f"wrote {path}")
sys.exit(0 if all(r.status == "ok" for r in results) else 1)
