"""Gluon pieces that version 6's forward and backward (:mod:`.v6_gluon_split`, :mod:`.b4_gluon_split_backward`)
share: the activations in one special-function instruction each, and version 5's grid barrier (a counter in global
memory, :mod:`gpulab.rnn.fused.split`) written for Gluon. Gluon has no interpreter: these compile for a GPU only."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

__all__ = ["tanh", "sigmoid", "barrier_base", "grid_barrier", "cta_barrier"]

cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
"""A barrier of the program's threads: ``gl.thread_barrier`` in Triton 3.6, ``gl.barrier`` in later releases."""


@gluon.jit
def tanh(x, FAST: gl.constexpr):
    """tanh in one instruction (``tanh.approx.f32``, FAST) or from one exponential."""
    if FAST:
        return gl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=gl.float32, is_pure=True,
                                         pack=1)  # fmt: skip
    else:
        return 2.0 / (1.0 + gl.exp(-2.0 * x)) - 1.0


@gluon.jit
def sigmoid(x, FAST: gl.constexpr):
    """sigmoid(x) = 1/2 + tanh(x / 2) / 2."""
    return 0.5 + 0.5 * tanh(0.5 * x, FAST)


@gluon.jit
def barrier_base(bar_ptr, n_programs):
    """The counter's value before this launch, as version 5 reads it: nobody has passed our first barrier yet, so
    the count is a multiple of the program count plus early arrivals."""
    base = gl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
    return base - base % n_programs


@gluon.jit
def grid_barrier(bar_ptr, target):
    """Arrive (after every thread's stores: a CTA barrier, then a release add) and wait until the counter reaches
    ``target`` (acquire loads)."""
    cta_barrier()
    gl.atomic_add(bar_ptr, 1, sem="release", scope="gpu")
    seen = gl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
    while seen < target:
        seen = gl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
