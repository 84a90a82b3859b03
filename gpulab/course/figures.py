"""Every stored GPU figure, redrawn from its records: the PNG beside a record file is a picture of that file.

    python -m gpulab.course.figures [NAME ...] [--check]

A lesson's benchmark draws its figure when it runs on a GPU and stores it beside the records
(``benchmarks/<lesson>/<gpu>-<date>.png``). When a plot function changes (a fixed axis, a label that overprinted),
the stored picture would keep the old drawing; :func:`regenerate` draws each figure again from the newest records of
its folder with the lesson's own plot function, on any machine. :data:`FIGURES` names the folders and their plots;
``tests/course/test_figures.py`` checks that every one renders from the stored records.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from gpulab import bench

__all__ = ["FIGURES", "figure", "regenerate", "main"]

ROOT = Path(__file__).resolve().parents[2]


def _memory(recs):
    from gpulab.memory.plots import plot_sweep  # noqa: PLC0415 - each lesson's modules load only for its figure

    return plot_sweep(recs).figure


def _roofline(recs):
    from gpulab import roofline  # noqa: PLC0415

    gpu = recs[0].device or "h100"
    return roofline.plot(recs, roofline.ceilings(gpu, root=None)).figure


def _codesign(recs):
    from gpulab import codesign  # noqa: PLC0415
    from gpulab.codesign.plot import plot_benchmark  # noqa: PLC0415

    return plot_benchmark(recs, codesign.pair_agreement(recs))


def _ladder(recs):
    from gpulab.rnn.ladder.plot import plot_ladder  # noqa: PLC0415

    return plot_ladder(recs)


def _attention(recs):
    from gpulab.attention.measure.report import plot  # noqa: PLC0415

    return plot(recs)


def _hopper(recs):
    from gpulab.attention.measure.report import plot_grid  # noqa: PLC0415

    return plot_grid(recs).figure


def _fused_rnn(recs):
    from gpulab.rnn.fused.measure.benchmark import plot_results  # noqa: PLC0415

    return plot_results(recs)


def _versions(recs):
    from gpulab.rnn.fused.measure.versions_report import plot_versions  # noqa: PLC0415

    return plot_versions(recs).figure


def _tasks(recs):
    from gpulab.tasks.results import figure  # noqa: PLC0415

    return figure(recs)


def _search(recs):
    from gpulab.tasks.spread import figure  # noqa: PLC0415

    return figure(recs)


def _throughput(recs):
    from gpulab.tasks.results import plot_throughput  # noqa: PLC0415

    return plot_throughput(recs).figure


FIGURES: dict[str, Callable] = {
    "00_memory_hierarchy": _memory,
    "01_roofline": _roofline,
    "02_codesign": _codesign,
    "03_cudnn_ladder": _ladder,
    "04_flash_attention": _attention,
    "05_attention_hopper/hopper": _hopper,
    "06_fused_rnn": _fused_rnn,
    "06_fused_rnn/versions": _versions,
    "08_state_tracking": _tasks,
    "08_state_tracking/throughput": _throughput,
    "08_state_tracking/search": _search,
}
"""Folder under ``benchmarks/`` -> the function drawing its newest records (the lesson's own plot)."""


def figure(name: str, root=None):
    """``(record path, matplotlib figure)`` of folder ``name`` (a key of :data:`FIGURES`), from its newest records."""
    if name not in FIGURES:
        raise ValueError(f"name={name!r} is not a stored figure; known: {sorted(FIGURES)}.")
    folder = Path(root) if root is not None else ROOT / "benchmarks"
    path = bench.newest(folder / name)
    recs = bench.load(name.split("/")[0], path=path)
    if not recs:
        raise ValueError(f"{path} holds no records to draw.")
    return path, FIGURES[name](recs)


def regenerate(names=None, root=None, dpi: int = 120) -> list[Path]:
    """Draw every figure of ``names`` (default: all of :data:`FIGURES`) from its newest records and store it beside
    them (same name, ``.png``); returns the paths written."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = list(FIGURES) if names is None else list(names)
    out = []
    for name in names:
        path, fig = figure(name, root)
        png = path.with_suffix(".png")
        fig.savefig(png, dpi=dpi, bbox_inches="tight")
        plt.close(fig)
        out.append(png)
    return out


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for png in regenerate(argv or None):
        print(f"wrote {png.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
