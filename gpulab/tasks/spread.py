"""Reading the search's records (:mod:`.search`): the pick, the grid, the spread over seeds, the plot.

Everything here takes a list of :class:`gpulab.bench.Result` (live from :func:`gpulab.tasks.search.search` or loaded
with :func:`stored_search`) and computes nothing new.

- :func:`pick`: per (task, model), the search row with the highest ``val_accuracy`` (validation strings of the
  training length), ties broken by the lower ``val_loss``. It reads ``kind "search"`` rows only: accuracy at the
  longer test lengths cannot move it;
- :func:`spread`: per (task, model, test length), the median, minimum and maximum accuracy over the seeds;
- :func:`search_table`, :func:`spread_table`: the grid's validation accuracy and the spread as text;
- :func:`plot_spread`: accuracy vs length, every seed a point, the median a line, the min-max range a band.
"""

from __future__ import annotations

import math
import statistics

from gpulab import bench, runtime
from gpulab.course import palette
from gpulab.tasks.data import get_task

__all__ = ["MODELS", "lr_text", "search_records", "pick", "spread", "search_table", "spread_table", "plot_spread",
           "figure", "stored_search"]  # fmt: skip

MODELS = ("LSTM", "Transformer")

_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def lr_text(lr: float) -> str:
    """A learning rate as ``3·10⁻⁴`` (``10⁻³`` for a mantissa of 1): written so, a small rate is not mistaken for
    float rounding digits by :func:`gpulab.course.prose.machine_digits`, and reads as the grid it is."""
    lr = runtime.finite_float("lr", lr, positive=True)
    exponent = math.floor(math.log10(lr) + 1e-9)
    mantissa = round(lr / 10**exponent, 3)
    power = "10" + str(exponent).translate(_SUPERSCRIPT)
    return power if mantissa == 1 else f"{mantissa:g}·{power}"


def _results(results) -> list:
    return bench.result_list("results", results, allow_empty=True, source=" (from tasks.search or stored_search)")


def search_records(results) -> list[bench.Result]:
    """The ``kind "search"`` records (one per grid point) that did not fail."""
    return [r for r in _results(results) if r.params.get("kind") == "search" and "error" not in r.params]


def _seed_records(results) -> list[bench.Result]:
    """The accuracy records of the seeds at the pick (``picked_by`` set) that did not fail."""
    return [
        r
        for r in _results(results)
        if r.params.get("kind") == "accuracy" and "picked_by" in r.params and "error" not in r.params
    ]


def _val_key(r: bench.Result):
    loss = r.params.get("val_loss")
    loss = math.inf if loss is None or math.isnan(loss) else loss
    acc = r.params["val_accuracy"]
    return (-math.inf if acc is None or math.isnan(acc) else acc, -loss)


def pick(results) -> dict:
    """``{(task, model): search record}``: the grid point with the best validation accuracy at the training length
    (then the lower validation loss; then the first in the records' order). Only ``kind "search"`` rows count."""
    best = {}
    for r in search_records(results):
        key = (r.params["task"], r.params["model"])
        if key not in best or _val_key(r) > _val_key(best[key]):
            best[key] = r
    return best


def spread(results) -> dict:
    """``{(task, model): {test_length: (median, min, max, seeds)}}`` of the accuracy over the seeds at the pick."""
    acc = {}
    for r in _seed_records(results):
        key = (r.params["task"], r.params["model"])
        acc.setdefault(key, {}).setdefault(r.params["test_length"], []).append(r.params["accuracy"])
    return {
        key: {n: (statistics.median(v), min(v), max(v), len(v)) for n, v in sorted(by_len.items())}
        for key, by_len in acc.items()
    }


def _grid(rows, first, lines) -> str:
    widths = [max(len(row[i]) for row in [first, *lines]) for i in range(len(first))]
    fmt = lambda row: "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths)))
    return "\n".join([fmt(first), fmt(["-" * w for w in widths]), *map(fmt, lines)])


def search_table(results) -> str:
    """Validation accuracy (%) at the training length per (task, model) (rows) and grid point (columns, ``lr/warmup``);
    ``*`` marks the pick."""
    recs = search_records(results)
    if not recs:
        return "no search records"
    points = list(dict.fromkeys((r.params["lr"], r.params["warmup"]) for r in recs))
    chosen = {id(r) for r in pick(recs).values()}
    rows = {}
    for r in recs:
        rows.setdefault((r.params["task"], r.params["model"]), {})[r.params["lr"], r.params["warmup"]] = r
    r0 = recs[0]
    first = [f"val. accuracy at {r0.params['train_length']} (%), {r0.params['steps']} steps"]
    first += [f"{lr_text(lr)}/{w}" for lr, w in points]
    lines = []
    for (task, model), by in rows.items():
        cells = []
        for p in points:
            r = by.get(p)
            cells.append("-" if r is None else f"{100 * r.params['val_accuracy']:.1f}{'*' if id(r) in chosen else ''}")
        lines.append([f"{task} {model}", *cells])
    return _grid(rows, first, lines) + "\n(columns: learning rate / warmup steps; * = the pick)"


def spread_table(results) -> str:
    """Accuracy (%) of the final state per (task, model) (rows) and test length (columns) over the seeds at the pick:
    ``median (min-max)``, or one number where every seed agrees."""
    sp = spread(results)
    if not sp:
        return "no accuracy records of the search's seeds"
    recs = _seed_records(results)
    lengths = sorted({n for by in sp.values() for n in by})
    first = ["task / model (params, lr, warmup, seeds)"] + [str(n) for n in lengths]
    lines = []
    for (task, model), by in sp.items():
        r = next(x for x in recs if (x.params["task"], x.params["model"]) == (task, model))
        seeds = max(v[3] for v in by.values())
        label = f"{task} {model} ({r.params['parameters']:,}, {lr_text(r.params['lr'])}, {r.params['warmup']}, {seeds})"
        cells = []
        for n in lengths:
            if n not in by:
                cells.append("-")
                continue
            med, lo, hi, _ = by[n]
            cells.append(f"{100 * med:.1f}" if lo == hi else f"{100 * med:.1f} ({100 * lo:.1f}-{100 * hi:.1f})")
        lines.append([label, *cells])
    return _grid(sp, first, lines) + "\n(median over seeds, (min-max) where the seeds differ)"


def plot_spread(results, axes=None, title=None):
    """One panel per task: accuracy vs test length at the pick, each seed a point, the median a line, the min-max
    range a band; the training length dashed, chance dotted. Returns the axes."""
    import matplotlib.pyplot as plt

    sp, recs = spread(results), _seed_records(results)
    tasks = list(dict.fromkeys(t for t, _ in sp))
    if axes is None:
        _, axes = plt.subplots(1, max(1, len(tasks)), figsize=(5.5 * max(1, len(tasks)), 3.8), squeeze=False)
        axes = axes[0]
    for ax, task in zip(axes, tasks):
        for i, model in enumerate(MODELS):
            by = sp.get((task, model))
            if not by:
                continue
            ns = list(by)
            r0 = next(r for r in recs if (r.params["task"], r.params["model"]) == (task, model))
            style = palette.style(palette.key_of(model, "gpulab"))
            color = style["color"]
            ax.fill_between(ns, [100 * by[n][1] for n in ns], [100 * by[n][2] for n in ns], color=color, alpha=0.2)
            seeds = max(v[3] for v in by.values())
            ax.plot(ns, [100 * by[n][0] for n in ns], **style | {"ms": 5, "label": f"{model} median (lr "
                    f"{lr_text(r0.params['lr'])}, {seeds} seeds)"})  # fmt: skip
            pts = [(r.params["test_length"], 100 * r.params["accuracy"]) for r in recs
                   if (r.params["task"], r.params["model"]) == (task, model)]  # fmt: skip
            # each model's seeds a little to its own side of the tested length, so the two models' points do not stack
            xs = [palette.dodge(n, i, len(MODELS), width=0.12, log=True) for n, _ in pts]
            ax.scatter(xs, [a for _, a in pts], color=color, marker="o", s=10, alpha=0.7, zorder=3,
                       label=f"{model}, one seed")  # fmt: skip
        train_len = next(r.params["train_length"] for r in recs if r.params["task"] == task)
        ref = palette.guide("reference")
        ax.axvline(train_len, color=ref, ls="--", lw=1, label=f"training length {train_len}")
        ax.axhline(100 / get_task(task).classes, color=ref, ls=":", lw=1, label="chance")
        ax.set_xscale("log", base=2)
        tested = sorted({r.params["test_length"] for r in recs if r.params["task"] == task})
        ax.set_xticks(tested, [str(n) for n in tested])
        ax.minorticks_off()
        ax.set_ylim(0, 105)
        ax.set_xlabel("test length (tokens)")
        ax.set_ylabel("final-state accuracy (%)")
        ax.set_title(get_task(task).description if title is None else title)
        palette.apply(ax)
        ax.legend(fontsize=7, loc="lower left")
    return axes


def figure(results):
    """The search's figure: :func:`plot_spread`, one panel per task."""
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(t for t, _ in spread(results))) or ["-"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4.2), squeeze=False)
    plot_spread(results, axes=axes[0])
    fig.tight_layout()
    return fig


def stored_search(gpu: str = "h100", root=None) -> list:
    """The newest stored search records of ``gpu`` (``benchmarks/08_state_tracking/search/``, written by
    ``python -m gpulab bench 08 search``); [] when there are none."""
    if not isinstance(gpu, str) or not gpu:
        raise runtime.ArgumentTypeError(f"gpu must be a GPU name such as 'h100', got {gpu!r}.")
    files = bench.record_files(bench.results_dir(root) / "08_state_tracking" / "search", gpu)
    return bench.load("08", path=bench.newest(files)) if files else []
