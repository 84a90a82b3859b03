"""``@triton.jit`` helpers shared by gpulab's kernels: one home for each trick, imported by every kernel that uses it.

- :func:`dot`: ``a @ b`` accumulated in fp32, with fp32 operands in the precision the wrapper chose (IEEE unless TF32
  is allowed; see :func:`gpulab.runtime.dot_precision`): one place instead of an ``if IS_FP32`` at every product.
- :data:`LOG2E`, :data:`LN2`: ``exp(x) = exp2(x * LOG2E)``, ``log(x) = log2(x) * LN2`` (exp2 is one instruction).
- :func:`tanh`: portable tanh through the sigmoid; :func:`tanh_approx`: one special-function instruction (GPU only).
- :func:`unpack_pairs`, :func:`word_pointer`, :func:`loaded_f32`: 16-bit tiles carried as 32-bit words, so that a
  prefetched tile is not split into halves in the step that loads it.
- :func:`dot_operand`: a product operand the compiler cannot look through (keeps the tensor-core operand layout);
  :func:`own_chain`: a product's result likewise (keeps products that are added up as independent chains).

Import :mod:`gpulab.runtime` before this module (``import gpulab`` does): it decides whether Triton interprets.
"""

from __future__ import annotations

from gpulab import runtime  # noqa: F401 - first: sets TRITON_INTERPRET before any kernel is defined

import triton  # isort: skip
import triton.language as tl  # isort: skip

__all__ = [
    "LOG2E",
    "LN2",
    "LOG2E_F",
    "LN2_F",
    "dot",
    "tanh",
    "tanh_approx",
    "unpack_pairs",
    "word_pointer",
    "loaded_f32",
    "dot_operand",
    "own_chain",
]

LOG2E_F = 1.4426950408889634
"""log2(e) as a Python float, for host code (e.g. ``scale * LOG2E_F`` passed to a kernel)."""
LN2_F = 0.6931471805599453
"""ln(2) as a Python float."""
LOG2E: tl.constexpr = tl.constexpr(LOG2E_F)
"""log2(e), usable inside kernels: ``exp(x) = exp2(x * LOG2E)``."""
LN2: tl.constexpr = tl.constexpr(LN2_F)
"""ln(2), usable inside kernels: ``log(x) = log2(x) * LN2``."""


@triton.jit
def dot(a, b, IS_FP32: tl.constexpr, PRECISION: tl.constexpr):
    """``a @ b`` accumulated in fp32; fp32 operands in ``PRECISION`` ('ieee' unless tf32 is allowed)."""
    if IS_FP32:
        return tl.dot(a, b, input_precision=PRECISION)
    else:
        return tl.dot(a, b)


@triton.jit
def tanh(x):
    """tanh(x) = 2 sigmoid(2x) - 1: portable (the interpreter and every GPU), exact to fp32 rounding."""
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@triton.jit
def tanh_approx(x):
    """tanh in one special-function instruction (PTX ``tanh.approx.f32``, relative error ~5e-4); GPU only."""
    return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def unpack_pairs(v, DT: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    """int32 [ROWS, COLS // 2], each word two 16-bit values of dtype ``DT`` (the lower half first, as in memory)
    -> DT [ROWS, COLS].

    Why load 16-bit data as 32-bit words: a tile that is loaded in one step and used in the next is carried in
    registers across the loop's back edge; carried as 16-bit elements, the compiler splits the loaded words into
    halves *in the step of the load*, which waits for the load to arrive and undoes the prefetch. Carried as
    words, nothing touches them until the step that uses them.
    """
    lo = v.to(tl.int16).to(DT, bitcast=True)
    hi = (v >> 16).to(tl.int16).to(DT, bitcast=True)
    return tl.reshape(tl.join(lo, hi), [ROWS, COLS])


@triton.jit
def word_pointer(ptr, P: tl.constexpr):
    """``ptr`` as a pointer to loads of P elements: 32-bit words when P = 2 (see :func:`unpack_pairs`), else itself."""
    if P == 2:
        return ptr.to(tl.pointer_type(tl.int32))
    else:
        return ptr


@triton.jit
def loaded_f32(v, DT: tl.constexpr, P: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    """A tile loaded through :func:`word_pointer` as fp32 [ROWS, COLS]: unpacked from words when P = 2."""
    if P == 2:
        return unpack_pairs(v, DT, ROWS, COLS).to(tl.float32)
    else:
        return v.to(tl.float32)


@triton.jit
def dot_operand(x, OPAQUE: tl.constexpr):
    """``x`` itself, for use as a ``tl.dot`` operand; with OPAQUE (compiled 16-bit kernels) through an identity
    instruction that the compiler cannot look through.

    Why: for an operand computed in registers, Triton 3.6 chooses the tensor-core operand layout from the ops that
    produced it, and halves its "kWidth" when a ``tl.join`` is among them. A product whose operand was assembled by
    joins then groups k by four instead of two, and the other operand, read from shared memory every step, is
    reordered with many register moves per step and warp. A non-pure inline-asm ``mov`` ends that search (ptxas then
    drops the mov). ``tests/test_rnn_compiled.py`` checks the compiled layout.
    """
    if OPAQUE:
        return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=x.dtype, is_pure=False, pack=2)
    else:
        return x


@triton.jit
def own_chain(x, OPAQUE: tl.constexpr):
    """A product's result behind an identity the compiler cannot look through (OPAQUE), so that adding it to another
    product stays an addition: Triton folds ``a + dot(x, y)`` into the product's accumulator, which chains the
    products one after the other."""
    if OPAQUE:
        return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=x.dtype, is_pure=False, pack=1)
    else:
        return x
