"""Minimal reproducer (Triton 3.6, Gluon): constexprs inside a tuple bound to a name reach warp_specialize's
partitions as int32 scalars, not constexprs.

    python scripts/repro_gluon_tuple_constexpr.py

compiles two kernels for sm_90 without a GPU. Both pass ``(p, N)`` to two partitions, N a constexpr; the first
binds the tuple to a name first (``args = (p, N)``), the second writes it inline. Seen with Triton 3.6.0: the
partitions print ``int32[]`` for the first (so ``N`` cannot size a layout or a ``static_range``: version 3 first
failed with "get_mma_layout(): incompatible function arguments" on an instr_shape holding a tensor) and ``64`` for
the second. gpulab.attention.v3.forward writes its partitions' argument tuples inline for this reason.
"""

import os

os.environ.pop("TRITON_INTERPRET", None)

from triton import compile as triton_compile  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402


@gluon.jit
def _part(p, N: gl.constexpr):
    gl.static_print("partition sees N =", N)


@gluon.jit
def bound_tuple(p, N: gl.constexpr):
    args = (p, N)
    gl.warp_specialize([(_part, args), (_part, args)], [1], [24])


@gluon.jit
def inline_tuple(p, N: gl.constexpr):
    gl.warp_specialize([(_part, (p, N)), (_part, (p, N))], [1], [24])


if __name__ == "__main__":
    for kernel in (bound_tuple, inline_tuple):
        print(f"{kernel.__name__}:", flush=True)
        src = GluonASTSource(fn=kernel, signature={"p": "*fp32", "N": "constexpr"}, constexprs={"N": 64})
        triton_compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
