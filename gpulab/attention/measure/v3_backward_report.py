"""Lesson 4, version 3's backward measured: the records of ``scripts/gpu_v3_backward.py`` read back, best rounds,
ratios and tables (no kernels here; :mod:`gpulab.attention.v3.backward` is the kernel).

Records: ``benchmarks/05_attention_hopper/v3/<gpu>-<date>-bwd-<run>-<part>.jsonl``, one JSON object a line, with the
device, torch and Triton versions and the date; ``part`` is ``check`` (gradients against float64, ``ok``,
``rel_err_dq/dk/dv``; ``kind='plan'``: through ``flash_attention``, eager, compiled and deterministic), ``race``
(``dkdv_differing`` of ``runs``, ``dq_max_rel_diff``; ``raw_launch``, where recorded: the repeated calls went through
the cached launch), ``time`` (``kind='fwd+bwd'``: ``impl``, ``round``, ``ms``
device time by ``do_bench``, ``wall_ms`` eager wall time) and ``cs336`` (the CS336 leaderboard problem, ``ms`` by
``triton.testing.do_bench``).
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

from gpulab import dtypes, runtime

__all__ = ["FOLDER", "runs", "stored", "best", "ratios", "spread", "table", "cs336", "check_summary", "race_summary",
           "CUDNN", "SHIPPED", "PLAN", "TOP_STUDENT_MS", "min_seq_table", "kernel_profile"]  # fmt: skip

FOLDER = Path(__file__).resolve().parents[3] / "benchmarks" / "05_attention_hopper" / "v3"
CUDNN = "SDPA cuDNN"
SHIPPED = "gpulab shipped"
"""``flash_attention`` with the two-kernel backward: the plan's forward, version 1's two backward kernels (the plan's
version-3 gate, ``plan.V3_BACKWARD_MIN_SEQ``, off)."""
PLAN = "gpulab plan"
"""``flash_attention`` as it is: version 3's backward where ``plan.V3_BACKWARD_MIN_SEQ`` takes it."""
TOP_STUDENT_MS = 5.36
"""The CS336 2025 leaderboard's top entry for this problem (ms, timed on the leaderboard's own H100)."""
_NAME = re.compile(r"^(?P<gpu>.+)-(?P<date>\d{4}-\d\d-\d\d)-bwd-(?P<run>[a-z])-(?P<part>check|race|time|cs336)\.jsonl$")


def runs(folder=None) -> list[str]:
    """The run letters with records in ``folder`` (default :data:`FOLDER`), oldest first."""
    folder = Path(folder) if folder is not None else FOLDER
    return sorted({m["run"] for p in folder.glob("*-bwd-*.jsonl") if (m := _NAME.match(p.name))})


def stored(run: str, part: str, folder=None) -> list[dict]:
    """The records of ``part`` ('check', 'race', 'time' or 'cs336') of run ``run`` (a letter, see :func:`runs`);
    FileNotFoundError naming the folder if there are none."""
    runtime.one_of("part", part, ("check", "race", "time", "cs336"))
    folder = Path(folder) if folder is not None else FOLDER
    files = sorted(p for p in folder.glob(f"*-bwd-{run}-{part}.jsonl") if _NAME.match(p.name))
    if not files:
        raise FileNotFoundError(f"no version-3 backward records of run {run!r}, part {part!r} in {folder}; "
                                "run scripts/gpu_v3_backward.py on an H100 and copy its files there.")  # fmt: skip
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]


def best(records: list[dict], clock: str = "ms") -> dict:
    """``{(dtype, head_dim, seq, causal): {impl: record}}`` of ``kind='fwd+bwd'`` records, each implementation's
    round with the shorter ``clock`` ('ms' or 'wall_ms') time; records with an error are left out."""
    runtime.one_of("clock", clock, ("ms", "wall_ms"))
    out: dict = {}
    for r in records:
        if r.get("kind") != "fwd+bwd" or clock not in r:
            continue
        key = (r["dtype"].replace("torch.", ""), r["head_dim"], r["seq"], r["causal"])
        row = out.setdefault(key, {})
        if r["impl"] not in row or r[clock] < row[r["impl"]][clock]:
            row[r["impl"]] = r
    return out


def ratios(best_rows: dict, impl: str, peer: str = CUDNN, clock: str = "ms", head_dim=None) -> list[float]:
    """``peer``'s time over ``impl``'s on every problem both ran (above 1: ``impl`` took less time), optionally
    at one ``head_dim``."""
    return [row[peer][clock] / row[impl][clock] for key, row in sorted(best_rows.items())
            if impl in row and peer in row and (head_dim is None or key[1] == head_dim)]  # fmt: skip


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, lowest, highest) of ``values``; ValueError if there are none."""
    if not values:
        raise ValueError("spread() needs at least one ratio; the records hold none for this pair.")
    return statistics.median(values), min(values), max(values)


def table(best_rows: dict, impls: list[str], clock: str = "ms") -> str:
    """A text table: one row per problem, per implementation its time and its speed relative to cuDNN's."""
    head = f"{'problem':26s}" + "".join(f"{name[-22:]:>24s}" for name in impls)
    lines = [head, "-" * len(head)]
    for (dtype, d, n, causal), row in sorted(best_rows.items()):
        label = f"{dtypes.short(dtype)} d{d} N{n}{' causal' if causal else ''}"
        cells = []
        for name in impls:
            if name in row and CUDNN in row:
                cells.append(f"{row[name][clock]:8.3f} ms {row[CUDNN][clock] / row[name][clock]:5.2f}x")
            else:
                cells.append("-")
        lines.append(f"{label:26s}" + "".join(f"{c:>24s}" for c in cells))
    return "\n".join(lines)


def cs336(records: list[dict]) -> dict[str, float]:
    """``{impl: ms}``: each implementation's shorter ``do_bench`` time over its rounds on the CS336 problem."""
    out: dict[str, float] = {}
    for r in records:
        if r.get("kind") == "cs336" and "ms" in r:
            out[r["impl"]] = min(out.get(r["impl"], float("inf")), r["ms"])
    return out


def check_summary(records: list[dict]) -> dict:
    """``{'passed', 'checks', 'max_rel_err', 'configs', 'plan_ok'}`` of a check part: gradient checks that passed,
    checks, the largest relative error of dQ, dK or dV, the configurations covered, and whether every check
    through ``flash_attention`` (eager, compiled, deterministic) passed (None: not in this run)."""
    grads = [r for r in records if r.get("kind") == "check"]
    plan = [r for r in records if r.get("kind") == "plan"]
    errs = [r[f"rel_err_{g}"] for r in grads for g in ("dq", "dk", "dv") if f"rel_err_{g}" in r]
    return {"passed": sum(bool(r.get("ok")) for r in grads), "checks": len(grads),
            "max_rel_err": max(errs, default=float("nan")), "configs": sorted({str(r["step"]) for r in grads}),
            "plan_ok": all(r.get("ok") for r in plan) if plan else None}  # fmt: skip


def race_summary(records: list[dict]) -> dict:
    """``{'configs', 'runs', 'dkdv_differing', 'dq_max_rel_diff'}`` of a race part: (step, d, causal) cases, runs
    each, runs whose dK or dV differed bit for bit from the first (summed), the largest relative difference of dQ."""
    rs = [r for r in records if r.get("kind") == "race"]
    return {"configs": len(rs), "runs": max((r["runs"] for r in rs), default=0),
            "dkdv_differing": sum(r["dkdv_differing"] for r in rs),
            "dq_max_rel_diff": max((r["dq_max_rel_diff"] for r in rs), default=float("nan"))}  # fmt: skip


def min_seq_table(best_rows: dict, impl: str, peer: str = SHIPPED, clock: str = "ms") -> dict[tuple[int, bool], int]:
    """``{(head dim, causal): N}``: the shortest sequence length of ``best_rows`` from which on ``impl`` took less
    ``clock`` time than ``peer`` on every problem (every dtype and longer length); a pair where it does not at the
    longest length has no entry. ValueError if some problem lacks either."""
    by: dict = {}
    for (dtype, d, n, causal), row in best_rows.items():
        if impl not in row or peer not in row:
            raise ValueError(f"problem {(dtype, d, n, causal)} lacks {impl!r} or {peer!r}; time both everywhere.")
        by.setdefault((d, causal), {}).setdefault(n, []).append(row[impl][clock] < row[peer][clock])
    out = {}
    for key, per_n in by.items():
        start = None
        for n in sorted(per_n, reverse=True):
            if not all(per_n[n]):
                break
            start = n
        if start is not None:
            out[key] = start
    return out


_STEP = re.compile(r"^## step (\d+):")
_KERNEL = re.compile(r"^\s*([0-9.]+) us\s+(\d+)x\s+(.+)$")


def kernel_profile(run: str, tag: str, folder=None) -> dict[int, dict[str, float]]:
    """``{step: {kernel name: device microseconds per backward}}`` of the text record
    ``*-bwd-<run>-profile-<tag>.txt`` (``scripts/profile_v3_backward.py``: torch.profiler, the backward alone);
    FileNotFoundError naming the folder if there is none."""
    folder = Path(folder) if folder is not None else FOLDER
    files = sorted(folder.glob(f"*-bwd-{run}-profile-{tag}.txt"))
    if not files:
        raise FileNotFoundError(f"no kernel profile of run {run!r}, tag {tag!r} in {folder}; run "
                                "scripts/profile_v3_backward.py on an H100 and copy its file there.")  # fmt: skip
    out: dict[int, dict[str, float]] = {}
    step = None
    for line in files[-1].read_text().splitlines():
        if m := _STEP.match(line):
            step = int(m[1])
            out[step] = {}
        elif (m := _KERNEL.match(line)) and step is not None:
            out[step][m[3].strip()] = float(m[1])
    return out
