"""The lessons say only what their records show: no measured figure typed into a lesson's markdown.

A measured number (a time, a rate, a percentage, a ratio) belongs in a code cell that computes it from the stored
records or from live outputs when the notebook runs, so it cannot drift from the data. Markdown may still state:
spec-sheet constants, targets, figures quoted from papers, and arithmetic of the lesson's own derivations — each on
:data:`ALLOWED` with its reason. :func:`figures` finds every number-with-unit in a notebook's markdown (LaTeX math
excluded), :func:`offenders` those not allowed; ``tests/course/test_prose.py`` runs it on every lesson.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

__all__ = ["UNITS", "ALLOWED", "figures", "offenders", "source_offenders", "ROUNDING_DIGITS", "machine_digits"]

UNITS = r"ms|µs|us|ns|TFLOP/s|GFLOP/s|GB/s|TB/s|%"
"""Units of a measured figure; a ratio is a number followed directly by x or × (no space: "4 × 64" is a shape)."""
_FIGURE = re.compile(rf"(?<![\w.$])(\d[\d,]*(?:\.\d+)?)(?:\s*(?:{UNITS})|[x×])(?![\w/])")
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]*\$", re.S)
_CODE = re.compile(r"`[^`\n]*`")

ALLOWED: dict[str, str] = {
    "3.35 TB/s": "H100 SXM HBM3 bandwidth, spec sheet",
    "989 TFLOP/s": "H100 SXM dense bf16/fp16 tensor-core rate, spec sheet",
    "50 GB/s": "400 Gb/s InfiniBand per GPU, a network spec (lesson 9's model)",
    "1.5x": "FSDP's bytes against DDP's, derived in lesson 9",
    "0.97×": "a target of lesson 1",
    "90%": "a target",
    "10×": "an order of magnitude in a derivation",
    "2x": "a factor in a derivation",
    "4x": "a factor in a derivation",
    "16x": "lesson 8 tests at 16x the training length (a design choice)",
    "40%": "the FlashRNN article's figure, quoted",
    "25%": "the FlashRNN article's figure, quoted",
    "0.6x": "the FlashRNN article's figure, quoted",
    "0.75x": "the FlashRNN article's figure, quoted",
    "100%": "a bound (accuracy, efficiency)",
    "3898 GFLOP/s": "the cuDNN 5 article's (Appleyard 2016) fastest step on an M40, quoted",
    "11.1x": "the cuDNN 5 article's (Appleyard 2016) speed-up over its ladder, quoted",
    "61%": "lesson 2: tile efficiency of a 200 x 300 output in 128 x 128 tiles, by its formula",
    "96%": "lesson 2: tile efficiency of a 1536 x 1472 output in 128 x 128 tiles, by its formula",
    "10%": "a threshold of a target (pairs whose times differ by more)",
    "5%": "a threshold of a design rule (lesson 2's microbatch rule)",
    "9%": "lesson 2: a last wave of 12 programs on 132 SMs, an example",
    "95%": "a target: exercise 6's grader asks for 95% of held-out final states right",
    "620 TFLOP/s": "the target for version 3 at bf16, d=128, N = 16k, non-causal, quoted",
}
"""Figures markdown may state, with the reason; anything else must be computed when the notebook runs."""


def figures(source: str) -> list[str]:
    """Every number-with-unit in markdown ``source``, outside LaTeX math and inline code."""
    text = _CODE.sub("", _MATH.sub("", source))
    return [m.group(0) for m in _FIGURE.finditer(text)]


def offenders(path, allowed=None) -> list[tuple[int, str]]:
    """``(cell index, figure)`` for every figure in the notebook's markdown cells that is not allowed."""
    allowed = ALLOWED if allowed is None else allowed
    nb = nbformat.read(Path(path), as_version=4)
    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            out += [(i, f) for f in figures(cell.source) if f not in allowed]
    return out


def source_offenders(path, allowed=None) -> list[tuple[int, str]]:
    """``(markdown cell index, figure)`` for every figure not allowed in the markdown of a jupytext source (a lesson's
    or a solution's ``notebooks/src/[solutions/]NN_x.py``: the exercises' task texts are the solutions' markdown)."""
    from gpulab.course.claims import markdown_cells

    if not isinstance(path, str | Path) or Path(path).suffix != ".py" or not Path(path).is_file():
        raise ValueError(f"path must be an existing jupytext source (notebooks/src/.../NN_x.py), got {path!r}.")
    allowed = ALLOWED if allowed is None else allowed
    cells = markdown_cells(Path(path).read_text())
    return [(i, f) for i, cell in enumerate(cells) for f in figures(cell) if f not in allowed]


ROUNDING_DIGITS = re.compile(r"(?<![\w.])(?:\d(?:\.\d+)?e-\d+|0\.000\d*)(?![\w.])", re.I)
"""A small float as printed (1e-07, 2.3e-06, 0.000123): its digits are the machine's float rounding."""
_BOUND = re.compile(r"(?:<|<=|≤|>|>=|≥|tol(?:erance)?|[ar]tol=|eps(?:ilon)?|threshold)\s*$", re.I)
_IGNORED = ("NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP")


def machine_digits(path) -> list[tuple[int, str, str]]:
    """``(cell index, number, its line)`` for small floats in outputs nbval compares (cells not marked
    ``# NBVAL_IGNORE_OUTPUT``) of the notebook at ``path``.

    Such digits differ between machines (1e-07 here, 2e-07 on CI), so a compared cell prints the class
    ("equal up to rounding (< 1e-5)") and an ignored cell the digits. A number right after a comparison or a
    tolerance word ("< 1e-6", "tol 1e-3") is a bound the lesson chose, not a result, and passes.
    """
    if not isinstance(path, str | Path) or Path(path).suffix != ".ipynb" or not Path(path).is_file():
        raise ValueError(f"path must be an existing executed notebook (.ipynb), got {path!r}.")
    nb = nbformat.read(Path(path), as_version=4)
    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or any(mark in cell.source for mark in _IGNORED):
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            for text in (output.get("text", ""), data.get("text/plain", ""), data.get("text/markdown", "")):
                text = "".join(text) if isinstance(text, list) else str(text)
                for line in text.splitlines():
                    out += [
                        (i, m.group(0), line.strip())
                        for m in ROUNDING_DIGITS.finditer(line)
                        if not _BOUND.search(line[: m.start()])
                    ]
    return out
