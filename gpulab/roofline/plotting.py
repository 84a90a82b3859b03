"""Placing results on the roofline: where each measured result (or predicted operation) sits against the roofs of
its memory level and compute precision, as a table and as the lesson's log-log figure.

A measured result's fraction is achieved / attainable on its own roofs; a result above 100% of the HBM roof was
served by a cache. matplotlib is imported inside :func:`plot`, so tables need no plotting library.
"""

from __future__ import annotations

import dataclasses

from gpulab import bench, dtypes, runtime
from gpulab.course import palette
from gpulab.memory.plots import check_axes, human_bytes
from gpulab.roofline.intensity import COMPUTE_ROOFS, MEMORY_LEVELS, ROOF_NAMES, Intensity, attainable, bound
from gpulab.roofline.roofs import Ceilings, rate_text, resolve

__all__ = ["Placement", "placement", "placement_table", "intensity_table", "plot"]


def _compute_key(r: bench.Result) -> str:
    """Which compute roof a measured result is held to: params['roof'] if set, else by dtype (fp32 -> FMA units)."""
    roof = r.params.get("roof")
    if roof:
        return roof
    short = dtypes.short(r.dtype) if r.dtype else "fp32"
    return short if short in ("bf16", "fp16", "tf32") else "fp32"  # fp32 (and anything else): the FMA units


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one result sits: its intensity, achieved and attainable rate, the fraction, and the bound."""

    case: str
    intensity: float | None
    achieved_tflops: float | None
    achieved_gbps: float | None
    roof_tflops: float | None
    fraction: float | None
    bound: str | None
    compute: str
    level: str


def placement(results, ceilings: Ceilings | None = None) -> list[Placement]:
    """Place :class:`gpulab.bench.Result` s (measured) and :class:`Intensity` records (predicted) on the roofline.

    A measured result is held to the roof of its memory level (``params['level']``, default HBM: its bytes are the
    HBM bytes the operation must move) and its compute roof (``params['roof']``, else by dtype). Its fraction is
    achieved / attainable; for a result without FLOPs (a copy) it is achieved / bandwidth. Predictions have no
    achieved rate: they sit on the HBM roof.
    """
    c = resolve(ceilings)
    out = []
    for i, r in enumerate(_listed("results", results)):
        if isinstance(r, Intensity):
            roof = c.attainable(r.intensity, r.compute, "HBM")
            bw, p = c.bandwidth("HBM"), c.compute(r.compute)
            bnd = bound(r.intensity, p, bw) if (p and bw) else None
            out.append(Placement(r.name, r.intensity, None, None, roof, None, bnd, r.compute, "HBM"))
            continue
        if not isinstance(r, bench.Result):
            raise runtime.ArgumentTypeError(
                f"results must hold gpulab.bench.Result or roofline.Intensity records; results[{i}] is a "
                f"{type(r).__name__}."
            )
        key, level = _compute_key(r), r.params.get("level", "HBM")
        bw, p = c.bandwidth(level), c.compute(key)
        i = r.intensity if r.flops else (0.0 if r.bytes else None)
        if i is None:
            out.append(Placement(r.case, None, r.tflops, r.gbps, None, None, None, key, level))
            continue
        if i == 0:
            frac = r.gbps / bw if bw else None
            out.append(Placement(r.case, 0.0, 0.0, r.gbps, 0.0, frac, "memory", key, level))
            continue
        roof = attainable(i, p, bw) if (p and bw) else None
        out.append(
            Placement(
                r.case,
                i,
                r.tflops,
                r.gbps,
                roof,
                r.tflops / roof if roof else None,
                bound(i, p, bw) if (p and bw) else None,
                key,
                level,
            )
        )
    return out


def _f(v, spec="{:.3g}") -> str:
    return "-" if v is None else spec.format(v)


def _label(r) -> str:
    """A row label: the case, and the working set where a result has one (lesson 0's sweep)."""
    if isinstance(r, bench.Result) and "working_set_bytes" in r.params:
        return f"{r.case}, W = {human_bytes(r.params['working_set_bytes'])}"
    return r.name if isinstance(r, Intensity) else r.case


def placement_table(results, ceilings: Ceilings | None = None) -> str:
    """:func:`placement` as text: one row per result, with its roofs ('compute/memory level')."""
    results = _listed("results", results)
    rows = placement(results, ceilings)
    labels = [_label(r) for r in results]
    w = max([len("case")] + [len(lab) for lab in labels])
    head = f"{'case':{w}s} {'FLOP/B':>8s} {'roofs':>9s} {'TFLOP/s':>9s} {'GB/s':>9s} {'roof TF/s':>10s}"
    head += f" {'fraction':>8s}  bound"
    lines = [head, "-" * len(head)]
    for lab, p in zip(labels, rows):
        lines.append(
            f"{lab:{w}s} {_f(p.intensity):>8s} {p.compute + '/' + p.level:>9s} {_f(p.achieved_tflops):>9s} "
            f"{_f(p.achieved_gbps, '{:,.0f}'):>9s} {_f(p.roof_tflops):>10s} {_f(p.fraction, '{:.0%}'):>8s}  "
            f"{p.bound or '-'}"
        )
    return "\n".join(lines)


def intensity_table(records, ceilings: Ceilings | None = None) -> str:
    """Intensity records as text: FLOPs, bytes, FLOP/byte, the ridge point of their roof, the attainable rate and
    the bound on ``ceilings`` (default: :func:`ceilings`)."""
    c = resolve(ceilings)
    records = _listed("records", records)
    for i, r in enumerate(records):
        if not isinstance(r, Intensity):
            raise runtime.ArgumentTypeError(
                f"records must hold roofline.Intensity records (from roofline.gemm(...) etc.); records[{i}] is a "
                f"{type(r).__name__}. Measured results go to placement_table."
            )
    w = max([len("operation")] + [len(r.name) for r in records])
    head = f"{'operation':{w}s} {'GFLOP':>10s} {'MB moved':>10s} {'FLOP/B':>8s} {'ridge':>6s} {'max TF/s':>9s}  bound"
    lines = [head, "-" * len(head)]
    for r in records:
        ridge = c.ridge(r.compute, "HBM")
        lines.append(
            f"{r.name:{w}s} {r.flops / 1e9:>10,.3f} {r.bytes / 1e6:>10,.3f} {r.intensity:>8.3g} "
            f"{_f(ridge, '{:.0f}'):>6s} "
            f"{_f(c.attainable(r.intensity, r.compute, 'HBM'), '{:.3g}'):>9s}  "
            f"{bound(r.intensity, c.compute(r.compute), c.bandwidth('HBM')) if ridge else '-'}"
        )
    return "\n".join(lines)


def plot(results=(), ceilings: Ceilings | None = None, ax=None, title=None):
    """Log-log roofline: a roof per memory level (HBM, L2, L1 where known) and per compute precision, and each result
    placed as a point labelled with its fraction of its roof.

    ``results``: :class:`gpulab.bench.Result` s (filled markers at their achieved rate; results without FLOPs, such
    as a copy, have no place on a FLOP/s axis and are left out: see :func:`placement_table`) and :class:`Intensity`
    records (hollow markers on the HBM roof: predictions). ``ceilings`` defaults to :func:`ceilings` (stored
    measurement, else spec table); the title says which.
    """
    import matplotlib.pyplot as plt

    check_axes(ax, title)
    c = resolve(ceilings)
    results = _listed("results", results)
    placed = placement(results, c)
    if ax is None:
        _, ax = plt.subplots(figsize=(8.5, 5))
    peaks = {k: c.compute(k) for k in COMPUTE_ROOFS if c.compute(k)}
    bws = {lvl: c.bandwidth(lvl) for lvl in MEMORY_LEVELS if c.bandwidth(lvl)}
    top = max(peaks.values()) if peaks else 1e3
    xs = [p.intensity for p in placed if p.intensity]
    xmin = min([1e-2] + [x / 3 for x in xs])
    xmax = max([1e4] + [x * 3 for x in xs])

    # Memory roofs: I * B up to the highest compute roof. Compute roofs: flat from the leftmost knee.
    # Roofs are greys (palette.GUIDES), so the providers' colours of the points stand out on them.
    styles = {"HBM": "-", "L2": "--", "L1": ":"}
    for lvl, bw in bws.items():
        knee = top * 1e3 / bw
        label = f"{ROOF_NAMES[lvl]} roof, {rate_text(bw)} GB/s"
        ax.plot([xmin, knee], [xmin * bw / 1e3, top], color=palette.guide(lvl), ls=styles[lvl], lw=2, label=label)
    drawn = []  # (keys, height, values): roofs within 5% of each other share a line (bf16 and fp16 do)
    for k, p in sorted(peaks.items(), key=lambda kv: kv[1]):
        if drawn and abs(p / drawn[-1][1] - 1) < 0.05:
            drawn[-1] = (drawn[-1][0] + [k], max(p, drawn[-1][1]), drawn[-1][2] + [p])
        else:
            drawn.append(([k], p, [p]))
    grays = [palette.guide(k) for k in ("L1", "L2", "HBM")] + [palette.color("torch")]
    for (keys, p, vals), g in zip(drawn, grays):
        start = p * 1e3 / max(bws.values()) if bws else xmin  # where it meets the fastest memory roof
        tensor = [k for k in keys if k != "fp32"]
        names = " / ".join(tensor) + " tensor cores" if tensor else ROOF_NAMES["fp32"]
        rates = " / ".join(dict.fromkeys(rate_text(v) for v in vals))  # 989 / 989 on paper is just 989
        ax.plot([start, xmax], [p, p], color=g, lw=1.5, label=f"{names} roof, {rates} TFLOP/s")

    # Points: measured results filled, predictions hollow. One legend entry per case, and per provider where several
    # share a case (lesson 4's implementations of one problem); a case measured at several levels (lesson 0's sweep)
    # gets one entry per level, so each shows its own roof. A measured point has its provider's palette colour
    # (palette.key_of its name, else gpulab's: the course's own kernels), a prediction the model's grey; cases of one
    # colour differ in marker.
    levels: dict[str, set] = {}
    providers: dict[str, set] = {}
    for p, r in zip(placed, results):
        levels.setdefault(p.case, set()).add(p.level)
        providers.setdefault(p.case, set()).add(_provider(r))
    by_case: dict[str, list] = {}
    for p, r in zip(placed, results):
        if p.intensity:
            key = (
                p.case
                if len(providers[p.case]) == 1
                else _provider(r)
                if len(providers) == 1
                else f"{_provider(r)}, {p.case}"
            )
            key = f"{key} ({p.level})" if len(levels[p.case]) > 1 else key
            by_case.setdefault(key, []).append((p, r))
    # points at one intensity (a sweep at one size, one problem by several providers) are spread a little sideways
    at_x: dict[float, int] = {}
    for items in by_case.values():
        for p, _ in items:
            at_x[round(p.intensity, 9)] = at_x.get(round(p.intensity, 9), 0) + 1
    seen_x: dict[float, int] = {}
    markers, used = "osD^vPX*h<>pH8d", {}
    for case, items in by_case.items():
        predicted = isinstance(items[0][1], Intensity)
        key = "model" if predicted else palette.key_of(_provider(items[0][1]), palette.key_of(case, "gpulab"))
        n_used = used[key] = used.get(key, -1) + 1
        own = palette.style(key)
        color = own["color"]
        marker = own["marker"] if n_used == 0 and own["marker"] else markers[n_used % len(markers)]
        ys = [p.roof_tflops if predicted else p.achieved_tflops for p, _ in items]
        fr = [p.fraction for p, _ in items if p.fraction is not None]
        if predicted:
            label = f"{case} (I = {items[0][0].intensity:.3g}, {items[0][0].bound}-bound)"
        elif fr:
            rng = f"{min(fr):.0%}" if len(fr) == 1 or max(fr) - min(fr) < 0.005 else f"{min(fr):.0%}-{max(fr):.0%}"
            label = f"{case}: {rng} of its roof"
        else:
            label = case
        face = "none" if predicted else color
        xs_case = []
        for p, _ in items:
            k = round(p.intensity, 9)
            seen_x[k] = seen_x.get(k, -1) + 1
            xs_case.append(palette.dodge(p.intensity, seen_x[k], at_x[k], width=0.5, log=True))
        # the fraction of its roof sits in the legend label: points at one intensity would overprint any annotation
        ax.scatter(xs_case, ys, s=40, zorder=4, label=label, facecolors=face, edgecolors=color, marker=marker)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(xmin, xmax)
    ys_all = [y for y in [xmin * min(bws.values()) / 1e3 if bws else None] if y]
    ys_all += [p.achieved_tflops or p.roof_tflops for p in placed if p.intensity]
    ax.set_ylim(max(min([y for y in ys_all if y] + [top]) / 3, 1e-6), top * 2.5)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)")
    ax.set_ylabel("TFLOP/s")
    palette.apply(ax)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    ax.set_title(title or f"Roofline of the {c.device}\n{c.source}", fontsize=9)
    return ax


def _provider(r) -> str:
    """Who made a result: its ``provider`` field, else ``params['impl']``, else its case (a prediction's name)."""
    if isinstance(r, Intensity):
        return r.name
    return r.provider or r.params.get("impl") or r.case


def _listed(name: str, items) -> list:
    """``items`` as a list, or a TypeError naming ``name`` for a string or a non-iterable."""
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        raise runtime.ArgumentTypeError(f"{name} must be a list of records, got {type(items).__name__}.")
    return list(items)
