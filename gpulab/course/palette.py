"""One colour, marker and label per provider, for every figure the course draws (a minimal stand-in).

:func:`style` gives the matplotlib keyword arguments for one provider, so the same provider looks the same in every
figure: ``ax.plot(xs, ys, **palette.style("cudnn", label="cuDNN (fp16)"))``. The keys and colours follow the course
palette (Okabe-Ito and Paul Tol's colours, a marker of its own per provider).
"""

from __future__ import annotations

__all__ = ["PROVIDERS", "style", "color"]

PROVIDERS: dict[str, dict] = {
    "v1": {"color": "#88CCEE", "marker": "v", "label": "gpulab v1", "linestyle": "-"},
    "v2": {"color": "#56B4E9", "marker": "^", "label": "gpulab v2", "linestyle": "-"},
    "v3": {"color": "#332288", "marker": "s", "label": "gpulab v3", "linestyle": "-"},
    "fused": {"color": "#009E73", "marker": "D", "label": "gpulab fused", "linestyle": "-"},
    "split": {"color": "#999933", "marker": "d", "label": "gpulab split", "linestyle": "-"},
    "alternating": {"color": "#117733", "marker": "h", "label": "gpulab alternating", "linestyle": "-"},
    "vanilla": {"color": "#DDCC77", "marker": "8", "label": "gpulab vanilla", "linestyle": "-"},
    "cudnn": {"color": "#E69F00", "marker": "X", "label": "cuDNN", "linestyle": "-"},
    "flashrnn": {"color": "#CC6677", "marker": "<", "label": "FlashRNN", "linestyle": "-"},
    "torch": {"color": "#000000", "marker": ">", "label": "PyTorch (eager)", "linestyle": "-"},
    "torch.compile": {"color": "#7F7F7F", "marker": "x", "label": "torch.compile", "linestyle": "--"},
    "model": {"color": "#444444", "marker": "", "label": "model", "linestyle": "--"},
}
"""Every provider by key (lowercase)."""


def style(provider: str, **override) -> dict:
    """Matplotlib keywords (``color``, ``marker``, ``label``, ``linestyle``) for ``provider``, with ``override``
    replacing or adding some: ``style("fused", label="v4 forward", ms=4)``."""
    if not isinstance(provider, str):
        raise TypeError(f"provider must be a str, one of {sorted(PROVIDERS)}; got {type(provider).__name__}")
    key = provider.strip().lower()
    if key not in PROVIDERS:
        raise ValueError(
            f"provider {provider!r} is not in gpulab.course.palette.PROVIDERS; known keys: {', '.join(PROVIDERS)}. "
            "Use one of them, or add the provider to PROVIDERS with a colour and marker of its own."
        )
    return {**PROVIDERS[key], **override}


def color(provider: str) -> str:
    """The colour of ``provider`` (for bars and spans, which take no marker)."""
    return style(provider)["color"]
