"""Lesson 6's fused LSTM forward as numbered versions, each one change on top of the one before (in the style of
llm.c's ``dev/cuda``): read them in order, run them with :func:`run_version`, time them with ``python -m gpulab bench
05 versions`` (:mod:`gpulab.rnn.fused.measure.versions_bench`; the records, under ``benchmarks/06_fused_rnn/versions/``,
hold every time). This package is the ladder only: nothing on the package's path imports it.

- v1 (:mod:`.v1_per_gate`): the persistent kernel; R on chip as one tile per gate, four products per step;
- v2 (:mod:`.v2_all_gates`): all gates in one tile, one product per step;
- v3 (:mod:`.v3_prefetch`): the input loaded two steps ahead, in 32-bit words, the loop unrolled by two;
- v4: one-instruction activations with the 1/2 of the sigmoid folded into R, Wx and b (16-bit on a GPU; elsewhere
  the exact cell): the package's ``fused`` forward (:mod:`gpulab.rnn.fused.forward`, which also runs GRU and Elman,
  tiles the batch and keeps R off chip where it must);
- v5: one head over several SMs, a grid barrier per step, for heads whose R does not fit one SM: the split kernel
  (:mod:`gpulab.rnn.fused.split`);
- v6 (Gluon, LSTM): v5 with each program's slice of R in registers, the warps splitting the product's depth and each
  reading only its chunk of h: the package's split kernel where it applies (:mod:`gpulab.rnn.fused.split_gluon`; its
  backward, b4, :mod:`gpulab.rnn.fused.split_gluon_backward`). GPU only; on a CPU its schedule runs in float64.

The backward (section 5 of the lesson) is one reverse-time kernel; its versions are what runs around it
(:data:`BACKWARD_VERSIONS`, timed forward+backward by :func:`run_training`):

- b1: the kernel (dh, dc carried on chip, the gate gradients dG written), then dR, db and dWx as products after it,
  on one stream;
- b2: the sequence cut at T/8: the kernel runs the pieces last to first and each finished piece's dR and db are
  computed on a second stream, on the SMs the kernel leaves idle (the package's fused backward);
- b3: one head over several SMs, a grid barrier per step (the package's split backward), after v5.

What each step measured, and what was tried beside them and dropped: ``notes/rnn-fused.md``.

Every version takes ``(Wx, R, b, states)`` as :func:`gpulab.rnn.flashrnn` does (LSTM, one compute dtype) and returns
``(states_all [2, B, T, NH, DH], states_last [2, B, 1, NH, DH])``. v1 to v3 need a head dim that is a power of two
of at least 16 and keep R on chip; v4 and v5 choose their tiles as the package does.
"""

from __future__ import annotations

import dataclasses

import torch
import triton

from gpulab import runtime
from gpulab.check import new_output
from gpulab.launch import aligned, cached_launch, direct_stream
from gpulab.rnn.fused import plan
from gpulab.rnn.fused.versions.v1_per_gate import v1_kernel
from gpulab.rnn.fused.versions.v2_all_gates import v2_kernel
from gpulab.rnn.fused.versions.v3_prefetch import v3_kernel

__all__ = [
    "VERSIONS",
    "BACKWARD_VERSIONS",
    "BLOCK_B",
    "KERNELS",
    "check_inputs",
    "launch",
    "run_version",
    "run_training",
]

VERSIONS = {
    "v1": "persistent kernel, R on chip, one product per gate",
    "v2": "all gates in one tile: one product per step",
    "v3": "input loaded two steps ahead (32-bit words, unrolled by two)",
    "v4": "one-instruction activations, the sigmoid's 1/2 folded into R, Wx, b (the package's fused forward)",
    "v5": "one head split over several SMs, a grid barrier per step (the package's split forward)",
}
"""Version -> what it changes, one line each."""

BACKWARD_VERSIONS = {
    "b1": "reverse-time kernel, then dR, db, dWx as products after it (one stream)",
    "b2": "dR, db of each finished piece (T/8) on a second stream beside the kernel (the package's backward)",
    "b3": "one head split over several SMs, a grid barrier per step (the package's split backward)",
}
"""Backward version -> what it changes (forward+backward: after v4, or v5 for b3)."""

BLOCK_B = 16  # batch rows per program of v1 to v3

KERNELS = {"v1": v1_kernel, "v2": v2_kernel, "v3": v3_kernel}
"""The ladder's own ``@triton.jit`` kernels by name (v4 is ``plan.KERNELS['forward']``, v5
``plan.KERNELS['split']``)."""


def check_inputs(Wx, R, b, states):
    """An LSTM problem as every version takes it, or a ValueError (TypeError) naming the argument."""
    for name, t in (("Wx", Wx), ("R", R), ("b", b), ("states", states)):
        if not isinstance(t, torch.Tensor):
            raise runtime.ArgumentTypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}.")
    if Wx.dim() != 5 or Wx.shape[2] != 4:
        raise ValueError(f"Wx must be an LSTM's [B, T, 4, NH, DH], got shape {list(Wx.shape)}.")
    B, T, _, NH, DH = Wx.shape
    want = {"R": (R, (4, NH, DH, DH)), "b": (b, (4, NH, DH)), "states": (states, (2, B, 1, NH, DH))}
    for name, (t, shape) in want.items():
        if tuple(t.shape) != shape:
            raise ValueError(
                f"{name} must have shape {list(shape)} for Wx of shape {list(Wx.shape)}, got {list(t.shape)}."
            )
        if t.dtype != Wx.dtype:
            raise ValueError(f"{name} has dtype {t.dtype}, Wx {Wx.dtype}: give every input the compute dtype.")


def launch(kernel, Wx, R, b, states):
    """Launch one of v1 to v3's kernels (they share their arguments) over the grid (heads, batch tiles); returns
    ``(states_all, states_last)``. Inputs checked by :func:`check_inputs`."""
    B, T, _, NH, DH = Wx.shape
    if DH < 16 or DH & (DH - 1):
        raise ValueError(f"v1 to v3 need a head dim that is a power of two >= 16, got {DH}; v4 takes any head dim.")
    Wx, R, b, states = (t.contiguous() for t in (Wx, R, b, states))
    out = new_output(2, B, T, NH, DH, dtype=Wx.dtype, device=Wx.device)
    last = new_output(2, B, 1, NH, DH, dtype=Wx.dtype, device=Wx.device)
    ints = (B, T, NH)
    run = cached_launch(kernel, (NH, triton.cdiv(B, BLOCK_B)), dict(
        DH=DH, BLOCK_B=BLOCK_B, IS_FP32=Wx.dtype == torch.float32, PRECISION=runtime.dot_precision(Wx.dtype),
    ), ints)  # fmt: skip
    tensors = (Wx, R, b, states, out, last)
    run(direct_stream(Wx.device) if aligned(*tensors) else None, *tensors, *ints)
    return out, last


def run_version(version: str, Wx, R, b, states):
    """Run lesson 6's forward ``version`` ('v1' ... 'v5', :data:`VERSIONS`) on an LSTM problem; returns
    ``(states_all, states_last)``. v1 to v3 need a head dim that is a power of two >= 16; v4 (the package's one-SM
    forward) and v5 (the split forward) choose their tiles as the package does."""
    runtime.one_of("version", version, tuple(VERSIONS))
    check_inputs(Wx, R, b, states)
    if version == "v4":
        return plan.single_sm_forward(Wx, R, b, states, "lstm", False)[:2]
    if version == "v5":
        return plan.split_forward_at(Wx, R, b, states, None)[:2]
    return launch(KERNELS[version], Wx, R, b, states)


def run_training(version: str, Wx, R, b, states):
    """Forward and backward of the LSTM with backward ``version`` ('b1', 'b2', 'b3', :data:`BACKWARD_VERSIONS`),
    gradients of ``sum(states_all)`` with respect to every input: returns ``(dWx, dR, db, dstates)``. The loops are
    the plan's (b1 and b2 where a head fits one SM, b3 where it is split); the inputs are detached copies that
    require gradients. b1 is the backward in one piece on one stream (no time cuts), run under
    :func:`gpulab.rnn.fused.plan.config_as` for the duration of the call."""
    runtime.one_of("version", version, tuple(BACKWARD_VERSIONS))
    check_inputs(Wx, R, b, states)
    leaves = [t.detach().requires_grad_(True) for t in (Wx, R, b, states)]
    config = plan.current_config()
    if version == "b1":
        config = dataclasses.replace(config, backward=dataclasses.replace(config.backward, cuts=()))
    with plan.config_as(config):
        out, _ = plan.fused_forward(*leaves, function="lstm")
        return torch.autograd.grad(out.sum(), leaves)
