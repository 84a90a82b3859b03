"""Lesson 2's benchmark, `python -m gpulab bench 02`: the three sweeps, the model's pair agreement, one figure."""

from __future__ import annotations

from gpulab import runtime
from gpulab.codesign.plot import plot_benchmark
from gpulab.codesign.sweeps import (
    format_agreement,
    pair_agreement,
    progress_wrapper,
    sweep_head_dim,
    sweep_k,
    sweep_waves,
)

__all__ = ["benchmark"]


def benchmark(progress=None):
    """The K, head-dimension and wave sweeps (bf16 on the GPU; tiny fp32 on CPU), each a :class:`gpulab.bench.Benchmark`
    whose every case is checked before any is timed; prints the model's pair agreement and returns
    ``(results, figure)``. ``progress``: a tqdm-like callable or None."""
    import matplotlib

    matplotlib.use("Agg")
    progress = progress_wrapper(progress)
    results = sweep_k(progress=progress)
    results += sweep_head_dim(progress=progress)
    results += sweep_waves(progress=progress)
    agreement = pair_agreement(results)
    where = "" if runtime.on_gpu() else " (CPU: interpreter / CPU timings against the H100 model: not meaningful)"
    print(format_agreement(agreement) + where)
    return results, plot_benchmark(results, agreement)
