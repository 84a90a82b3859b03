"""Two clocks for one callable, CUDA graphs, and fp32 without TF32.

- :func:`time_callable` is the **device clock**: CUDA events around each call after a warm-up, each call preceded by
  a short spin kernel so the host's launch cost is not counted. It answers "how long does the GPU work take", which
  is what a CUDA graph or ``torch.compile`` can reach. On CPU (the interpreter) it is the wall clock around each call.
- :func:`wall_time` is the **eager wall clock**: calls back to back as a training loop makes them, one synchronize at
  the end, no spin, no graph, divided by the number of calls. It counts the host's work (Python, validation,
  launches) wherever the GPU waits for it, which is what users of an eager model get.

Both report the median and the interquartile range, not the mean, which one slow outlier would drag.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import statistics
import time
import warnings

import torch

from gpulab import runtime

__all__ = ["Timing", "time_callable", "wall_time", "CapturedStep", "capture", "no_tf32"]


@dataclasses.dataclass
class Timing:
    """Milliseconds per call: median and interquartile range over ``reps`` timed repetitions of ``calls`` calls each
    (one call per repetition on the device clock; a loop of calls on the wall clock)."""

    median_ms: float
    q25_ms: float
    q75_ms: float
    reps: int
    calls: int = 1


def _quartiles(times: list[float], calls: int = 1) -> Timing:
    times = sorted(times)
    if len(times) == 1:
        return Timing(times[0], times[0], times[0], 1, calls)
    q = statistics.quantiles(times, n=4, method="inclusive")
    return Timing(statistics.median(times), q[0], q[2], len(times), calls)


def _caller(fn, rotate):
    """``fn`` itself, or a zero-argument callable that passes the next argument tuple of ``rotate`` on each call."""
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}.")
    if rotate is None:
        return fn
    if isinstance(rotate, (str, bytes)) or not hasattr(rotate, "__len__"):
        raise TypeError(f"rotate must be a list of argument tuples, got {type(rotate).__name__}.")
    if len(rotate) == 0:
        raise ValueError("rotate must list at least one tuple of arguments, got an empty list.")
    sets = [tuple(a) if isinstance(a, (tuple, list)) else (a,) for a in rotate]
    counter = itertools.count()
    return lambda: fn(*sets[next(counter) % len(sets)])


def _budget(warmup_ms, rep_ms) -> tuple[float, float]:
    warmup_ms = runtime.finite_float("warmup_ms", warmup_ms, minimum=0.0)
    rep_ms = runtime.finite_float("rep_ms", rep_ms, positive=True)
    return warmup_ms, rep_ms


def time_callable(
    fn,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    rotate=None,
    flush_l2: bool = False,
    min_reps: int = 5,
    max_reps: int = 10_000,
) -> Timing:
    """Device time of ``fn()`` (or ``fn(*rotate[i % len(rotate)])`` when ``rotate`` lists argument tuples).

    GPU: a few calls estimate the cost; then ``warmup_ms`` of warm-up and about ``rep_ms`` of timed calls, each
    between its own pair of CUDA events, each preceded by a short spin on the GPU so that the host's launch overhead
    is not counted as device time. ``flush_l2`` overwrites a 256 MB buffer before each call (outside the
    events) so every call starts with a cold L2. CPU (the interpreter): wall clock around each call, at least three.

    ``warmup_ms`` may be 0 (the first call still warms up, untimed); ``rep_ms`` must be > 0 and
    ``1 <= min_reps <= max_reps``.
    """
    warmup_ms, rep_ms = _budget(warmup_ms, rep_ms)
    min_reps = runtime.positive_int("min_reps", min_reps)
    max_reps = runtime.integer("max_reps", max_reps, minimum=min_reps)
    flush_l2 = runtime.strict_bool("flush_l2", flush_l2)
    call = _caller(fn, rotate)

    if not runtime.on_gpu():
        call()  # warm-up: the interpreter's first call also traces the kernel
        times = []
        deadline = time.perf_counter() + rep_ms / 1e3
        while len(times) < min(min_reps, 3) or (time.perf_counter() < deadline and len(times) < max_reps):
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1e3)
        return _quartiles(times)

    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda") if flush_l2 else None
    call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(3):
        call()
    end.record()
    host_ms = (time.perf_counter() - t0) * 1e3 / 3  # Python + launch cost of one call, as seen by the host
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 3, 1e-4)
    n_warm = max(1, int(warmup_ms / estimate))
    n_rep = int(min(max_reps, max(min_reps, rep_ms / estimate)))
    for _ in range(n_warm):
        call()
    # With an idle GPU, the start event fires at once and the GPU then waits for the host to launch the work, so a
    # small kernel would be charged its launch overhead. A short spin kernel before each start event keeps the GPU
    # busy while the host enqueues the call: the interval between the events is then device time only.
    sleep = getattr(torch.cuda, "_sleep", None)
    spin_cycles = int(min(2 * host_ms, 5.0) * 1e-3 * 2e9)  # ~2 GHz clock; capped at 5 ms
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for s, e in zip(starts, ends):
        if flush is not None:
            flush.zero_()
        if sleep is not None:
            sleep(spin_cycles)
        s.record()
        call()
        e.record()
    torch.cuda.synchronize()
    return _quartiles([s.elapsed_time(e) for s, e in zip(starts, ends)])


def wall_time(
    fn,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    repeats: int = 5,
    rotate=None,
    max_calls: int = 10_000,
) -> Timing:
    """Eager wall time per call of ``fn()``, as a training loop sees it.

    Warm up for ``warmup_ms`` (at least one call), then ``repeats`` loops, each of ``calls`` calls back to back
    followed by ONE synchronize, timed with the host clock (no spin kernel, no CUDA graph, no events between calls):
    the host's work per call is counted wherever the GPU has to wait for it, and hidden where the GPU is the slower
    of the two. ``calls`` is chosen so all loops together take about ``rep_ms`` (at most ``max_calls``). Returns
    the median and quartiles over the loops of (loop time / calls). On CPU it is the same measurement.
    """
    warmup_ms, rep_ms = _budget(warmup_ms, rep_ms)
    repeats = runtime.positive_int("repeats", repeats)
    max_calls = runtime.positive_int("max_calls", max_calls)
    call = _caller(fn, rotate)

    runtime.synchronize()
    n_warm, t0 = 0, time.perf_counter()
    while n_warm < 1 or (time.perf_counter() - t0) * 1e3 < warmup_ms:
        call()
        n_warm += 1
    runtime.synchronize()
    estimate = max((time.perf_counter() - t0) * 1e3 / n_warm, 1e-4)
    calls = int(min(max_calls, max(1, rep_ms / repeats / estimate)))
    per_call = []
    for _ in range(repeats):
        runtime.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        runtime.synchronize()
        per_call.append((time.perf_counter() - t0) * 1e3 / calls)
    return _quartiles(per_call, calls)


# ----------------------------------------------------------------------------------------------------------------
# CUDA graphs and precision


class CapturedStep:
    """A callable captured in a CUDA graph: ``captured()`` replays it and returns the (static) outputs.

    Warm-up runs on a side stream first (as PyTorch requires: it compiles Triton kernels, lets cuBLAS pick its
    kernels and the allocator settle); then one call is captured. Inputs must stay at the same addresses: to run
    on new data, copy it into the tensors the function closes over.
    """

    def __init__(self, fn, warmup=2):
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}.")
        warmup = runtime.nonnegative_int("warmup", warmup)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.output = fn()
        torch.cuda.synchronize()

    def __call__(self):
        self.graph.replay()
        return self.output


def capture(fn, warmup=2):
    """:class:`CapturedStep` of ``fn`` on a GPU; None on CPU (graphs are a CUDA feature: "graphed: n/a")."""
    if not callable(fn):
        raise runtime.ArgumentTypeError(f"fn must be a function to capture, got {type(fn).__name__}.")
    warmup = runtime.nonnegative_int("warmup", warmup)
    return CapturedStep(fn, warmup) if runtime.on_gpu() else None


@contextlib.contextmanager
def no_tf32():
    """fp32 products in IEEE fp32 (cuBLAS and cuDNN), as cuDNN's fp32 LSTM is timed; restores the flags after."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old
