"""Lesson 3's figures: the ladder as bars per dtype (eager and graphed, cuDNN as the reference line), and the steps
on lesson 1's roofline. Both read the records of :func:`gpulab.rnn.ladder.benchmark.benchmark`."""

from __future__ import annotations

import dataclasses

from gpulab import bench, dtypes, roofline, runtime
from gpulab.course import palette
from gpulab.rnn.ladder.steps import BEYOND_ARTICLE

__all__ = ["plot_ladder", "plot_roofline", "short_dtype", "find", "result_dtypes"]


def short_dtype(dtype) -> str:
    """fp32, fp16, bf16 for a dtype or its name (:func:`gpulab.dtypes.short`); '?' for anything else."""
    try:
        return dtypes.short(str(dtype).removeprefix("torch."))
    except ValueError:
        return "?"


def find(results, dtype, step, mode):
    for r in results:
        if r.dtype == dtype and r.params.get("step") == step and r.params.get("mode") == mode:
            return r
    return None


def result_dtypes(results):
    """The dtypes of ``results`` (a non-empty list of the ladder's records), in the order they first appear."""
    return list(dict.fromkeys(r.dtype for r in bench.result_list("results", results)))


def plot_ladder(results, metric="tflops"):
    """Bar chart, one panel per dtype: eager (plain) and graphed (hatched) bars per step in gpulab's palette colour,
    cuDNN's bars and its best mode (the dashed reference line) in cuDNN's."""
    import matplotlib.pyplot as plt  # deferred: heavy, and only figures need it

    results = bench.result_list("results", results)
    runtime.one_of("metric", metric, ("tflops", "ms", "wall_ms", "wall_tflops"))
    dts = result_dtypes(results)
    fig, axes = plt.subplots(1, len(dts), figsize=(5.2 * len(dts), 3.8), squeeze=False)
    for ax, dt in zip(axes[0], dts):
        rs = [r for r in results if r.dtype == dt]
        steps = list(dict.fromkeys(r.params["step"] for r in rs))
        for mode, hatch, dx in (("eager", None, -0.2), ("graph", "///", 0.2)):
            labelled = set()
            for i, s in enumerate(steps):
                r = find(rs, dt, s, mode)
                if r is None:
                    continue
                key = "cudnn" if s == "cuDNN" else "gpulab"
                name = f"{palette.PROVIDERS[key].label}, {mode}"
                ax.bar(i + dx, getattr(r, metric) or 0.0, width=0.4, color=palette.color(key), hatch=hatch,
                       edgecolor=palette.guide("faint"), label=None if name in labelled else name)  # fmt: skip
                labelled.add(name)
        cud = [r for r in rs if r.params["step"] == "cuDNN"]
        if cud:
            best = max(cud, key=lambda r: getattr(r, metric) or 0.0)
            ax.axhline(
                getattr(best, metric) or 0.0, color=palette.color("cudnn"), ls="--", lw=1, label="cuDNN (best mode)"
            )
        ax.set_xticks(range(len(steps)), [str(s) if s != "cuDNN" else "cuDNN" for s in steps])
        ax.set_xlabel(f"step ({', '.join(map(str, BEYOND_ARTICLE))}: beyond the article)")
        ax.set_ylabel({"tflops": "TFLOP/s", "ms": "ms"}.get(metric, metric))
        where = "interpreter, not GPU numbers" if rs[0].params.get("interpreter") else rs[0].device
        ax.set_title(f"{short_dtype(dt)}: LSTM L=4 H=512 B=64 T=100" if not rs[0].params.get("interpreter") else
                     f"{short_dtype(dt)} ({where})", fontsize=9)  # fmt: skip
        if metric == "ms":
            ax.set_yscale("log")
        palette.apply(ax)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_roofline(results, dtype="float16", mode="graph", ceilings=None, ax=None):
    """Place each step (and cuDNN) of one dtype and mode on the lesson 1 roofline (:func:`gpulab.roofline.plot`).

    The bytes are the per-step model (weights read at every cell), so the intensity is the same for every step:
    the steps differ only in height, how close they get to the roof.
    """
    results = bench.result_list("results", results)
    runtime.one_of("mode", mode, ("eager", "graph"))
    dtype = dtypes.name(dtype)
    runtime.one_of("dtype", dtype, ("float32", "float16", "bfloat16"))
    picked = [
        dataclasses.replace(r, case=str(step), provider="cuDNN" if step == "cuDNN" else "gpulab")
        for r in results
        if r.dtype == dtype and r.params.get("mode") == mode
        for step in [f"step {r.params['step']}" if r.params["step"] != "cuDNN" else "cuDNN"]
    ]
    return roofline.plot(picked, ceilings, ax=ax, title=f"LSTM ladder on the roofline ({short_dtype(dtype)}, {mode})")
