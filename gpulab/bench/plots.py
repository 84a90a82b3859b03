"""Tables and charts of :class:`~gpulab.bench.Result` records: what every lesson shows.

Columns and axes name a Result attribute (``ms``, ``wall_ms``, ``tflops``, ``wall_gbps``, ``provider`` ...) or a key
of its ``params``. A value that does not exist or is undefined (a rate without a time) shows as "-" in a table and
is left out of a chart.
"""

from __future__ import annotations

import math

from gpulab import runtime
from gpulab.bench.records import Result, result_list
from gpulab.course import palette

__all__ = ["table", "text_table", "bar", "line", "series_styles", "value", "HEADINGS"]

HEADINGS = {
    "tflops": "TFLOP/s",
    "gbps": "GB/s",
    "wall_ms": "wall ms",
    "wall_tflops": "wall TFLOP/s",
    "wall_gbps": "wall GB/s",
}
"""Column headings and axis labels for the derived quantities (anything else is shown by its own name)."""


def as_results(results, name: str = "results") -> list[Result]:
    return result_list(name, results, allow_empty=True)


def _names(name: str, keys) -> tuple[str, ...]:
    if isinstance(keys, str):
        keys = (keys,)
    keys = tuple(keys)
    for k in keys:
        if not isinstance(k, str):
            raise runtime.ArgumentTypeError(f"{name} must hold column names (str), got {k!r}.")
    return keys


def value(r: Result, key: str):
    """The attribute ``key`` of ``r`` (rates included), else ``r.params[key]``, else None."""
    return getattr(r, key) if hasattr(r, key) else r.params.get(key)


def _fmt(v, digits=3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 10**digits else f"{v:,.0f}"
    return str(v)


def _label(key: str) -> str:
    return HEADINGS.get(key, key)


def table(results, columns=("case", "ms", "tflops", "gbps"), title=None, headings=None) -> str:
    """A plain-text table of results; ``columns`` are Result attributes or keys of ``params``; ``headings``
    overrides a column's heading (``{"ms": "device ms"}``)."""
    results = as_results(results)
    columns = _names("columns", columns)
    rows = [[value(r, c) for c in columns] for r in results]
    return text_table([(headings or {}).get(c, _label(c)) for c in columns], rows, title=title)


def text_table(heads, rows, title=None) -> str:
    """Rows of values under ``heads``, left-aligned in columns; None and NaN show as "-", floats with 3 digits."""
    heads = [str(h) for h in heads]
    rows = [[_fmt(v) for v in row] for row in rows]
    for i, row in enumerate(rows):
        if len(row) != len(heads):
            raise ValueError(f"rows[{i}] has {len(row)} values but there are {len(heads)} headings.")
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(heads)]
    lines = [title] if title else []
    lines.append("  ".join(h.ljust(w) for h, w in zip(heads, widths)).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def _number(v) -> float:
    return 0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def bar(results, metric="tflops", label="case", ax=None, reference=None, title=None):
    """Bar chart of ``metric`` per result, each bar its provider's palette colour (:func:`gpulab.course.palette.key_of`
    its label, gpulab's where none is named); ``reference`` names a case drawn grey and hatched (e.g. a baseline)."""
    import matplotlib.pyplot as plt  # deferred: matplotlib is heavy and only charts need it

    results = as_results(results)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4, 0.8 * len(results) + 2), 3.5))
    values = [_number(value(r, metric)) for r in results]
    labels = [str(value(r, label)) for r in results]
    for i, (v, lab) in enumerate(zip(values, labels)):
        ref = reference is not None and lab == reference
        color = palette.guide("faint") if ref else palette.color(palette.key_of(lab, "gpulab"))
        ax.bar(i, v, color=color, hatch="//" if ref else None,
               edgecolor=palette.guide("reference"), label="reference" if ref else None)  # fmt: skip
    ax.set_xticks(range(len(values)), labels, rotation=30, ha="right")
    ax.set_ylabel(_label(metric))
    ax.set_title(title or f"{_label(metric)} per {label}")
    palette.apply(ax)
    if reference is not None and reference in labels:
        ax.legend(fontsize=8)
    return ax


def series_styles(names) -> dict:
    """Matplotlib keywords for each of ``names`` (one line each): its provider's palette style where
    :func:`gpulab.course.palette.key_of` knows it and no earlier name took it, else that colour (or the measured one)
    with another marker and dash, so no two lines look alike."""
    if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
        raise runtime.ArgumentTypeError(
            f"names must be an iterable of series names (e.g. a list of cases), got {type(names).__name__} {names!r}."
        )
    markers, dashes = "osD^vPX*h<>pH8d", ("-", "--", ":", "-.")
    out, used = {}, {}
    for name in names:
        key = palette.key_of(str(name), "measured")
        n = used[key] = used.get(key, -1) + 1
        extra = {} if n == 0 else {"marker": markers[n % len(markers)], "linestyle": dashes[n % len(dashes)]}
        out[name] = palette.style(key, label=str(name), **extra)
    return out


def line(results, x, y="gbps", group="case", ax=None, logx=True, logy=False, title=None, xlabel=None):
    """Line chart of ``y`` against ``x`` (attributes or params), one line per value of ``group``; points where ``x``
    or ``y`` is undefined are left out."""
    import matplotlib.pyplot as plt  # deferred: matplotlib is heavy and only charts need it

    results = as_results(results)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 3.8))
    groups: dict = {}
    for r in results:
        yv = value(r, y)
        if value(r, x) is None or yv is None or (isinstance(yv, float) and math.isnan(yv)):
            continue
        groups.setdefault(value(r, group), []).append(r)
    styles = series_styles(groups)
    for name, rs in groups.items():
        rs = sorted(rs, key=lambda r: value(r, x))
        style = styles[name] | ({"ms": 3} if len(rs) > 1 else {"ms": 7, "label": f"{name} (one point)"})
        if style["linestyle"] == "none":
            style["linestyle"] = "-"
        ax.plot([value(r, x) for r in rs], [value(r, y) for r in rs], **style)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(_label(y))
    if groups:
        ax.legend(fontsize=8)
    ax.set_title(title or f"{_label(y)} against {xlabel or x}")
    palette.apply(ax)
    ax.grid(True, which="both", alpha=0.3)
    return ax
