"""Lesson 5's named benchmark part for the recurrence *as a training loop calls it*: ``python -m gpulab bench 05
called``, records ``<gpu>-<date>-called.jsonl`` under ``benchmarks/05_fused_rnn/split/``.

Two problems, LSTM, bf16, Wx given, ``flashrnn(backend='fused')``: the main one (B 16, T 1024, 12 heads of 64) and a
tiny one (B 1, T 4, 2 heads of 64), where the host's work is all there is. Per problem (``kind='called'``,
``params['mode']``), every mode timed on the eager wall clock (calls back to back, one synchronize) and the device
clock:

- ``loop``: ``for p in leaves: p.grad = None``, forward, ``out.sum().backward()`` (what a training loop does with
  ``zero_grad(set_to_none=True)``, PyTorch's default);
- ``loop accumulating``: the same without clearing the gradients (autograd adds into ``.grad``: one more kernel per
  input);
- ``autograd.grad``: forward, ``torch.autograd.grad(out.sum(), leaves)``;
- ``graph``: the ``autograd.grad`` step captured in a CUDA graph and replayed (no host work per step);
- ``forward``: the forward alone, without autograd.

Then the tiny problem's wall time taken apart (``kind='breakdown'``): the forward with autograd recording, the sum, the
gradients cleared and the backward alone (forwards made first), each timed the same way, against the whole step; the
number of kernels a step launches (torch.profiler); the wall time of one eager PyTorch op (an in-place add on one
element: dispatch and a launch, the floor of any eager op); and the host's share, the step's wall time less the
kernels' device time (the graph's replay). On CPU: the tiny problem in the interpreter, checked paths, no timing claims.
"""

from __future__ import annotations

import time

import torch

from gpulab import bench, runtime
from gpulab.rnn.api import flashrnn
from gpulab.rnn.fused.benchmark import problem_inputs

__all__ = ["called", "PROBLEMS"]

PROBLEMS = {"main": (16, 1024, 12, 64), "tiny": (1, 4, 2, 64)}
"""Problem name -> (B, T, NH, DH) on a GPU; in the interpreter both run as the tiny one with T = 3."""


def _shape(name):
    B, T, NH, DH = PROBLEMS[name]
    return runtime.pick(cpu=(1, 3, 2, 16), gpu=(B, T, NH, DH))


def _leaves(name):
    B, T, NH, DH = _shape(name)
    dtype = runtime.pick(cpu=torch.float32, gpu=torch.bfloat16)
    return [t.detach().requires_grad_(True) for t in problem_inputs(B, T, NH, DH, dtype)]


def _modes(x) -> dict:
    """The step functions of each mode on leaves ``x`` (the graph mode made from ``autograd.grad``; None on CPU)."""

    def forward():
        return flashrnn(*x, function="lstm", backend="fused")[0]

    def loop():
        for t in x:
            t.grad = None
        forward().sum().backward()

    def loop_accumulating():
        forward().sum().backward()

    def grad():
        return torch.autograd.grad(forward().sum(), x)

    def forward_only():
        with torch.no_grad():
            return forward()

    out = {"loop": loop, "loop accumulating": loop_accumulating, "autograd.grad": grad, "forward": forward_only}
    if runtime.on_gpu():
        out["graph"] = bench.capture(grad)
    return out


def _wall_ms(fn, n) -> float:
    """Eager wall ms per call: ``n`` calls back to back, one synchronize; the best of three such loops."""
    best = float("inf")
    for _ in range(3):
        runtime.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        runtime.synchronize()
        best = min(best, (time.perf_counter() - t) / n * 1e3)
    return best


def _calls(name) -> int:
    return runtime.pick(cpu=2, gpu=20 if name == "main" else 300)


def _record(name, mode, fn, **extra) -> bench.Result:
    B, T, NH, DH = _shape(name)
    dtype = runtime.pick(cpu="float32", gpu="bfloat16")
    r = bench.measure(fn, lesson="05", case=f"{name} {mode}", dtype=dtype, wall_clock=False, kind="called",
                      problem=name, mode=mode, B=B, T=T, NH=NH, DH=DH, **extra)  # fmt: skip
    r.wall_ms = _wall_ms(fn, _calls(name))
    return r


def _kernels_per_step(fn) -> int | None:
    if not runtime.on_gpu():
        return None
    from torch.profiler import ProfilerActivity, profile

    fn()
    runtime.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        runtime.synchronize()
    return sum(e.count for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA)


def _breakdown(x, step_fns) -> list[bench.Result]:
    """The tiny step's wall time in pieces (see the module): forward with autograd recording, the sum, the backward
    alone; the kernels per step; the host's share."""
    n = _calls("tiny")

    def forward():
        return flashrnn(*x, function="lstm", backend="fused")[0]

    outs = [forward() for _ in range(n)]
    sums = [o.sum() for o in outs]
    runtime.synchronize()
    t = time.perf_counter()
    for s in sums:  # as the loop runs it: the gradients cleared, then the backward
        for leaf in x:
            leaf.grad = None
        s.backward()
    runtime.synchronize()
    backward_ms = (time.perf_counter() - t) / n * 1e3
    pieces = {
        "forward (autograd recording)": _wall_ms(forward, n),
        "sum": _wall_ms(lambda o=outs[0]: o.sum(), n),
        "gradients cleared + backward": backward_ms,
    }
    whole = _wall_ms(step_fns["loop"], n)
    one = torch.zeros(1, device=x[0].device)
    one_op = _wall_ms(lambda: one.add_(1), n)  # the floor of one eager PyTorch op: dispatch and a launch
    graph = step_fns.get("graph")
    kernels_ms = bench.time_callable(graph).median_ms if graph is not None else None
    B, T, NH, DH = _shape("tiny")
    r = bench.record(lesson="05", case="tiny breakdown", kind="breakdown", problem="tiny", B=B, T=T, NH=NH, DH=DH,
                     pieces_ms=pieces, pieces_sum_ms=sum(pieces.values()), step_wall_ms=whole,
                     kernels_device_ms=kernels_ms, kernels_per_step=_kernels_per_step(step_fns["loop"]),
                     host_ms=whole - kernels_ms if kernels_ms is not None else None, one_op_ms=one_op)  # fmt: skip
    r.wall_ms = whole
    return [r]


def called(progress=None, problems=None):
    """``python -m gpulab bench 05 called``: every mode of ``problems`` (names of :data:`PROBLEMS`, default both),
    then the tiny step's breakdown."""
    problems = tuple(PROBLEMS) if problems is None else problems
    if isinstance(problems, str) or not isinstance(problems, (list, tuple)) or not problems:
        raise TypeError(f"problems must be a non-empty list of names from {list(PROBLEMS)}, got {problems!r}.")
    for name in problems:
        runtime.one_of("problems", name, tuple(PROBLEMS))
    out = []
    for name in problems:
        x = _leaves(name)
        fns = _modes(x)
        for mode, fn in fns.items():
            if fn is not None:
                out.append(_record(name, mode, fn))
        if name == "tiny":
            out += _breakdown(x, fns)
    return out
