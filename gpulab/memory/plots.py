"""Lesson 0's figures: bandwidth against working set, the capacity of each level, and each GPU's ridge point.

matplotlib is imported inside each function, so importing this module (and :func:`human_bytes`) stays light.
"""

from __future__ import annotations

from gpulab import bench, hardware, runtime
from gpulab.course import palette

__all__ = ["plot_sweep", "plot_hierarchy", "plot_ridge_points", "human_bytes", "check_axes"]


def plot_sweep(results, ax=None, gpu=None, title=None):
    """Bandwidth vs working set on log-log axes, with the spec's HBM bandwidth and the L1 / L2 sizes marked."""
    import matplotlib.pyplot as plt

    results = _results(results)
    check_axes(ax, title)
    if gpu is not None:
        hardware.spec(gpu)  # an error naming gpu now, not only when the figure reaches the spec lines
    sweep = sorted((r for r in results if r.case == "working-set sweep"), key=lambda r: r.params["working_set_bytes"])
    if not sweep:
        raise ValueError(
            "results holds no 'working-set sweep' record; pass what gpulab.memory.measure_sweep() returns."
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    xs = [r.params["working_set_bytes"] for r in sweep]
    ys = [r.gbps for r in sweep]
    ax.plot(xs, ys, **palette.style("gpulab", label=f"sweep kernel ({sweep[0].device})", ms=3))
    others = [r for r in results if r.case != "working-set sweep" and r.gbps and "working_set_bytes" in r.params]
    for i, r in enumerate(others):  # points at one working set are moved apart a little, so none hides another
        x = palette.dodge(r.params["working_set_bytes"], i, len(others), width=0.3, log=True)
        ax.scatter([x], [r.gbps], zorder=3, **palette.style(palette.key_of(r.case, "gpulab"), label=r.case))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if sweep and sweep[0].mode == "cuda":
        s = hardware.spec(gpu or sweep[0].device)
        ax.axhline(
            s.hbm_gbps, color=palette.guide("reference"), ls="--", lw=1, label=f"HBM spec {s.hbm_gbps:,.0f} GB/s"
        )
        for size, name in ((s.l1_per_sm, "L1 per SM"), (s.l2_bytes, "L2")):
            ax.axvline(size, color=palette.guide("faint"), ls=":", lw=1)
            ax.text(size, min(ys), f" {name}", rotation=90, va="bottom", fontsize=8)
    ticks = [x for x in xs if (x.bit_length() - 1) % 2 == 0]
    ax.set_xticks(ticks, [human_bytes(t) for t in ticks], rotation=45)
    ax.set_xlabel("working set W")
    ax.set_ylabel("bandwidth (GB/s, bytes read / time)")
    palette.apply(ax)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Bandwidth vs working set")
    return ax


def plot_hierarchy(gpu=None, ax=None):
    """Capacity of each level of the hierarchy on one GPU, summed over the chip (log scale)."""
    import matplotlib.pyplot as plt

    check_axes(ax)
    s = hardware.spec(gpu)
    levels = [
        ("registers", s.registers_per_sm * 4 * s.sm_count, f"{s.registers_per_sm * 4 // 1024} KB per SM"),
        ("L1 / shared", s.l1_per_sm * s.sm_count, f"{s.l1_per_sm // 1024} KB per SM"),
        ("L2", s.l2_bytes, "shared by all SMs"),
        ("HBM", s.memory_gb * 2**30, f"{s.hbm_gbps:,.0f} GB/s to the chip"),
    ]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 2.8))
    # each level's size and note in its label, so the bars end where the data ends (no text beyond them to fit)
    names = [f"{n}: {human_bytes(b)}\n({t})" for n, b, t in levels][::-1]
    sizes = [b for _, b, _ in levels][::-1]
    ax.barh(names, sizes, color=[palette.guide(k) for k in ("HBM", "L2", "L1", "registers")])
    ax.set_xscale("log")
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlim(1e6, max(sizes) * 3)
    ax.set_xlabel("capacity, whole chip (bytes)")
    ax.set_title(f"Memory hierarchy of the {s.name}")
    return ax


def plot_ridge_points(specs=None, dtype="float16", ax=None):
    """Ridge point (FLOPs per HBM byte needed to be compute-bound) of each GPU in the spec table."""
    import matplotlib.pyplot as plt

    check_axes(ax)
    specs = list(hardware.SPECS.values()) if specs is None else [hardware.spec(s) for s in specs]
    if not specs:
        raise ValueError("specs is empty; pass GPU names or GPUSpecs, or None for every GPU in the spec table.")
    hardware.ridge_point(specs[0], dtype)  # an error naming dtype before any drawing
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3))
    names = [s.name.replace("NVIDIA ", "").replace("GeForce ", "") for s in specs]
    ridges = [hardware.ridge_point(s, dtype) for s in specs]
    ax.bar(names, ridges, color=palette.guide("L2"))
    ref = palette.guide("reference")
    ax.axhline(1 / 12, color=ref, ls="--", lw=1)
    ax.text(-0.4, 0.1, "fp32 vector add: 1 FLOP per 12 bytes", color=ref, fontsize=8, backgroundcolor="white")
    ax.set_ylim(0.03, None)
    ax.set_yscale("log")
    ax.set_ylabel(f"FLOP per byte ({dtype} peak / HBM)")
    ax.set_title("How many FLOPs a kernel must do per byte to stop being memory-bound")
    ax.tick_params(axis="x", rotation=45)
    for label in ax.get_xticklabels():
        label.set_ha("right")
    return ax


def human_bytes(b: float) -> str:
    """A byte count for people: 16384 -> '16 KB', 3 << 30 -> '3 GB' (powers of 1024, 3 significant digits)."""
    b = runtime.finite_float("b", b, minimum=0.0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if b < 1024:
            return f"{b:.3g} {unit}"
        b /= 1024
    return f"{b:g} PB"


def _results(results) -> list:
    return bench.result_list("results", results, allow_empty=True)


def check_axes(ax, title=None) -> None:
    """A TypeError unless ``ax`` is None or matplotlib Axes and ``title`` is None or a string."""
    import matplotlib.axes

    if ax is not None and not isinstance(ax, matplotlib.axes.Axes):
        raise runtime.ArgumentTypeError(f"ax must be matplotlib Axes or None, got {type(ax).__name__}.")
    if title is not None and not isinstance(title, str):
        raise runtime.ArgumentTypeError(f"title must be a string or None, got {title!r}.")
