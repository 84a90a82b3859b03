"""One record per measurement, in every lesson: the times a notebook displays, grouped by key, come from one run.

A lesson source loads records with calls such as ``bench.load("06", gpu="h100")`` or ``split_report.load_split(
"h100", record="cross")`` and displays them in the cell of the call (and later cells). :data:`DISPLAYS` maps each
such call, as the sources write it, to the times it displays, each with its :class:`gpulab.bench.history.Key`
(lesson, case, kernel version, device, problem, clock) and its run (the record file). :func:`displayed` reads a
source cell by cell: every loader call of a code cell adds its values, **marked as shown under their own run's
name when that cell prints its record's banner** (:func:`gpulab.bench.index.banner`, re-exported as
``shown.banner``: the record file that ``benchmarks/INDEX.json`` names, its device, versions and date).
:func:`check_source` raises when one key is displayed from two runs without a banner, and when a source calls a
loader that :data:`DISPLAYS` does not know (so a new display cannot bypass the check). ``tests/course/
test_records_shown.py`` runs it on every lesson source.

A loader call stands for everything later cells show from the records it loaded: print the banner in the cell that
loads a record shown beside the lesson's run (the check reads that cell), and name the record again in the text of a
later cell that shows more of it.

What is keyed: times (device and wall clock, and ``do_bench`` where a leaderboard uses it), and bandwidths derived
from them. Ratios are not: a ratio is a comparison within one run, which is the point of measuring peers in the same
run. Byte counts (Nsight Compute), instruction counts and stall shares are not times and are not keyed.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpulab import bench
from gpulab.bench.history import Key, Shown, check

__all__ = ["DISPLAYS", "LOADER", "BANNER", "Display", "loader_calls", "displayed", "check_source"]

BANNER = re.compile(r"\b(?:shown|bench\.index|index)\.banner\(")
"""A call that prints the banner of the record a cell shows (the file, device, versions and date it comes from)."""

LOADER = re.compile(
    r"\b(?:bench|traffic|hopper_report|attention_report|versions_report|split_report|rows_report|tasks|roofline|"
    r"codesign)\."
    r"(?:load|stored\w*|load_\w+|hbm_ceiling|stored_read_plateau|ceilings|model_constants)\((?:[^()]|\([^()]*\))*\)"
)
"""A call that loads stored records, as the lesson sources write it."""

# --- keys of stored records -----------------------------------------------------------------------------------------

_PROBLEM = ("direction", "pass", "mode", "causal")


def _finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _times(get_key: Callable[[str], Key], run: str, ms, wall_ms, history: bool = False) -> list[Shown]:
    return [Shown(get_key(c), run, float(v), history) for c, v in (("device", ms), ("wall", wall_ms)) if _finite(v)]


def results_shown(records, run: str, lesson: str, *, case=None, version=None, problem=None, keep=None) -> list[Shown]:
    """Device and wall times of bench records, keyed: ``case``, ``version`` and ``problem`` are functions of a record
    (defaults: the case without an 'HBM: ' prefix; the record's impl/backend/strategy; its shape, dtype and pass);
    ``keep`` selects the records the cell displays."""
    out = []
    for r in bench.result_list("records", records):
        if r.status != "ok" or (keep is not None and not keep(r)):
            continue
        p = r.params
        c = case(r) if case else r.case.removeprefix("HBM: ")
        v = version(r) if version else str(p.get("impl") or p.get("backend") or p.get("strategy") or "-")
        prob = problem(r) if problem else " ".join(
            [f"{list(r.shape) if r.shape else '-'}", str(r.dtype)] + [f"{k}={p[k]}" for k in _PROBLEM if k in p]
        )  # fmt: skip
        dev = r.device or "?"
        out += _times(lambda clock, c=c, v=v, prob=prob, dev=dev: Key(lesson, c, v, dev, prob, clock), run, r.ms,
                      r.wall_ms)  # fmt: skip
    return out


def _newest(lesson: str, root, gpu="h100", sub: str = "") -> Path:
    return bench.current(lesson, sub or "main", gpu, root)


def _run(lesson: str, root, gpu="h100", sub: str = "", **kw) -> list[Shown]:
    path = _newest(lesson, root, gpu, sub)
    return results_shown(bench.load(lesson, path=path), path.name, lesson, **kw)


def _roofline_run(root, keep=None) -> list[Shown]:
    """The newest lesson-1 run, which :func:`gpulab.roofline.ceilings` and ``hbm_ceiling`` read."""
    path = _newest("01", root)
    return results_shown(bench.load("01", path=path), path.name, "01", keep=keep)


# --- lessons 4 and 5 ---------------------------------------------------------------------------------------------


def _attention_version(r) -> str:
    """The kernel version behind an implementation name of lesson 4's runs (one name per version across runs)."""
    impl, fwd_only = r.params.get("impl", ""), r.params.get("direction") == "forward"
    if impl in ("gpulab", "gpulab v2 fwd + v1 bwd") or (impl == "gpulab v2" and fwd_only):
        return "v2 forward" if fwd_only else "v2 forward + v1 backward"
    if impl == "gpulab v2":
        return "v2 forward + v2 (TMA) backward"
    if impl == "gpulab v1":
        return "v1" if fwd_only else "v1 forward + v1 backward"
    return {"SDPA default": "cuDNN (SDPA default)", "SDPA cuDNN": "cuDNN (SDPA default)"}.get(impl, impl)


def _attention_problem(r) -> str:
    p = r.params
    return (f"B{p.get('batch')} H{p.get('heads')} N{p.get('seq')} d{p.get('head_dim')} {r.dtype} "
            f"{'causal' if p.get('causal') else 'full'}")  # fmt: skip


def _attention(records, run: str, keep=None, version=_attention_version) -> list[Shown]:
    return results_shown(records, run, "04", case=lambda r: f"attention {r.params.get('direction')}",
                         version=version, problem=_attention_problem, keep=keep)  # fmt: skip


def _hopper(root, sub: str = ""):

    path = bench.current("05", "/".join(p for p in ("hopper", sub) if p), "h100", root)
    return bench.load("05", path=path), path.name


def _lesson04_probe(root) -> list[Shown]:
    recs, run = _hopper(root)
    return _attention(recs, run, keep=lambda r: r.params.get("kind") in ("throughput", "tiny"))


def _lesson04_cs336(root) -> list[Shown]:
    recs, run = _hopper(root, "cs336")
    out = _attention(recs, run, keep=lambda r: r.params.get("kind") == "cs336")
    for r in recs:  # the leaderboard's clock: triton.testing.do_bench
        if r.params.get("kind") == "cs336" and _finite(r.params.get("do_bench_ms")):
            key = Key("04", "attention forward+backward", _attention_version(r), r.device, _attention_problem(r),
                      "do_bench")  # fmt: skip
            out.append(Shown(key, run, float(r.params["do_bench_ms"])))
    return out


def _lesson04_sweep(root) -> list[Shown]:
    from gpulab.attention.measure import report

    folder = None if root is None else bench.results_dir(root) / "05_attention_hopper" / "hopper"
    recs = [r for r in report.stored_sweep(folder) if str(r.params.get("check", "")).startswith("ok")]

    def config(r):  # a sweep times one config of version 2; the lesson's grid times the dispatched one
        c = r.params["config"]
        return (f"v2 forward, {c['block_m']}x{c['block_n']} tiles, {c['num_warps']} warps, {c['num_stages']} stages"
                f"{', persistent' if c['persistent'] else ''}{', warp-specialized' if c['warp_specialize'] else ''}"
                f"{', overlap' if c.get('overlap') else ''} ({r.params.get('source')})")  # fmt: skip

    return _attention(recs, "sweeps", version=config)


def _lesson04_v3(root) -> list[Shown]:
    from gpulab.attention.measure import report

    path = bench.current("05", "v3", "h100", root)
    return _attention(bench.load("05", path=path), path.name,
                      keep=lambda r: r.params.get("impl") == report.V3_TUNED)  # fmt: skip


def _median_rounds(root, suffix: str, kind: str, measurement: str) -> list[Shown]:
    """A rounds record's median rounds (``<...>-<suffix>.jsonl``, records of ``kind``): a measurement of its own
    (the median of its alternating rounds), keyed apart from a grid's faster-of-two rounds of the same problem."""
    from gpulab.attention.measure import report

    path = bench.current("05", f"v3/{suffix}", "h100", root)
    records = bench.load("05", path=path)
    rows = {r.params["impl"]: r for r in records if r.status == "ok" and r.params.get("kind") == kind}
    out = []
    for impl, h in report.v3_headline(records, kind=kind).items():
        r = rows[impl]
        key = functools.partial(Key, "04", measurement, _attention_version(r), r.device, _attention_problem(r))
        out += _times(key, path.name, h["ms"], h["wall_ms"])
    return out


def _lesson04_v3_headline(root) -> list[Shown]:
    """The headline part's median rounds."""
    return _median_rounds(root, "headline", "headline", "attention forward, median of alternating rounds")


def _lesson04_v3_qregs_ab(root) -> list[Shown]:
    """The A/B of Q from registers: median rounds, keyed apart from the headline part's (another run)."""
    return _median_rounds(root, "qregs-ab", "ab", "attention forward, A/B of Q from registers, median rounds")


# --- lessons 6 and 7 ---------------------------------------------------------------------------------------------


def _lstm_key(pass_: str, version: str, device: str, b, t, nh, dh, dtype: str, clock: str) -> Key:
    return Key("06", f"LSTM {pass_}", version, device, f"B{b} T{t} {nh}x{dh} {dtype}", clock)


def _run05_version(p) -> str:
    backend = p.get("backend", "")
    if backend == "fused":
        return "gpulab fused backend"
    if backend == "cuDNN nn.LSTM (dense)":
        return "cuDNN nn.LSTM"
    if backend == "alternating":
        return f"alternating ({p.get('mode')})"
    return backend


def _lesson05_run(root) -> list[Shown]:
    path = _newest("06", root)
    out = []
    for r in bench.load("06", path=path):
        p = r.params
        if r.status != "ok" or not r.shape:
            continue
        b, t, nh, dh = (list(r.shape) + [None] * 4)[:4]
        key = lambda clock, r=r, p=p, b=b, t=t, nh=nh, dh=dh: _lstm_key(  # noqa: E731
            p.get("pass", "?"), _run05_version(p), r.device, b, t, nh, dh, r.dtype, clock
        )
        out += _times(key, path.name, r.ms, r.wall_ms)
    return out


def _lesson05_versions(root) -> list[Shown]:
    from gpulab.rnn.fused.measure import versions_report as report

    path = bench.current("06", "versions", "h100", root)
    out = []
    for r in report.load_versions("h100", root):
        p = r.params
        v = p.get("version")
        name = {"v4": "gpulab fused backend", "v5": "gpulab fused backend", "b2": "gpulab fused backend",
                "b3": "gpulab fused backend, first split backward", "cuDNN": "cuDNN nn.LSTM"}.get(v, v)  # fmt: skip
        pass_ = "fwd+bwd" if p.get("direction") == "forward+backward" else "fwd"
        key = lambda clock, r=r, p=p, name=name, pass_=pass_: _lstm_key(  # noqa: E731
            pass_, name, r.device, r.shape[0], r.shape[1], p["NH"], p["DH"], r.dtype, clock
        )
        out += _times(key, path.name, r.ms, r.wall_ms, history=v == "b3")  # b3: a history line of its own
    return out


def _split_rows(root, record):
    from gpulab.rnn.fused.measure import split_report

    rows = split_report.load_split("h100", root, record=record) if record else split_report.load_split("h100", root)
    env = next((r for r in rows if r.get("kind") == "env"), {})
    return rows, env.get("device", "?"), split_report.split_path("h100", root, **({"record": record} if record else
                                                                                  {})).name  # fmt: skip


def _lesson05_split(root) -> list[Shown]:
    rows, device, run = _split_rows(root, None)
    names = {"fused split (chosen)": "gpulab fused backend", "cuDNN nn.LSTM float16": "cuDNN nn.LSTM",
             "cuDNN nn.LSTM bfloat16": "cuDNN nn.LSTM", "alternating": "alternating (eager)"}  # fmt: skip
    out = []
    for r in rows:  # the table's forward rows; its forward+backward rows are a history line (shown.split_now)
        if r.get("kind") == "time" and r.get("case") in names and "pass_" not in r:
            dtype = "bfloat16" if "bfloat16" in r["case"] else "float16" if "float16" in r["case"] else "bfloat16"
            key = lambda clock, r=r, dtype=dtype: _lstm_key(  # noqa: E731
                "fwd", names[r["case"]], device, 16, 1024, 1, r["DH"], dtype, clock
            )
            out += _times(key, run, r.get("ms"), r.get("wall_ms"))
    return out


def _lesson05_cross(root) -> list[Shown]:
    rows, device, run = _split_rows(root, "cross")
    out = []
    for r in rows:
        if r.get("kind") == "cross":
            fits = r["DH"] <= 128
            name = {"split": "gpulab fused backend" if not fits else "split kernel (forced)",
                    "one-SM fused": "gpulab fused backend",
                    "alternating": "alternating (eager)"}[r["case"]]  # fmt: skip
            key = lambda clock, r=r, name=name: _lstm_key(  # noqa: E731
                "fwd", name, device, r["B"], r.get("T", 1024), 1, r["DH"], "bfloat16", clock
            )
            out += _times(key, run, r.get("ms"), r.get("wall_ms"))
    return out


def _lesson05_candidates(root) -> list[Shown]:
    rows, device, run = _split_rows(root, "candidates")
    out = []
    for r in rows:
        if r.get("kind") == "candidate" and "ms" in r:
            name = f"split kernel, {r['block_u']}x{r['block_b']} tiles, {r['warps']} warps ({r['direction']})"
            key = lambda clock, r=r, name=name: _lstm_key(  # noqa: E731
                "fwd" if r["direction"] == "forward" else "bwd kernel", name, device, r.get("B", 32), 1024, r["NH"],
                r.get("DH", 768 // r["NH"]), "bfloat16", clock)  # fmt: skip
            out += _times(key, run, r.get("ms"), None)
    return out


def _lesson05_partials(root) -> list[Shown]:
    from gpulab.course import shown

    rows, device, run = _split_rows(root, "partials")
    out = []
    for r in shown.partials_now(rows):  # the backward kernel alone, per tiling: a quantity of its own
        if "ms" in r and "B" in r:
            name = f"split backward kernel alone, {r.get('case', r.get('kind'))}, block_u {r.get('block_u')}"
            key = lambda clock, r=r, name=name: _lstm_key(  # noqa: E731
                "bwd kernel", name, device, r["B"], 1024, r.get("NH", 1), r.get("DH"), "bfloat16", clock
            )
            out += _times(key, run, r.get("ms"), None)
    return out


# --- the registry ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Display:
    """What one loader call displays: ``values(root)`` -> keyed times; ``why`` says what it shows (or why no time)."""

    values: Callable
    why: str


def _lesson05_steps(root) -> list[Shown]:
    """Appendix G's exchange experiment: each exchange's time in that run, keyed as the experiment's own cases (the
    barrier kernel there ran with the stamping build beside it; cuDNN's row is the same-run peer of the ratios)."""
    rows, device, run = _split_rows(root, "steps")
    out = []
    for r in rows:
        if r.get("kind") == "time" and "ms" in r:
            pass_ = "fwd+bwd" if r.get("training") else "fwd"
            case = f"exchange experiment: {r['case'].removesuffix(' fwd+bwd')}"
            key = lambda clock, case=case, pass_=pass_: _lstm_key(  # noqa: E731
                pass_, case, device, 16, 1024, 1, 768, "bfloat16", clock
            )
            out += _times(key, run, r.get("ms"), r.get("wall_ms"))
    return out


def _lesson05_hinted(root) -> list[Shown]:
    """Appendix G's exchange candidates (the ``split/hinted`` record): each (exchange, units, warps) forward and
    cuDNN fp16's of the same run, keyed as that run's own cases."""
    rows, device, run = _split_rows(root, "hinted")
    out = []
    for r in rows:
        if r.get("kind") == "hinted" and "ms" in r:
            name = (f"exchange candidates: {r['exchange']}, {r['block_u']} units, {r['warps']} warps"
                    if "exchange" in r else "exchange candidates: cuDNN nn.LSTM float16")  # fmt: skip
            pass_ = "bwd kernel" if r.get("direction") == "backward" else "fwd"
            key = lambda clock, name=name, pass_=pass_: _lstm_key(  # noqa: E731
                pass_, name, device, 16, 1024, 1, 768, "bfloat16", clock
            )
            out += _times(key, run, r.get("ms"), r.get("wall_ms"))
    return out


def _lesson05_v6(which: str, head_dim: int = 768) -> Callable:
    """Appendix I's and J's version-6 runs (``report.load_v6``'s ``which``), keyed as each run's own cases (cuDNN's
    and b3's rows: same-run peers); the run: its record file."""

    def shown(root) -> list[Shown]:
        from gpulab.rnn.fused.measure import versions_report as report

        recs = report.load_v6("h100", which, root, head_dim)
        name = report.v6_record_name("h100", which, root, head_dim)  # the record file load_v6 read
        out = []
        for r in recs:
            if r.status == "ok" and r.ms:
                pass_ = "fwd+bwd" if "fwd+bwd" in r.case else "bwd kernel" if "backward" in r.case else "fwd"
                args = (pass_, f"version 6 {which}: {r.case}", r.device, r.params.get("B", 16), 1024, 1, head_dim)
                out += _times(lambda clock, a=args: _lstm_key(*a, "bfloat16", clock), name, r.ms, r.wall_ms)
        return out

    return shown


def _lesson05_called(root) -> list[Shown]:
    """Appendix G's recurrence as called: flashrnn's API path per calling mode (loop, autograd.grad, graph, forward
    under no_grad), a different case from section 8's kernel records."""
    rows, device, run = _split_rows(root, "called")
    out = []
    for r in rows:
        if r.get("kind") == "called" and "ms" in r:
            key = lambda clock, r=r: _lstm_key(  # noqa: E731
                "as called", f"flashrnn API: {r['mode']}", device, r["B"], r["T"], r["NH"], r["DH"], "bfloat16", clock
            )
            out += _times(key, run, r.get("ms"), r.get("wall_ms"))
    return out


def _lesson05_rows(kind: str):
    """Appendix H's runs (the ``rows/`` records): 'rows' (16 and 8 rows per program), 'product' (the backward's
    product per gate or all at once), 'rows_split' (the split kernels at 8 rows), each keyed as its run's own cases,
    cuDNN fp16 as that run's peer."""

    def shown(root) -> list[Shown]:
        from gpulab.rnn.fused.measure import rows_report

        run = rows_report.path(kind, root=root).name
        out = []
        for r in rows_report.load(kind, root=root):
            p = r.params
            if r.status != "ok":
                continue
            if kind == "rows_split":
                name, pass_, prob = f"8-rows experiment: {r.case}", p.get("direction", "?"), (16, 1024, 1, 768)
            elif r.case.startswith("cuDNN"):
                name, pass_ = f"{kind} experiment: cuDNN nn.LSTM float16, dense", r.case.split()[2]
                prob = (p["B"], p["T"], 1, p["NH"] * p["DH"])
            else:
                name = f"{kind} experiment: {p['block_b']} rows" + (f", {p['product']}" if kind == "product" else "")
                pass_, prob = p["part"], (p["B"], p["T"], p["NH"], p["DH"])
            key = lambda clock, name=name, pass_=pass_, prob=prob, r=r: _lstm_key(  # noqa: E731
                pass_, name, r.device, *prob, str(r.dtype), clock
            )
            out += _times(key, run, r.ms, r.wall_ms)
        return out

    return shown


def _none(root) -> list[Shown]:
    return []


def _stored(name):
    """Lesson 8's stored run ``tasks.stored_<name>("h100")``, keyed as its records."""

    def values(root) -> list[Shown]:
        from gpulab import tasks

        recs = getattr(tasks, f"stored_{name}")("h100", root)
        return results_shown(recs, f"{recs[0].date} {name}", "08") if recs else []

    return values


_COPY = ("copy kernel (gpulab)", "torch copy_ (peer)")

DISPLAYS: dict[tuple[str, str], Display] = {
    ("00", 'bench.load("00", gpu="h100")'): Display(
        lambda root: _run("00", root, keep=lambda r: r.case == "working-set sweep"),
        "lesson 0's run: its working-set sweep (the copy it also timed is shown from lesson 1's run, the ceiling)"),
    ("00", 'roofline.hbm_ceiling("H100")'): Display(
        lambda root: _roofline_run(root, keep=lambda r: r.case.removeprefix("HBM: ") in _COPY),
        "the HBM ceiling and the copies it is measured with (lesson 1's run)"),
    ("00", 'roofline.ceilings("H100")'): Display(
        lambda root: _roofline_run(root, keep=lambda r: r.case.removeprefix("HBM: ") in _COPY),
        "the copies, from the ceiling's run"),
    ("00", "roofline.hbm_ceiling()"): Display(
        lambda root: _roofline_run(root, keep=lambda r: r.case.removeprefix("HBM: ") in _COPY), "the HBM ceiling"),
    ("00", 'traffic.stored("00")'): Display(_none, "Nsight Compute byte counts, not times"),
    ("01", 'roofline.ceilings("h100")'): Display(lambda root: _roofline_run(root), "lesson 1's run: every ceiling"),
    ("01", 'bench.load("00", gpu="h100")'): Display(
        lambda root: _run("00", root, keep=lambda r: r.case == "working-set sweep"),
        "lesson 0's sweep placed on the roofline"),
    ("02", 'bench.load("02", gpu="h100")'): Display(lambda root: _run("02", root), "lesson 2's run"),
    ("02", 'roofline.stored_read_plateau("H100")'): Display(
        lambda root: _run("00", root, keep=lambda r: r.case == "working-set sweep"),
        "lesson 0's read-only plateau (its sweep)"),
    ("02", "codesign.model_constants()"): Display(
        lambda root: _run("02", root, keep=lambda r: r.params.get("sweep") == "K"),
        "the model's measured constants, read from lesson 2's run (its K sweep)"),
    ("02", 'roofline.hbm_ceiling("H100")'): Display(
        lambda root: _roofline_run(root, keep=lambda r: r.case.removeprefix("HBM: ") in _COPY), "the HBM ceiling"),
    ("03", 'bench.load("03", gpu="h100")'): Display(lambda root: _run("03", root), "lesson 3's run"),
    **{(n, 'roofline.ceilings("H100")'): Display(lambda root: _roofline_run(root), "the roofs of the plots")
       for n in ("04", "05", "06", "07")},
    ("03", 'roofline.ceilings("h100")'): Display(
        lambda root: _roofline_run(root), "the roofs one LSTM step is placed on (lesson 1's run)"),
    ("04", 'bench.load("04", gpu="h100")'): Display(
        lambda root: _attention(bench.load("04", path=_newest("04", root)), _newest("04", root).name,
                                keep=lambda r: r.params.get("kind") == "throughput"),
        "section 8's run: the lesson's grid, every implementation"),
    ("04", 'traffic.stored("04")'): Display(_none, "Nsight Compute byte counts, not times"),
    ("05", "hopper_report.stored()"): Display(_lesson04_probe, "the Hopper probe's grid and small problems"),
    ("05", "hopper_report.stored_cs336()"): Display(_lesson04_cs336, "the CS336 leaderboard problem"),
    ("05", "hopper_report.stored_sweep()"): Display(_lesson04_sweep, "version 2's config sweeps, per config"),
    ("05", "hopper_report.stored_fused()"): Display(_none, "the one-pass backward: ratios to the two kernels only"),
    ("05", "hopper_report.stored_v3()"): Display(_lesson04_v3, "version 3's run: version 3's own times (the peers as "
                                                               "ratios within the run)"),
    ("05", "hopper_report.stored_v3_headline()"): Display(
        _lesson04_v3_headline, "version 3's headline run: each implementation's median round on both clocks"),
    ("05", "hopper_report.stored_v3_run()"): Display(_none, "the letter of version 3's newest run, not a time"),
    ("05", 'hopper_report.stored_v3_tune(run="i")'): Display(
        _none, "version 3's run-i tune: ratios within the run only (paired causal tiles vs one tile per program), "
               "no time shown"),
    ("05", 'hopper_report.stored_v3_tune(run="l")'): Display(
        _none, "version 3's run-l tune: ratios within the run only (Q from registers vs not), no time shown"),
    ("05", 'bench.load("05", path=bench.current("05", "features", "h200"))'): Display(
        _none, "the features run (GQA, varlen, head dim 256) on an H200: ratios to the peers within the run only"),
    ("05", 'hopper_report.stored_v3_ab("qregs")'): Display(
        _lesson04_v3_qregs_ab, "the A/B of Q from registers: each implementation's median round on both clocks"),
    ("06", 'versions_report.load_versions("h100")'): Display(_lesson05_versions, "the version ladder"),
    ("07", 'split_report.load_split("h100")'): Display(_lesson05_split, "the split probe, forward per head dim"),
    ("07", 'split_report.load_split("h100", record="partials")'): Display(
        _lesson05_partials, "the backward kernel alone, per tiling"),
    **{(n, 'bench.load("06", gpu="h100")'): Display(_lesson05_run, "lesson 6's run, the fused RNN's record")
       for n in ("06", "07")},
    ("06", "versions_report.load_sass(64)"): Display(_none, "instruction counts, not times"),
    ("06", 'versions_report.load_profile("h100")'): Display(_none, "stall shares, not times"),
    ("07", 'split_report.load_split("h100", record="parts")'): Display(
        _none, "the first backward's step with parts switched off: microseconds per step of a superseded kernel, "
               "shown as an experiment on it"),
    ("07", 'split_report.load_split("h100", record="cross")'): Display(_lesson05_cross, "the crossover run"),
    ("07", 'split_report.load_split("h100", record="candidates")'): Display(
        _lesson05_candidates, "every fitting tiling of lesson 6's split layers (B = 32)"),
    ("06", 'traffic.stored("06")'): Display(_none, "Nsight Compute byte counts, not times"),
    ("07", 'split_report.load_split("h100", record="steps")'): Display(
        _lesson05_steps, "Appendix G's exchange experiment (its own cases, peers as ratios within the run)"),
    ("07", 'split_report.load_split("h100", record="hinted")'): Display(
        _lesson05_hinted, "Appendix G's exchange candidates (their own cases, cuDNN beside them in the run)"),
    ("07", 'split_report.load_split("h100", record="called")'): Display(
        _lesson05_called, "Appendix G: flashrnn's API path per calling mode"),
    ("07", 'bench.load("06", path=bench.current("06", "lstm-grid", "h200"))'): Display(
        lambda root: _run("06", root, "h200", keep=lambda r: r.params.get("kind") == "grid", sub="lstm-grid"),
        "the drop-in grid's run (lesson 6's lstm-grid part): its large batches against cuDNN"),
    ("07", 'rows_report.load("sass")'): Display(_none, "instruction counts of the compiled step, not times"),
    ("07", 'rows_report.load("rows")'): Display(_lesson05_rows("rows"), "Appendix H: 16 and 8 rows per program"),
    ("07", 'rows_report.load("product")'): Display(
        _lesson05_rows("product"), "Appendix H: the backward's product per gate or at once"),
    ("07", 'rows_report.load("rows_split")'): Display(
        _lesson05_rows("rows_split"), "Appendix H: the split kernels at 8 rows"),
    ("07", "split_report.load_sass()"): Display(_none, "instruction and shared-memory byte counts, not times"),
    ("07", "versions_report.load_v6_sass()"): Display(
        _none, "Appendix I: version 6's compiled step, instruction and byte counts, not times"),
    **{("07", f'versions_report.load_v6_{which}("h100")'): Display(
        _lesson05_v6(which), f"Appendix I: version 6's {what} (its own cases, peers in the run)")
       for which, what in (("run", "run"), ("parts", "clock-stamped forwards"), ("wide", "32 rows per program"),
                           ("tiles", "16-row tiles past 16 rows"), ("rows8", "8-row tiles"))},  # fmt: skip
    **{("07", f'versions_report.load_v6_switch("h100", "{p}")'): Display(_lesson05_v6(p), f"Appendix J's {p} run")
       for p in ("tagged", "tagdiag", "poll", "prefetch", "barrier", "late", "b4wide", "b4db")},  # fmt: skip
    **{("07", f'versions_report.load_v6_rows8("h100", head_dim={d})'): Display(
        _lesson05_v6("rows8", d), f"Appendix I: version 6's 8-row tiles at a head of {d} (peers in the run)")
       for d in (512, 256)},  # fmt: skip
    ("08", 'bench.load("08", gpu="h100")'): Display(_none, "the accuracy runs: accuracies, not times"),
    **{("08", f'tasks.stored_{n}("h100")'): Display(_stored(n), f"the newest {what} run")
       for n, what in (("throughput", "training-throughput"), ("rope", "RoPE kernel"))},
    ("09", 'bench.load("09")'): Display(lambda root: _run("09", root, None, keep=lambda r: r.shape is not None),
                                        "lesson 9's run"),
}  # fmt: skip
"""(lesson, loader call as the source writes it) -> what its cell displays."""
DISPLAYS.update({("06", c): d for (n, c), d in list(DISPLAYS.items()) if n == "07" and c.startswith("rows_report.")})
# the rows records (benchmarks/07_rnn_split/rows/): read by the split lesson and by the one-SM lesson's eight-rows part


# --- reading a lesson source ----------------------------------------------------------------------------------------


def _code_cells(text: str) -> list[str]:
    cells = []
    for chunk in re.split(r"^# %%", text, flags=re.M)[1:]:
        head, _, body = chunk.partition("\n")
        if "[markdown]" not in head:
            cells.append(body)
    return cells


def loader_calls(path) -> list[tuple[int, str, bool]]:
    """``(code cell index, loader call, the cell prints a record banner)`` for every loader call of a lesson source."""
    if not isinstance(path, str | Path):
        raise TypeError(f"path must be a lesson source path (str or Path), got {type(path).__name__} {path!r}.")
    path = Path(path)
    if path.suffix != ".py" or not path.is_file():
        raise ValueError(f"path must be an existing jupytext source notebooks/src/NN_name.py, got {str(path)!r}.")
    out = []
    for i, cell in enumerate(_code_cells(path.read_text())):
        labelled = BANNER.search(cell) is not None
        for m in LOADER.finditer(cell):
            out.append((i, " ".join(m.group(0).split()), labelled))
    return out


def displayed(path, registry=None, root=None) -> list[Shown]:
    """Every keyed time a lesson source displays, marked (``history``) where the loader's cell prints a banner.
    ValueError naming a loader call the registry does not know."""
    table = DISPLAYS if registry is None else registry
    lesson = Path(path).name[:2]
    found, unknown, seen = [], [], set()
    for _, call, labelled in loader_calls(path):
        entry = table.get((lesson, call))
        if entry is None:
            unknown.append(call)
            continue
        if (call, labelled) in seen:  # the same records loaded again in another cell: shown once per label
            continue
        seen.add((call, labelled))
        for s in entry.values(root):
            found.append(Shown(s.key, s.run, s.value, s.history or labelled))
    if unknown:
        raise ValueError(
            f"{Path(path).name} loads records with {sorted(set(unknown))}, which gpulab.course.one_record.DISPLAYS "
            f"does not know: add what that cell displays (its keyed times, or why none) for lesson {lesson}."
        )
    return found


def check_source(path, registry=None, root=None) -> None:
    """Raise ValueError if a lesson source displays one key from two runs without a banner (or loads
    records the registry does not know)."""
    check(displayed(path, registry, root))
