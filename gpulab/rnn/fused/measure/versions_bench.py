"""Lesson 6's forward and backward versions, a named part of its benchmark: ``python -m gpulab bench 06 versions``,
records under ``benchmarks/06_fused_rnn/versions/`` that :mod:`gpulab.rnn.fused.measure.versions_report` reads.

The lesson's problem: LSTM, B = 16, T = 1024, 12 heads of 64, bf16, Wx given. The forward versions v1 ... v4 run
it; v5 (the split kernel) runs one head of 768, cuDNN's own problem (12 heads of 64 each fit one SM). Peer in the same
run: cuDNN's ``nn.LSTM`` in fp16, dense hidden 768 (it also computes the input product). Then the backward versions
b1, b2 (12 x 64) and b3 (1 x 768) forward+backward (``params['direction']``), beside cuDNN's forward+backward.
Every version is checked against the float64 recurrence (its gradients against float64 autograd; cuDNN against its
module in float64) before anything is timed, on both clocks; ``registers``/``spills`` of each forward's kernel. Each
record's ``params`` hold ``version``, ``NH``, ``DH`` (and ``error``: the largest relative error). On CPU: a tiny
version in the interpreter (float32).
"""

from __future__ import annotations

import math

import torch

from gpulab import bench, check, runtime
from gpulab.rnn.api import flashrnn
from gpulab.rnn.fused import plan
from gpulab.rnn.fused import versions as ladder
from gpulab.rnn.fused.measure.benchmark import check_states, dense_reference, dense_run, problem_inputs

__all__ = ["versions", "forward_benchmarks", "backward_benchmarks"]


def _sizes():
    """(B, T, dtype, (NH, DH) of v1-v4 and b1-b2, (NH, DH) of v5 and b3, cuDNN's dtype)."""
    return runtime.pick(
        cpu=(2, 3, torch.float32, (2, 16), (1, 32), torch.float32),
        gpu=(16, 1024, torch.bfloat16, (12, 64), (1, 768), torch.float16),
    )


def _largest_error(out, ref) -> dict:
    outs, refs = (out, ref) if isinstance(out, tuple) else ((out,), (ref,))
    err = max(float(check.relative_error(a, b)) for a, b in zip(outs, refs))
    tol = check.tolerance(outs[0].dtype)
    if not (math.isfinite(err) and err <= tol):
        raise AssertionError(f"relative error {err:.3g} (tolerance {tol:.3g})")
    return {"error": err}


def _forward_reference(version, *x):
    return flashrnn(*(t.double() for t in x), function="lstm", backend="vanilla")


def _gradients_reference(version, *x):
    leaves = [t.detach().double().requires_grad_(True) for t in x]
    return tuple(torch.autograd.grad(flashrnn(*leaves, function="lstm", backend="vanilla")[0].sum(), leaves))


def _forward_kernel(version, NH, DH):
    name = {"v4": "forward", "v5": "split"}.get(version, version)
    return plan.KERNELS[name] if name in plan.KERNELS else ladder.KERNELS[name]


def _dense(name, hidden, B, T, dtype, training):
    def inputs():
        torch.manual_seed(0)
        m = torch.nn.LSTM(hidden, hidden).to(runtime.device, dtype)
        return torch.randn(T, B, hidden, device=runtime.device, dtype=dtype), m, training

    return bench.Benchmark(
        lesson="06", name=name, cases=[{}], inputs=inputs, providers={"cuDNN": dense_run}, reference=dense_reference,
        check=check_states, on_mismatch="record", dtype=dtype,
        shape=[B, T, 1, hidden], label=lambda: "",
        params={"version": "cuDNN", "NH": 1, "DH": hidden, **({"direction": "forward+backward"} if training else {})},
    )  # fmt: skip


def forward_benchmarks() -> list[bench.Benchmark]:
    """The forward versions v1 ... v5 (``kind`` by ``version``), and cuDNN's forward."""
    B, T, dtype, small, wide, dense_dtype = _sizes()
    cases = [{"version": v, "NH": small[0], "DH": small[1]} for v in ("v1", "v2", "v3", "v4")]
    cases.append({"version": "v5", "NH": wide[0], "DH": wide[1]})
    ours = bench.Benchmark(
        lesson="06", name="versions", cases=cases,
        inputs=lambda version, NH, DH: (version, *problem_inputs(B, T, NH, DH, dtype)),
        providers={"gpulab": ladder.run_version}, reference=_forward_reference, check=_largest_error,
        kernels={"gpulab": _forward_kernel}, shape=lambda version, NH, DH: [B, T, NH, DH], dtype=dtype,
        label=lambda version, NH, DH: f"{version}: {ladder.VERSIONS[version]}",
    )  # fmt: skip
    hidden = wide[0] * wide[1]
    return [ours, _dense(f"cuDNN nn.LSTM {_name(dense_dtype)}, hidden {hidden}", hidden, B, T, dense_dtype, False)]


def backward_benchmarks() -> list[bench.Benchmark]:
    """The backward versions b1 ... b3 forward+backward (the gradients of sum(states_all) w.r.t. Wx, R, b, states),
    and cuDNN's forward+backward (gradients of its input and every weight)."""
    B, T, dtype, small, wide, dense_dtype = _sizes()
    cases = [{"version": v, "NH": small[0], "DH": small[1]} for v in ("b1", "b2")]
    cases.append({"version": "b3", "NH": wide[0], "DH": wide[1]})
    ours = bench.Benchmark(
        lesson="06", name="versions forward+backward", cases=cases,
        inputs=lambda version, NH, DH: (version, *problem_inputs(B, T, NH, DH, dtype)),
        providers={"gpulab": ladder.run_training}, reference=_gradients_reference,
        check=_largest_error, shape=lambda version, NH, DH: [B, T, NH, DH], dtype=dtype,
        params={"direction": "forward+backward"},
        label=lambda version, NH, DH: f"{version}: {ladder.BACKWARD_VERSIONS[version]}",
    )  # fmt: skip
    hidden = wide[0] * wide[1]
    name = f"cuDNN nn.LSTM {_name(dense_dtype)}, hidden {hidden}, forward+backward"
    return [ours, _dense(name, hidden, B, T, dense_dtype, True)]


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def versions(progress=None, forward_only: bool = False) -> list[bench.Result]:
    """``python -m gpulab bench 06 versions``: :func:`forward_benchmarks`, then (unless ``forward_only``)
    :func:`backward_benchmarks`."""
    forward_only = runtime.strict_bool("forward_only", forward_only)
    return bench.run(forward_benchmarks() + ([] if forward_only else backward_benchmarks()), progress)
