"""Lesson 5's fused LSTM forward as numbered versions, each one change on top of the one before (in the style of
llm.c's ``dev/cuda``): read them in order, run them with :func:`gpulab.rnn.fused.plan.run_version`, time them with
``python -m gpulab bench 05 versions`` (:mod:`gpulab.rnn.fused.versions_bench`; the records, under
``benchmarks/05_fused_rnn/versions/``, hold every time).

- v1 (:mod:`.v1_per_gate`): the persistent kernel; R on chip as one tile per gate, four products per step;
- v2 (:mod:`.v2_all_gates`): all gates in one tile, one product per step;
- v3 (:mod:`.v3_prefetch`): the input loaded two steps ahead, in 32-bit words, the loop unrolled by two;
- v4: one-instruction activations with the 1/2 of the sigmoid folded into R, Wx and b (16-bit on a GPU; elsewhere
  the exact cell): the package's ``fused`` forward (:mod:`gpulab.rnn.fused.forward`, which also runs GRU and Elman,
  tiles the batch and keeps R off chip where it must);
- v5: one head over several SMs, a grid barrier per step, for heads whose R does not fit one SM: the split kernel
  (:mod:`gpulab.rnn.fused.split`);
- v6 (:mod:`.v6_gluon_split`, Gluon, LSTM): v5 with each program's slice of R in registers, the warps splitting the
  product's depth and each reading only its chunk of h (v5 reads R and all of h through shared memory every step).
  GPU only; on a CPU its schedule runs in float64 and the compiler's sm_90 output is checked. Its backward, b4
  (:mod:`.b4_gluon_split_backward`): b3 with each program's rows of R in registers, transposed.

The backward (section 5 of the lesson) is one reverse-time kernel; its versions are what runs around it
(:data:`BACKWARD_VERSIONS`, timed forward+backward by :func:`gpulab.rnn.fused.plan.run_training`):

- b1: the kernel (dh, dc carried on chip, the gate gradients dG written), then dR, db and dWx as products after it,
  on one stream;
- b2: the sequence cut at T/8: the kernel runs the pieces last to first and each finished piece's dR and db are
  computed on a second stream, on the SMs the kernel leaves idle (the package's fused backward);
- b3: one head over several SMs, a grid barrier per step (the package's split backward), after v5.

What the H100 said along the way (the records hold the times):

- v3: Nsight Compute's stall sampling (``scripts/rnn_ncu.sh``, ``scripts/profile_versions.py``) found the wait
  that v3's two details remove (the loop's back edge copying a fresh load, 16-bit words split in the step of their
  load) among the forward's largest stalls, and the same wait in the backward, which prefetches the same way;
- v4: issuing the prefetch right after Wx_t is in the product's layout beat issuing it after the product (except at
  DH 128, at the register cap); a further step, ``tanh.approx.f16x2`` (two values per instruction), does not pay:
  it compiles to two special-function instructions on sm_90;
- b2: the cut at T/8 beat T/4 and T/2; saving the LSTM's activations rather than its pre-activations (one tanh
  recomputed per unit instead of five special functions) barely mattered: the step's time is its dependent chain;
  Triton 3.6 gave dG, assembled with ``tl.join``, a k-by-4 operand layout and reordered R's fragments with about
  170 register moves per step and warp, which ``gpulab.triton_ops.dot_operand`` removes;
- b3: its first version exchanged dG through L2 every step, and the product and its exchange took 3.6 of a 5.1 us
  step (``benchmarks/05_fused_rnn/split/*-parts.jsonl``); the present one exchanges partial sums of dh (the
  ``partials`` record times both).
- after v5 and b3: the step taken apart by clock stamps in the kernel (``python -m gpulab bench 05 steps``,
  :mod:`gpulab.rnn.fused.clocks`): loading h and the barrier are most of a forward step. Two cheaper meeting points
  were built as candidates for a v6 (:mod:`gpulab.rnn.fused.exchange`): h in tagged words (the LL protocol) and a
  flag per program; both made the step longer, so v5 and b3 stay as they are (the ``steps`` record holds the times).

Every version takes ``(Wx, R, b, states)`` as :func:`gpulab.rnn.flashrnn` does (LSTM, one compute dtype) and returns
``(states_all [2, B, T, NH, DH], states_last [2, B, 1, NH, DH])``. v1 to v3 need a head dim that is a power of two
of at least 16 and keep R on chip; v4 and v5 choose their tiles as the package does. This package holds the
versions' descriptions, their input check and the launch v1 to v3 share; :mod:`gpulab.rnn.fused.plan` chooses
between the versions.
"""

from __future__ import annotations

import torch
import triton

from gpulab import runtime
from gpulab.check import new_output
from gpulab.launch import aligned, cached_launch, direct_stream

__all__ = ["VERSIONS", "BACKWARD_VERSIONS", "BLOCK_B", "check_inputs", "launch"]

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
