"""Lesson 5, version 3's forward measured: the runs of ``python -m gpulab bench 05 v3`` (and its ``-tune`` part) read
back, each implementation's best round, ratios, spreads and the steps' table (no kernels here;
:mod:`gpulab.attention.v3.forward` is the kernel). :mod:`gpulab.attention.measure.report` re-exports every name, so
lesson 4 reads them beside version 2's probe records.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from gpulab import bench, dtypes, runtime

__all__ = [
    "V3_FOLDER",
    "V3_TUNED",
    "V3_STEPS",
    "V3_PEERS",
    "V3_TRITON_LAUNCH",
    "V3_PART_SUFFIXES",
    "stored_v3",
    "stored_v3_run",
    "v3_best",
    "v3_ratios",
    "v3_spread",
    "v3_step_gains",
    "v3_table",
    "stored_v3_tune",
    "stored_v3_headline",
    "stored_v3_ab",
    "v3_headline",
    "headline_gpu_state",
    "v3_tune_ratios",
]


V3_FOLDER = Path(__file__).resolve().parents[3] / "benchmarks" / "05_attention_hopper" / "v3"
V3_TUNED = "gpulab v3 (tuned)"
V3_STEPS = ("gpulab v3 step 1 (partitions)", "gpulab v3 step 2 (+ ping-pong)", "gpulab v3 step 3 (+ overlap)")
V3_PEERS = ("gpulab v2", "SDPA cuDNN", "SDPA FlashAttention-2")
V3_TRITON_LAUNCH = "gpulab v3 (tuned, Triton's launch)"
"""The tuned kernel launched through Triton's ``kernel[grid](...)`` on every call (descriptors built and encoded each
time; ``raw_launch=False`` of :func:`gpulab.attention.v3.forward.attention_forward`): the host-overhead baseline of the
cached launch."""


V3_PART_SUFFIXES = ("-check", "-race", "-tune", "-headline", "-ab")
"""Record files beside a grid run that are not grid runs: its correctness, race, tune and headline parts, A/B
timings (:func:`stored_v3` skips them)."""


def _newest_grid_run(folder) -> Path:
    """The newest grid record in ``folder`` (default :data:`V3_FOLDER`), its parts skipped. FileNotFoundError if
    none."""
    folder = Path(folder) if folder is not None else V3_FOLDER
    runs = [p for p in folder.glob("*.jsonl") if not p.stem.endswith(V3_PART_SUFFIXES)]
    if not runs:
        raise FileNotFoundError(f"no version-3 bench records in {folder}; run `gpulab bench 05 v3` on an H100.")
    return bench.newest(runs)


def stored_v3(folder=None) -> list[bench.Result]:
    """The newest bench run of version 3 (``python -m gpulab bench 05 v3``:
    ``benchmarks/05_attention_hopper/v3/<gpu>-<date>[-tag].jsonl``; the ``-check``, ``-race`` and ``-tune`` files hold
    its correctness and tuning parts, ``bench 05 v3-check|v3-race|v3-tune``). FileNotFoundError if none."""
    return bench.load("05", path=_newest_grid_run(folder))


def stored_v3_run(folder=None) -> str:
    """The tag of the run :func:`stored_v3` reads (``"g"`` for ``<gpu>-2026-11-26-g.jsonl``; ``""`` for a file without
    one), so prose can name the run it states. FileNotFoundError if none."""
    tag = re.search(r"\d{4}-\d{2}-\d{2}(?:-(\w+))?$", _newest_grid_run(folder).stem)
    return (tag.group(1) or "") if tag else ""


def v3_best(records) -> dict[tuple, dict[str, bench.Result]]:
    """``{(dtype, head_dim, causal, seq): {impl: record}}``, each implementation's faster round (the run timed every
    provider twice, alternating, and keeps the faster: one config timed twice in one run differed by up to 10%)."""
    records = bench.result_list("records", records)
    best: dict[tuple, dict[str, bench.Result]] = {}
    for r in records:
        p = r.params
        if r.status != "ok" or p.get("kind") != "throughput":
            continue
        row = best.setdefault((r.dtype, p["head_dim"], p["causal"], p["seq"]), {})
        if p["impl"] not in row or r.ms < row[p["impl"]].ms:
            row[p["impl"]] = r
    return best


def v3_ratios(records, over: str, ours: str = V3_TUNED, clock: str = "device") -> list[float]:
    """``over``'s time / ``ours``' time on every problem where both ran (> 1: ours faster), on ``clock``."""
    runtime.one_of("clock", clock, ("device", "wall"))
    attr = "ms" if clock == "device" else "wall_ms"
    out = []
    for row in v3_best(records).values():
        if ours in row and over in row:
            out.append(getattr(row[over], attr) / getattr(row[ours], attr))
    return out


def v3_spread(values) -> tuple[float, float, float]:
    """(median, min, max) of ratios; a ValueError for none."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
        raise TypeError(f"values must be a list of ratios (floats, e.g. from v3_ratios), got {type(values).__name__}.")
    if not values:
        raise ValueError("no ratios: the two implementations never ran the same problem in these records.")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        raise ValueError(f"values must be finite numbers (ratios), got {values!r}.")
    return statistics.median(values), min(values), max(values)


def v3_step_gains(records) -> list[tuple[str, str, tuple[float, float, float]]]:
    """The ladder: each step's time against the one before (step 1 against version 2, the tuned kernel against step
    3), as (step, before, (median, min, max)) of device-time ratios over the run's problems."""
    chain = ("gpulab v2", *V3_STEPS, V3_TUNED)
    return [(b, a, v3_spread(v3_ratios(records, a, ours=b))) for a, b in zip(chain, chain[1:])]


def v3_table(records) -> str:
    """Per problem: version 3 (tuned) in TFLOP/s on both clocks, and its ratio to version 2, cuDNN and FA-2
    (device time; > 1: version 3 faster)."""
    rows = v3_best(records)
    head = (f"{'dtype':5s} {'d':>4s} {'causal':>6s} {'N':>6s} {'v3 TFLOP/s':>10s} {'(wall)':>7s} "
            f"{'vs v2':>6s} {'vs cuDNN':>8s} {'vs FA-2':>7s}")  # fmt: skip
    lines = [head]
    for (dtype, d, causal, n), row in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3])):
        ours = row.get(V3_TUNED)
        if ours is None:
            continue
        ratio = [f"{row[p].ms / ours.ms:.2f}x" if p in row else "-" for p in V3_PEERS]
        lines.append(f"{dtypes.short(dtype):5s} {d:4d} {('yes' if causal else 'no'):>6s} {n:6d} {ours.tflops:10.0f} "
                     f"{ours.wall_tflops:7.0f} {ratio[0]:>6s} {ratio[1]:>8s} {ratio[2]:>7s}")  # fmt: skip
    return "\n".join(lines)


def _stored_part(folder, pattern: str, part: str, missing: str) -> list[bench.Result]:
    """The newest record in ``folder`` (default :data:`V3_FOLDER`) matching ``pattern``, its run read from its name
    without ``-<part>``; FileNotFoundError with ``missing`` (``{folder}`` filled in) if none."""
    folder = Path(folder) if folder is not None else V3_FOLDER
    runs = list(folder.glob(pattern))
    if not runs:
        raise FileNotFoundError(missing.format(folder=folder))
    return bench.load("05", path=bench.newest(runs, part=part))


def stored_v3_tune(folder=None, run: str | None = None) -> list[bench.Result]:
    """The newest tuning run of version 3 (``benchmarks/05_attention_hopper/v3/<gpu>-<date>[-tag]-tune.jsonl``:
    candidates checked, raced and timed beside their peers, ``kind='tune'``), or with ``run`` (a run letter, e.g.
    ``"i"``) that run's. FileNotFoundError if none."""
    if run is not None and not (isinstance(run, str) and run.isalnum()):
        raise ValueError(f"run must be a run letter such as 'i' (letters and digits), got {run!r}.")
    which = f"run {run}'s" if run else "version-3"
    return _stored_part(
        folder,
        f"*-{run}-tune.jsonl" if run else "*-tune.jsonl",
        "tune",
        f"no {which} tune records in {{folder}}; run `gpulab bench 05 v3-tune` on an H100.",
    )


def stored_v3_ab(name: str, folder=None) -> list[bench.Result]:
    """The newest A/B record named ``name`` (``benchmarks/05_attention_hopper/v3/<gpu>-<date>[-tag]-<name>-ab.jsonl``: a
    kernel change against the kernel before it in alternating rounds, ``kind='ab'``; e.g. ``"qregs"``, written by
    ``scripts/gpu_v3_qregs_ab.py``). :func:`v3_headline` with ``kind='ab'`` reads its median rounds.
    FileNotFoundError if none."""
    if not (isinstance(name, str) and name.replace("_", "").isalnum()):
        raise ValueError(f"name must name an A/B record such as 'qregs' (letters, digits, _), got {name!r}.")
    return _stored_part(
        folder, f"*-{name}-ab.jsonl", f"{name}-ab", f"no '{name}' A/B records of version 3 in {{folder}}."
    )


def v3_tune_ratios(records, ours: str, over: str) -> dict[tuple, float]:
    """``{(dtype, head_dim, causal, seq): over's time / ours' time}`` (device time; > 1: ``ours`` faster) over a
    tune run's timed records (``kind='tune'``, status ok, check ok), where both providers ran the problem."""
    records = bench.result_list("records", records)
    ms: dict[tuple, dict[str, float]] = {}
    for r in records:
        p = r.params
        if r.status != "ok" or p.get("kind") != "tune" or p.get("check") != "ok" or r.provider not in (ours, over):
            continue
        ms.setdefault((r.dtype, p["head_dim"], p["causal"], p["seq"]), {})[r.provider] = r.ms
    return {key: t[over] / t[ours] for key, t in sorted(ms.items()) if ours in t and over in t}


def stored_v3_headline(folder=None) -> list[bench.Result]:
    """The newest headline run of version 3 (``benchmarks/05_attention_hopper/v3/<gpu>-<date>[-tag]-headline.jsonl``,
    ``python -m gpulab bench 05 v3-headline``: the headline problem in alternating rounds). FileNotFoundError if
    none."""
    return _stored_part(
        folder,
        "*-headline.jsonl",
        "headline",
        "no version-3 headline records in {folder}; run `gpulab bench 05 v3-headline` on an H100.",
    )


def v3_headline(records, kind: str = "headline") -> dict[str, dict]:
    """``{impl: {"ms", "wall_ms", "tflops", "wall_tflops", "rounds", "tflops_rounds"}}`` over a headline run's records
    (``kind='headline'``, status ok; ``kind='ab'`` for an A/B record, :func:`stored_v3_ab`): each implementation's
    median round on each clock (TFLOP/s from the median time), its number of rounds and every round's device-clock
    TFLOP/s in round order. A ValueError if the records hold more than one problem (the part times one)."""
    runtime.one_of("kind", kind, ("headline", "ab"))
    records = bench.result_list("records", records)
    rows = [r for r in records if r.status == "ok" and r.params.get("kind") == kind]
    problems = {(r.dtype, r.params["head_dim"], r.params["causal"], r.params["seq"]) for r in rows}
    if len(problems) > 1:
        raise ValueError(f"a headline run times one problem; these records hold {len(problems)}: {sorted(problems)}.")
    out = {}
    for impl in dict.fromkeys(r.params["impl"] for r in rows):
        mine = sorted((r for r in rows if r.params["impl"] == impl), key=lambda r: r.params["round"])
        ms, wall = statistics.median(r.ms for r in mine), statistics.median(r.wall_ms for r in mine)
        out[impl] = dict(
            ms=ms,
            wall_ms=wall,
            tflops=mine[0].flops / ms / 1e9,
            wall_tflops=mine[0].flops / wall / 1e9,
            rounds=len(mine),
            tflops_rounds=[r.tflops for r in mine],
        )
    return out


POWER_CAP = 0x4
"""``clocks_event_reasons.active``'s bit for the software power cap (the board held at its power limit)."""


def headline_gpu_state(folder=None, busy_watts: float = 300.0) -> dict:
    """What the GPU did during the newest headline run: its ``nvidia-smi`` trace beside the records
    (``<gpu>-<date>[-tag]-headline-smi.csv``, sampled every 250 ms: SM clock, temperature, power, clock event
    reasons). Over the samples drawing more than ``busy_watts`` (the timed kernels running): their number, the share
    with the software power cap active, the SM clock's range and the highest power and temperature.
    FileNotFoundError if no trace is stored."""
    busy_watts = runtime.finite_float("busy_watts", busy_watts, positive=True)
    folder = Path(folder) if folder is not None else V3_FOLDER
    traces = list(folder.glob("*-headline-smi.csv"))
    if not traces:
        raise FileNotFoundError(f"no nvidia-smi trace of a headline run in {folder} (`*-headline-smi.csv`).")
    trace = bench.newest(traces, part="headline-smi")
    busy = []
    for line in trace.read_text().splitlines()[1:]:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 6:
            continue
        clock, temp, watts, reasons = (
            float(fields[1].split()[0]),
            float(fields[3]),
            float(fields[4].split()[0]),
            fields[5],
        )
        if watts > busy_watts:
            busy.append((clock, temp, watts, int(reasons, 16)))
    if not busy:
        raise ValueError(f"{trace.name} holds no sample above {busy_watts} W: the trace missed the timed kernels.")
    return dict(
        samples=len(busy),
        power_capped=sum(bool(r & POWER_CAP) for *_, r in busy) / len(busy),
        clock_min=min(b[0] for b in busy),
        clock_max=max(b[0] for b in busy),
        watts_max=max(b[2] for b in busy),
        temp_max=max(b[1] for b in busy),
    )
