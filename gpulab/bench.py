"""Timing, result records, and the tables and charts every lesson shows.

- :func:`time_callable` times a callable correctly: on a GPU with CUDA events around each call after a warm-up
  (device work is asynchronous; a host clock without a sync measures the launch, not the work), optionally flushing
  L2 between calls and rotating among several input sets so caches don't flatter; on CPU with the wall clock.
  It reports the median and the interquartile range, not the mean, which one slow outlier would drag.
- :class:`Result` is one measurement: time, the FLOPs and bytes the operation must do (so the roofline can place
  it), derived rates, the kernel's registers and spills, and where and when it ran. Results are stored as JSON lines
  under ``benchmarks/NN_lesson/<gpu>-<date>.jsonl`` (:func:`save`, :func:`load`).

FLOP conventions live beside each operation and are stated once, here:

- a multiply-add is 2 FLOPs; a GEMM of (M, K) x (K, N) is ``2*M*N*K``;
- attention forward is ``4*B*H*Nq*Nk*D`` (two GEMMs, QK^T and PV), halved when causal; forward + backward is 3.5x
  the forward (the backward's five GEMMs of the same size, one of them recomputing S, count 2.5x);
- bytes are the fewest an implementation must move through device memory: each input read once, each output
  written once. A kernel that moves more shows up as a lower achieved bandwidth, which is the point.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import math
import os
import statistics
import time
import warnings
from pathlib import Path

import torch

from gpulab import hardware, runtime

__all__ = [
    "Timing",
    "Result",
    "time_callable",
    "measure",
    "record",
    "environment",
    "kernel_resources",
    "results_dir",
    "save",
    "load",
    "table",
    "bar",
    "line",
    "attention_flops",
    "CapturedStep",
    "capture",
    "no_tf32",
]


def attention_flops(batch, heads, seq_q, seq_k, head_dim, causal=False, backward=False) -> float:
    """FLOPs of attention by the course's convention: 4*B*H*Nq*Nk*D, halved if causal, x3.5 with backward."""
    f = 4.0 * batch * heads * seq_q * seq_k * head_dim
    if causal:
        f /= 2
    return f * 3.5 if backward else f


@dataclasses.dataclass
class Timing:
    """Milliseconds per call: median and interquartile range over ``reps`` timed calls."""

    median_ms: float
    q25_ms: float
    q75_ms: float
    reps: int


def _quartiles(times: list[float]) -> Timing:
    times = sorted(times)
    if len(times) == 1:
        return Timing(times[0], times[0], times[0], 1)
    q = statistics.quantiles(times, n=4, method="inclusive")
    return Timing(statistics.median(times), q[0], q[2], len(times))


def time_callable(
    fn,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    rotate=None,
    flush_l2: bool = False,
    min_reps: int = 5,
    max_reps: int = 10_000,
) -> Timing:
    """Time ``fn()`` (or ``fn(*rotate[i % len(rotate)])`` when ``rotate`` lists argument tuples).

    GPU: a few calls estimate the cost; then ``warmup_ms`` of warm-up and about ``rep_ms`` of timed calls, each
    between its own pair of CUDA events, each preceded by a short spin on the GPU so that the host's launch overhead
    is not counted as device time. ``flush_l2`` overwrites a 256 MB buffer before each call (outside the
    events) so every call starts with a cold L2. CPU (the interpreter): wall clock around each call, fewer calls.
    """
    if rotate is not None:
        if len(rotate) == 0:
            raise ValueError("rotate must list at least one tuple of arguments, got an empty list.")
        sets = [tuple(a) if isinstance(a, (tuple, list)) else (a,) for a in rotate]
        counter = iter(range(1 << 62))
        call = lambda: fn(*sets[next(counter) % len(sets)])
    else:
        call = fn

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


def environment() -> dict:
    """Where a result was measured: device, SM count, versions, mode, date (UTC)."""
    import triton

    env = {
        "mode": runtime.MODE,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"),
    }
    if runtime.on_gpu():
        p = hardware.live_properties()
        env.update(device=p["name"], sm_count=p["sm_count"], cuda=torch.version.cuda)
    else:
        env.update(device="CPU (Triton interpreter)", sm_count=0)
    return env


def kernel_resources(kernel) -> dict:
    """Registers per thread, spilled bytes and shared memory of the newest compilation of a ``@triton.jit`` kernel.

    Empty in interpreter mode (nothing is compiled) and for callables that are not Triton kernels.
    """
    if not runtime.on_gpu():
        return {}
    compiled = None
    try:
        for cache in getattr(kernel, "device_caches", {}).values():
            kernels = cache[0] if isinstance(cache, tuple) else cache
            if kernels:
                compiled = list(kernels.values())[-1]
        if compiled is None:
            return {}
        if hasattr(compiled, "_init_handles"):
            compiled._init_handles()
        return {
            "registers": int(compiled.n_regs),
            "spills": int(compiled.n_spills),
            "shared_bytes": int(getattr(compiled.metadata, "shared", 0)),
            "num_warps": int(getattr(compiled.metadata, "num_warps", 0)),
        }
    except Exception:  # noqa: BLE001 - Triton internals differ between versions; resources are optional detail
        return {}


@dataclasses.dataclass
class Result:
    """One measurement. ``flops`` and ``bytes`` are the work the operation must do (not what a kernel happened to
    do), so :attr:`tflops` and :attr:`gbps` are comparable across implementations of the same case."""

    lesson: str
    case: str
    ms: float
    ms_q25: float = math.nan
    ms_q75: float = math.nan
    reps: int = 0
    flops: float | None = None
    bytes: float | None = None
    dtype: str | None = None
    shape: list | None = None
    device: str = ""
    sm_count: int = 0
    torch: str = ""
    triton: str = ""
    mode: str = ""
    date: str = ""
    registers: int | None = None
    spills: int | None = None
    params: dict = dataclasses.field(default_factory=dict)

    @property
    def tflops(self) -> float | None:
        return self.flops / (self.ms * 1e-3) / 1e12 if self.flops else None

    @property
    def gbps(self) -> float | None:
        return self.bytes / (self.ms * 1e-3) / 1e9 if self.bytes else None

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOPs per byte moved (the roofline's x axis)."""
        return self.flops / self.bytes if (self.flops and self.bytes) else None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["tflops"], d["gbps"] = self.tflops, self.gbps
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Result:
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in d.items() if k in names}
        extra = {k: v for k, v in d.items() if k not in names and k not in ("tflops", "gbps")}
        known["params"] = {**(d.get("params") or {}), **extra}
        return cls(**known)


def measure(
    fn,
    *,
    lesson: str,
    case: str,
    flops=None,
    bytes=None,  # noqa: A002 - the record's field name
    dtype=None,
    shape=None,
    kernel=None,
    rotate=None,
    flush_l2: bool = False,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    **params,
) -> Result:
    """Time ``fn`` and return a :class:`Result` with the environment filled in.

    ``kernel`` is the ``@triton.jit`` function that ``fn`` launches, for the registers/spills report.
    Any other keyword is stored in ``params`` (e.g. ``working_set_bytes=...``).
    """
    t = time_callable(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, rotate=rotate, flush_l2=flush_l2)
    res = kernel_resources(kernel) if kernel is not None else {}
    extra = {k: v for k, v in res.items() if k not in ("registers", "spills")}
    r = record(lesson=lesson, case=case, ms=t.median_ms, flops=flops, bytes=bytes, dtype=dtype, shape=shape)
    r.ms_q25, r.ms_q75, r.reps = t.q25_ms, t.q75_ms, t.reps
    r.registers, r.spills = res.get("registers"), res.get("spills")
    r.params = {**params, **extra}
    return r


def record(
    *,
    lesson: str,
    case: str,
    ms: float = math.nan,
    flops=None,
    bytes=None,  # noqa: A002 - the record's field name
    dtype=None,
    shape=None,
    **params,
) -> Result:
    """A :class:`Result` with the environment filled in but no timing of its own: for values that are not times
    (peak memory, accuracy) or a time measured elsewhere (e.g. a whole training run). ``params`` as in
    :func:`measure`."""
    env = environment()
    return Result(
        lesson=lesson,
        case=case,
        ms=ms,
        flops=float(flops) if flops is not None else None,
        bytes=float(bytes) if bytes is not None else None,
        dtype=str(dtype).replace("torch.", "") if dtype is not None else None,
        shape=list(shape) if shape is not None else None,
        device=env["device"],
        sm_count=env["sm_count"],
        torch=env["torch"],
        triton=env["triton"],
        mode=env["mode"],
        date=env["date"],
        params=dict(params),
    )


def results_dir(root=None) -> Path:
    """Where result files live: ``$GPULAB_BENCHMARKS``, else ``benchmarks/`` at the repository root."""
    if root is not None:
        return Path(root)
    if os.environ.get("GPULAB_BENCHMARKS"):
        return Path(os.environ["GPULAB_BENCHMARKS"])
    return Path(__file__).resolve().parent.parent / "benchmarks"


def _lesson_dir(lesson: str, root: Path) -> Path:
    """'00' or '00_memory_hierarchy' -> root/'00_memory_hierarchy' (from the lesson table, else an existing folder)."""
    from gpulab import lessons

    lesson = str(lesson)
    entry = lessons.find(lesson)
    if entry is not None:
        return root / entry.slug
    matches = sorted(root.glob(f"{lesson}*")) if root.exists() else []
    if len(matches) == 1:
        return matches[0]
    raise ValueError(f"lesson={lesson!r} is not a known lesson; known: {', '.join(lessons.ids())}.")


def save(results, lesson: str, root=None, path=None) -> Path:
    """Write results as JSON lines to ``benchmarks/<lesson>/<gpu>-<date>.jsonl`` (or ``path``); return the path."""
    results = list(results)
    if not results:
        raise ValueError("results is empty: there is nothing to save.")
    if path is None:
        folder = _lesson_dir(lesson, results_dir(root))
        path = folder / f"{hardware.gpu_slug(results[0].device)}-{results[0].date}.jsonl"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for r in results:
            f.write(json.dumps(r.to_dict(), sort_keys=True) + "\n")
    return path


def load(lesson: str, gpu: str | None = None, root=None, path=None) -> list[Result]:
    """The newest stored results of ``lesson`` (optionally only files whose GPU slug contains ``gpu``, e.g. 'h100').

    Raises FileNotFoundError naming the folder when nothing matches.
    """
    if path is None:
        folder = _lesson_dir(lesson, results_dir(root))
        files = sorted(folder.glob("*.jsonl")) if folder.exists() else []
        if gpu:  # whole words of the slug: 'l4' matches nvidia-l4-..., not nvidia-l40s-...
            files = [f for f in files if f"-{hardware.gpu_slug(gpu)}-" in f"-{f.stem}-"]
        if not files:
            raise FileNotFoundError(
                f"no stored results for lesson {lesson!r}{f' on {gpu}' if gpu else ''} in {folder}; "
                f"run `python -m gpulab bench {lesson}` on a GPU to make them."
            )
        # Newest by the date in the name (YYYY-MM-DD sorts as text), then by modification time.
        path = max(files, key=lambda f: (f.stem[-10:], f.stat().st_mtime))
    with Path(path).open() as f:
        return [Result.from_dict(json.loads(line)) for line in f if line.strip()]


def _fmt(v, digits=3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 10**digits else f"{v:,.0f}"
    return str(v)


def table(results, columns=("case", "ms", "tflops", "gbps"), title=None) -> str:
    """A plain-text table of results; ``columns`` are Result attributes or keys of ``params``."""
    rows = []
    for r in results:
        rows.append([_fmt(getattr(r, c) if hasattr(r, c) else r.params.get(c)) for c in columns])
    heads = [c.replace("gbps", "GB/s").replace("tflops", "TFLOP/s") for c in columns]
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(heads)]
    lines = [title] if title else []
    lines.append("  ".join(h.ljust(w) for h, w in zip(heads, widths)))
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def _value(r: Result, key):
    return getattr(r, key) if hasattr(r, key) else r.params.get(key)


def bar(results, metric="tflops", label="case", ax=None, reference=None, title=None):
    """Bar chart of ``metric`` per result; ``reference`` names a case drawn in grey (e.g. the cuDNN baseline)."""
    import matplotlib.pyplot as plt

    results = list(results)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4, 0.8 * len(results) + 2), 3.5))
    values = [_value(r, metric) or 0.0 for r in results]
    labels = [str(_value(r, label)) for r in results]
    colors = ["0.6" if (reference is not None and lab == reference) else "C0" for lab in labels]
    ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)), labels, rotation=30, ha="right")
    ax.set_ylabel({"tflops": "TFLOP/s", "gbps": "GB/s", "ms": "ms"}.get(metric, metric))
    if title:
        ax.set_title(title)
    return ax


def line(results, x, y="gbps", group="case", ax=None, logx=True, logy=False, title=None, xlabel=None):
    """Line chart of ``y`` against ``x`` (attributes or params), one line per value of ``group``."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.8))
    groups: dict = {}
    for r in results:
        groups.setdefault(_value(r, group), []).append(r)
    for name, rs in groups.items():
        rs = sorted(rs, key=lambda r: _value(r, x))
        ax.plot([_value(r, x) for r in rs], [_value(r, y) for r in rs], marker="o", ms=3, label=str(name))
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel({"tflops": "TFLOP/s", "gbps": "GB/s", "ms": "ms"}.get(y, y))
    if len(groups) > 1:
        ax.legend()
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    return ax


# ----------------------------------------------------------------------------------------------------------------
# CUDA graphs and precision


class CapturedStep:
    """A callable captured in a CUDA graph: ``captured()`` replays it and returns the (static) outputs.

    Warm-up runs on a side stream first (as PyTorch requires: it compiles Triton kernels, lets cuBLAS pick its
    kernels and the allocator settle); then one call is captured. Inputs must stay at the same addresses: to run
    on new data, copy it into the tensors the function closes over.
    """

    def __init__(self, fn, warmup=2):
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
