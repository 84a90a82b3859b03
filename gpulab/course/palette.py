"""One colour, marker and label per provider, for every figure the course draws.

A provider is whoever made the kernel a point measures: one of gpulab's versions, cuDNN, one of SDPA's backends,
FlashRNN, eager PyTorch, ... :func:`style` gives the matplotlib keyword arguments for one, so the same provider looks
the same in every lesson::

    ax.plot(xs, ys, **palette.style("cudnn", label="cuDNN (fp16)")); palette.apply(ax)

Colours: Okabe-Ito (safe for the common colour-vision deficiencies), then Paul Tol's and tab10; each provider has its
own marker too, so colour is never the only way to tell two apart.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["Style", "PROVIDERS", "style", "color", "apply", "dodge", "key_of", "GUIDES", "guide"]


@dataclass(frozen=True)
class Style:
    """How one provider is drawn: matplotlib's ``color``, ``marker``, ``label`` and ``linestyle``."""

    color: str
    marker: str
    label: str
    linestyle: str = "-"


PROVIDERS: dict[str, Style] = {
    "gpulab": Style("#0072B2", "o", "gpulab"),
    "v1": Style("#88CCEE", "v", "gpulab v1"),
    "v2": Style("#56B4E9", "^", "gpulab v2"),
    "v3": Style("#332288", "s", "gpulab v3"),
    "fused": Style("#009E73", "D", "gpulab fused"),
    "split": Style("#999933", "d", "gpulab split"),
    "alternating": Style("#117733", "h", "gpulab alternating"),
    "vanilla": Style("#DDCC77", "8", "gpulab vanilla"),
    "cudnn": Style("#E69F00", "X", "cuDNN"),
    "sdpa-cudnn": Style("#D55E00", "H", "SDPA (cuDNN)"),
    "sdpa-flash": Style("#CC79A7", "*", "SDPA (flash)"),
    "sdpa-efficient": Style("#AA4499", "p", "SDPA (efficient)"),
    "sdpa-math": Style("#882255", "P", "SDPA (math)"),
    "flashrnn": Style("#CC6677", "<", "FlashRNN"),
    "torch": Style("#000000", ">", "PyTorch (eager)"),
    "torch.compile": Style("#7F7F7F", "x", "torch.compile", "--"),
    "triton": Style("#8C564B", "+", "Triton"),
    "lstm": Style("#44AA99", "1", "LSTM"),
    "transformer": Style("#D62728", "2", "Transformer"),
    "model": Style("#444444", "", "model", "--"),
    "measured": Style("#17BECF", ".", "measured", "none"),
}
"""Every provider by key (lowercase): gpulab's kernels in blues and greens, vendors' in oranges, reds and purples,
PyTorch and Triton in greys and browns. ``"model"`` is a line (dashed, no marker), ``"measured"`` points (no line)."""


def _get(provider: str) -> Style:
    if not isinstance(provider, str):
        raise TypeError(
            f"provider must be a str, one of {sorted(PROVIDERS)}; got {type(provider).__name__} {provider!r}"
        )
    key = provider.strip().lower()
    if key not in PROVIDERS:
        raise ValueError(
            f"provider {provider!r} is not in gpulab.course.palette.PROVIDERS; known keys: {', '.join(PROVIDERS)}. "
            "Use one of them, or add the new provider to PROVIDERS (one colour and marker of its own)."
        )
    return PROVIDERS[key]


GUIDES: dict[str, str] = {
    "ink": "0.1",  # marks drawn on data (device time as a dot on a wall-clock bar)
    "reference": "0.45",  # a spec, a chance level, a training length: a line to read the data against
    "faint": "0.75",  # a boundary marked but not compared with (a cache size)
    "HBM": "0.1",  # memory levels and compute roofs: greys, so the providers' colours stand out on them
    "L2": "0.35",
    "L1": "0.55",
    "registers": "0.7",
}
"""Colours of what is not a provider: reference lines, memory levels, roofs (greys, dark to light)."""


def guide(name: str) -> str:
    """The colour of a non-provider element of :data:`GUIDES`; a ValueError listing the names for another."""
    if name not in GUIDES:
        raise ValueError(f"guide {name!r} is not in gpulab.course.palette.GUIDES; known: {', '.join(GUIDES)}.")
    return GUIDES[name]


_NAMES = (  # (words in a record's provider or impl name, its key); the first whose words all occur wins
    (("sdpa", "flash"), "sdpa-flash"), (("sdpa", "cudnn"), "sdpa-cudnn"), (("sdpa", "default"), "sdpa-cudnn"),
    (("sdpa", "efficient"), "sdpa-efficient"), (("sdpa", "math"), "sdpa-math"), (("flashrnn",), "flashrnn"),
    (("cudnn",), "cudnn"), (("compile",), "torch.compile"), (("triton",), "triton"), (("v1",), "v1"),
    (("v2",), "v2"), (("v3",), "v3"), (("split",), "split"), (("alternating",), "alternating"),
    (("vanilla",), "vanilla"), (("fused",), "fused"), (("gpulab",), "gpulab"), (("torch",), "torch"),
    (("pytorch",), "torch"), (("lstm",), "lstm"), (("transformer",), "transformer"),
)  # fmt: skip


def key_of(name: str, default: str | None = None) -> str | None:
    """The :data:`PROVIDERS` key a record's provider name stands for (``"SDPA FlashAttention-2"`` ->
    ``"sdpa-flash"``, ``"SDPA default"`` -> ``"sdpa-cudnn"``: cuDNN is what SDPA picks on Hopper, ``"gpulab v2"`` ->
    ``"v2"``, ``"naive (PyTorch)"`` -> ``"torch"``), else ``default``."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str (a record's provider or impl); got {type(name).__name__} {name!r}")
    low = name.lower()
    return next((k for words, k in _NAMES if all(w in low for w in words)), default)


def style(provider: str, **override) -> dict:
    """Matplotlib keywords (``color``, ``marker``, ``label``, ``linestyle``) for ``provider`` (any case), with
    ``override`` replacing or adding some: ``style("v3", label="v3 forward", ms=4)``."""
    kwargs = asdict(_get(provider))
    kwargs.update(override)
    return kwargs


def color(provider: str) -> str:
    """The colour of ``provider`` (for bars, spans and text, which take no marker)."""
    return _get(provider).color


def apply(ax) -> None:
    """The course's axes conventions on ``ax`` (one Axes or an iterable of them): a light grid on, and no offset or
    scientific multiplier hidden in an axis corner (scale the data and name the unit in the label instead)."""
    from matplotlib.axes import Axes
    from matplotlib.ticker import ScalarFormatter

    axes = [ax] if isinstance(ax, Axes) else list(getattr(ax, "flat", ax)) if hasattr(ax, "__iter__") else None
    if not axes or not all(isinstance(a, Axes) for a in axes):
        raise TypeError(f"ax must be a matplotlib Axes or an iterable of them (plt.subplots' result); got {ax!r}")
    for a in axes:
        a.grid(True, alpha=0.3)
        for axis in (a.xaxis, a.yaxis):
            fmt = axis.get_major_formatter()
            if isinstance(fmt, ScalarFormatter):
                fmt.set_useOffset(False)
                fmt.set_scientific(False)


def dodge(x: float, i: int, n: int, width: float = 0.08, log: bool = False) -> float:
    """``x`` moved sideways for series ``i`` of ``n`` drawn at the same x, so their markers do not stack.

    The ``n`` series are spread over ``width`` (a fraction of x, multiplicative when ``log`` is true; in x's
    units otherwise) centred on ``x``.
    """
    if not isinstance(n, int) or n < 1 or not isinstance(i, int) or not 0 <= i < n:
        raise ValueError(f"dodge needs 0 <= i < n with n >= 1 (ints); got i={i!r}, n={n!r}")
    offset = 0.0 if n == 1 else (i / (n - 1) - 0.5) * width
    return x * (1 + offset) if log else x + offset
