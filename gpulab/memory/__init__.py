"""Lesson 0: the memory hierarchy, measured with two small Triton kernels.

What you will learn:
- a Triton kernel is a function of one *program* (a thread block); the grid says how many run, masks handle the
  ragged edge;
- how fast data arrives depends on where it lives: a working set that fits in L1 or L2 is read many times faster
  than one that streams from HBM;
- bandwidth = bytes moved / time, counted the same way for every kernel in the course.

Two kernels:

``copy``: the simplest memory-bound kernel. Program ``p`` copies elements ``[p*BLOCK, (p+1)*BLOCK)``; the last block
is ragged, so loads and stores are masked. It reads N and writes N elements: ``2*N*itemsize`` bytes, no FLOPs.

``working_set_sweep``: reads a working set of W bytes over and over inside one launch. The working set is cut into
``C = ceil(n / BLOCK)`` chunks; ``P`` programs run ``iters`` steps each, and at step ``i`` program ``p`` reads

    chunk(p, i) = (p + i*P) mod C

and adds it to a running sum. So at every step the grid reads P consecutive chunks, and the grid as a whole marches
through the working set again and again. Choosing ``P`` coprime to ``C`` makes every program visit every chunk, so
each SM's own reuse distance is the whole working set too. Hence the picture: a working set that fits one SM's L1
is read from L1; one that fits L2 from L2; a larger one from HBM, and the bandwidth we compute (bytes read / time)
drops at each size where the next level takes over. Each program stores its sum, so no load can be optimised away,
and the sums are checked against a float64 reference of the same access pattern.

Where the code lives:

- :mod:`gpulab.memory.kernels`: ``copy_kernel`` / ``copy`` and ``sweep_kernel`` / ``working_set_sweep``;
- :mod:`gpulab.memory.schedule`: the sweep's schedule on the host (``sweep_plan``, ``chunk_schedule``) and its
  float64 reference (``sweep_reference``);
- :mod:`gpulab.memory.measure`: ``measure_sweep`` and the lesson's benchmark (``python -m gpulab bench 00``);
- :mod:`gpulab.memory.plots`: the lesson's figures.

Every name is available here, as ``gpulab.memory.copy`` etc. The kernels and measurements load on first use, so
importing this package (for :func:`human_bytes` or a figure) defines no kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpulab import lazy
from gpulab.memory.plots import human_bytes, plot_hierarchy, plot_ridge_points, plot_sweep
from gpulab.memory.schedule import (
    chunk_schedule,
    sweep_data,
    sweep_plan,
    sweep_reference,
    working_set_sizes,
    working_sets,
)

if TYPE_CHECKING:  # for readers and type checkers; at run time these load lazily through __getattr__
    from gpulab.memory.kernels import (
        block_size,
        check_sweep_args,
        copy,
        copy_kernel,
        copy_reference,
        sweep_kernel,
        working_set_sweep,
    )
    from gpulab.memory.measure import benchmark, check_progress, measure_sweep

_human_bytes = human_bytes  # the name lesson 0's notebook uses

_LAZY = {
    **dict.fromkeys(
        (
            "copy",
            "copy_reference",
            "copy_kernel",
            "working_set_sweep",
            "sweep_kernel",
            "check_sweep_args",
            "block_size",
        ),
        "gpulab.memory.kernels",
    ),
    **dict.fromkeys(("measure_sweep", "benchmark", "check_progress"), "gpulab.memory.measure"),
}

__all__ = [
    "copy",
    "copy_reference",
    "copy_kernel",
    "working_set_sweep",
    "sweep_reference",
    "sweep_plan",
    "sweep_kernel",
    "chunk_schedule",
    "check_sweep_args",
    "block_size",
    "plot_hierarchy",
    "plot_ridge_points",
    "working_set_sizes",
    "working_sets",
    "sweep_data",
    "measure_sweep",
    "plot_sweep",
    "human_bytes",
    "check_progress",
    "benchmark",
]


__getattr__, __dir__ = lazy.attributes(__name__, globals(), _LAZY)
