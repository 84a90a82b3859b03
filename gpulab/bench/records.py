"""Result records: one measurement, where it ran, and its storage as JSON lines.

- :class:`Result` is one measurement: the device time ``ms`` and the eager wall time ``wall_ms`` per call (see
  :mod:`gpulab.bench.timing` for the two clocks), the FLOPs and bytes the operation must do (so the roofline can
  place it), derived rates on either clock, the kernel's registers and spills, the provider and its status, and where
  and when it ran. Records of the CPU interpreter carry ``mode == "interpreter"``: their times are not GPU times.
- :func:`measure` times a callable on both clocks; :func:`record` makes a record of a value measured elsewhere.
- Results are stored as JSON lines under ``benchmarks/NN_lesson/<gpu>-<date>.jsonl`` (:func:`save`, :func:`load`);
  records written before ``wall_ms``, ``provider`` and ``status`` existed load with their defaults.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import numbers
import os
import re
from pathlib import Path

import torch
import triton

from gpulab import hardware, lessons, runtime
from gpulab.bench import index
from gpulab.bench.index import results_dir
from gpulab.bench.timing import time_callable, wall_time

__all__ = [
    "CLOCKS",
    "Result",
    "measure",
    "record",
    "environment",
    "kernel_resources",
    "results_dir",
    "save",
    "load",
    "current",
    "newest",
    "by_run",
    "record_files",
    "result_list",
]

CLOCKS = ("device", "wall")
"""``"device"``: :attr:`Result.ms` (CUDA events, host work not counted); ``"wall"``: :attr:`Result.wall_ms` (eager
calls back to back, host work counted where the GPU waits for it)."""

_DERIVED = ("tflops", "gbps", "wall_tflops", "wall_gbps")


def environment() -> dict:
    """Where a result was measured: device, SM count, versions, mode, date (UTC)."""
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


def _time_field(name: str, value):
    """None, NaN (not timed) or a finite number >= 0 of milliseconds; anything else is refused naming ``name``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise runtime.ArgumentTypeError(f"{name} must be a number of milliseconds, got {value!r}.")
    if math.isnan(value):
        return value
    return runtime.finite_float(name, value, minimum=0.0)


def _amount_field(name: str, value):
    if value is None:
        return None
    return runtime.finite_float(name, value, minimum=0.0)


def _rate(amount, ms, scale: float) -> float | None:
    """``amount / ms`` in units of ``scale`` per second; None where it is undefined (no amount, no or zero time)."""
    if not amount or ms is None or math.isnan(ms) or ms <= 0:
        return None
    return amount / (ms * 1e-3) / scale


@dataclasses.dataclass
class Result:
    """One measurement. ``flops`` and ``bytes`` are the work the operation must do (not what a kernel happened to
    do), so :attr:`tflops` and :attr:`gbps` are comparable across implementations of the same case.

    ``ms`` is the device time (NaN for a record that is not a time); ``wall_ms`` the eager wall time per call (None
    where it was not measured). Rates are None where they are undefined (no FLOPs, no time, a time of 0).
    """

    lesson: str
    case: str
    ms: float | None
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
    wall_ms: float | None = None
    provider: str | None = None
    status: str = "ok"

    def __post_init__(self):
        self.ms = _time_field("ms", self.ms)
        self.wall_ms = _time_field("wall_ms", self.wall_ms)
        self.flops = _amount_field("flops", self.flops)
        self.bytes = _amount_field("bytes", self.bytes)
        if not isinstance(self.params, dict):
            raise runtime.ArgumentTypeError(f"params must be a dict, got {type(self.params).__name__}.")

    @property
    def tflops(self) -> float | None:
        return _rate(self.flops, self.ms, 1e12)

    @property
    def gbps(self) -> float | None:
        return _rate(self.bytes, self.ms, 1e9)

    @property
    def wall_tflops(self) -> float | None:
        """TFLOP/s on the wall clock: what an eager caller gets."""
        return _rate(self.flops, self.wall_ms, 1e12)

    @property
    def wall_gbps(self) -> float | None:
        return _rate(self.bytes, self.wall_ms, 1e9)

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOPs per byte moved (the roofline's x axis)."""
        return self.flops / self.bytes if (self.flops and self.bytes) else None

    @property
    def interpreter(self) -> bool:
        """True for a record of the CPU interpreter: its times say nothing about a GPU."""
        return self.mode == "interpreter"

    def time(self, clock: str = "device") -> float | None:
        """Milliseconds per call on ``clock`` ('device': :attr:`ms`, 'wall': :attr:`wall_ms`)."""
        return self.ms if runtime.one_of("clock", clock, CLOCKS) == "device" else self.wall_ms

    def rate(self, metric: str, clock: str = "device") -> float | None:
        """``metric`` ('tflops' or 'gbps') on ``clock``."""
        metric = runtime.one_of("metric", metric, ("tflops", "gbps"))
        return getattr(self, metric if runtime.one_of("clock", clock, CLOCKS) == "device" else f"wall_{metric}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update({k: getattr(self, k) for k in _DERIVED})
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Result:
        if not isinstance(d, dict):
            raise runtime.ArgumentTypeError(f"d must be a dict (one JSON record), got {type(d).__name__}.")
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in d.items() if k in names}
        extra = {k: v for k, v in d.items() if k not in names and k not in _DERIVED}
        known["params"] = {**(d.get("params") or {}), **extra}
        return cls(**known)


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
        flops=flops,
        bytes=bytes,
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
    wall_clock: bool = True,
    **params,
) -> Result:
    """Time ``fn`` on both clocks and return a :class:`Result` with the environment filled in.

    ``ms`` is :func:`~gpulab.bench.time_callable`'s device time; on a GPU ``wall_ms`` is
    :func:`~gpulab.bench.wall_time`'s eager wall time per call (skip it with ``wall_clock=False``); on CPU both are
    the same wall clock, so ``wall_ms`` repeats ``ms``. ``kernel`` is the ``@triton.jit`` function that ``fn``
    launches, for the registers/spills report. Any other keyword is stored in ``params``.
    """
    wall_clock = runtime.strict_bool("wall_clock", wall_clock)
    t = time_callable(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, rotate=rotate, flush_l2=flush_l2)
    if not runtime.on_gpu():
        wall_ms = t.median_ms  # synchronous execution: the per-call wall clock is the eager wall time
    elif wall_clock:
        wall_ms = wall_time(fn, warmup_ms=min(warmup_ms, 5.0), rep_ms=rep_ms, rotate=rotate).median_ms
    else:
        wall_ms = None
    res = kernel_resources(kernel) if kernel is not None else {}
    extra = {k: v for k, v in res.items() if k not in ("registers", "spills")}
    r = record(lesson=lesson, case=case, ms=t.median_ms, flops=flops, bytes=bytes, dtype=dtype, shape=shape)
    r.ms_q25, r.ms_q75, r.reps, r.wall_ms = t.q25_ms, t.q75_ms, t.reps, wall_ms
    r.registers, r.spills = res.get("registers"), res.get("spills")
    r.params = {**params, **extra}
    return r


# ----------------------------------------------------------------------------------------------------------------
# storage


def _lesson_dir(lesson: str, root: Path) -> Path:
    """'00' or '00_memory_hierarchy' -> root/'00_memory_hierarchy' (from the lesson table, else an existing folder)."""
    lesson = str(lesson)
    entry = lessons.find(lesson)
    if entry is not None:
        return root / entry.slug
    matches = sorted(root.glob(f"{lesson}*")) if (lesson and root.exists()) else []
    if len(matches) == 1:
        return matches[0]
    raise ValueError(f"lesson={lesson!r} is not a known lesson; known: {', '.join(lessons.ids())}.")


def save(results, lesson: str, root=None, path=None, part: str | None = None) -> Path:
    """Write results as JSON lines to ``benchmarks/<lesson>/<gpu>-<date>.jsonl`` (or ``path``); return the path.

    ``part`` ('main', 'hopper', 'v3/tune', ...): also make the file the current record of that part on its GPU in
    the results folder's ``INDEX.json`` (:func:`gpulab.bench.index.record_set`; ``path`` must then lie under
    ``root``'s results folder). None: the index is left as it is (a scratch run)."""
    results = result_list("results", results)
    if path is None:
        folder = _lesson_dir(lesson, results_dir(root))
        path = folder / f"{hardware.gpu_slug(results[0].device)}-{results[0].date}.jsonl"
    path = Path(_path("path", path, "a file path"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for r in results:
            f.write(json.dumps(r.to_dict(), sort_keys=True) + "\n")
    if part is not None:
        index.record_set(lesson, part, [path], root)
    return path


_DATED = re.compile(r"(\d{4}-\d{2}-\d{2})(?:-[A-Za-z0-9_.]+)?$")


def _run_key(path: Path, part: str | None = None) -> tuple[str, str]:
    """(date, tag) of a record file's name: ``<gpu>-YYYY-MM-DD`` or ``<gpu>-YYYY-MM-DD-<tag>`` (('', '') if none),
    read after removing ``-<part>`` from the end when the name ends with it (``...-2026-11-26-i-tune``, part 'tune':
    tag 'i'). Runs of one day sort by their tag: no tag first, then 'a', 'b', ..."""
    stem = path.stem
    if part and stem.endswith(f"-{part}"):
        stem = stem[: -len(part) - 1]
    m = _DATED.search(stem)
    if not m:
        return "", ""
    return m.group(1), stem[m.end(1) + 1 :]


def record_files(folder, gpu: str | None = None, pattern: str = "*.jsonl") -> list[Path]:
    """The files in ``folder`` matching ``pattern`` (sorted; none if the folder does not exist), only those of
    ``gpu`` when it is given: its slug as whole words of the name ('l4' matches nvidia-l4-..., not nvidia-l40s-...)."""
    folder = Path(_path("folder", folder))
    if gpu is not None and not isinstance(gpu, str):
        raise runtime.ArgumentTypeError(f"gpu must be a GPU name such as 'h100' or None, got {gpu!r}.")
    if not isinstance(pattern, str) or not pattern:
        raise runtime.ArgumentTypeError(f"pattern must be a glob pattern such as '*.jsonl', got {pattern!r}.")
    files = sorted(folder.glob(pattern)) if folder.exists() else []
    if gpu:
        files = [f for f in files if f"-{hardware.gpu_slug(gpu)}-" in f"-{f.stem}-"]
    return files


def newest(files, part: str | None = None) -> Path:
    """The newest of record files (a folder, or a non-empty list of paths): by the date in each name
    (``<gpu>-YYYY-MM-DD.jsonl``, or with a tag after the date for a second run of one day: ``...-2026-11-25-b``;
    YYYY-MM-DD sorts as text), then by the tag (none, 'a', 'b', ...), then by modification time (a fresh clone gives
    every file the same one). ``part``: the files are one part of tagged runs, ``<gpu>-<date>[-<tag>]-<part>.jsonl``
    (e.g. 'tune'), and the tag is read before it. FileNotFoundError for a folder without records."""
    _check_part(part)
    if isinstance(files, (str, os.PathLike)):
        folder = Path(files)
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"files={str(folder)!r} is a file, not a folder; pass its folder, or a list: [files].")
        files = sorted(folder.glob("*.jsonl")) if folder.exists() else []
        if not files:
            raise FileNotFoundError(f"no records (*.jsonl) in {folder}")
    files = runtime.record_list("files", files, (str, os.PathLike), "record file paths", " (or their folder)")
    return by_run(files, part)[-1]


def _check_part(part) -> None:
    """:func:`newest`'s and :func:`by_run`'s ``part``: None or a record part's name, else an ArgumentTypeError."""
    if part is not None and (not isinstance(part, str) or not part or "/" in part):
        raise runtime.ArgumentTypeError(f"part must be a record part's name such as 'tune', or None; got {part!r}.")


def by_run(files, part: str | None = None) -> list[Path]:
    """Record files (a list of paths, possibly empty) oldest run first, in :func:`newest`'s order: date, tag (none,
    'a', 'b', ...; read before ``-<part>``), modification time."""
    _check_part(part)
    files = runtime.record_list("files", files, (str, os.PathLike), "record file paths", allow_empty=True)
    return sorted((Path(f) for f in files), key=lambda f: (*_run_key(f, part), f.stat().st_mtime))


def result_list(name: str, value, allow_empty: bool = False, source: str = "") -> list[Result]:
    """``value`` as a list of :class:`Result` records, non-empty unless ``allow_empty``; a TypeError or ValueError
    naming ``name`` otherwise (one Result, a string, a dict, an item that is not a Result, an empty list). Every
    function that reads records checks them with this (:func:`gpulab.runtime.record_list` for other kinds)."""
    where = source or " (from a benchmark run or gpulab.bench.load)"
    return runtime.record_list(name, value, Result, "gpulab.bench.Result records", where, allow_empty)


def _path(name: str, value, what: str = "a folder path"):
    if not isinstance(value, (str, os.PathLike)):
        raise runtime.ArgumentTypeError(f"{name} must be {what} (str or Path), got {type(value).__name__} {value!r}.")
    return value


def current(lesson: str, part: str = "main", gpu: str | None = "h100", root=None) -> Path:
    """The current ``.jsonl`` record of ``lesson``'s ``part`` on ``gpu``, as ``benchmarks/INDEX.json`` names it
    (:func:`gpulab.bench.index.current_file`). In a folder without an index (fresh runs: ``root`` or
    ``$GPULAB_BENCHMARKS``) the newest file of the part's folder (``part`` 'main': the lesson's folder; 'hopper/tiny':
    that subfolder). FileNotFoundError naming the lesson, part and GPU when there is none."""
    path = index.current_file(lesson, part, gpu, root)
    if path is None and not index.read_index(root):
        folder = _lesson_dir(lesson, results_dir(root))
        files = record_files(folder if part == "main" else folder / part, gpu)
        path = newest(files) if files else None
    if path is None:
        raise FileNotFoundError(
            f"no current record of lesson {lesson!r}, part {part!r}{f' on {gpu}' if gpu else ''} in "
            f"{results_dir(root) / index.INDEX_NAME}; run `python -m gpulab bench {lesson}` on a GPU and add it there."
        )
    return path


def load(lesson: str, gpu: str | None = None, root=None, path=None) -> list[Result]:
    """The current stored results of ``lesson``: its 'main' entry in ``benchmarks/INDEX.json``
    (:mod:`gpulab.bench.index`) on ``gpu`` (e.g. 'h100'; None: any GPU's); in a folder without an index (fresh runs,
    ``root`` or ``$GPULAB_BENCHMARKS``), the newest file of the lesson's folder. ``path``: that file instead.

    Raises FileNotFoundError naming the folder when nothing matches.
    """
    if gpu is not None and not isinstance(gpu, str):
        raise runtime.ArgumentTypeError(f"gpu must be a GPU name such as 'h100' or None, got {gpu!r}.")
    if path is None:
        folder = _lesson_dir(lesson, results_dir(root))
        indexed = index.current_file(folder.name, "main", gpu, root)
        files = [indexed] if indexed is not None else ([] if index.read_index(root) else record_files(folder, gpu))
        if not files:
            raise FileNotFoundError(
                f"no stored results for lesson {lesson!r}{f' on {gpu}' if gpu else ''} in {folder}; "
                f"run `python -m gpulab bench {lesson}` on a GPU to make them."
            )
        path = newest(files)
    with Path(_path("path", path, "a file path")).open() as f:
        return [Result.from_dict(json.loads(line)) for line in f if line.strip()]
