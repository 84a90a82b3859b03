"""Timing on two clocks, result records, the declarative benchmark harness, and the tables and charts every lesson
shows.

- :mod:`~gpulab.bench.timing`: :func:`time_callable` (device clock: CUDA events, host work not counted),
  :func:`wall_time` (eager wall clock: calls back to back, one synchronize), CUDA graphs (:func:`capture`),
  :func:`no_tf32`.
- :mod:`~gpulab.bench.records`: :class:`Result` (``ms`` and ``wall_ms``, rates on either clock, provider, status,
  environment), :func:`measure`, :func:`record`, :func:`save`/:func:`load` as JSON lines under ``benchmarks/``,
  :func:`result_list` (the check of a list of records every reader uses).
- :mod:`~gpulab.bench.report`: :class:`Benchmark` and :func:`run` (every case checked before any is timed),
  :func:`graphed` (a provider replayed from a CUDA graph),
  :func:`summary` (a table on one named clock), :func:`speedup`, :func:`plot`.
- :mod:`~gpulab.bench.plots`: :func:`table`, :func:`bar`, :func:`line`.
- :mod:`~gpulab.bench.flops`: the course's FLOP and byte conventions (:func:`attention_flops`).
"""

from gpulab.bench.flops import attention_flops, visible_attention_flops, visible_pairs
from gpulab.bench.plots import bar, line, table, text_table
from gpulab.bench.records import (
    CLOCKS,
    Result,
    by_run,
    current,
    environment,
    kernel_resources,
    load,
    measure,
    newest,
    record,
    record_files,
    result_list,
    results_dir,
    save,
)
from gpulab.bench.report import (
    Benchmark,
    CheckFailed,
    Unavailable,
    graphed,
    interpreter_summary,
    plot,
    run,
    speedup,
    summary,
    unavailable,
)
from gpulab.bench.timing import CapturedStep, Timing, capture, no_tf32, time_callable, wall_time

__all__ = [
    "Timing",
    "Result",
    "CLOCKS",
    "time_callable",
    "wall_time",
    "measure",
    "record",
    "environment",
    "kernel_resources",
    "results_dir",
    "result_list",
    "save",
    "load",
    "current",
    "newest",
    "by_run",
    "record_files",
    "table",
    "text_table",
    "bar",
    "line",
    "attention_flops",
    "visible_attention_flops",
    "visible_pairs",
    "CapturedStep",
    "capture",
    "no_tf32",
    "Benchmark",
    "Unavailable",
    "unavailable",
    "graphed",
    "CheckFailed",
    "run",
    "summary",
    "speedup",
    "plot",
    "interpreter_summary",
]
