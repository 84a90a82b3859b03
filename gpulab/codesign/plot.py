"""Lesson 2, the figures: the tile grid of one output, the model's wave staircase, and measured beside predicted.

matplotlib is imported inside each function, so importing lesson 2 does not import it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gpulab import hardware, runtime
from gpulab.codesign.gemm_model import (
    DEFAULT_TILE,
    GemmPrediction,
    check_tile,
    gemm_time,
    tile_quantization,
    wave_quantization,
)
from gpulab.codesign.sweeps import as_results, pair_agreement
from gpulab.course import palette

__all__ = ["plot_tiles", "plot_prediction", "plot_wave_staircase", "plot_sweep", "plot_benchmark"]


def plot_tiles(m: int, n: int, tile=DEFAULT_TILE, ax=None, gpu=None):
    """The m x n output cut into tiles. The padded part of partial tiles is hatched red (tile quantization); with
    ``gpu`` each tile is coloured by the wave it runs in, in launch order, and the last wave's idle SMs are counted."""
    import matplotlib.patches as patches
    import matplotlib.pyplot as plt

    tm, tn = check_tile(tile)
    m, n = runtime.positive_int("m", m), runtime.positive_int("n", n)
    tiles, e_tile = tile_quantization(m, n, (tm, tn))
    sms = hardware.spec(gpu).sm_count if gpu is not None else None
    rows, cols = math.ceil(m / tm), math.ceil(n / tn)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 6.5 * min(1.5, max(0.3, rows * tm / (cols * tn)))))
    # a diagram, not a provider's data: pale fills per wave, so the red padding hatch stands out (lint allow-list)
    colours = ("#cfe2f3", "#fce5cd", "#d9ead3", "#e6d7f0", "#fff2cc")
    for i in range(rows):
        for j in range(cols):
            wave = (i * cols + j) // sms if sms else 0  # launch order: row-major over the tile grid
            ax.add_patch(
                patches.Rectangle(
                    (j * tn, i * tm), tn, tm, fc=colours[wave % len(colours)] if sms else "none", ec="0.35", lw=0.6
                )
            )
            if sms and rows * cols <= 300:
                ax.text((j + 0.5) * tn, (i + 0.5) * tm, str(wave + 1), ha="center", va="center", fontsize=8)
    ax.add_patch(patches.Rectangle((0, 0), n, m, fill=False, ec="k", lw=1.5))
    if cols * tn > n:
        ax.add_patch(patches.Rectangle((n, 0), cols * tn - n, rows * tm, hatch="///", fill=False, ec="C3", lw=0))
    if rows * tm > m:
        ax.add_patch(patches.Rectangle((0, m), cols * tn, rows * tm - m, hatch="///", fill=False, ec="C3", lw=0))
    ax.set_xlim(0, cols * tn)
    ax.set_ylim(rows * tm, 0)
    ax.set_aspect("equal")
    ax.set_xlabel("N (columns of C)")
    ax.set_ylabel("M (rows of C)")
    title = f"{m} x {n} output in {tm}x{tn} tiles: {tiles} tiles, {e_tile:.1%} of their area useful (red: padding)"
    if sms:
        waves, e_wave = wave_quantization(tiles, sms)
        last = tiles - (waves - 1) * sms
        title += (
            f"\n{sms} SMs: {waves} waves (number = wave of each tile); the last runs {last} tiles, "
            f"{sms - last} SMs idle: {e_wave:.1%} of SM slots busy"
        )
    ax.set_title(title, fontsize=9)
    return ax


def plot_prediction(xs, predictions, ax=None, label="model", metric="tflops", xlabel="", **style):
    """A line of the model's predictions (``tflops``, ``ms`` or ``efficiency``) against ``xs``: one x per
    :class:`GemmPrediction` (from :func:`gemm_time`), in the palette's ``"model"`` style unless ``style`` overrides
    it (e.g. ``**palette.style("triton", linestyle="--")``)."""
    import matplotlib.pyplot as plt

    runtime.one_of("metric", metric, ("tflops", "ms", "efficiency"))
    xs, predictions = _list("xs", xs), _list("predictions", predictions)
    if len(xs) != len(predictions):
        raise ValueError(f"xs has {len(xs)} values but predictions has {len(predictions)}; give one x per prediction.")
    for i, p in enumerate(predictions):
        if not isinstance(p, GemmPrediction):
            raise TypeError(f"predictions[{i}] must be a GemmPrediction (from gemm_time), got {type(p).__name__}.")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.8))
    ys = [getattr(p, metric) for p in predictions]
    own = palette.style("model", label=label, lw=1.5)
    if "ls" in style:
        own.pop("linestyle")
    ax.plot(xs, ys, **(own | style))
    ax.set_xlabel(xlabel)
    ax.set_ylabel({"tflops": "TFLOP/s", "ms": "ms", "efficiency": "shape efficiency"}.get(metric, metric))
    palette.apply(ax)
    return ax


def plot_wave_staircase(m, k, ns, tile=DEFAULT_TILE, dtype="bfloat16", gpu="H100", ax=None, metric="tflops"):
    """Predicted TFLOP/s (or ms) of ``[m, k] @ [k, N]`` against N for a fixed tile, with the wave boundaries marked.

    In ms it is a staircase (every tile of a wave costs the same, so time is flat until a new wave starts); in
    TFLOP/s a saw-tooth (more useful work in the same time, then a drop when the next wave starts nearly empty).
    """
    runtime.one_of("metric", metric, ("tflops", "ms", "efficiency"))
    spec = hardware.spec(gpu)
    tile = check_tile(tile)
    ns = [runtime.positive_int(f"ns[{i}]", n) for i, n in enumerate(_list("ns", ns))]
    if not ns:
        raise ValueError("ns is empty; give the N values to draw, e.g. ns=range(1024, 4097, 128).")
    preds = [gemm_time(m, n, k, dtype=dtype, gpu=spec, tile=tile) for n in ns]
    ax = plot_prediction(ns, preds, ax=ax, label=f"model, fixed {tile[0]}x{tile[1]} tile", xlabel="N", metric=metric)
    for n0, n1, p0, p1 in zip(ns, ns[1:], preds, preds[1:]):
        if p1.waves != p0.waves:
            ax.axvline((n0 + n1) / 2, color=palette.guide("faint"), ls=":", lw=1)
            ax.text(
                (n0 + n1) / 2,
                0,
                f" {p1.waves} waves",
                rotation=90,
                va="bottom",
                fontsize=7,
                color=palette.guide("reference"),
            )
    ax.set_ylim(bottom=0)
    ax.set_title(f"Wave quantization: {m} x N x {k}, {spec.sm_count} SMs ({dtype})", fontsize=10)
    return ax


_SWEEP_ORDER = ("K", "head dim", "N (waves)")


def _list(name: str, values) -> list:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise runtime.ArgumentTypeError(f"{name} must be a list, got {type(values).__name__}.")
    return list(values)


def plot_sweep(results, sweep=None, ax=None, metric="tflops", title=None):
    """Measured (solid, markers) and predicted (dashed, no marker; the provider's palette colour for both) ``metric``
    against the swept size, for one sweep.

    ``metric``: 'tflops', 'ms', or 'relative' (each line divided by its own maximum TFLOP/s, to compare shapes).
    """
    import matplotlib.pyplot as plt

    runtime.one_of("metric", metric, ("tflops", "ms", "relative"))
    rs = [r for r in as_results(results) if "sweep" in r.params and "predicted_ms" in r.params]
    sweeps = sorted({r.params["sweep"] for r in rs}, key=lambda s: (_SWEEP_ORDER + (s,)).index(s))
    if sweep is None:
        if len(sweeps) != 1:
            raise ValueError(f"sweep must name one of {sweeps} (results hold {len(sweeps)} sweeps).")
        sweep = sweeps[0]
    rs = [r for r in rs if r.params["sweep"] == sweep]
    if not rs:
        raise ValueError(f"sweep={sweep!r} has no results; the results hold {sweeps}.")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    cases: dict = {}
    for r in rs:
        cases.setdefault(r.params.get("impl", r.case), []).append(r)
    for case, group in cases.items():
        group = sorted(group, key=lambda r: r.params["x"])
        xs = [r.params["x"] for r in group]
        if metric == "ms":
            meas, pred = [r.ms for r in group], [r.params["predicted_ms"] for r in group]
        else:
            meas, pred = [r.tflops for r in group], [r.params["predicted_tflops"] for r in group]
            if metric == "relative":
                meas = [v / max(meas) for v in meas]
                pred = [v / max(pred) for v in pred]
        key = palette.key_of(case, "gpulab")
        ax.plot(xs, meas, **palette.style(key, label=f"{case}: measured", ms=3.5))
        ax.plot(xs, pred, **palette.style(key, label=f"{case}: model", linestyle="--", marker="", alpha=0.8))
    ax.set_xlabel(rs[0].params.get("x_name", "x"))
    ax.set_ylabel({"tflops": "TFLOP/s", "ms": "ms", "relative": "TFLOP/s / best of its line"}[metric])
    if metric != "ms":
        ax.set_ylim(bottom=0)
    palette.apply(ax)
    ax.legend(fontsize=7)
    dev = rs[0].device or "?"
    ax.set_title(title or f"{sweep} sweep on {dev}", fontsize=10)
    return ax


def plot_benchmark(results, agreement=None):
    """All sweeps side by side, measured and predicted; the pair agreement in the title. Returns the figure."""
    import matplotlib.pyplot as plt

    results = as_results(results)
    present = {r.params.get("sweep") for r in results}
    sweeps = [s for s in _SWEEP_ORDER if s in present]
    if not sweeps:
        raise ValueError("results hold no sweep with predictions; run sweep_k, sweep_head_dim or sweep_waves.")
    fig, axes = plt.subplots(1, len(sweeps), figsize=(6.2 * len(sweeps), 4.4), squeeze=False)
    for ax, s in zip(axes[0], sweeps):
        plot_sweep(results, s, ax=ax)
    agreement = agreement or pair_agreement(results)
    dev = results[0].device if results else ""
    if not math.isnan(agreement["fraction"]):
        fig.suptitle(
            f"GEMM shapes on {dev}: measured vs model; the model orders {agreement['agree']}/{agreement['pairs']} "
            f"({agreement['fraction']:.0%}) of pairs differing by > {agreement['threshold']:.0%}",
            fontsize=11,
        )
    fig.tight_layout()
    return fig
