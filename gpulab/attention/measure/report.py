"""Lesson 4, measured: tables and plots of the records, kept apart from the benchmarks that write them.

- ``python -m gpulab bench 04`` (:mod:`gpulab.attention.measure.benchmark`): :func:`summary_table`,
  :func:`memory_table`, :func:`targets`, :func:`plot_throughput`, :func:`plot_memory`, :func:`plot`;
- version 2 of the forward beside version 1 and SDPA's backends (the Hopper records), below.

What you will learn: what TMA bought, what warp specialization did on Triton 3.6, and how far cuDNN still is. The
records come from ``python -m gpulab bench 05 hopper`` (:mod:`gpulab.attention.measure.hopper_bench`; one run on the
H100: a config sweep, then lesson 4's 24 problems with every implementation checked against SDPA's math backend before
it was timed on both clocks):

- ``benchmarks/05_attention_hopper/hopper/<gpu>-<date>.jsonl``: ``kind='throughput'`` (impl ``gpulab v1``, ``gpulab
  v2``, ``SDPA default`` (cuDNN on the H100), ``SDPA FlashAttention-2``), ``kind='sweep'`` and ``kind='choice'`` (the
  configs tried and chosen), ``kind='tiny'`` (B 1, H 1, d 64: the host floor); from the second run on, forward+backward
  also as ``gpulab v2 fwd + v1 bwd`` (:data:`SHIPPED`: what ``flash_attention`` runs on the H100), where ``gpulab v2``
  ran version 2's TMA backward (:mod:`gpulab.attention.experiments.v2_backward`);
- ``benchmarks/05_attention_hopper/hopper/cs336/`` (``bench 05 cs336``): the CS336 leaderboard problem, timed with
  ``triton.testing.do_bench``;
- ``benchmarks/05_attention_hopper/hopper/fused/``: the one-pass backward's tiles (``bench 05 fused``)
  against the two-kernel backward, backward only;
- ``benchmarks/05_attention_hopper/hopper/sweep/``: the first sweep, with warp-specialized and persistent candidates;
- ``benchmarks/05_attention_hopper/v3/``: version 3 (Gluon) beside version 2, cuDNN and FlashAttention-2 (``bench 05
  v3``, :mod:`gpulab.attention.measure.v3_bench`; its ``v3-check``, ``v3-race`` and ``v3-tune`` parts beside it),
  :func:`stored_v3`.

:func:`plot_timeline` draws why a Hopper kernel overlaps its work (a picture, not a measurement).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from gpulab import bench, dtypes, runtime
from gpulab.course import palette

__all__ = ["stored", "stored_sweep", "stored_cs336", "cs336_lines", "problems", "grid_table", "summary",
           "sweep_summary", "sweep_ratios", "ratios", "plot_grid", "plot_timeline", "IMPLS", "SHIPPED",
           "CS336_BEST_STUDENT_MS",
           "stored_fused", "fused_summary", "IMPLEMENTATIONS", "throughput_records", "summary_table", "targets",
           "memory_table", "plot_throughput", "plot_memory", "plot", "HOPPER_FOLDER"]  # fmt: skip

IMPLEMENTATIONS = ("gpulab", "gpulab (autotuned)", "SDPA FlashAttention-2", "SDPA default", "naive (PyTorch)")
"""The implementations lesson 4's benchmark times, in the order its tables print them."""
IMPLS = ("gpulab v1", "gpulab v2", "SDPA default", "SDPA FlashAttention-2")
SHIPPED = "gpulab v2 fwd + v1 bwd"
"""Forward+backward as the library runs it on Hopper: version 2's forward, version 1's backward
(version 2's backward is an experiment: :mod:`gpulab.attention.experiments.v2_backward`)."""
HOPPER_FOLDER = Path(__file__).resolve().parents[3] / "benchmarks" / "05_attention_hopper" / "hopper"
"""Where ``python -m gpulab bench 05 hopper`` stores its runs (``cs336/`` and ``fused/`` below it)."""


def stored(folder=None) -> list[bench.Result]:
    """The newest records of ``python -m gpulab bench 05 hopper`` (FileNotFoundError when there are none)."""
    folder = Path(folder) if folder is not None else HOPPER_FOLDER
    return bench.load("05", path=bench.newest(folder))


def stored_sweep(folder=None) -> list[bench.Result]:
    """Sweep records of every stored probe run (the first run's sweep has the warp-specialized candidates)."""
    folder = Path(folder) if folder is not None else HOPPER_FOLDER
    out = []
    for path in sorted(folder.rglob("*.jsonl")):
        for r in bench.load("05", path=path):
            if r.params.get("kind") == "sweep":
                r.params["source"] = str(path.relative_to(folder))  # pairs are compared within one run
                out.append(r)
    return out


def stored_cs336(folder=None) -> list[bench.Result]:
    """The newest records of ``python -m gpulab bench 05 cs336`` (FileNotFoundError when there are none)."""
    folder = (Path(folder) if folder is not None else HOPPER_FOLDER) / "cs336"
    return bench.load("05", path=bench.newest(folder))


def stored_fused(folder=None) -> list[bench.Result]:
    """The newest records of ``python -m gpulab bench 05 fused`` (FileNotFoundError when there are none)."""
    folder = (Path(folder) if folder is not None else HOPPER_FOLDER) / "fused"
    return bench.load("05", path=bench.newest(folder))


def fused_summary(records) -> list[str]:
    """Per head dim: the one-pass backward's chosen tiles against the two kernels on each problem (backward only,
    device time; above 1: the one-pass backward is faster)."""
    recs = bench.result_list("records", records)
    lines = []
    for choice in (r for r in recs if r.params.get("kind") == "fused choice"):
        d, tiles = choice.params["head_dim"], tuple(choice.params["chosen"])
        cells = []
        for r in recs:
            p = r.params
            cfg = p.get("config") or {}
            key = (cfg.get("block_m"), cfg.get("block_n"), cfg.get("num_warps"), cfg.get("num_stages"))
            if p.get("kind") == "fused sweep" and p.get("head_dim") == d and key == tiles and r.status == "ok":
                cells.append(f"N{p['seq'] // 1024}k {'causal' if p['causal'] else 'full'} {p['vs_two_kernels']:.2f}x")
        lines.append(f"d{d}, tiles (block_m, block_n, warps, stages) = {tiles}: geometric mean "
                     f"{choice.params['speedup']:.2f}x the two kernels; " + ", ".join(cells))  # fmt: skip
    return lines


CS336_BEST_STUDENT_MS = 5.36
"""The best published student entry of the CS336 (2025) assignment-2 leaderboard, forward+backward (lesson 4's
target: beat it)."""


def cs336_lines(records) -> list[str]:
    """The CS336 leaderboard problem (B 1, N 16k, 16 heads of 64, bf16, causal, forward+backward): each
    implementation's ``triton.testing.do_bench`` time (the leaderboard's clock), device and wall time."""
    recs = [r for r in bench.result_list("records", records) if r.params.get("kind") == "cs336"]
    lines = []
    for r in recs:
        lines.append(f"{r.params['impl']:22s} do_bench {r.params['do_bench_ms']:.2f} ms, device {r.ms:.2f} ms, "
                     f"wall {r.wall_ms:.2f} ms ({r.params.get('check')})")  # fmt: skip
    by_impl = {r.params["impl"]: r for r in recs}
    ours = by_impl.get(SHIPPED, by_impl.get("gpulab v2"))  # older records: version 2's forward and version 1's backward
    if ours is not None:
        beat = ours.params["do_bench_ms"] < CS336_BEST_STUDENT_MS
        lines.append(f"target: below the best student entry's {CS336_BEST_STUDENT_MS} ms: "
                     f"{'met' if beat else 'not met'} "
                     f"({ours.params['impl']}: {ours.params['do_bench_ms']:.2f} ms)")  # fmt: skip
    return lines


def problems(records, direction: str = "forward") -> dict:
    """``{(dtype, head_dim, seq, causal): {impl: Result}}`` of the throughput records in ``direction``."""
    runtime.one_of("direction", direction, ("forward", "forward+backward"))
    out: dict = {}
    for r in bench.result_list("records", records):
        p = r.params
        if p.get("kind") == "throughput" and p.get("direction") == direction and r.status == "ok" and r.ms == r.ms:
            out.setdefault((r.dtype, p["head_dim"], p["seq"], p["causal"]), {})[p["impl"]] = r
    return {k: v for k, v in out.items() if all(i in v for i in IMPLS)}


def grid_table(records, direction: str = "forward") -> str:
    """TFLOP/s of each implementation per problem on device time, and version 2's ratios on both clocks (forward+
    backward: of :data:`SHIPPED`, version 2's forward with version 1's backward, where the records have it)."""
    rows = []
    probs = sorted(problems(records, direction).items())
    shipped = direction == "forward+backward" and all(SHIPPED in v for _, v in probs) and bool(probs)
    for (dt, d, n, causal), impls in probs:
        v1, v2, cd, fa = (impls[i] for i in IMPLS)
        ours = impls[SHIPPED] if shipped else v2
        rows.append([f"{dtypes.short(dt)} d{d} N{n // 1024}k {'causal' if causal else 'full'}",
                     *(f"{r.tflops:.0f}" for r in (v1, v2, *([ours] if shipped else []), cd, fa)),
                     f"{v1.ms / ours.ms:.2f}", f"{cd.ms / ours.ms:.2f}",
                     f"{cd.wall_ms / ours.wall_ms:.2f}"])  # fmt: skip
    if shipped:
        heads = ["problem", "v1", "v2 (TMA bwd)", "v2 fwd+v1 bwd", "cuDNN", "FA-2", "vs v1", "vs cuDNN", "(wall)"]
        title = f"{direction}: TFLOP/s on device time; ratios = other ms / (v2 fwd + v1 bwd) ms"
    else:
        heads = ["problem", "v1", "v2", "cuDNN", "FA-2", "v2/v1", "v2 vs cuDNN", "(wall)"]
        title = f"{direction}: TFLOP/s on device time; ratios = other ms / v2 ms"
    return bench.text_table(heads, rows, title=title)


def _ratios(records, direction, peer, clock="device", ours="gpulab v2"):
    get = (lambda r: r.ms) if clock == "device" else (lambda r: r.wall_ms)
    return {k: get(v[peer]) / get(v[ours]) for k, v in problems(records, direction).items() if ours in v}


def summary(records) -> list[str]:
    """Lesson 4's targets, each with what the records show (device time unless the line says wall)."""
    fwd = problems(records, "forward")
    if not fwd:
        return ["no complete forward problems in these records"]
    lines = []
    big = fwd.get(("bfloat16", 128, 16384, False))
    if big:
        v1, v2 = big["gpulab v1"], big["gpulab v2"]
        lines.append(f"d128, N16k, bf16 forward: version 2 {v2.tflops:.0f} TFLOP/s ({v2.wall_tflops:.0f} on the wall "
                     f"clock), version 1 {v1.tflops:.0f}: {v1.ms / v2.ms:.2f}x (firm target >= 1.1x: "
                     f"{'met' if v1.ms / v2.ms >= 1.1 else 'not met'}; stretch 600 "
                     f"TFLOP/s: {'reached' if v2.tflops >= 600 else 'not reached'})")  # fmt: skip
    for clock in ("device", "wall"):
        vs = list(_ratios(records, "forward", "SDPA default", clock).values())
        met = statistics.median(vs) >= 0.95 and min(vs) >= 0.85
        lines.append(f"forward vs cuDNN over {len(vs)} problems ({clock} clock): median {statistics.median(vs):.2f}x, "
                     f"lowest {min(vs):.2f}x (targets: median >= 0.95x, none below 0.85x: "
                     f"{'met' if met else 'not met'})")  # fmt: skip
    v21 = list(_ratios(records, "forward", "gpulab v1").values())
    lines.append(f"version 2 / version 1, forward: median {statistics.median(v21):.2f}x, "
                 f"{min(v21):.2f}x to {max(v21):.2f}x")  # fmt: skip
    short = [v for k, v in _ratios(records, "forward", "gpulab v1").items() if k[2] <= 1024]
    if short:
        lines.append(f"N = 1k (short): version 2 / version 1 {min(short):.2f}x to {max(short):.2f}x on device time")
    fb_all = problems(records, "forward+backward")
    shipped = SHIPPED if any(SHIPPED in v for v in fb_all.values()) else "gpulab v2"
    for clock in ("device", "wall"):
        fb = list(_ratios(records, "forward+backward", "SDPA default", clock, shipped).values())
        if fb:
            lines.append(f"forward+backward (version 2's forward, version 1's backward) vs cuDNN over {len(fb)} "
                         f"problems ({clock} clock): median {statistics.median(fb):.2f}x, lowest {min(fb):.2f}x "
                         f"(target: median >= 0.9x: {'met' if statistics.median(fb) >= 0.9 else 'not met'})"
                         )  # fmt: skip
    if shipped == SHIPPED:  # version 2's TMA backward ran as "gpulab v2": is it worth turning on?
        tma = list(_ratios(records, "forward+backward", SHIPPED, "device", "gpulab v2").values())
        lines.append(f"version 2's TMA backward / version 1's backward, forward+backward: median "
                     f"{statistics.median(tma):.2f}x, {min(tma):.2f}x to {max(tma):.2f}x "
                     f"(above 1: TMA faster)")  # fmt: skip
    tiny = {(r.params["seq"], r.params["impl"]): r for r in records if r.params.get("kind") == "tiny"}
    for n in sorted({s for s, _ in tiny}):
        cells = [f"{i} {tiny[(n, i)].wall_ms * 1e3:.0f} us" for i in IMPLS if (n, i) in tiny]
        lines.append(f"B1 H1 N{n} d64 forward, wall clock per call: " + ", ".join(cells))
    return lines


def sweep_summary(records) -> list[str]:
    """What the sweeps found: warp-specialized configs that failed their check, persistent against one program per
    tile, and the fastest config per (head dim, causal)."""
    sweep = [r for r in bench.result_list("records", records) if r.params.get("kind") == "sweep"]
    ws = [r for r in sweep if r.params["config"]["warp_specialize"]]
    ws_bad = [r for r in ws if not str(r.params.get("check", "")).startswith("ok")]
    lines = []
    if ws:
        wrong_128 = sum(1 for r in ws_bad if r.params["config"]["block_m"] == 128)
        all_128 = sum(1 for r in ws if r.params["config"]["block_m"] == 128)
        lines.append(f"warp-specialized runs: {len(ws_bad)} of {len(ws)} gave wrong results ({wrong_128} of {all_128} "
                     "with 128-row Q tiles, the two-consumer form)")  # fmt: skip
        passed = [r for r in ws if r not in ws_bad]
        if passed:
            lines.append(f"the {len(passed)} that passed their check ran at {min(r.tflops for r in passed):.0f} - "
                         f"{max(r.tflops for r in passed):.0f} TFLOP/s")  # fmt: skip

    good = [r for r in sweep if str(r.params.get("check", "")).startswith("ok") and r.ms == r.ms]
    found = sweep_ratios(sweep)
    for name, what in (
        ("persistent", "persistent (one program per SM) / one program per tile"),
        ("overlap", "next block's scores issued before the softmax (overlap) / the plain loop"),
    ):
        ratios = found[name]
        if ratios:
            lines.append(f"{what}: {min(ratios):.2f}x to {max(ratios):.2f}x over {len(ratios)} problems, same tiles "
                         f"(below 1: slower)")  # fmt: skip
    best: dict = {}
    for r in good:
        k = (r.params["head_dim"], r.params["causal"], r.params["seq"])
        if k not in best or r.ms < best[k].ms:
            best[k] = r
    for (d, causal, n), r in sorted(best.items()):
        c = r.params["config"]
        lines.append(f"fastest at d{d} N{n // 1024}k {'causal' if causal else 'full'}: {c['block_m']}x{c['block_n']}, "
                     f"{c['num_warps']} warps, {c['num_stages']} stages: {r.tflops:.0f} TFLOP/s")  # fmt: skip
    return lines


def sweep_ratios(records) -> dict[str, list[float]]:
    """Per variant of the sweeps, each run's speed relative to the plain loop on the same problem in the same run
    (plain ms / variant ms; below 1: the variant is slower): 'persistent' and 'overlap' against the plain loop with the
    same tiles; 'ws' (warp-specialized runs that passed their check) against the fastest plain loop of the problem,
    since the warp-specialized form takes other tiles (4 warps)."""
    sweep = [r for r in bench.result_list("records", records) if r.params.get("kind") == "sweep"]

    def key(r):
        c = r.params["config"]
        return (r.params.get("source"), r.params["head_dim"], r.params["causal"], r.params["seq"], c["block_m"],
                c["block_n"], c["num_warps"], c["num_stages"])  # fmt: skip

    def variant(r):
        c = r.params["config"]
        if c["persistent"] or c["warp_specialize"]:
            return "persistent" if c["persistent"] else "ws"
        return "overlap" if c.get("overlap") else ""

    good = [r for r in sweep if str(r.params.get("check", "")).startswith("ok") and r.ms == r.ms]
    plain = {key(r): r for r in good if variant(r) == ""}
    fastest: dict = {}
    for r in plain.values():
        k = key(r)[:4]
        fastest[k] = min(fastest.get(k, r.ms), r.ms)
    out: dict[str, list[float]] = {"persistent": [], "overlap": [], "ws": []}
    for r in good:
        if variant(r) == "ws" and key(r)[:4] in fastest:
            out["ws"].append(fastest[key(r)[:4]] / r.ms)
        elif variant(r) and key(r) in plain:
            out[variant(r)].append(plain[key(r)].ms / r.ms)
    return out


def ratios(records, direction: str, peer: str, clock: str = "device", ours: str = "gpulab v2") -> dict:
    """``{(dtype, head_dim, seq, causal): peer time / ours time}`` over the problems of one probe run, on ``clock``
    ('device' or 'wall'); above 1: ``ours`` is faster."""
    runtime.one_of("clock", clock, ("device", "wall"))
    return _ratios(records, direction, peer, clock, ours)


def plot_grid(records, direction: str = "forward", ax=None):
    """TFLOP/s (device time) of each implementation on every problem of ``direction``, bf16."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - plotting only when asked

    probs = {k: v for k, v in sorted(problems(records, direction).items()) if k[0] == "bfloat16"}
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 3.6))
    width = 0.2
    for j, impl in enumerate(IMPLS):
        xs = [i + (j - 1.5) * width for i in range(len(probs))]
        ax.bar(xs, [v[impl].tflops for v in probs.values()], width, **_bar_style(impl))
    ax.set_xticks(range(len(probs)))
    ax.set_xticklabels([f"d{d}\nN{n // 1024}k\n{'causal' if c else 'full'}" for (_, d, n, c) in probs], fontsize=8)
    ax.set_ylabel("TFLOP/s (device time)")
    head = next(iter(next(iter(probs.values())).values()), None) if probs else None
    where = f" on the {head.device}, {head.date}" if head else ""
    ax.set_title(f"bf16 attention {direction}{where}")
    palette.apply(ax)
    ax.legend(fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.28))
    return ax


def _bar_style(impl: str) -> dict:
    """Bar keywords of one implementation: its palette colour (:func:`gpulab.course.palette.key_of` its name), hatched
    where a second bar of the same provider sits beside it (the autotuned kernel, a mixed forward/backward)."""
    second = "autotuned" in impl or "+" in impl
    color = palette.color(palette.key_of(impl, "gpulab"))
    return {"color": color, "hatch": "//" if second else None, "edgecolor": palette.guide("faint"), "label": impl}


def plot_timeline(ax=None, steps: int = 4):
    """A schematic of one Q block's key loop: version 1 (the same warps load, wait, multiply and exponentiate, with
    loads issued ahead by the software pipeline) against a warp-specialized Hopper kernel (a producer warp issues TMA
    copies; two consumer warpgroups take turns, one on its softmax while the other's products run). Durations are
    illustrative units, not measurements."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    steps = runtime.integer("steps", steps, minimum=1, maximum=12)
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 3.2))
    # a schematic of work kinds, not of providers: its own colours (lint allow-list)
    colors = {"load": "#8da0cb", "QK^T": "#fc8d62", "softmax": "#66c2a5", "PV": "#e78ac3"}
    lanes = []

    def box(lane, start, length, kind, label=None):
        ax.broken_barh([(start, length)], (lane - 0.4, 0.8), facecolors=colors[kind], edgecolor="k", lw=0.5)
        if label:
            ax.text(start + length / 2, lane, label, ha="center", va="center", fontsize=7)

    # version 1: one warpgroup; the next tile's load is in flight (pipelined) but math runs in series
    box(4, 0.0, 1.0, "load", "K0,V0")
    t = 0.0
    for j in range(steps):
        if j + 1 < steps:  # the next tile's copy, issued before this tile's math
            box(4, t + 1.0, 1.0, "load", f"K{j + 1},V{j + 1}")
        box(3, t + 1.0, 1.0, "QK^T", "QK")
        box(3, t + 2.0, 1.4, "softmax", "exp")
        box(3, t + 3.4, 1.0, "PV", "PV")
        t += 3.4
    lanes += [(4, "v1: loads (async copies)"), (3, "v1: the same warps compute")]
    # Hopper: producer + two consumer warpgroups in ping-pong
    for j in range(steps + 1):  # tile j+1 is copied while the consumers work on tile j
        box(2, max(0.0, 2.4 * j - 1.4), 1.0, "load", f"K{j},V{j}")
    for lane, offset in ((1, 1.0), (0, 2.2)):
        t = offset
        for _ in range(steps):
            box(lane, t, 0.5, "QK^T")
            box(lane, t + 0.5, 1.4, "softmax")
            box(lane, t + 1.9, 0.5, "PV")
            t += 2.4
    lanes += [(2, "v2 ideal: producer (TMA)"), (1, "consumer warpgroup 1"), (0, "consumer warpgroup 2")]
    ax.set_yticks([y for y, _ in lanes])
    ax.set_yticklabels([n for _, n in lanes], fontsize=8)
    ax.set_xlabel("time (illustrative units)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, list(colors), fontsize=8, ncol=4, loc="upper right")
    ax.set_title("one Q block's key loop: software pipeline (version 1) against warp specialization (FlashAttention-3)")
    ax.set_xlim(0, max(14.0, steps * 3.4 + 1.5))
    return ax


# ----------------------------------------------------------------------------------------------------------------
# lesson 4's benchmark (python -m gpulab bench 04), read


def throughput_records(results, direction=None, impl=None):
    """The throughput records that ran (not those of a provider unavailable for the problem)."""
    out = [r for r in results if r.params.get("kind") == "throughput" and r.status == "ok"]
    if direction:
        out = [r for r in out if r.params.get("direction") == direction]
    if impl:
        out = [r for r in out if r.params.get("impl") == impl]
    return out


def _label(r) -> str:
    p = r.params
    return f"{dtypes.short(r.dtype)} d{p['head_dim']} N{p['seq']}{' causal' if p['causal'] else ''}"


def summary_table(results) -> str:
    """TFLOP/s per problem (rows) and implementation (columns), with gpulab's ratios to the two SDPA backends."""
    results = bench.result_list("results", results)
    lines = []
    for direction in ("forward", "forward+backward"):
        rows = {}
        for r in throughput_records(results, direction):
            rows.setdefault(_label(r), {})[r.params["impl"]] = r
        if not rows:
            continue
        impls = [i for i in IMPLEMENTATIONS if any(i in row for row in rows.values())]
        head = ["problem"] + impls + ["vs FA2", "vs default"]
        body = []
        for label, row in rows.items():
            g = row.get("gpulab")
            cells = [label]
            for i in impls:
                r = row.get(i)
                cells.append("-" if r is None else f"{r.tflops:.0f}" + ("" if r.params.get("check") == "ok" else "!"))
            for field in ("vs_fa2", "vs_default"):
                v = g.params.get(field) if g else None
                cells.append("-" if v is None else f"{v:.2f}x")
            body.append(cells)
        widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
        lines.append(f"{direction}, TFLOP/s ('!' = failed its check):")
        lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        lines += ["  ".join(c.ljust(w) for c, w in zip(cells, widths)) for cells in body]
        lines.append("")
    return "\n".join(lines)


def memory_table(results) -> str:
    """Peak extra memory (MB) of one forward+backward against sequence length."""
    results = bench.result_list("results", results)
    rows = {}
    for r in results:
        if r.params.get("kind") == "memory":
            v = r.params.get("peak_extra_bytes")
            rows.setdefault(r.params["seq"], {})[r.params["impl"]] = (
                ("n/a" if r.params.get("check") == "ok" else r.params.get("check")) if v is None else f"{v / 1e6:,.1f}"
            )
    if not rows:
        return ""
    impls = sorted({i for row in rows.values() for i in row})
    lines = ["peak memory beyond inputs and gradients, forward+backward (MB):", "seq      " + "  ".join(impls)]
    for n in sorted(rows):
        lines.append(f"{n:<8} " + "  ".join(str(rows[n].get(i, "-")).rjust(len(i)) for i in impls))
    return "\n".join(lines)


def targets(results) -> list[str]:
    """Lesson 4's targets, each as one line: forward and forward+backward >= 1.0x FA2, forward vs default."""
    results = bench.result_list("results", results)
    out = []
    for impl in ("gpulab", "gpulab (autotuned)"):
        for direction in ("forward", "forward+backward"):
            g = throughput_records(results, direction, impl)
            fa2 = [r.params.get("vs_fa2") for r in g if r.params.get("vs_fa2")]
            dflt = [r.params.get("vs_default") for r in g if r.params.get("vs_default")]
            bad = [r for r in g if r.params.get("check") != "ok"]
            if fa2:
                met = sum(x >= 1.0 for x in fa2)
                out.append(
                    f"{direction}: {impl} / SDPA FlashAttention-2 = {min(fa2):.2f}x .. {max(fa2):.2f}x "
                    f"(>= 1.0x in {met} of {len(fa2)} problems)"
                )
            if dflt:
                out.append(
                    f"{direction}: {impl} / SDPA default = {min(dflt):.2f}x .. {max(dflt):.2f}x "
                    f"(median {sorted(dflt)[len(dflt) // 2]:.2f}x)"
                )
            if bad:
                out.append(f"{direction}: {len(bad)} {impl} checks FAILED")
    return out


def plot_throughput(results, direction="forward", ax=None):
    """Grouped bars: TFLOP/s per problem, one bar per implementation."""
    results = bench.result_list("results", results)
    import matplotlib.pyplot as plt

    rows = {}
    for r in throughput_records(results, direction):
        rows.setdefault(_label(r), {})[r.params["impl"]] = r.tflops
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 3.8))
    impls = [i for i in IMPLEMENTATIONS if any(i in row for row in rows.values())]
    width = 0.8 / max(1, len(impls))
    for j, impl in enumerate(impls):
        xs = [i + j * width for i in range(len(rows))]
        ax.bar(xs, [row.get(impl) or 0.0 for row in rows.values()], width, **_bar_style(impl))
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], list(rows), rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"attention {direction}")
    palette.apply(ax)
    ax.margins(y=0.2)  # headroom: the legend's one row sits above the bars, not on them
    ax.legend(fontsize=8, ncol=max(1, len(impls)), loc="upper left")
    return ax


def plot_memory(results, ax=None):
    """Peak extra memory against sequence length, log-log: naive grows as N^2, the tiled kernel as N."""
    results = bench.result_list("results", results)
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3.8))
    series = {}
    for r in results:
        if r.params.get("kind") == "memory" and r.params.get("peak_extra_bytes") is not None:
            series.setdefault(r.params["impl"], []).append((r.params["seq"], r.params["peak_extra_bytes"] / 1e6))
    for impl, pts in sorted(series.items()):
        pts.sort()
        extra = {"linestyle": ":"} if "autotuned" in impl else {}
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            **palette.style(palette.key_of(impl, "gpulab"), label=impl, **extra),
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length (batch 1, 16 heads, d 64)")
    ax.set_ylabel("peak extra memory, MB")
    ax.set_title("memory beyond inputs, forward+backward")
    palette.apply(ax)
    if series:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "not measured here (needs a GPU)", ha="center", transform=ax.transAxes)
    return ax


def plot(results):
    """The lesson's figure: forward and forward+backward throughput bars, and memory against sequence length."""
    results = bench.result_list("results", results)
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(13, 8.5))
    gs = fig.add_gridspec(2, 3)
    plot_throughput(results, "forward", fig.add_subplot(gs[0, :]))
    plot_throughput(results, "forward+backward", fig.add_subplot(gs[1, :2]))
    plot_memory(results, fig.add_subplot(gs[1, 2]))
    fig.tight_layout()
    return fig


# version 3 (Gluon): its records are read by :mod:`gpulab.attention.measure.v3_report`; the names stay importable from
# here.
from gpulab.attention.measure.v3_report import (  # noqa: E402 - re-exported after the version-2 readers
    V3_FOLDER,
    V3_PART_SUFFIXES,
    V3_PEERS,
    V3_STEPS,
    V3_TRITON_LAUNCH,
    V3_TUNED,
    headline_gpu_state,
    stored_v3,
    stored_v3_ab,
    stored_v3_headline,
    stored_v3_run,
    stored_v3_tune,
    v3_best,
    v3_headline,
    v3_ratios,
    v3_spread,
    v3_step_gains,
    v3_table,
    v3_tune_ratios,
)

__all__ += [
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
    "v3_tune_ratios",
    "stored_v3_ab",
    "stored_v3_headline",
    "v3_headline",
    "headline_gpu_state",
]
