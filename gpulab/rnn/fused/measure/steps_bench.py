"""Lesson 7's named benchmark part for the split kernels' step: ``python -m gpulab bench 07 steps``, records
``<gpu>-<date>-steps.jsonl`` under ``benchmarks/07_rnn_split/split/`` that :mod:`gpulab.rnn.fused.measure.split_report`
reads.

The problem is cuDNN's own: one LSTM head of 768, B = 16, T = 1024, bf16, Wx given, the chooser's tilings.

- ``kind='parts'``: the persistent forward (each exchange of :data:`gpulab.rnn.fused.exchange.EXCHANGES`) and the
  split backward launched with clock stamps (:mod:`gpulab.rnn.fused.clocks`): ns per step of each part
  (``params['parts']``), ``step_ns``, and ``ms`` the same launch without stamps (device clock; ``wall_ms`` eager).
- ``kind='time'``: the forward with each exchange (``flashrnn(backend='fused')`` under
  :func:`gpulab.rnn.fused.experiments.exchange_as`) and forward+backward (each forward exchange but the tagged
  words, with the backward of :data:`gpulab.rnn.fused.experiments.BACKWARD_EXCHANGE`), beside cuDNN's dense
  ``nn.LSTM`` in fp16 (with its input product), checked against float64 before anything is timed, both clocks.

On CPU: the forward with each exchange in the interpreter (float16, a tiny problem, one launch per step), checked
and not timed; the stamps need a GPU (a record saying so).
"""

from __future__ import annotations

import torch

from gpulab import bench, dtypes, runtime
from gpulab.rnn.api import flashrnn
from gpulab.rnn.fused import clocks, exchange, plan
from gpulab.rnn.fused.experiments import BACKWARD_EXCHANGE, exchange_as
from gpulab.rnn.fused.measure.benchmark import (
    check_states,
    dense_reference,
    dense_run,
    problem_inputs,
    states_reference,
)

__all__ = ["steps", "parts_records", "time_benchmarks", "exchange_as"]


def _sizes():
    """(B, T, DH, dtype): the timed problem on a GPU; a tiny one in float16 on CPU (the tagged words hold 16-bit)."""
    return runtime.pick(cpu=(2, 3, 192, torch.float16), gpu=(16, 1024, 768, torch.bfloat16))


def _with_exchange(name):
    def run(*x):
        with exchange_as(name):
            out, last = flashrnn(*x, function="lstm", backend="fused")
            if not x[0].requires_grad:
                return out
            return out, *torch.autograd.grad(out.sum(), list(x))

    return run


def _inputs(B, T, DH, dtype, training):
    return tuple(t.requires_grad_(training) for t in problem_inputs(B, T, 1, DH, dtype))


def _check_first(out, ref):
    return check_states(out[0] if isinstance(out, tuple) else out, ref)


def _reference(*x):
    return states_reference(*x)


def time_benchmarks() -> list[bench.Benchmark]:
    """``kind='time'``: forward and forward+backward with each exchange, and cuDNN fp16 (bf16 too on a GPU)."""
    B, T, DH, dtype = _sizes()
    out = []
    for training, suffix in ((False, ""), (True, " fwd+bwd")):
        names = [e for e in exchange.EXCHANGES if not training or e != "tagged"]  # (tagged: the slowest forward)
        providers = {f"split {e}{suffix}": _with_exchange(e) for e in names}
        out.append(bench.Benchmark(
            lesson="07", name=f"steps{suffix}", cases=[{}], inputs=lambda training=training: _inputs(
                B, T, DH, dtype, training), providers=providers, reference=_reference, check=_check_first,
            on_mismatch="record", label=lambda: f"B{B} 1x{DH}",
            provider_params={p: {"kind": "time", "case": p, "exchange": p.split()[1], "training": training}
                             for p in providers},
            params={"B": B, "T": T, "DH": DH},
        ))  # fmt: skip

        def dense_inputs(dtype, training=training):
            torch.manual_seed(0)
            m = torch.nn.LSTM(DH, DH).to(runtime.device, dtype)
            return torch.randn(T, B, DH, device=runtime.device, dtype=dtype), m, training

        out.append(bench.Benchmark(
            lesson="07", name=f"steps cuDNN{suffix}", inputs=dense_inputs,
            cases=[{"dtype": d} for d in runtime.pick(cpu=(torch.float32,), gpu=(torch.float16, torch.bfloat16))],
            providers={"cuDNN nn.LSTM": dense_run}, reference=dense_reference, check=check_states,
            on_mismatch="record",
            params=lambda dtype, training=training, suffix=suffix: {
                "kind": "time", "B": B, "T": T, "DH": DH, "training": training,
                "case": f"cuDNN nn.LSTM {dtypes.name(dtype)}{suffix}"},
        ))  # fmt: skip
    return out


def _parts_record(name, direction, exch, cfg, stamps, run, backward=False):
    fields = clocks.step_parts(stamps, backward=backward)
    r = bench.measure(run, lesson="07", case=name, dtype=torch.bfloat16, kind="parts", direction=direction,
                      exchange=exch, programs=cfg.programs, block_u=cfg.block_u, warps=cfg.num_warps,
                      parts={k: fields[k] for k in (clocks.BACKWARD_PARTS if backward else clocks.PARTS)},
                      step_ns=fields["step_ns"], cycles_per_ns=fields["cycles_per_ns"])  # fmt: skip
    return r


def parts_records() -> list[bench.Result]:
    """``kind='parts'``: the forward with each exchange and the backward, stamped (GPU only; on CPU one record
    saying so)."""
    if not runtime.on_gpu():
        r = bench.record(lesson="07", case="split step parts", kind="parts")
        r.status = "unavailable: the clock stamps are inline PTX (a GPU's SM clock)"
        return [r]
    B, T, DH, dtype = _sizes()
    x = problem_inputs(B, T, 1, DH, dtype)
    fwd = plan.choose(B, 1, DH, "lstm", dtype, training=True)
    out = []
    for e in exchange.EXCHANGES:
        stamps = clocks.clock_buffer(fwd.tiling.programs, T, x[0].device)
        plan.split_forward_at(*x, fwd.tiling, save_gates=True, exchange=e, clocks=stamps)
        torch.cuda.synchronize()

        def run(e=e):
            return plan.split_forward_at(*x, fwd.tiling, save_gates=True, exchange=e)

        out.append(_parts_record(f"split forward {e} 1x{DH}", "forward", e, fwd.tiling, stamps, run))
    states_all, _, gates = plan.split_forward_at(*x, fwd.tiling, save_gates=True)
    d_out = torch.randn_like(states_all)
    bwd = fwd.backward
    for e in sorted(set(BACKWARD_EXCHANGE.values())):
        stamps = clocks.clock_buffer(bwd.programs, T, x[0].device)
        plan.split_backward_at(d_out, gates, states_all, x[3], x[1], bwd, clocks=stamps, exchange=e)
        torch.cuda.synchronize()

        def run_bwd(e=e):
            return plan.split_backward_at(d_out, gates, states_all, x[3], x[1], bwd, exchange=e)

        out.append(_parts_record(f"split backward {e} 1x{DH}", "backward", e, bwd, stamps, run_bwd, True))
    return out


def steps(progress=None):
    """``python -m gpulab bench 07 steps``: the parts of a step (:func:`parts_records`) and the times
    (:func:`time_benchmarks`)."""
    return parts_records() + bench.run(time_benchmarks(), progress)
