"""What the lessons display from superseded records, and the one-record check over it (:mod:`gpulab.bench.history`).

Lessons 6 and 7 (the fused RNN on one SM, and one head over many SMs) read four records that each timed one head of 768
forward+backward: the version ladder (b3, the first split backward, which exchanged dG), the split probe (the same first
backward), the partials experiment and the lesson's run (the present backward, which exchanges partial sums of dh). The
present measurement is the lesson's run (``python -m gpulab bench 06``, section 8); the first backward's times are
history. :func:`versions_now` and :func:`split_now` split a record's rows into what a lesson shows as current and what
only a labelled history line may show; notebooks 06 and 07 and the README's generator call them. :func:`lesson06` lists,
for the forward+backward of one head of 768, every value notebooks 06 and 07 and the README display, with its run and
label, so ``tests/course/test_records_shown.py`` can check that one key comes from one run.

The same rule for every lesson, read from the sources' loader calls, is :mod:`gpulab.course.one_record`. A cell
that shows a record beside the lesson's run prints that record's :func:`banner` (the record file the index names,
its device, versions and date: :func:`gpulab.bench.index.banner`), which is what the check reads.
"""

from __future__ import annotations

from gpulab import bench
from gpulab.bench.history import Key, Shown
from gpulab.bench.index import banner

__all__ = [
    "SUPERSEDED",
    "versions_now",
    "split_now",
    "partials_now",
    "run_training",
    "unmeasured",
    "history_line",
    "banner",
    "attention_versions",
    "lesson06",
]

SUPERSEDED: dict[tuple[str, str], str] = {
    ("versions", "b3"): "b3 and its cuDNN peer: the first split backward (it exchanged dG through L2); the partial-sum "
    "backward replaced it (section 6b) and section 8's run times it",
    ("split", "fwd+bwd"): "the split probe's forward+backward ran the first split backward (dG exchange); the "
    "partial-sum backward replaced it (section 6b) and section 8's run times it",
}
"""(record, what) -> why those rows are history and what replaced them."""


def versions_now(rows) -> tuple[list, list]:
    """(current, history) rows of the versions record: b3 and the forward+backward cuDNN peer measured beside it are
    history (:data:`SUPERSEDED`)."""
    rows = bench.result_list("rows", rows, source=" (from load_versions)")
    old = [r for r in rows if r.params.get("direction") == "forward+backward" and r.params.get("version") in
           ("b3", "cuDNN")]  # fmt: skip
    return [r for r in rows if r not in old], old


def split_now(rows) -> tuple[list[dict], list[dict]]:
    """(current, history) rows of a split record: its forward+backward times are history (:data:`SUPERSEDED`)."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TypeError(f"rows must be the list of dicts load_split() returns, got {type(rows).__name__}.")
    old = [r for r in rows if r.get("kind") == "time" and r.get("pass_") == "fwd+bwd"]
    return [r for r in rows if r not in old], old


def run_training(rows, backend: str, dtype: str | None = None):
    """The lesson run's forward+backward of one head of 768, B = 16, eager, of ``backend`` ('fused', 'cuDNN nn.LSTM
    (dense)') and ``dtype`` if given: the one record of that measurement (None if the run has none)."""
    for r in bench.result_list("rows", rows, source=" (from bench.load('06'))"):
        p = r.params
        if (p.get("backend"), p.get("pass"), p.get("mode"), p.get("NH"), p.get("DH")) == (
            backend,
            "fwd+bwd",
            "eager",
            1,
            768,
        ):
            if r.shape and r.shape[0] == 16 and r.status == "ok" and (dtype is None or r.dtype == dtype):
                return r
    return None


def partials_now(rows) -> list[dict]:
    """The rows of a partials record a lesson shows: its backward kernels. Its forward+backward rows time what the
    lesson's run times too (one head of 768), so the lesson shows the run's (one record per measurement)."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TypeError(f"rows must be the list of dicts load_split() returns, got {type(rows).__name__}.")
    return [r for r in rows if r.get("kind") != "fwd+bwd"]


def unmeasured(rows) -> str:
    """The records of a run that hold no time, one line per reason (the status's first line, cut at 100
    characters) with how many and which cases: what a table of 'n/a' rows would say, in a few lines."""
    rows = bench.result_list("rows", rows)
    by_reason: dict[str, list[str]] = {}
    for r in rows:
        if r.status != "ok":
            reason = r.status.strip().splitlines()[0].rstrip(": ")
            reason = reason if len(reason) <= 100 else reason[:97] + "..."
            p = r.params
            what = f"{r.case} {p.get('pass', '')} {p.get('mode', '')}".strip()
            by_reason.setdefault(reason, []).append(what)
    if not by_reason:
        return "every record of the run holds a time"
    lines = [f"{sum(map(len, by_reason.values()))} records of the run hold no time:"]
    for reason, cases in by_reason.items():
        names = sorted(set(cases))
        listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"  {len(cases):3d} x {reason} ({listed})")
    return "\n".join(lines)


def history_line(record: str, what: str, rows, describe) -> str:
    """One labelled line for superseded rows: 'history (...why...): ' + ``describe(row)`` for each."""
    if (record, what) not in SUPERSEDED:
        raise ValueError(f"(record, what) must be one of {sorted(SUPERSEDED)}, got {(record, what)!r}.")
    if not callable(describe):
        raise TypeError(f"describe must be a function of one row returning a str, got {describe!r}.")
    why = SUPERSEDED[(record, what)]
    return f"history, superseded ({why}): " + "; ".join(describe(r) for r in rows)


def attention_versions(records) -> tuple[str, int]:
    """Which forward version ran as ``gpulab`` in a lesson-4 run ('1', '2' or '1/2': its config key names 'v2' when
    version 2 ran) and on how many problems; the backward is version 1's (version 2's is an experiment)."""
    fwd, n = set(), 0
    for r in bench.result_list("records", records, source=" (from bench.load('04'))"):
        configs = r.params.get("configs") or {}
        if r.params.get("impl") == "gpulab" and r.params.get("kind") == "throughput" and configs:
            n += 1
            fwd.add("2" if any("v2" in k for k in configs) else "1")
    return "/".join(sorted(fwd)), n


def lesson06(gpu: str = "h100", root=None) -> list[Shown]:
    """Every device and wall time of one head of 768, B = 16, forward+backward, that notebooks 06 and 07 and the README
    display, from every record they read, labelled as they label it."""
    from gpulab.rnn.fused.measure import split_report, versions_report

    def key(case, version, device, clock):
        return Key("06", f"LSTM forward+backward, {case}", version, device, "B16 T1024 1x768", clock)

    shown = []

    def add(case, version, device, run, r_ms, r_wall, history):
        for clock, value in (("device", r_ms), ("wall", r_wall)):
            if value is not None:
                shown.append(Shown(key(case, version, device, clock), run, float(value), history))

    # the lesson's run (section 8, section 9, Appendix F; the README's lesson 6 block): current
    run = bench.current("06", "main", gpu, root)
    rows = bench.load("06", path=run)
    for case, version, r in (
        ("gpulab split kernel", "split backward", run_training(rows, "fused")),
        ("cuDNN fp16", "cuDNN", run_training(rows, "cuDNN nn.LSTM (dense)", "float16")),
    ):
        if r is not None:
            add(case, version, r.device, run.name, r.ms, r.wall_ms, False)  # fmt: skip
    # the version ladder (section 4b; the README's versions block): b3 and its peer are history
    vfile = bench.current("06", "versions", gpu, root)
    now, old = versions_now(versions_report.load_versions(gpu, root))
    for rows, history in ((now, False), (old, True)):
        for r in rows:
            if r.params.get("direction") == "forward+backward" and r.params.get("DH") == 768:
                ours = r.params.get("version") != "cuDNN"
                add("gpulab split kernel" if ours else "cuDNN fp16", "split backward" if ours else "cuDNN", r.device,
                    vfile.name, r.ms, r.wall_ms, history)  # fmt: skip
    # the split probe (section 6b; the README's split block): its forward+backward rows are history
    srows = split_report.load_split(gpu, root)
    device = srows[0].get("device", "?") if srows and srows[0].get("kind") == "env" else "?"
    sfile = split_report.split_path(gpu, root).name
    now_s, old_s = split_now(srows)
    for rows, history in ((now_s, False), (old_s, True)):
        for r in rows:
            if r.get("kind") == "time" and r.get("pass_") == "fwd+bwd" and r.get("DH") == 768:
                case = {"fused split fwd+bwd": "gpulab split kernel", "cuDNN nn.LSTM float16 fwd+bwd": "cuDNN fp16"}
                if r.get("case") in case:
                    ours = case[r["case"]] == "gpulab split kernel"
                    add(case[r["case"]], "split backward" if ours else "cuDNN", device, sfile, r.get("ms"),
                        r.get("wall_ms"), history)  # fmt: skip
    # the partials experiment (section 6b; the README's split block): what partials_now keeps
    pfile = split_report.split_path(gpu, root, record="partials").name
    for r in partials_now(split_report.load_split(gpu, root, record="partials")):
        if r.get("kind") == "fwd+bwd" and (r.get("B"), r.get("NH"), r.get("DH")) == (16, 1, 768):
            ours = r["case"].startswith("gpulab")
            if ours or r["case"].startswith("cuDNN nn.LSTM float16"):
                add("gpulab split kernel" if ours else "cuDNN fp16", "split backward" if ours else "cuDNN", device,
                    pfile, r.get("ms"), r.get("wall_ms"), False)  # fmt: skip
    return shown
