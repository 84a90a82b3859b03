"""Lesson 0's measurements: the working-set sweep at every size, each launch checked against float64 before it is
timed, and ``python -m gpulab bench 00`` (the sweep, plus the copy kernel against torch's copy at 1 GiB)."""

from __future__ import annotations

import torch

from gpulab import bench, hardware, runtime
from gpulab.check import assert_close, new_output
from gpulab.memory.kernels import block_size, copy, copy_kernel, sweep_kernel, working_set_sweep
from gpulab.memory.plots import plot_sweep
from gpulab.memory.schedule import sweep_data, sweep_plan, sweep_reference, working_set_sizes, working_sets

__all__ = ["measure_sweep", "benchmark", "check_progress"]


def check_progress(progress):
    """``progress`` if it is None or callable (a tqdm-like wrapper for loops), else an error naming it."""
    if progress is not None and not callable(progress):
        raise runtime.ArgumentTypeError(f"progress must be callable (like tqdm) or None, got {progress!r}.")
    return progress


def measure_sweep(sizes=None, bytes_to_read=None, programs=None, block=None, progress=None, check=True):
    """Sweep working-set sizes, checking each launch against the float64 reference, and time it.

    ``sizes``: working sets in bytes (multiples of 4; default :func:`gpulab.memory.working_set_sizes`);
    ``bytes_to_read`` per size (at least two passes); ``programs`` (default 4 per SM); ``block`` (default 4096).
    Returns one :class:`gpulab.bench.Result` per size, with ``params['working_set_bytes']`` and the bytes read.
    """
    sizes = working_set_sizes() if sizes is None else working_sets(sizes)
    block = 4096 if block is None else block_size("block", block)
    if programs is None:
        programs = runtime.pick(cpu=3, gpu=4 * hardware.spec().sm_count)
    programs = runtime.positive_int("programs", programs)
    if bytes_to_read is None:
        bytes_to_read = runtime.pick(cpu=256 << 10, gpu=4 << 30)
    bytes_to_read = runtime.finite_float("bytes_to_read", bytes_to_read, minimum=0.0)
    progress, check = check_progress(progress), runtime.strict_bool("check", check)
    n_max = max(sizes) // 4
    x = sweep_data(n_max)
    results = []
    for w in progress(sizes) if progress else sizes:
        n = w // 4
        plan = sweep_plan(n, max(bytes_to_read, 2 * w), block, programs)
        run = lambda n=n, plan=plan: working_set_sweep(x, n, plan["programs"], plan["iters"], block)
        if check:
            ref = sweep_reference(x, n, plan["programs"], plan["iters"], block)
            assert_close(run(), ref, rtol=1e-4, name="sweep partial sums", context=f"working set {w} bytes")
        r = bench.measure(
            run,
            lesson="00",
            case="working-set sweep",
            bytes=plan["bytes"],
            flops=plan["bytes"] / 4,  # one add per element read
            dtype=torch.float32,
            shape=[n],
            kernel=sweep_kernel,
            warmup_ms=runtime.pick(cpu=0, gpu=20),
            rep_ms=runtime.pick(cpu=1, gpu=60),
            working_set_bytes=w,
            programs=plan["programs"],
            iters=plan["iters"],
            block=block,
            level=hardware.cache_level(w),
        )
        results.append(r)
    return results


def benchmark(progress=None):
    """`python -m gpulab bench 00`: the sweep from 16 KB to 4 GB, plus the copy kernel and torch's copy at 1 GB.
    Returns (results, the figure of :func:`gpulab.memory.plot_sweep`)."""
    results = measure_sweep(progress=check_progress(progress))
    n = runtime.pick(cpu=1 << 16, gpu=1 << 28)  # 1 GB of fp32 on the GPU
    src = torch.randn(n, device=runtime.device)
    dst = new_output(n, dtype=src.dtype, device=src.device)
    assert_close(copy(src, dst), src, name="copy")
    for case, fn, kernel in (
        ("copy kernel (gpulab)", lambda: copy(src, dst), copy_kernel),
        ("torch copy_ (peer)", lambda: dst.copy_(src), None),
    ):
        results.append(
            bench.measure(
                fn,
                lesson="00",
                case=case,
                bytes=2 * n * 4,
                flops=0,
                dtype=torch.float32,
                shape=[n],
                kernel=kernel,
                working_set_bytes=2 * n * 4,
            )
        )
    import matplotlib  # here, not at the top: the figure is only drawn by the benchmark

    matplotlib.use("Agg")
    ax = plot_sweep(results)
    return results, ax.figure
