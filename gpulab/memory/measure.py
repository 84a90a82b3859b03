"""Lesson 0's measurements on the declarative harness (:class:`gpulab.bench.Benchmark`): the working-set sweep at
every size, checked against float64 before anything is timed, and ``python -m gpulab bench 00`` (the sweep, plus the
copy kernel against torch's copy at 1 GiB).

Records: the sweep's ``case`` is ``"working-set sweep"``, its ``params`` hold ``working_set_bytes`` (the x value),
``programs``, ``iters``, ``block`` and ``level`` (the cache level that should serve it); the two copies' ``case`` is
their provider's name (``"copy kernel (gpulab)"``, ``"torch copy_ (peer)"``, as stored before the harness), with
``working_set_bytes`` = the bytes read and written. ``params['check']`` says how the record was checked.
"""

from __future__ import annotations

import torch

from gpulab import bench, hardware, runtime
from gpulab.check import assert_close, new_output
from gpulab.memory.kernels import block_size, copy, copy_kernel, copy_reference, sweep_kernel, working_set_sweep
from gpulab.memory.plots import human_bytes, plot_sweep
from gpulab.memory.schedule import sweep_data, sweep_plan, sweep_reference, working_set_sizes, working_sets

__all__ = ["measure_sweep", "benchmark", "check_progress"]

SWEEP = "working-set sweep"
COPY_PROVIDERS = ("copy kernel (gpulab)", "torch copy_ (peer)")


def check_progress(progress):
    """``progress`` if it is None or callable (a tqdm-like wrapper for loops), else an error naming it."""
    if progress is not None and not callable(progress):
        raise runtime.ArgumentTypeError(f"progress must be callable (like tqdm) or None, got {progress!r}.")
    return progress


def _not_checked(*inputs):
    """The reference of a sweep run with ``check=False``: nothing to compare against."""
    return None


def _check_sums(out, ref):
    """The sweep's fp32 partial sums against float64 (positive data: no cancellation, so 1e-4 holds at every size)."""
    assert_close(out, ref, rtol=1e-4, name="sweep partial sums")


def _sweep_benchmark(sizes, bytes_to_read, programs, block, check) -> bench.Benchmark:
    """The sweep as one :class:`gpulab.bench.Benchmark`: a case per working set (its schedule in the x values), the
    sweep kernel as the provider, :func:`gpulab.memory.sweep_reference` (float64) as the reference."""
    plans = {w: sweep_plan(w // 4, max(bytes_to_read, 2 * w), block, programs) for w in sizes}
    cases = [
        {"working_set_bytes": w, "programs": p["programs"], "iters": p["iters"], "block": block}
        for w, p in plans.items()
    ]

    def inputs(working_set_bytes, programs, iters, block):
        n = working_set_bytes // 4
        return sweep_data(n), n, programs, iters, block

    return bench.Benchmark(
        lesson="00",
        name=SWEEP,
        label=lambda **x: "",  # the case is the sweep, as in the stored records; the size is in params
        cases=cases,
        inputs=inputs,
        providers={"sweep kernel": working_set_sweep},
        reference=sweep_reference if check else _not_checked,
        check=_check_sums if check else lambda out, ref: {"check": "not checked"},
        bytes=lambda working_set_bytes, **x: plans[working_set_bytes]["bytes"],
        flops=lambda working_set_bytes, **x: plans[working_set_bytes]["bytes"] / 4,  # one add per element read
        params=lambda working_set_bytes, **x: {"level": hardware.cache_level(working_set_bytes)},
        kernels={"sweep kernel": sweep_kernel},
        warmup_ms=runtime.pick(cpu=0.0, gpu=20.0),
        rep_ms=runtime.pick(cpu=1.0, gpu=60.0),
    )


def _copy_benchmark() -> bench.Benchmark:
    """The copy kernel and ``Tensor.copy_`` as two providers of one case (1 GiB of fp32 on a GPU), each writing its
    own output, so that one cannot fill in what the other left unwritten before the check; the reference is the
    source itself."""
    n = runtime.pick(cpu=1 << 16, gpu=1 << 28)

    def inputs(n):
        src = torch.randn(n, device=runtime.device)
        return src, new_output(n, dtype=src.dtype, device=src.device), new_output(n, dtype=src.dtype, device=src.device)

    return bench.Benchmark(
        lesson="00",
        name="copy",
        label=lambda n: f"{human_bytes(4 * n)} fp32",
        cases=[{"n": n}],
        inputs=inputs,
        providers={
            COPY_PROVIDERS[0]: lambda src, ours, theirs: copy(src, ours),
            COPY_PROVIDERS[1]: lambda src, ours, theirs: theirs.copy_(src),
        },
        reference=lambda src, ours, theirs: copy_reference(src),
        bytes=lambda n: 2.0 * n * 4,  # read once, written once
        flops=0.0,
        params=lambda n: {"working_set_bytes": 2 * n * 4},
        kernels={COPY_PROVIDERS[0]: copy_kernel},
    )


def measure_sweep(sizes=None, bytes_to_read=None, programs=None, block=None, progress=None, check=True):
    """Sweep working-set sizes: every size checked against the float64 reference first, then each timed.

    ``sizes``: working sets in bytes (multiples of 4; default :func:`gpulab.memory.working_set_sizes`);
    ``bytes_to_read`` per size (at least two passes); ``programs`` (default 4 per SM); ``block`` (default 4096);
    ``check=False`` skips the comparison (``params['check'] == 'not checked'``).
    Returns one :class:`gpulab.bench.Result` per size, with ``params['working_set_bytes']`` and the bytes read.
    """
    sweep = _sweep_benchmark(*_sweep_args(sizes, bytes_to_read, programs, block, check))
    return bench.run(sweep, check_progress(progress))


def _sweep_args(sizes, bytes_to_read, programs, block, check) -> tuple:
    """The sweep's arguments validated (errors name them), None replaced by the mode's defaults."""
    sizes = working_set_sizes() if sizes is None else working_sets(sizes)
    block = 4096 if block is None else block_size("block", block)
    if programs is None:
        programs = runtime.pick(cpu=3, gpu=4 * hardware.spec().sm_count)
    programs = runtime.positive_int("programs", programs)
    if bytes_to_read is None:
        bytes_to_read = runtime.pick(cpu=256 << 10, gpu=4 << 30)
    bytes_to_read = runtime.finite_float("bytes_to_read", bytes_to_read, minimum=0.0)
    return sizes, bytes_to_read, programs, block, runtime.strict_bool("check", check)


def benchmark(progress=None):
    """`python -m gpulab bench 00`: the sweep from 16 KB to 4 GB, plus the copy kernel and torch's copy at 1 GB, all
    checked before any is timed. Returns (results, the figure of :func:`gpulab.memory.plot_sweep`)."""
    progress = check_progress(progress)
    sweep = _sweep_benchmark(*_sweep_args(None, None, None, None, True))
    results = bench.run([sweep, _copy_benchmark()], progress)
    for r in results:
        if r.provider in COPY_PROVIDERS:
            r.case = r.provider  # one line per implementation, as the readers (and the stored records) name them
    import matplotlib  # here, not at the top: the figure is only drawn by the benchmark

    matplotlib.use("Agg")
    ax = plot_sweep(results)
    return results, ax.figure
