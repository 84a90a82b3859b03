"""The declarative benchmark harness: a lesson states its cases and providers; the harness checks, times and reports.

In the spirit of ``triton.testing.Benchmark``/``perf_report`` and of llm.c's dev files (every version checked against
the reference before any is timed)::

    attention = bench.Benchmark(
        lesson="04", name="attention forward",
        cases=[{"N": n, "causal": c} for n in (1024, 4096) for c in (False, True)],
        inputs=lambda N, causal: (*qkv(N), causal),          # fresh inputs of one case, passed to every provider
        providers={"gpulab": flash_attention, "sdpa": sdpa},
        reference="sdpa",                                     # or a function of the inputs
        flops=lambda N, causal: bench.attention_flops(1, 8, N, N, 64, causal=causal),
    )
    results = bench.run([attention])
    print(bench.summary(results, clock="wall", baseline="sdpa"))

:func:`run` first runs every provider of every case once and checks it against the case's reference
(:func:`gpulab.check.assert_close` unless the benchmark gives its own ``check``; on ``check_inputs``, smaller ones,
where the reference cannot run at the timed size); a mismatch raises :class:`CheckFailed` naming the case and provider
before anything is timed (or, with ``on_mismatch="record"``, is written into the record's ``params['check']``, for a
long run where one wrong case must not cost the others). A provider that cannot run (it raises :class:`Unavailable`, or
any other error) gets a status ("unavailable: no flash_attn", "failed: ValueError: ...") instead of stopping the report.
Then each case is timed on both clocks, its providers one after another on the same inputs: ``ms`` (device time, what
CUDA graphs or compile can reach) and ``wall_ms`` (eager calls back to back, what users get). In the CPU interpreter the
records carry ``mode == "interpreter"`` (:attr:`Result.interpreter`) and both clocks are the same wall clock: a lesson
checks there, and stays quiet about the times.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from triton.runtime import KernelInterface

from gpulab import check, lessons, runtime
from gpulab.bench import plots
from gpulab.bench.records import CLOCKS, Result, kernel_resources, record
from gpulab.bench.timing import capture, time_callable, wall_time

__all__ = ["Benchmark", "Unavailable", "unavailable", "graphed", "CheckFailed", "run", "summary", "speedup", "plot"]
__all__ += ["interpreter_summary"]

MISMATCH = ("raise", "record")


class Unavailable(Exception):  # noqa: N818 - it names a state, as in "the provider is unavailable"
    """Raised by a provider that cannot run here (a package not installed, no GPU, a case it does not support)."""


class CheckFailed(AssertionError):
    """A provider's output does not match its case's reference; raised by :func:`run` before anything is timed."""


def unavailable(reason: str) -> Callable:
    """A provider that always raises :class:`Unavailable` with ``reason``: ``providers={"fa2": fa2 or
    bench.unavailable("flash_attn is not installed")}``."""
    if not isinstance(reason, str) or not reason:
        raise runtime.ArgumentTypeError(f"reason must be a non-empty string, got {reason!r}.")

    def provider(*args):
        raise Unavailable(reason)

    return provider


def graphed(fn: Callable, no_grad: bool = True) -> Callable:
    """``fn`` replayed from a CUDA graph, as a provider of its own (``{"alternating": f, "alternating (graph)":
    bench.graphed(f)}``): the first call with a set of arguments captures ``fn(*args)`` (under ``torch.no_grad()``
    unless ``no_grad=False``), later calls with the same tensors replay it and return its static outputs. Only the
    newest capture is kept. On CPU it raises :class:`Unavailable` (graphs are a CUDA feature); a capture that fails
    raises, so the provider's record says why."""
    if not callable(fn):
        raise runtime.ArgumentTypeError(f"fn must be a provider function to capture, got {fn!r}.")
    no_grad = runtime.strict_bool("no_grad", no_grad)
    held: list = []  # [args, captured step] of the newest capture

    def provider(*args):
        if not runtime.on_gpu():
            raise Unavailable("CUDA graphs need a GPU")
        if not held or len(held[0]) != len(args) or any(a is not b for a, b in zip(held[0], args)):
            held.clear()
            with torch.no_grad() if no_grad else contextlib.nullcontext():
                held.extend([args, capture(lambda: fn(*args))])
        return held[1]()

    return provider


def _plain(value):
    """An x value as it is stored in the records: a torch dtype by its name ('bfloat16'), anything else as is."""
    return str(value).replace("torch.", "") if isinstance(value, torch.dtype) else value


def _per_case(spec, x: Mapping):
    """A field given as a function of the case's x values, or as one value for every case."""
    return spec(**x) if callable(spec) else spec


@dataclasses.dataclass
class Benchmark:
    """One operation measured over a grid of cases, one line per provider.

    ``cases``: the x values of each case (dicts with the same keys), passed as keywords to ``inputs``, ``flops``,
    ``bytes``, ``dtype``, ``shape``, ``params`` and ``label`` where those are functions. ``inputs(**x)`` returns the
    arguments of every provider (a tuple; fresh for the check and again for the timing). ``providers`` maps a name to
    ``fn(*inputs) -> output``. ``reference`` is ``fn(*inputs) -> expected`` or the name of a provider whose output
    the others must match; ``check(out, expected)`` raises AssertionError on a mismatch (default:
    :func:`gpulab.check.assert_close` at the output dtype's tolerance). ``flops`` and ``bytes`` are the work the
    operation must do; ``dtype`` and ``shape`` default to those of the first tensor input. ``kernels`` maps a
    provider to the ``@triton.jit`` kernel it launches (registers and spills in the records), or to a function of the
    case's x values returning that kernel (None: none to report) where the provider picks its kernel by case.
    """

    lesson: str
    name: str
    cases: Sequence[Mapping[str, Any]]
    providers: Mapping[str, Callable]
    inputs: Callable[..., tuple]
    reference: Callable | str
    check: Callable | None = None
    flops: Callable | float | None = None
    bytes: Callable | float | None = None
    dtype: Callable | Any = None
    shape: Callable | Sequence[int] | None = None
    params: Callable | Mapping | None = None
    kernels: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    label: Callable | None = None
    check_inputs: Callable | None = None
    skip: Callable | None = None
    on_mismatch: str = "raise"
    provider_params: Mapping[str, Mapping] = dataclasses.field(default_factory=dict)
    warmup_ms: float = dataclasses.field(default_factory=lambda: runtime.pick(cpu=0.0, gpu=25.0))
    rep_ms: float = dataclasses.field(default_factory=lambda: runtime.pick(cpu=1.0, gpu=100.0))

    def __post_init__(self):
        if lessons.find(self.lesson) is None:
            raise ValueError(f"lesson={self.lesson!r} is not a lesson; known: {', '.join(lessons.ids())}.")
        if not isinstance(self.name, str) or not self.name:
            raise runtime.ArgumentTypeError(f"name must be a non-empty string, got {self.name!r}.")
        if isinstance(self.cases, Mapping) or not isinstance(self.cases, Sequence) or not self.cases:
            raise ValueError(f"cases must be a non-empty list of dicts of x values, got {self.cases!r}.")
        for i, x in enumerate(self.cases):
            if not isinstance(x, Mapping) or not all(isinstance(k, str) for k in x):
                raise runtime.ArgumentTypeError(f"cases[{i}] must be a dict of x values by name, got {x!r}.")
        if not isinstance(self.providers, Mapping) or not self.providers:
            raise ValueError(f"providers must be a non-empty dict of name -> function, got {self.providers!r}.")
        for name, fn in self.providers.items():
            if not isinstance(name, str) or not callable(fn):
                raise runtime.ArgumentTypeError(f"providers[{name!r}] must be a function (name a str), got {fn!r}.")
        for field in ("inputs", "check", "label", "check_inputs", "skip"):
            fn = getattr(self, field)
            if fn is not None and not callable(fn):
                raise runtime.ArgumentTypeError(f"{field} must be a function, got {type(fn).__name__}.")
        if not callable(self.inputs):
            raise runtime.ArgumentTypeError("inputs must be a function of the x values returning the arguments.")
        if isinstance(self.reference, str):
            runtime.one_of("reference", self.reference, tuple(self.providers))
        elif not callable(self.reference):
            raise runtime.ArgumentTypeError(
                f"reference must be a function of the inputs or a provider's name, got {self.reference!r}."
            )
        for field in ("flops", "bytes"):
            v = getattr(self, field)
            if v is not None and not callable(v):
                runtime.finite_float(field, v, minimum=0.0)
        self.on_mismatch = runtime.one_of("on_mismatch", self.on_mismatch, MISMATCH)
        if not isinstance(self.provider_params, Mapping):
            raise runtime.ArgumentTypeError(f"provider_params must be a dict, got {self.provider_params!r}.")
        for name, fields in self.provider_params.items():
            runtime.one_of("provider_params' key", name, tuple(self.providers))
            if not isinstance(fields, Mapping):
                raise runtime.ArgumentTypeError(f"provider_params[{name!r}] must be a dict, got {fields!r}.")
        self.warmup_ms = runtime.finite_float("warmup_ms", self.warmup_ms, minimum=0.0)
        self.rep_ms = runtime.finite_float("rep_ms", self.rep_ms, positive=True)

    def case_name(self, x: Mapping) -> str:
        """The case's name in the records: ``"<name> <label>"`` (label: ``"N=1024 causal=True"`` by default)."""
        label = self.label(**x) if self.label is not None else " ".join(f"{k}={v}" for k, v in x.items())
        return f"{self.name} {label}".strip()

    def args(self, x: Mapping, for_check: bool = False) -> tuple:
        make = self.check_inputs if for_check and self.check_inputs is not None else self.inputs
        args = make(**x)
        return tuple(args) if isinstance(args, (tuple, list)) else (args,)

    def skipped(self, provider: str, x: Mapping) -> str | None:
        """Why ``provider`` does not run on case ``x`` (from ``skip``), or None."""
        why = self.skip(provider, **x) if self.skip is not None else None
        if why is not None and (not isinstance(why, str) or not why):
            raise runtime.ArgumentTypeError(f"skip must return None or a reason (a non-empty str), got {why!r}.")
        return why

    def expected(self, x: Mapping, args: tuple, outputs: dict):
        if isinstance(self.reference, str):
            if self.reference not in outputs:
                raise CheckFailed(
                    f"lesson {self.lesson}, {self.case_name(x)}: the reference provider {self.reference!r} did not "
                    "run, so no provider of this case can be checked."
                )
            return outputs[self.reference]
        return self.reference(*args)

    def compare(self, provider: str, out, expected) -> dict:
        """Fields for the record's params from the check (raises AssertionError on a mismatch)."""
        if self.check is None:
            check.assert_close(out, expected, name=provider)
            return {}
        fields = self.check(out, expected)
        if fields is not None and not isinstance(fields, Mapping):
            raise runtime.ArgumentTypeError(
                f"check must return None or a dict of record fields, got {type(fields).__name__}."
            )
        return dict(fields or {})

    def kernel(self, provider: str, x: Mapping):
        """The ``@triton.jit`` kernel ``provider`` launches in case ``x`` (None if ``kernels`` does not name one)."""
        k = self.kernels.get(provider)
        if k is None or isinstance(k, KernelInterface) or not callable(k):
            return k
        return k(**x)

    def new_record(self, x: Mapping, args: tuple, provider: str, status: str) -> Result:
        """An untimed record of one (case, provider): the environment, the work, the x values in ``params``."""
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        dtype = _per_case(self.dtype, x) if self.dtype is not None else getattr(first, "dtype", None)
        shape = _per_case(self.shape, x) if self.shape is not None else getattr(first, "shape", None)
        extra = _per_case(self.params, x) if self.params is not None else {}
        r = record(
            lesson=self.lesson,
            case=self.case_name(x),
            flops=_per_case(self.flops, x),
            bytes=_per_case(self.bytes, x),
            dtype=dtype,
            shape=shape,
        )
        r.provider, r.status = provider, status
        r.params = {"benchmark": self.name, **{k: _plain(v) for k, v in x.items()}, **dict(extra)}
        r.params.update(self.provider_params.get(provider, {}))
        return r


def _identity(items):
    return items


def _failure(exc: BaseException) -> str:
    if isinstance(exc, Unavailable):
        return f"unavailable: {exc}"
    if isinstance(exc, ImportError):
        return f"unavailable: {exc}"
    return f"failed: {type(exc).__name__}: {exc}"


def _check_all(benchmarks, progress) -> tuple[dict, dict]:
    """Run and check every provider of every case: the status of each (benchmark, case, provider), and the fields its
    check gives its record (``check``: 'ok', 'reference' or the mismatch; what the benchmark's ``check`` returns)."""
    status, checked = {}, {}
    steps = [(bi, ci) for bi, b in enumerate(benchmarks) for ci in range(len(b.cases))]
    for bi, ci in progress(steps):
        b = benchmarks[bi]
        x = b.cases[ci]
        args = b.args(x, for_check=True)
        outputs = {}
        order = sorted(b.providers, key=lambda p: p != b.reference)  # a reference provider runs first
        for p in order:
            why = b.skipped(p, x)
            if why is not None:
                status[bi, ci, p] = f"unavailable: {why}"
                continue
            try:
                outputs[p] = b.providers[p](*args)
                status[bi, ci, p] = "ok"
            except Exception as exc:  # noqa: BLE001 - a provider that cannot run is reported, not fatal
                status[bi, ci, p] = _failure(exc)
        expected = b.expected(x, args, outputs)
        for p, out in outputs.items():
            if p == b.reference:
                checked[bi, ci, p] = {"check": "reference"}
                continue
            try:
                checked[bi, ci, p] = {"check": "ok", **b.compare(p, out, expected)}
            except AssertionError as exc:
                if b.on_mismatch == "record":
                    checked[bi, ci, p] = {"check": f"FAILED: {' '.join(str(exc).split())[:300]}"}
                    continue
                raise CheckFailed(
                    f"lesson {b.lesson}, case {b.case_name(x)!r}, provider {p!r} does not match the reference "
                    f"(nothing was timed):\n{exc}"
                ) from exc
        del args, outputs, expected
    return status, checked


def run(benchmarks, progress=None, timed: bool = True) -> list[Result]:
    """Check every case of every benchmark against its reference, then time each on both clocks.

    Returns one :class:`Result` per (case, provider), in the benchmarks' order: ``ms`` on the device clock,
    ``wall_ms`` on the eager wall clock (quartiles and calls in ``params``), rates from the benchmark's FLOPs and
    bytes, the x values and the benchmark's name in ``params``, ``status`` "ok" or why the provider did not run.
    ``timed=False`` only checks (status "checked, not timed"). ``progress`` wraps each phase's loop (e.g. tqdm).
    """
    benchmarks = [benchmarks] if isinstance(benchmarks, Benchmark) else list(benchmarks)
    for i, b in enumerate(benchmarks):
        if not isinstance(b, Benchmark):
            raise runtime.ArgumentTypeError(f"benchmarks[{i}] is a {type(b).__name__}, not a bench.Benchmark.")
    timed = runtime.strict_bool("timed", timed)
    progress = _identity if progress is None else progress
    if not callable(progress):
        raise runtime.ArgumentTypeError(f"progress must wrap an iterable (like tqdm), got {progress!r}.")

    status, checked = _check_all(benchmarks, progress)
    results = []
    steps = [(bi, ci) for bi, b in enumerate(benchmarks) for ci in range(len(b.cases))]
    for bi, ci in progress(steps):
        b = benchmarks[bi]
        x = b.cases[ci]
        args = b.args(x)
        for p, fn in b.providers.items():
            r = b.new_record(x, args, p, status[bi, ci, p])
            r.params.update(checked.get((bi, ci, p), {}))
            if r.status == "ok" and not timed:
                r.status = "checked, not timed"
            elif r.status == "ok":
                _time_into(r, b, fn, args, b.kernel(p, x))
            results.append(r)
        del args  # before the next case's inputs are made
        if runtime.on_gpu():
            torch.cuda.empty_cache()
    return results


def _time_into(r: Result, b: Benchmark, fn: Callable, args: tuple, kernel) -> None:
    call = lambda: fn(*args)  # noqa: E731
    try:
        t = time_callable(call, warmup_ms=b.warmup_ms, rep_ms=b.rep_ms)
        w = wall_time(call, warmup_ms=min(b.warmup_ms, 5.0), rep_ms=b.rep_ms) if runtime.on_gpu() else t
    except Exception as exc:  # noqa: BLE001 - e.g. out of memory while timing: reported, not fatal
        r.status = f"failed while timing: {type(exc).__name__}: {exc}"
        return
    r.ms, r.ms_q25, r.ms_q75, r.reps = t.median_ms, t.q25_ms, t.q75_ms, t.reps
    r.wall_ms = w.median_ms
    r.params.update(wall_ms_q25=w.q25_ms, wall_ms_q75=w.q75_ms, wall_calls=w.calls)
    res = kernel_resources(kernel) if kernel is not None else {}
    r.registers, r.spills = res.get("registers"), res.get("spills")


# ----------------------------------------------------------------------------------------------------------------
# reading the results


def as_results(results) -> list[Result]:
    return plots.as_results(results)


def speedup(results, provider: str, over: str, clock: str = "wall") -> dict[str, float | None]:
    """Per case: how many times faster ``provider`` is than ``over`` on ``clock`` (``over``'s time / ``provider``'s);
    None where either has no time (unavailable, failed, not timed)."""
    results = as_results(results)
    clock = runtime.one_of("clock", clock, CLOCKS)
    times: dict[str, dict[str, float | None]] = {}
    for r in results:
        times.setdefault(r.case, {})[r.provider] = r.time(clock) if r.status == "ok" else None
    known = tuple(dict.fromkeys(r.provider for r in results))
    runtime.one_of("provider", provider, known)
    runtime.one_of("over", over, known)
    out = {}
    for case, by in times.items():
        a, b = by.get(provider), by.get(over)
        out[case] = b / a if _positive(a) and _positive(b) else None
    return out


def interpreter_summary(results, against: str = "their references") -> str:
    """The one line a CPU run prints instead of timing tables and plots: how many cases ran and matched ``against``
    in Triton's interpreter (those that cannot run here, status "unavailable: ...", counted apart), and that its
    timings say nothing about a GPU."""
    results = as_results(results)
    if not isinstance(against, str):
        raise runtime.ArgumentTypeError(f"against must name what the cases were checked against, got {against!r}.")
    absent = [r for r in results if r.status.startswith("unavailable")]
    ran = [r for r in results if not r.status.startswith("unavailable")]
    bad = [r for r in ran if r.status not in _RAN or str(r.params.get("check", "ok")).startswith("FAILED")]
    failed = sorted({f"{r.case} ({r.provider})" if r.provider else r.case for r in bad})
    line = f"checked in Triton's CPU interpreter: {len(ran) - len(bad)} of {len(ran)} cases matched {against}"
    if failed:
        line += f"; failed: {', '.join(failed)}"
    if absent:
        line += f"; {len(absent)} not run here (e.g. {absent[0].status.removeprefix('unavailable: ')})"
    return line + ". Interpreter timings measure the interpreter, not a GPU: the stored H100 run does the teaching."


_RAN = ("ok", "checked, not timed")


def _positive(t) -> bool:
    return t is not None and not math.isnan(t) and t > 0


def _clock_label(r: Result, clock: str) -> str:
    return f"{clock} (interpreter)" if r.interpreter else clock


def summary(results, clock: str = "wall", baseline: str | None = None, title: str | None = None) -> str:
    """A table of every record on one clock, the clock named in every row: case, provider, clock, ms, TFLOP/s, GB/s,
    (``x vs <baseline>``: the speedup over that provider on the same clock), status."""
    results = as_results(results)
    clock = runtime.one_of("clock", clock, CLOCKS)
    if baseline is not None:
        runtime.one_of("baseline", baseline, tuple(dict.fromkeys(r.provider for r in results)))
    base = {r.case: r.time(clock) for r in results if r.provider == baseline and r.status == "ok"}
    heads = ["case", "provider", "clock", "ms", "TFLOP/s", "GB/s"]
    if baseline is not None:
        heads.append(f"x vs {baseline}")
    heads.append("status")
    rows = []
    for r in results:
        row = [
            r.case,
            r.provider,
            _clock_label(r, clock),
            r.time(clock),
            r.rate("tflops", clock),
            r.rate("gbps", clock),
        ]
        if baseline is not None:
            mine, theirs = r.time(clock), base.get(r.case)
            row.append(theirs / mine if r.status == "ok" and _positive(mine) and _positive(theirs) else None)
        row.append(r.status)
        rows.append(row)
    return plots.text_table(heads, rows, title=title)


def plot(results, x: str, clock: str = "wall", metric: str = "ms", ax=None, title=None, logx=True, logy=False):
    """One line per provider: ``metric`` ('ms', 'tflops' or 'gbps') on ``clock`` against the x value ``x``."""
    results = as_results(results)
    clock = runtime.one_of("clock", clock, CLOCKS)
    metric = runtime.one_of("metric", metric, ("ms", "tflops", "gbps"))
    y = {"ms": "ms", "tflops": "tflops", "gbps": "gbps"}[metric]
    y = y if clock == "device" else ("wall_ms" if metric == "ms" else f"wall_{metric}")
    ok = [r for r in results if r.status == "ok"]
    ax = plots.line(ok, x=x, y=y, group="provider", ax=ax, logx=logx, logy=logy, title=title)
    ax.set_ylabel(f"{plots.HEADINGS.get(metric, metric)} ({clock} clock)")
    return ax
