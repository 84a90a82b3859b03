"""The language-modelling records read back: the search's grid, the seeds' table, the figure, the comparison.

- :func:`stored_lm`: the newest ``lm`` (and ``lm-search``) records of a GPU under
  ``benchmarks/08_state_tracking/lm/``, [] where there are none;
- :func:`search_table`, :func:`final_table`: text tables (median and range over seeds of the validation bits per
  byte and of the training throughput, each LSTM's throughput relative to the Transformer's beside the article's);
- :func:`at_equal`: each model's validation bits per byte at one number of tokens or one wall time (read off its
  curve, the median over seeds);
- :func:`findings`: what the records say, in sentences computed from them (the lesson prints them, so no figure is
  typed into its prose);
- :func:`figure`: one figure, two panels: bits per byte against tokens seen and against wall time, one colour per
  model, every seed a line.
"""

from __future__ import annotations

import math
import statistics

from gpulab import bench, runtime
from gpulab.course import palette
from gpulab.tasks.lm import MODELS
from gpulab.tasks.results import ARTICLE_RATIO as _BY_HEADS

__all__ = [
    "COLORS",
    "STYLES",
    "stored_lm",
    "search_table",
    "final_table",
    "at_equal",
    "throughput_ratios",
    "findings",
    "figure",
]

_MODELS = MODELS
STYLES = {  # the palette's, per model: the two LSTMs one colour, twelve heads dashed; curves without markers
    "LSTM 1 head": palette.style("lstm", label="LSTM 1 head", marker=""),
    "LSTM 12 heads": palette.style("lstm", label="LSTM 12 heads", marker="", linestyle="--"),
    "Transformer": palette.style("transformer", marker=""),
}
COLORS = {m: s["color"] for m, s in STYLES.items()}

ARTICLE_RATIO = {"LSTM 1 head": _BY_HEADS[1], "LSTM 12 heads": _BY_HEADS[12]}
"""FlashRNN (Pöppel et al., 2024), language modelling on 8 H100s: the LSTM's training throughput relative to the
Transformer's (:data:`gpulab.tasks.results.ARTICLE_RATIO`, by model)."""


def _of(results, kind: str) -> list:
    results = bench.result_list("results", results, allow_empty=True)
    return [r for r in results if r.params.get("kind") == kind]


def stored_lm(gpu: str = "h200", part: str = "lm", root=None) -> list:
    """The newest records of ``part`` (``"lm"`` or ``"lm-search"``) of ``gpu`` under
    ``benchmarks/08_state_tracking/lm/``; [] when there are none (no GPU run yet)."""
    if not isinstance(gpu, str) or not gpu:
        raise runtime.ArgumentTypeError(f"gpu must be a GPU name such as 'h200', got {gpu!r}.")
    runtime.one_of("part", part, ("lm", "lm-search"))
    folder = bench.results_dir(root) / "08_state_tracking" / "lm"
    files = bench.record_files(folder, gpu, f"*-{part}.jsonl")
    return bench.load("08", path=bench.newest(files, part=part)) if files else []


def _fmt(x, digits=3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def search_table(results) -> str:
    """The grid: one row per (model, lr, warmup), validation bits per byte at the search budget, ``*`` the pick."""
    rows = []
    for r in _of(results, "lm-search"):
        p = r.params
        val = p.get("error", "")[:60] or _fmt(p.get("val_bpb"))
        rows.append([p["model"], f"{p['lr']:g}", str(p["warmup"]), val, _fmt(p.get("tokens_per_s", math.nan) / 1e6, 2),
                     "*" if p.get("picked") else ""])  # fmt: skip
    heads = ["model", "lr", "warmup", "val bits/byte", "M bytes/s", "pick"]
    return bench.text_table(heads, rows, title="lm search (one seed per grid point)")


def _spread(values) -> str:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return "-"
    return f"{statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def _median_tps(final) -> dict:
    out = {}
    for m in _MODELS:
        tps = [r.params["tokens_per_s"] for r in final if r.params["model"] == m and r.params.get("tokens_per_s")]
        if tps:
            out[m] = statistics.median(tps)
    return out


def throughput_ratios(results) -> dict:
    """``{model: median training throughput / the Transformer's}`` over the ``lm`` records."""
    tps = _median_tps(_of(results, "lm"))
    if "Transformer" not in tps:
        return {}
    return {m: v / tps["Transformer"] for m, v in tps.items()}


def final_table(results) -> str:
    """One row per model: seeds, parameters, pick, validation bits per byte (median [min, max] over seeds) at the
    end, training throughput, its ratio to the Transformer's and the article's ratio."""
    final = _of(results, "lm")
    ratios, tps = throughput_ratios(results), _median_tps(final)
    rows = []
    for m in _MODELS:
        mine = [r for r in final if r.params["model"] == m]
        if not mine:
            continue
        p = mine[0].params
        rows.append([m, str(len(mine)), f"{p.get('parameters', 0) / 1e6:.2f} M", f"{p['lr']:g} / {p['warmup']}",
                     _spread([r.params.get("val_bpb") for r in mine]), _fmt(tps.get(m, math.nan) / 1e6, 2),
                     _fmt(ratios.get(m), 2), _fmt(ARTICLE_RATIO.get(m, 1.0), 2)])  # fmt: skip
    heads = ["model", "seeds", "params", "lr / warmup", "val bits/byte", "M bytes/s", "vs Transformer", "article"]
    return bench.text_table(heads, rows, title="lm: each model at its pick, every seed to the same budget")


def _interpolate(curve, key: str, at: float):
    points = [(c[key], c["val_bpb"]) for c in curve]
    if not points or at < points[0][0] or at > points[-1][0]:
        return None
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= at <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (at - x0) / (x1 - x0)
    return points[-1][1] if at == points[-1][0] else None


def at_equal(results, tokens: float | None = None, seconds: float | None = None) -> dict:
    """``{model: median over seeds of the validation bits per byte}`` at ``tokens`` bytes seen or at ``seconds`` of
    training (exactly one of the two), read off each curve by linear interpolation between validations; a model
    whose curves do not reach that far is left out."""
    if (tokens is None) == (seconds is None):
        raise ValueError("give exactly one of tokens= (bytes seen) or seconds= (training wall time).")
    key, at = ("tokens", tokens) if tokens is not None else ("seconds", seconds)
    at = runtime.finite_float(key, at, positive=True)
    out = {}
    for m in _MODELS:
        values = [
            _interpolate(r.params.get("curve", []), key, at) for r in _of(results, "lm") if r.params["model"] == m
        ]
        values = [v for v in values if v is not None]
        if values:
            out[m] = statistics.median(values)
    return out


def _order(values: dict) -> str:
    ranked = sorted(values.items(), key=lambda kv: kv[1])
    return " < ".join(f"{m} ({v:.3f})" for m, v in ranked)


def findings(results) -> str:
    """The comparison in four sentences computed from the ``lm`` records: the order per byte (at the smallest
    budget all reached) and per second (at the shortest training's wall time), the LSTMs' throughput beside the
    article's ratios, and what one head buys over twelve. '' without records."""
    final = _of(results, "lm")
    if not final:
        return ""
    budget = min(r.params["tokens"] for r in final)
    seconds = min(r.params["curve"][-1]["seconds"] for r in final if r.params.get("curve"))
    per_byte, per_second = at_equal(final, tokens=budget), at_equal(final, seconds=seconds)
    ratios = throughput_ratios(final)
    lines = [
        f"Per byte (validation bits per byte at {budget / 1e6:.0f} M bytes, lower is better): {_order(per_byte)}.",
        f"Per second (at {seconds:.0f} s of training, the shortest run's whole time): {_order(per_second)}.",
    ]
    if ratios:
        lines.append(
            "Training throughput against the Transformer's: "
            + "; ".join(f"{m} {ratios[m]:.2f}x (article {ARTICLE_RATIO[m]:.2f}x)" for m in ARTICLE_RATIO if m in ratios)
            + "."
        )
    one, twelve = per_byte.get("LSTM 1 head"), per_byte.get("LSTM 12 heads")
    if one is not None and twelve is not None:
        better = "one head" if one < twelve else "twelve heads"
        t_one, t_twelve = per_second.get("LSTM 1 head"), per_second.get("LSTM 12 heads")
        lead = "one head" if t_one is not None and t_twelve is not None and t_one < t_twelve else "twelve heads"
        sec = "" if t_one is None or t_twelve is None else f"; per second {lead} leads by {abs(t_one - t_twelve):.3f}"
        lines.append(f"Heads: per byte {better} leads by {abs(one - twelve):.3f} bits{sec}.")
    return "\n".join(lines)


def figure(results, ax=None):
    """Validation bits per byte against bytes seen (left) and against training wall time (right), one colour per
    model, one line per seed; returns the figure (None without ``lm`` records)."""
    import matplotlib.pyplot as plt

    final = _of(results, "lm")
    if not final:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True) if ax is None else (ax[0].figure, ax)
    for m in _MODELS:
        for i, r in enumerate(r for r in final if r.params["model"] == m and r.params.get("curve")):
            curve = r.params["curve"]
            style = STYLES[m] | {"alpha": 0.8, "label": STYLES[m]["label"] if i == 0 else None}
            axes[0].plot([c["tokens"] / 1e6 for c in curve], [c["val_bpb"] for c in curve], **style)
            axes[1].plot([c["seconds"] for c in curve], [c["val_bpb"] for c in curve], **style)
    axes[0].set_xlabel("bytes seen (M)")
    axes[1].set_xlabel("training wall time (s)")
    axes[0].set_ylabel("validation bits per byte")
    axes[0].set_title("against bytes seen", fontsize=10)
    axes[1].set_title("against training wall time", fontsize=10)
    palette.apply(axes)
    axes[0].legend()
    r0 = final[0]
    fig.suptitle(f"byte-level LM on {r0.params.get('corpus')} ({str(r0.params.get('corpus_sha256'))[:12]}), "
                 f"{r0.device}")  # fmt: skip
    fig.tight_layout()
    return fig
