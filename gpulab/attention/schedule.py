"""Lesson 4: the forward kernel's block schedule as data and as a picture.

What you will learn: which (Q block, K block) pairs :func:`gpulab.attention.v1.forward.attention_forward_kernel` loads
without a mask (``FULL``: the block lies inside both sequences and, if causal, left of the block's first query),
which with a bounds or causal mask (``MASKED``: ragged last blocks, the diagonal), and which it never loads
(``SKIPPED``: causal blocks right of the diagonal, about half of a causal forward). The schedule mirrors the kernel's
``full`` and ``hi`` loop bounds exactly; the tests check it pair by pair against the mask it stands for.

The launch order is part of the picture too: Q blocks of one head are neighbours in the grid (they share K and V in
L2), and a causal launch starts with the last Q blocks, which see the most keys, so the final wave is made of short
programs.
"""

from __future__ import annotations

from gpulab import runtime

__all__ = ["SKIPPED", "FULL", "MASKED", "block_schedule", "plot_block_schedule"]

SKIPPED, FULL, MASKED = 0, 1, 2


def block_schedule(n_q: int, n_k: int, block_m: int, block_n: int, is_causal: bool = False) -> list[list[int]]:
    """What :func:`gpulab.attention.v1.forward.attention_forward_kernel` does with each (Q block, K block) pair:
    ``FULL`` (loaded, no mask), ``MASKED`` (loaded, bounds/causal mask applied) or ``SKIPPED`` (never loaded).
    Mirrors the kernel's ``full`` and ``hi`` bounds exactly; rows are Q blocks, columns K blocks."""
    for name, v in (("n_q", n_q), ("n_k", n_k), ("block_m", block_m), ("block_n", block_n)):
        runtime.positive_int(name, v)
    is_causal = runtime.strict_bool("is_causal", is_causal)
    rows = []
    for start_m in range(0, n_q, block_m):
        hi, full = n_k, (n_k // block_n) * block_n
        if is_causal:
            hi = min(n_k, start_m + block_m)
            full = min(full, ((start_m + 1) // block_n) * block_n)
        rows.append(
            [FULL if start_n < full else MASKED if start_n < hi else SKIPPED for start_n in range(0, n_k, block_n)]
        )
    return rows


def plot_block_schedule(n_q, n_k, block_m, block_n, is_causal=False, ax=None):
    """The schedule as a picture: grey blocks are skipped, blue ones run without a mask, orange ones with one."""
    import matplotlib.pyplot as plt  # heavy and optional: only when a picture is asked for
    from matplotlib.colors import ListedColormap

    sched = block_schedule(n_q, n_k, block_m, block_n, is_causal)
    if ax is None:
        _, ax = plt.subplots(figsize=(4, 4))
    ax.imshow(sched, cmap=ListedColormap(["0.9", "C0", "C1"]), vmin=0, vmax=2)
    counts = [sum(row.count(k) for row in sched) for k in (FULL, MASKED, SKIPPED)]
    ax.set_title(
        f"Nq={n_q}, Nk={n_k}, {block_m}x{block_n} tiles{', causal' if is_causal else ''}\n"
        f"{counts[0]} full, {counts[1]} masked, {counts[2]} skipped",
        fontsize=9,
    )
    ax.set_xlabel("K block")
    ax.set_ylabel("Q block")
    from matplotlib.patches import Patch

    legend = [Patch(color=c, label=name) for c, name in (("C0", "full"), ("C1", "masked"), ("0.9", "skipped"))]
    ax.legend(handles=legend, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, frameon=False)
    return ax
