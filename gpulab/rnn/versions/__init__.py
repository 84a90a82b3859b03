"""Lesson 5's fused LSTM forward as numbered versions, each one change on top of the one before (in the style of
llm.c's ``dev/cuda``): read them in order, run them with :func:`run`, time them with ``scripts/probe_versions.py``.

- v1 (:mod:`.v1_per_gate`): the persistent kernel; R on chip as one tile per gate, four products per step;
- v2 (:mod:`.v2_all_gates`): all gates in one tile, one product per step;
- v3 (:mod:`.v3_prefetch`): the input loaded two steps ahead, in 32-bit words, the loop unrolled by two;
- v4: one-instruction activations with the 1/2 of the sigmoid folded into R, Wx and b (16-bit on a GPU; elsewhere
  the exact cell): the package's ``fused`` forward (:mod:`gpulab.rnn.backends.fused.forward`, which also runs GRU
  and Elman, tiles the batch and keeps R off chip where it must);
- v5: one head over several SMs, a grid barrier per step, for heads whose R does not fit one SM: the split kernel
  (:mod:`gpulab.rnn.backends.fused.split`).

The backward (section 5 of the lesson) is one reverse-time kernel; its versions are what runs around it
(:data:`BACKWARD_VERSIONS`, timed forward+backward by :func:`run_training`):

- b1: the kernel (dh, dc carried on chip, the gate gradients dG written), then dR, db and dWx as products after it,
  on one stream;
- b2: the sequence cut at T/8: the kernel runs the pieces last to first and each finished piece's dR and db are
  computed on a second stream, on the SMs the kernel leaves idle (the package's fused backward);
- b3: one head over several SMs, a grid barrier per step (the package's split backward), after v5.

Every version takes ``(Wx, R, b, states)`` as :func:`gpulab.rnn.flashrnn` does (LSTM, one compute dtype) and returns
``(states_all [2, B, T, NH, DH], states_last [2, B, 1, NH, DH])``. v1 to v3 need a head dim that is a power of two
of at least 16 and keep R on chip; v4 and v5 choose their tiles as the package does.
"""

from __future__ import annotations

import contextlib

import torch
import triton

from gpulab import runtime
from gpulab.check import new_output
from gpulab.launch import aligned, cached_launch, direct_stream
from gpulab.rnn.backends.fused import backward as fused_backward
from gpulab.rnn.versions.v1_per_gate import v1_kernel
from gpulab.rnn.versions.v2_all_gates import v2_kernel
from gpulab.rnn.versions.v3_prefetch import v3_kernel

__all__ = ["VERSIONS", "BACKWARD_VERSIONS", "run", "run_training"]

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

_KERNELS = {"v1": v1_kernel, "v2": v2_kernel, "v3": v3_kernel}
BLOCK_B = 16


def _check(Wx, R, b, states):
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


def run(version: str, Wx, R, b, states):
    """Run lesson 5's forward ``version`` ('v1' ... 'v5') on an LSTM problem; returns ``(states_all, states_last)``."""
    runtime.one_of("version", version, tuple(VERSIONS))
    _check(Wx, R, b, states)
    if version == "v4":
        from gpulab.rnn.backends.fused.forward import fused_rnn_forward

        return fused_rnn_forward(Wx, R, b, states, "lstm", save_gates=False)[:2]
    if version == "v5":
        from gpulab.rnn.backends.fused.split import split_rnn_forward

        return split_rnn_forward(Wx, R, b, states, function="lstm", save_gates=False)[:2]
    B, T, _, NH, DH = Wx.shape
    if DH < 16 or DH & (DH - 1):
        raise ValueError(f"{version} needs a head dim that is a power of two >= 16, got {DH}; v4 takes any head dim.")
    Wx, R, b, states = (t.contiguous() for t in (Wx, R, b, states))
    out = new_output(2, B, T, NH, DH, dtype=Wx.dtype, device=Wx.device)
    last = new_output(2, B, 1, NH, DH, dtype=Wx.dtype, device=Wx.device)
    ints = (B, T, NH)
    launch = cached_launch(_KERNELS[version], (NH, triton.cdiv(B, BLOCK_B)), dict(
        DH=DH, BLOCK_B=BLOCK_B, IS_FP32=Wx.dtype == torch.float32, PRECISION=runtime.dot_precision(Wx.dtype),
    ), ints)  # fmt: skip
    tensors = (Wx, R, b, states, out, last)
    launch(direct_stream(Wx.device) if aligned(*tensors) else None, *tensors, *ints)
    return out, last


@contextlib.contextmanager
def _one_piece():
    """The fused backward in one piece on one stream (b1): no time cuts, so no second stream."""
    saved = fused_backward.MIN_PIECE_STEPS
    fused_backward.MIN_PIECE_STEPS = 1 << 62
    try:
        yield
    finally:
        fused_backward.MIN_PIECE_STEPS = saved


def run_training(version: str, Wx, R, b, states):
    """Forward and backward of the LSTM with backward ``version`` ('b1', 'b2', 'b3'), gradients of ``sum(states_all)``
    with respect to every input: returns ``(dWx, dR, db, dstates)``. b1 and b2 run after v4 (their heads fit one
    SM), b3 after v5. The inputs are detached copies that require gradients. Not thread-safe: b1 turns the package's
    time cuts off for the duration of the call."""
    runtime.one_of("version", version, tuple(BACKWARD_VERSIONS))
    _check(Wx, R, b, states)
    from gpulab.rnn.api import flashrnn  # deferred: the package's autograd path (the versions' kernels need none)

    leaves = [t.detach().requires_grad_(True) for t in (Wx, R, b, states)]
    context = _one_piece() if version == "b1" else contextlib.nullcontext()
    with context:
        out, _ = flashrnn(*leaves, function="lstm", backend="fused")
        return torch.autograd.grad(out.sum(), leaves)
