"""One colour and marker per provider, for every plot of the course: :func:`style`.

A minimal stand-in with the course palette's API (``style(provider, **override) -> dict``); the keys are the
providers the lessons plot: gpulab's attention versions, cuDNN, SDPA's backends, eager PyTorch and a model's
prediction.
"""

from __future__ import annotations

__all__ = ["PROVIDERS", "style"]

PROVIDERS: dict[str, dict] = {
    "v1": {"color": "#1f77b4", "marker": "o", "label": "gpulab version 1", "linestyle": "-"},
    "v2": {"color": "#2ca02c", "marker": "s", "label": "gpulab version 2", "linestyle": "-"},
    "v3": {"color": "#9467bd", "marker": "D", "label": "gpulab version 3", "linestyle": "-"},
    "cudnn": {"color": "#d62728", "marker": "^", "label": "cuDNN (SDPA default)", "linestyle": "--"},
    "sdpa-flash": {"color": "#ff7f0e", "marker": "v", "label": "SDPA FlashAttention-2", "linestyle": "--"},
    "sdpa-efficient": {"color": "#8c564b", "marker": "P", "label": "SDPA memory-efficient", "linestyle": "--"},
    "sdpa-math": {"color": "#7f7f7f", "marker": "X", "label": "SDPA math", "linestyle": ":"},
    "torch": {"color": "#17becf", "marker": "h", "label": "PyTorch (eager)", "linestyle": ":"},
    "model": {"color": "#000000", "marker": "*", "label": "model", "linestyle": "-."},
}
"""Provider key -> its matplotlib style (colour, marker, legend label, line style)."""

_KEYS = ("color", "marker", "label", "linestyle")


def style(provider: str, **override) -> dict:
    """The style of ``provider`` (a key of :data:`PROVIDERS`) as ``dict(color, marker, label, linestyle)``, with any
    of those four keys replaced by ``override``."""
    if not isinstance(provider, str) or provider not in PROVIDERS:
        raise ValueError(f"style: provider must be one of {sorted(PROVIDERS)}, got {provider!r}; add it to "
                         "gpulab.course.palette.PROVIDERS to plot a new one.")  # fmt: skip
    bad = sorted(set(override) - set(_KEYS))
    if bad:
        raise TypeError(f"style: override takes only {list(_KEYS)}, got {bad}; pass e.g. label='...'.")
    return {**PROVIDERS[provider], **override}
