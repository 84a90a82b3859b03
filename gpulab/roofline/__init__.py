"""Lesson 1: the roofline, with the machine's ceilings measured rather than copied from a spec sheet.

What you will learn:
- a kernel that does ``F`` FLOPs and must move ``Q`` bytes cannot beat ``t >= max(F / P, Q / B)``; dividing by ``t``
  gives the **roofline**: attainable FLOP/s ``= min(P, I * B)`` with the **arithmetic intensity** ``I = F / Q``
  (FLOPs per byte). Below the **ridge point** ``I* = P / B`` a kernel is memory-bound, above it compute-bound;
- the roofs are **hierarchical**: each memory level has its own bandwidth (HBM < L2 < L1) and each precision its own
  compute peak (FP32 FMA << TF32 < bf16 = fp16 tensor cores), so the ridge point depends on both;
- how to count ``F`` and ``Q`` for the operations of this course (vector add, softmax, GEMM, naive and tiled
  attention, an LSTM step and a whole LSTM sequence) and read off, before writing a kernel, what bounds it;
- how to measure each ceiling with a microbenchmark small enough to read, and why the measured ceilings, not the
  spec sheet, are what a kernel's speed should be compared with.

Where the code lives, in the order of the lesson:

- :mod:`gpulab.roofline.intensity`: counting FLOPs and bytes per operation (:class:`Intensity`, :func:`gemm`, ...)
  and the model (:func:`attainable`, :func:`ridge_point`, :func:`bound`);
- :mod:`gpulab.roofline.roofs`: the :class:`Ceilings` of one machine, stored measurements, :func:`ceilings` (no
  measuring: the newest stored measurement, else the spec table) and the lesson's :func:`targets`;
- :mod:`gpulab.roofline.kernels`: the FP32 FMA and L2 sweep kernels, each beside its float64 reference;
- :mod:`gpulab.roofline.measure`: measuring every ceiling (:func:`measure_ceilings`) and the lesson's benchmark;
- :mod:`gpulab.roofline.plotting`: placing results on the roofs (:func:`placement_table`) and the figure
  (:func:`plot`).

Every name is available here (``gpulab.roofline.ceilings``, ``gpulab.roofline.fma_chain``, ...). Counting, ceilings
and plotting load with the package; the kernels and measurements load on first use, so lessons 3 to 5, which read
``roofline.ceilings()`` and draw ``roofline.plot(...)``, do not define lesson 1's measurement kernels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpulab import lazy
from gpulab.roofline.hbm import HBMCeiling, hbm_ceiling, read_plateau, stored_read_plateau
from gpulab.roofline.intensity import (
    COMPUTE_ROOFS,
    MEMORY_LEVELS,
    Intensity,
    attainable,
    attention_naive,
    attention_tiled,
    bound,
    course_operations,
    dtype_and_size,
    gemm,
    lstm_sequence,
    lstm_step,
    ridge_point,
    softmax,
    vector_add,
)
from gpulab.roofline.plotting import Placement, intensity_table, placement, placement_table, plot
from gpulab.roofline.roofs import Ceilings, ceilings, targets

if TYPE_CHECKING:  # for readers and type checkers; at run time these load lazily through __getattr__
    from gpulab.roofline.kernels import (
        FMA_CHAINS,
        FMA_UNROLL,
        fma_chain,
        fma_closed_form,
        fma_kernel,
        fma_reference,
        l2_sweep,
        l2_sweep_kernel,
    )
    from gpulab.roofline.measure import (
        benchmark,
        measure_cache,
        measure_ceilings,
        measure_fma,
        measure_hbm,
        measure_matmul,
    )

_KERNELS = (
    "FMA_CHAINS",
    "FMA_UNROLL",
    "fma_kernel",
    "fma_chain",
    "fma_reference",
    "fma_closed_form",
    "l2_sweep_kernel",
    "l2_sweep",
)
_MEASURE = ("measure_hbm", "measure_cache", "measure_matmul", "measure_fma", "measure_ceilings", "benchmark")
_LAZY = {**dict.fromkeys(_KERNELS, "gpulab.roofline.kernels"), **dict.fromkeys(_MEASURE, "gpulab.roofline.measure")}

__all__ = [
    "Intensity",
    "dtype_and_size",
    "vector_add",
    "softmax",
    "gemm",
    "attention_naive",
    "attention_tiled",
    "lstm_step",
    "lstm_sequence",
    "course_operations",
    "attainable",
    "ridge_point",
    "bound",
    "Ceilings",
    "COMPUTE_ROOFS",
    "MEMORY_LEVELS",
    "ceilings",
    "targets",
    "HBMCeiling",
    "hbm_ceiling",
    "read_plateau",
    "stored_read_plateau",
    "FMA_CHAINS",
    "FMA_UNROLL",
    "fma_kernel",
    "fma_chain",
    "fma_reference",
    "fma_closed_form",
    "l2_sweep_kernel",
    "l2_sweep",
    "measure_hbm",
    "measure_cache",
    "measure_matmul",
    "measure_fma",
    "measure_ceilings",
    "benchmark",
    "Placement",
    "placement",
    "placement_table",
    "intensity_table",
    "plot",
]


__getattr__, __dir__ = lazy.attributes(__name__, globals(), _LAZY)
