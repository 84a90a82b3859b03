"""The forward versions' stored GPU records (``python -m gpulab bench 06 versions``, under
``benchmarks/06_fused_rnn/versions/``) as a table and a bar chart: each version's time on both clocks, its gain over
the version before, and the compiled kernel's registers."""

from __future__ import annotations

import json

from gpulab import bench, runtime
from gpulab.course import palette
from gpulab.rnn.fused.versions import BACKWARD_VERSIONS, VERSIONS

__all__ = ["load_versions", "versions_table", "plot_versions", "load_sass", "sass_table", "load_profile",
           "profile_table", "load_v6_sass", "v6_records", "compiled_split_table", "plot_compiled_split", "load_v6_run",
           "v6_run_table", "load_v6_parts", "v6_parts_table", "plot_v6_parts", "load_v6_wide",
           "load_v6_tiles", "load_v6_rows8", "v6_record_name", "V6_SWITCHES", "load_v6_switch", "load_v6"]  # fmt: skip

_FOLDER = ("06_fused_rnn", "versions")


def load_versions(gpu: str = "h100", root=None) -> list[bench.Result]:
    """The newest versions record of ``gpu`` (a list of :class:`gpulab.bench.Result`)."""
    if not isinstance(gpu, str) or not gpu:
        raise TypeError(f"gpu must be a GPU name such as 'h100', got {gpu!r}.")
    folder = bench.results_dir(root).joinpath(*_FOLDER)
    files = bench.record_files(folder, gpu)
    if not files:
        raise FileNotFoundError(
            f"no versions record for {gpu!r} in {folder}; run `python -m gpulab bench 06 versions` on that GPU."
        )
    return bench.load("06", path=bench.newest(files))


def _rows(results):
    results = bench.result_list("results", results, source=" (from load_versions)")
    return [r for r in results if r.status == "ok" and r.params.get("version")]


def _pass(r) -> str:
    return "fwd+bwd" if r.params.get("direction") == "forward+backward" else "fwd"


def versions_table(results) -> str:
    """One line per version (and the cuDNN peer): the problem, the pass (forward, or forward+backward for the
    backward versions b1-b3), device ms, eager wall ms, the speed-up over the version before on the same problem and
    pass (wall clock), registers per thread and spills."""
    rows = _rows(results)
    if not rows:
        raise ValueError("results has no version rows: load them with load_versions().")
    head = rows[0]
    lines = [
        f"{head.device}, torch {head.torch}, Triton {head.triton}, {head.date} | LSTM, B = {head.shape[0]}, "
        f"T = {head.shape[1]:,}, bf16 (cuDNN: fp16, dense, with the input product)",
        f"{'version':8s} {'problem':>9s} {'pass':>7s} {'ms':>7s} {'wall ms':>8s} {'gain':>6s} {'regs':>5s} "
        f"{'spills':>6s}  change",
    ]
    before = {}
    for r in rows:
        v, problem, pass_ = r.params["version"], f"{r.params['NH']}x{r.params['DH']}", _pass(r)
        key = (problem, pass_)
        gain = f"{before[key] / r.wall_ms:.2f}x" if key in before and v != "cuDNN" else "-"
        if v != "cuDNN":
            before[key] = r.wall_ms
        regs = str(r.registers) if r.registers else "-"
        spills = str(r.spills) if r.spills is not None else "-"
        note = VERSIONS.get(v) or BACKWARD_VERSIONS.get(v) or r.case
        lines.append(f"{v:8s} {problem:>9s} {pass_:>7s} {r.ms:7.3f} {r.wall_ms:8.3f} {gain:>6s} {regs:>5s} "
                     f"{spills:>6s}  {note}")  # fmt: skip
    return "\n".join(lines)


def plot_versions(results, ax=None):
    """Bars of eager wall time per version (device time as a dot on each bar) in the palette's colours: the fused
    kernels (12 heads of 64), the split ones (v5, b3: one head of 768) and the cuDNN peer (the bar labels say which).
    With backward versions in the records and no ``ax``, a second panel shows forward+backward."""
    import matplotlib.pyplot as plt  # deferred: only the figure needs it

    rows = _rows(results)
    if not rows:
        raise ValueError("results has no version rows: load them with load_versions().")
    passes = [[r for r in rows if _pass(r) == p] for p in ("fwd", "fwd+bwd")]
    passes = [p for p in passes if p]
    if ax is None:
        _, axes = plt.subplots(1, len(passes), figsize=(8 + 4 * (len(passes) - 1), 3.6), squeeze=False,
                               gridspec_kw={"width_ratios": [len(p) for p in passes]})  # fmt: skip
        axes = list(axes[0])
    else:
        axes, passes = [ax], passes[:1]
    for ax_, part in zip(axes, passes):
        x = range(len(part))
        keys = ["cudnn" if r.params["version"] == "cuDNN" else "fused" if r.params["NH"] > 1 else "split" for r in part]
        names = {"cudnn": "cuDNN", "fused": "gpulab fused (12 heads)", "split": "gpulab split (one head)"}
        for i, (r, key) in enumerate(zip(part, keys)):
            first = key not in keys[:i]
            ax_.bar(i, r.wall_ms, color=palette.color(key), label=f"{names[key]}, wall clock" if first else None)
        ax_.plot(x, [r.ms for r in part], ".", color=palette.guide("ink"), label="device time")
        ax_.set_xticks(list(x), [f"{r.params['version']}\n{r.params['NH']}x{r.params['DH']}" for r in part])
        for i, r in enumerate(part):
            ax_.annotate(f"{r.wall_ms:.2f}", (i, r.wall_ms), ha="center", va="bottom", fontsize=9)
            if i and (r.params["NH"], r.params["DH"]) != (part[i - 1].params["NH"], part[i - 1].params["DH"]):
                ax_.axvline(i - 0.5, color=palette.guide("reference"), ls="--", lw=1)  # a different problem from here
        what = "forward" if _pass(part[0]) == "fwd" else "forward+backward"
        ax_.set_ylabel(f"{what}, ms (eager wall clock)")
        ax_.set_title(f"LSTM {what}, B = 16, T = 1024, bf16", fontsize=10)
        palette.apply(ax_)
        ax_.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)  # below: inside, it hid bars
    return axes[0]


def load_sass(dh: int = 64, root=None) -> list[dict]:
    """The versions' compiled loops at head dim ``dh`` (``python -m gpulab.rnn.fused.measure.sass versions``, sm_90,
    bf16, 4 warps; no GPU needed): one dict per version, counts per time step and warp."""
    dh = runtime.positive_int("dh", dh)
    folder = bench.results_dir(root).joinpath(*_FOLDER, "sass")
    files = sorted(folder.glob(f"sm90-dh{dh}-*.jsonl"))
    if not files:
        raise FileNotFoundError(
            f"no SASS counts at dh={dh} in {folder}; run `python -m gpulab.rnn.fused.measure.sass versions --dh {dh}`"
            f" > {folder}/sm90-dh{dh}-bf16-w4.jsonl (no GPU needed)."
        )
    with files[-1].open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


def sass_table(rows) -> str:
    """The versions' loops side by side: instructions, barriers, tensor-core (MMA) and special-function (MUFU)
    instructions, global and shared loads and stores, per time step and warp, and registers per thread."""
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and "version" in r for r in rows):
        raise TypeError(f"rows must be the list of dicts that load_sass() returns, got {type(rows).__name__}.")
    head = rows[0]
    keys = ("instructions", "barriers", "mma", "mufu", "global_loads", "global_stores", "shared_loads", "shared_stores")
    lines = [
        f"SASS of each version's time loop (Triton {head.get('triton', '?')}, {head.get('target', 'sm_90')}, "
        f"DH = {head['dh']}, {head['dtype']}, {head['warps']} warps), per time step and warp",
        f"{'version':8s} {'instr':>6s} {'BAR':>4s} {'MMA':>4s} {'MUFU':>5s} {'LDG':>4s} {'STG':>4s} {'LDS':>4s} "
        f"{'STS':>4s} {'regs':>5s}",
    ]
    for r in rows:
        c = [f"{r[k]:g}" for k in keys]
        lines.append(f"{r['version']:8s} {c[0]:>6s} {c[1]:>4s} {c[2]:>4s} {c[3]:>5s} {c[4]:>4s} {c[5]:>4s} {c[6]:>4s} "
                     f"{c[7]:>4s} {r['registers']:5d}")  # fmt: skip
    return "\n".join(lines)


def load_profile(gpu: str = "h100", root=None) -> dict:
    """The newest Nsight Compute summary of the forward versions on ``gpu`` (``scripts/profile_versions.py``, under
    ``benchmarks/06_fused_rnn/versions/profile/``): per version, the share of stall samples per reason over the time
    loop and the instructions with the most samples."""
    if not isinstance(gpu, str) or not gpu:
        raise TypeError(f"gpu must be a GPU name such as 'h100', got {gpu!r}.")
    folder = bench.results_dir(root).joinpath(*_FOLDER, "profile")
    files = bench.record_files(folder, gpu, "*.json")
    if not files:
        raise FileNotFoundError(
            f"no profile of the versions for {gpu!r} in {folder}; run `OUT=... python scripts/profile_versions.py` "
            "on that GPU (Nsight Compute's ncu on the PATH)."
        )
    with max(files, key=lambda f: f.stem[-10:]).open() as fh:
        return json.load(fh)


def profile_table(profile) -> str:
    """Where each version's warps wait: the share of stall samples over its time loop for the main reasons (long_sb:
    global memory; short_sb: shared memory or a special function; wait: a fixed-latency dependency; barrier;
    selected: issuing), and its hottest instruction (what Nsight Compute's stall sampling saw)."""
    if not isinstance(profile, dict) or not isinstance(profile.get("versions"), dict):
        raise TypeError(f"profile must be the dict that load_profile() returns, got {type(profile).__name__}.")
    p = profile.get("problem", {})
    keys = ("long_sb", "short_sb", "wait", "barrier", "selected")
    rows = []
    for v, s in profile["versions"].items():
        top = s["top"][0] if s.get("top") else {"sass": "-", "share": 0.0}
        rows.append([v, *(f"{s['stalls'].get(k, 0.0):.0%}" for k in keys), str(s["loop_instructions"]),
                     f"{top['sass'][:34]} ({top['share']:.0%})"])  # fmt: skip
    title = (f"Stall sampling on the {profile.get('device', '?')}, {profile.get('date', '?')} (LSTM forward, B "
             f"{p.get('B')}, T {p.get('T')}, {p.get('NH')} x {p.get('DH')}, {p.get('dtype')}): share of samples over "
             "the time loop; loop instr: SASS instructions in the loop body (v3's body holds two steps)")  # fmt: skip
    return bench.text_table(["version", *keys, "loop instr", "hottest instruction (share)"], rows, title=title)


_V6_FOLDER = ("07_rnn_split", "v6")


def load_v6_sass(root=None) -> list[dict]:
    """Version 6's compiled step per tile (``v6/sm90-v6-sass.jsonl``, written without a GPU by ``python
    scripts/sass05_split.py SPLIT.jsonl V6.jsonl``), in the rows of
    :func:`gpulab.rnn.fused.measure.split_report.load_sass`."""
    path = bench.results_dir(root).joinpath(*_V6_FOLDER, "sm90-v6-sass.jsonl")
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run `python scripts/sass05_split.py "
            f"benchmarks/07_rnn_split/split/sm90-split-sass.jsonl {path}` (no GPU needed)."
        )
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def v6_records(gpu: str = "h100", root=None) -> list[str]:
    """The names of version 6's timed runs on ``gpu`` (``scripts/bench05_v6.py``: ``*-v6.jsonl``), oldest first."""
    if not isinstance(gpu, str) or not gpu:
        raise TypeError(f"gpu must be a GPU name such as 'h100', got {gpu!r}.")
    return [f.name for f in bench.record_files(bench.results_dir(root).joinpath(*_V6_FOLDER), gpu, "*-v6.jsonl")]


def compiled_split_table(v5_rows, v6_rows) -> str:
    """The split kernels' compiled step at one head of 768, version 5's (``split_report.load_sass()``, or the b3
    rows of :func:`load_v6_sass`) beside version 6's (:func:`load_v6_sass`): per step, instructions and tensor-core
    instructions per warp, CTA barriers, shared-memory kilobytes of the whole program (``ldmatrix``: operands read
    from shared memory) and registers per thread. A row's version is its ``version`` (v5 where it has none)."""
    rows = []
    for name, given in (("v5_rows", v5_rows), ("v6_rows", v6_rows)):
        if not isinstance(given, list) or not given or not all(isinstance(r, dict) and "shared_bytes" in r
                                                               for r in given):  # fmt: skip
            raise TypeError(f"{name} must be the non-empty list of compiled-step rows that its loader returns.")
        rows += [(r.get("version", "v5"), r) for r in given]
    lines = [f"{'version':7s} {'exchange':8s} {'units':>5s} {'warps':>5s} {'instr/warp':>10s} {'HMMA/warp':>9s} "
             f"{'BAR':>4s} {'ldmatrix KB':>11s} {'all smem KB':>11s} {'regs':>5s}"]  # fmt: skip
    for v, r in rows:
        w = r["warps"]
        lines.append(f"{v:7s} {r['exchange']:8s} {r['block_u']:5d} {w:5d} {r['instructions']:10d} {r['hmma']:9d} "
                     f"{r['barriers']:4d} {r['shared_bytes'].get('ldsm', 0) * w / 1024:11.1f} "
                     f"{sum(r['shared_bytes'].values()) * w / 1024:11.1f} {r['registers']:5d}")  # fmt: skip
    return "sm_90, bf16, B = 16 rows per program, one time step (compiled, not timed)\n" + "\n".join(lines)


def plot_compiled_split(rows, ax=None):
    """Stacked bars of shared-memory kilobytes per step and program (``ldmatrix`` below, the other loads and stores
    above) for each compiled split kernel in ``rows`` (version 5's from ``split_report.load_sass()`` and the rows of
    :func:`load_v6_sass`), forward and backward side by side: where version 6 takes the operands out of shared
    memory."""
    import matplotlib.pyplot as plt  # deferred: only the figure needs it

    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and "shared_bytes" in r for r in rows):
        raise TypeError("rows must be the non-empty list of compiled-step rows (split_report.load_sass(), "
                        "load_v6_sass()).")  # fmt: skip
    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 3.6))
    from matplotlib.patches import Patch  # noqa: PLC0415

    x = range(len(rows))
    ldsm = [r["shared_bytes"].get("ldsm", 0) * r["warps"] / 1024 for r in rows]
    rest = [sum(r["shared_bytes"].values()) * r["warps"] / 1024 - a for r, a in zip(rows, ldsm)]
    hatches = ["//" if r.get("version", "v5") in ("v6", "b4") else None for r in rows]  # Gluon hatched
    split, edge = palette.color("split"), palette.guide("faint")
    ax.bar(x, ldsm, color=split, hatch=hatches, edgecolor=edge)
    ax.bar(x, rest, bottom=ldsm, color=split, alpha=0.4, hatch=hatches, edgecolor=edge)
    labels = [f"{r.get('version', 'v5')} {r['exchange']}\n{r['block_u']} u, {r['warps']} w" for r in rows]
    ax.set_xticks(list(x), labels, fontsize=8)
    for i, r in enumerate(rows):
        if i and r["kernel"] != rows[i - 1]["kernel"]:
            ax.axvline(i - 0.5, color=palette.guide("reference"), ls="--", lw=1)  # the backward from here on
    ax.set_ylabel("KB per step and program")
    ax.set_title("Split LSTM kernels, one head of 768, compiled for sm_90: shared-memory traffic (u: units, w: warps)"
                 , fontsize=10)  # fmt: skip
    ax.legend(handles=[Patch(facecolor=split, label="gpulab split, Triton (v5, b3)"),
                       Patch(facecolor=split, hatch="//", edgecolor=edge, label="gpulab split, Gluon (v6, b4)"),
                       Patch(facecolor=split, label="dark: ldmatrix"),
                       Patch(facecolor=split, alpha=0.4, label="light: other")], fontsize=8)  # fmt: skip
    palette.apply(ax)
    return ax


def _v6_file(gpu, root, part: str, how: str, run=None):
    """The record file ``<gpu>-<date>[-<run>]-<part>.jsonl`` of version 6's folder: the newest, or the one of run
    ``run`` (its tag, e.g. 'z')."""
    if not isinstance(gpu, str) or not gpu:
        raise TypeError(f"gpu must be a GPU name such as 'h100', got {gpu!r}.")
    if run is not None and (not isinstance(run, str) or not run.isalpha()):
        raise ValueError(f"run must be a run's tag (letters, such as 'z') or None for the newest, got {run!r}.")
    folder = bench.results_dir(root).joinpath(*_V6_FOLDER)
    files = bench.record_files(folder, gpu, pattern=f"*-{part}.jsonl")
    if run is not None:
        files = [f for f in files if f.stem.endswith(f"-{run}-{part}")]
    if not files:
        raise FileNotFoundError(f"no {part} record{'' if run is None else f' of run {run}'} of {gpu!r} in {folder}; "
                                f"{how}")  # fmt: skip
    return bench.newest(files, part=part)


def _v6_newest(gpu, root, part: str, how: str, run=None) -> list[bench.Result]:
    """The newest record file ``<gpu>-<date>[-<run>]-<part>.jsonl`` of version 6's folder (or run ``run``'s),
    loaded."""
    return bench.load("07", path=_v6_file(gpu, root, part, how, run))


def v6_record_name(gpu: str = "h100", which: str = "rows8", root=None, head_dim: int = 768, run=None) -> str:
    """The file name of the record :func:`load_v6` loads for the same arguments (the newest, or run ``run``'s):
    what a lesson names as the run it shows."""
    which = runtime.one_of("which", which, _V6_WHICH)
    head_dim = runtime.positive_int("head_dim", head_dim)
    part = {"run": "v6", "parts": "diag"}.get(which, which) + ("" if head_dim == 768 else f"dh{head_dim}")
    return _v6_file(gpu, root, part, "run its script on that GPU.", run).name


V6_SWITCHES = {
    "tagged": "the tagged-word exchange",
    "tagdiag": "the tagged exchange's diagnostics",
    "poll": "the barrier's polling loop",
    "prefetch": "prefetching the next step's inputs",
    "barrier": "the barrier's implementation",
    "late": "loading the inputs late",
    "b4wide": "b4's wide tiles",
    "b4db": "db summed inside b4",
}
"""Appendix J's experiments on version 6 and b4: each record part and what it varies (the scripts that wrote the
records: notes/scripts.md; the runs: notes/rnn-split.md)."""
_V6_WHICH = ("run", "parts", "wide", "tiles", "rows8", *V6_SWITCHES)  # what load_v6 and v6_record_name take


def load_v6_switch(gpu: str = "h100", part: str = "prefetch", root=None) -> list[bench.Result]:
    """The newest record of one of Appendix J's experiments (``part``, one of :data:`V6_SWITCHES`): the tagged
    exchange, its stores, the barrier's polls, the inputs loaded a step ahead, a barrier per head and tile, the
    forward's late inputs, b4 in 8-row tiles of 32 units, the parameter products after b4; each beside its
    alternative, cuDNN or b3 in the same run."""
    part = runtime.one_of("part", part, tuple(V6_SWITCHES))
    return _v6_newest(gpu, root, part, f"measure {V6_SWITCHES[part]} on that GPU (notes/rnn-split.md).")


def load_v6_run(gpu: str = "h100", root=None) -> list[bench.Result]:
    """Version 6's newest timed run on ``gpu`` (``scripts/bench05_v6.py``, files ``<gpu>-<date>[-<run>]-v6.jsonl``):
    every tile of v6 and b4 beside version 5, b3 and cuDNN, forward+backward and as a training loop calls it."""
    return _v6_newest(gpu, root, "v6", "run `scripts/gpu_rnn_v6_final.sh` on that GPU (scripts/bench05_v6.py).")


def v6_run_table(results) -> str:
    """The run of :func:`load_v6_run` as a table: each case on both clocks (device ms, eager wall ms) and its ratio
    to cuDNN's fp16 ``nn.LSTM`` in the same run on the wall clock (forward cases to cuDNN's forward, the others to
    its forward+backward)."""
    rows = bench.result_list("results", results)
    ok = [r for r in rows if r.status == "ok" and r.ms]
    cud = {("fwd+bwd" in r.case): r for r in ok if r.case.startswith("cuDNN")}
    if len(cud) != 2:
        raise ValueError("results must hold cuDNN's forward and forward+backward rows (scripts/bench05_v6.py's run).")
    lines = [f"{'case':52s} {'ms':>7s} {'wall ms':>8s} {'x cuDNN (wall)':>15s}"]
    for r in ok:
        training = "fwd+bwd" in r.case or "backward" in r.case
        peer = cud[training]
        lines.append(f"{r.case:52s} {r.ms:7.3f} {r.wall_ms:8.3f} {r.wall_ms / peer.wall_ms:15.2f}")
    return (f"{ok[0].device}, one head of 768, B16, T1024, bf16 (cuDNN fp16); ms: device time; wall: eager wall time "
            "per call; ratios below 1: faster than cuDNN\n" + "\n".join(lines))  # fmt: skip


def load_v6_wide(gpu: str = "h100", root=None) -> list[bench.Result]:
    """Version 6's newest run at 32 rows per program (``scripts/bench05_v6_wide.py``, ``<gpu>-<date>[-<run>]-wide``):
    B32 beside version 5, b3 and cuDNN, and the 16-row tiles with the swizzled partials, stamped."""
    return _v6_newest(gpu, root, "wide", "run `scripts/gpu_rnn_v6_wide.sh` on that GPU.")


def load_v6_tiles(gpu: str = "h100", root=None) -> list[bench.Result]:
    """Version 6's newest run past 16 rows in 16-row batch tiles (``scripts/bench05_v6_tiles.py``, ``<gpu>-<date>
    [-<run>]-tiles.jsonl``): B32 in two tiles, the forward in b4's tile, beside version 5, b3 and cuDNN."""
    return _v6_newest(gpu, root, "tiles", "run `scripts/gpu_rnn_v6_tiles.sh` on that GPU.")


def load_v6_rows8(gpu: str = "h100", root=None, head_dim: int = 768, run=None) -> list[bench.Result]:
    """Version 6's newest run in 8-row batch tiles (``scripts/bench05_v6_rows8.py``, ``<gpu>-<date>[-<run>]-rows8
    .jsonl``), or run ``run``'s: one head of ``head_dim`` at B16, the forward and b4 in 8-row tiles beside the 16-row
    defaults, stamped, and as called. Head dims other than 768 are their own records (``-rows8dh<head_dim>.jsonl``)."""
    head_dim = runtime.positive_int("head_dim", head_dim)
    part = "rows8" if head_dim == 768 else f"rows8dh{head_dim}"
    return _v6_newest(gpu, root, part, f"run `scripts/gpu_rnn_v6_rows8{'' if head_dim == 768 else '_dims'}.sh` on "
                      "that GPU.", run)  # fmt: skip


def load_v6_parts(gpu: str = "h100", root=None) -> list[bench.Result]:
    """Version 6's newest clock-stamped run on ``gpu`` (``scripts/diag05_v6.py``, ``<gpu>-<date>[-<run>]-diag.jsonl``):
    each forward variant (how h is read, tile) and version 5 with their mean ns per step of each part."""
    return [r for r in _v6_newest(gpu, root, "diag", "run `scripts/diag05_v6.py` on that GPU.") if
            r.params.get("parts")]  # fmt: skip


_PARTS = (("h arrives", ("inputs", "exchange")), ("product", ("product",)), ("cell", ("pointwise",)),
          ("stores", ("stores",)), ("barrier", ("barrier",)))  # fmt: skip
"""The stamped parts of a step as the table and figure group them: version 6 issues its loads of h_{t-1} after the
barrier, so its 'inputs' stamp (the previous barrier to this step's inputs) is h's arrival; version 5's hinted
exchange waits for h inside its 'exchange' stamp."""


def _parts_of(r) -> dict:
    p = r.params["parts"]
    return {name: sum(p.get(k, 0.0) for k in keys) for name, keys in _PARTS}


def _label(r) -> str:
    if r.params.get("version") == "v5":
        return "v5 hinted 8u 4w"
    late = " (arrives late)" if r.params.get("early_arrive") is False else ""
    return f"v6 {r.params.get('h_loads')} {r.params.get('block_u')}u {r.params.get('warps')}w{late}"


def v6_parts_table(results) -> str:
    """:func:`load_v6_parts`'s run as a table: each forward's time (device, wall) and the mean ns per step of each
    part of its step (``gpulab.rnn.fused.clocks`` stamps, grouped as in the lesson)."""
    rows = [r for r in bench.result_list("results", results) if r.params.get("parts")]
    if not rows:
        raise ValueError("results must hold clock-stamped forward records (scripts/diag05_v6.py's run).")
    w = max(len(_label(r)) for r in rows)
    head = f"{'forward':{w}s} {'ms':>6s} {'wall':>6s} " + " ".join(f"{n:>9s}" for n, _ in _PARTS) + f" {'step ns':>8s}"
    lines = [head]
    for r in rows:
        parts = _parts_of(r)
        lines.append(f"{_label(r):{w}s} {r.ms:6.3f} {r.wall_ms:6.3f} " + " ".join(f"{parts[n]:9.0f}" for n, _ in _PARTS)
                     + f" {r.params['parts']['step_ns']:8.0f}")  # fmt: skip
    return f"{rows[0].device}: one head of 768, B16, T1024, bf16; parts in ns per step (stamped launch)\n" + "\n".join(
        lines
    )


def plot_v6_parts(results, ax=None):
    """Stacked horizontal bars: each stamped forward's step (ns) by part, version 5 beside version 6's variants
    (version 5's hinted exchange waits for the other programs while h arrives: its barrier is in that part)."""
    import matplotlib.pyplot as plt  # deferred: only the figure needs it

    rows = [r for r in bench.result_list("results", results) if r.params.get("parts")]
    if not rows:
        raise ValueError("results must hold clock-stamped forward records (scripts/diag05_v6.py's run).")
    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 0.5 + 0.5 * len(rows)))
    left = [0.0] * len(rows)
    shades = plt.get_cmap("cividis")  # parts of one step, not providers: a sequential map, apart from the palette
    for k, (name, _) in enumerate(_PARTS):
        widths = [_parts_of(r)[name] for r in rows]
        ax.barh(range(len(rows)), widths, left=left, color=shades(k / max(1, len(_PARTS) - 1)), label=name)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(range(len(rows)), [_label(r) for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ns per step (clock stamps)")
    ax.set_title(f"Split LSTM forward, one head of 768, B = 16 ({rows[0].device}): where a step goes", fontsize=10)
    palette.apply(ax)
    ax.legend(fontsize=8, ncols=len(_PARTS), loc="upper center", bbox_to_anchor=(0.5, -0.3 - 0.4 / len(rows)))
    return ax


def load_v6(gpu: str = "h100", which: str = "rows8", root=None, head_dim: int = 768, run=None) -> list[bench.Result]:
    """Any of version 6's records by name: ``which`` 'run', 'parts', 'wide', 'tiles' or 'rows8' (``head_dim`` and
    ``run`` for 'rows8'), or one of :data:`V6_SWITCHES` (Appendix J's experiments)."""
    which = runtime.one_of("which", which, _V6_WHICH)
    if which in V6_SWITCHES:
        return load_v6_switch(gpu, which, root)
    if which == "rows8":
        return load_v6_rows8(gpu, root, head_dim, run)
    return globals()[f"load_v6_{which}"](gpu, root)
