"""Lesson 2: GEMM shapes and hardware co-design.

Based on Anthony et al., "The Case for Co-Designing Model Architectures with Hardware" (2024, arXiv:2401.14489):
almost all of a transformer's (and an LSTM's) FLOPs are matrix products, and how fast a matrix product runs depends
on its *shape*, not only on its FLOP count. Two models with the same parameter count can differ by tens of percent
in throughput because one of them picked sizes the GPU dislikes.

What you will learn:
- a model of GEMM time on a given GPU (a :class:`gpulab.hardware.GPUSpec`): a memory roof, a compute roof, and
  three shape effects that lower the compute roof: **alignment**, **tile quantization** and **wave quantization**;
- to measure each effect on the H100 and to put the model's prediction beside the measurement;
- to check a model configuration (a transformer or a multi-head LSTM) against the paper's sizing rules, and to find
  the nearest compliant sizes.

Where the code lives, in the order of the lesson:

- :mod:`gpulab.codesign.gemm_model`: the model (:func:`gemm_time`, the three effects, the constants read from the
  records, :func:`model_constants`);
- :mod:`gpulab.codesign.matmul`: the fixed-tile Triton matmul (:func:`matmul_fixed_tile`) beside its float64
  reference;
- :mod:`gpulab.codesign.sweeps`: the K, head-dimension and wave sweeps, checked then timed, and the model's pair
  agreement with them;
- :mod:`gpulab.codesign.plot`: the tile grid, the wave staircase, measured beside predicted;
- :mod:`gpulab.codesign.configs`: model configurations and the paper's rules (:func:`check_config`,
  :func:`fix_config`);
- :mod:`gpulab.codesign.benchmark`: `python -m gpulab bench 02`, named in the syllabus (:mod:`gpulab.lessons`).

Every name is available here (``gpulab.codesign.gemm_time``, ``gpulab.codesign.check_config``, ...).
"""

from __future__ import annotations

from gpulab.codesign.benchmark import benchmark
from gpulab.codesign.configs import (
    KNOWN_CONFIGS,
    LSTM_STEP_TILE,
    MICROBATCH_GAIN,
    MULTIPLE,
    LSTMConfig,
    RuleCheck,
    TransformerConfig,
    check_config,
    fix_config,
    format_checks,
    heads_options,
    layer_time,
    model_gemms,
)
from gpulab.codesign.gemm_model import (
    ALIGNMENT_BYTES,
    DEFAULT_TILE,
    FALLBACK,
    K_TILE_BYTES,
    LIBRARY_TILES,
    GemmConstants,
    GemmPrediction,
    alignment_efficiency,
    alignment_penalty,
    gemm_time,
    memory_fraction,
    model_constants,
    relative_throughput,
    tile_quantization,
    wave_quantization,
)
from gpulab.codesign.matmul import (
    TRITON_CPU_CONFIG,
    TRITON_GPU_CONFIG,
    matmul_fixed_tile,
    matmul_fixed_tile_kernel,
    matmul_reference,
)
from gpulab.codesign.plot import plot_benchmark, plot_prediction, plot_sweep, plot_tiles, plot_wave_staircase
from gpulab.codesign.sweeps import format_agreement, pair_agreement, sweep_head_dim, sweep_k, sweep_waves

__all__ = [
    "PEAK_FRACTION",
    "MEMORY_FRACTION",
    "memory_fraction",
    "MISALIGNED_PENALTY",
    "PARTIALLY_ALIGNED_PENALTY",
    "GemmConstants",
    "FALLBACK",
    "model_constants",
    "alignment_penalty",
    "ALIGNMENT_BYTES",
    "K_TILE_BYTES",
    "LIBRARY_TILES",
    "DEFAULT_TILE",
    "GemmPrediction",
    "gemm_time",
    "relative_throughput",
    "alignment_efficiency",
    "tile_quantization",
    "wave_quantization",
    "matmul_fixed_tile_kernel",
    "matmul_fixed_tile",
    "matmul_reference",
    "TRITON_GPU_CONFIG",
    "TRITON_CPU_CONFIG",
    "TransformerConfig",
    "LSTMConfig",
    "RuleCheck",
    "KNOWN_CONFIGS",
    "MULTIPLE",
    "MICROBATCH_GAIN",
    "LSTM_STEP_TILE",
    "check_config",
    "fix_config",
    "heads_options",
    "format_checks",
    "model_gemms",
    "layer_time",
    "sweep_k",
    "sweep_head_dim",
    "sweep_waves",
    "pair_agreement",
    "format_agreement",
    "plot_tiles",
    "plot_wave_staircase",
    "plot_prediction",
    "plot_sweep",
    "plot_benchmark",
    "benchmark",
]


def __getattr__(name):  # the measured constants are read from the records on first use (gemm_model.__getattr__)
    if name in ("MEMORY_FRACTION", "PEAK_FRACTION", "MISALIGNED_PENALTY", "PARTIALLY_ALIGNED_PENALTY"):
        from gpulab.codesign import gemm_model

        return getattr(gemm_model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
