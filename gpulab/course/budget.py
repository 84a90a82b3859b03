"""A lesson's budget: the markdown words and code-cell lines a learner reads, and the source listings it prints.

Counting (read from the lesson's source, never executed):

- **words**: the whitespace-separated words of every markdown cell (``len(cell.split())``, headings, formulas and
  tables included);
- **code lines**: the lines of every code cell (``len(cell.splitlines())``, blank lines and comments included);
- **listings**: a code cell that prints a source (``inspect.getsource``, ``listing.show``, ``listing.diff``) is found
  in the executed notebook (``notebooks/<slug>.ipynb``, by its source text) and its printed output is cut into
  listings: a listing starts at a line at column 0 that opens a definition (``@decorator``, ``def``, ``class``) or a
  diff (``--- name``) and runs while its lines are blank, indented, decorator-continued or diff lines; its length is
  its lines without trailing blanks and without :func:`gpulab.course.listing.show`'s fold note. A
  ``listing.show(..., max_lines=N)`` with N over the bound is a problem before any output is read.

``python -m gpulab.course.budget`` prints each lesson's counts and its longest listing against the bounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

import nbformat

from gpulab.course import sources, texts

__all__ = ["MAX_WORDS", "MAX_CODE_LINES", "MAX_LISTING_LINES", "counts", "split_listings"]
__all__ += ["listings", "problems", "table", "main"]

MAX_WORDS = 3000
MAX_CODE_LINES = 450
MAX_LISTING_LINES = 60


@dataclasses.dataclass(frozen=True)
class Counts:
    words: int  # markdown words
    code_lines: int  # lines of code cells
    cells: int


@dataclasses.dataclass(frozen=True)
class Listing:
    cell: int  # the code cell's index in the lesson
    first: str  # the listing's first line (names what it prints)
    lines: int


def counts(nb) -> Counts:
    """The markdown words, code-cell lines and cells of notebook ``nb``."""
    if not isinstance(nb, nbformat.NotebookNode):
        raise TypeError(f"nb must be a notebook (nbformat.NotebookNode), got {type(nb).__name__}.")
    words = sum(len(c.source.split()) for c in nb.cells if c.cell_type == "markdown")
    lines = sum(len(c.source.splitlines()) for c in nb.cells if c.cell_type == "code")
    return Counts(words, lines, len(nb.cells))


_PRINTS_SOURCE = re.compile(r"\bgetsource\(|\blisting\.(?:show|diff)\(|\bsource_lines\(")
_MAX_LINES = re.compile(r"\blisting\.show\([^\n]*?max_lines\s*=\s*(\d+)")
_OPENS = re.compile(r"^(?:@|def |async def |class |--- )")
_FOLD = re.compile(r"^\s+# \.\.\. \d+ more lines:")


def split_listings(output: str) -> list[tuple[str, int]]:
    """The source listings in a cell's printed ``output``, as (first line, number of lines)."""
    if not isinstance(output, str):
        raise TypeError(f"output must be a cell's printed text (str), got {type(output).__name__}.")
    found: list[list[str]] = []
    current: list[str] | None = None
    for line in output.splitlines():
        diff = current is not None and current[0].startswith("--- ")
        if current is not None and (
            not line.strip()
            or line[0] in " \t)]}"
            or (diff and line[0] in "+-@")
            or (current[-1].startswith("@") and _OPENS.match(line))
        ):
            current.append(line)
            continue
        current = [line] if _OPENS.match(line) else None
        if current is not None:
            found.append(current)
    out = []
    for block in found:
        body = [x for x in block if not _FOLD.match(x)]
        while body and not body[-1].strip():
            body.pop()
        first = next((x for x in block if x.startswith(("def ", "async def ", "class ", "--- "))), block[0])
        out.append((first, len(body)))
    return out


def _printed(cell) -> str:
    return "".join(
        o.get("text", "") if o.output_type == "stream" else o.get("data", {}).get("text/plain", "")
        for o in cell.get("outputs", [])
    )


def listings(nb, executed=None) -> tuple[list[Listing], list[str]]:
    """The listings printed by ``nb``'s cells (their output read from ``executed``, the executed notebook), and the
    problems found on the way (a ``max_lines`` over the bound, a listing cell missing from ``executed``)."""
    if not isinstance(nb, nbformat.NotebookNode):
        raise TypeError(f"nb must be a notebook (nbformat.NotebookNode), got {type(nb).__name__}.")
    if executed is not None and not isinstance(executed, nbformat.NotebookNode):
        raise TypeError(f"executed must be an executed notebook or None, got {type(executed).__name__}.")
    ran = {}
    for cell in executed.cells if executed is not None else []:
        if cell.cell_type == "code":
            ran.setdefault(cell.source, cell)
    found, problems = [], []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not _PRINTS_SOURCE.search(cell.source):
            continue
        for m in _MAX_LINES.finditer(cell.source):
            if int(m[1]) > MAX_LISTING_LINES:
                problems.append(f"cell {i}: listing.show(..., max_lines={m[1]}) prints over {MAX_LISTING_LINES} lines")
        if cell.source not in ran or not ran[cell.source].get("outputs"):
            problems.append(f"cell {i} prints a source but the executed notebook has no output for it; execute it")
            continue
        found += [Listing(i, first, n) for first, n in split_listings(_printed(ran[cell.source]))]
    return found, problems


def problems(root=sources.ROOT) -> dict[str, list[str]]:
    """Lesson id -> what is over the budget (empty lists: within it)."""
    out = {}
    for text in texts.lessons(root):
        c = counts(text.nb)
        bad = []
        if c.words > MAX_WORDS:
            bad.append(f"{c.words} markdown words (at most {MAX_WORDS})")
        if c.code_lines > MAX_CODE_LINES:
            bad.append(f"{c.code_lines} lines of code cells (at most {MAX_CODE_LINES})")
        executed = Path(root) / text.lesson.notebook
        found, issues = listings(text.nb, nbformat.read(executed, as_version=4) if executed.exists() else None)
        bad += issues
        bad += [
            f"cell {x.cell} prints a {x.lines}-line listing (at most {MAX_LISTING_LINES}): {x.first.strip()!r}; "
            "fold it with listing.show(fn, max_lines=...) or print a listing.diff"
            for x in found
            if x.lines > MAX_LISTING_LINES
        ]
        out[text.lesson.id] = bad
    return out


def table(root=sources.ROOT) -> str:
    """Each lesson's words, code lines, cells and longest listing, against the bounds."""
    rows = [f"{'lesson':24s} {'words':>6s} {'code':>5s} {'cells':>5s} {'listing':>7s}"]
    for text in texts.lessons(root):
        c = counts(text.nb)
        executed = Path(root) / text.lesson.notebook
        found, _ = listings(text.nb, nbformat.read(executed, as_version=4) if executed.exists() else None)
        longest = max((x.lines for x in found), default=0)
        over = c.words > MAX_WORDS or c.code_lines > MAX_CODE_LINES or longest > MAX_LISTING_LINES
        rows.append(
            f"{text.lesson.slug:24s} {c.words:6d} {c.code_lines:5d} {c.cells:5d} {longest:7d}{'  OVER' if over else ''}"
        )
    rows.append(f"{'bound':24s} {MAX_WORDS:6d} {MAX_CODE_LINES:5d} {'':5s} {MAX_LISTING_LINES:7d}")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpulab.course.budget", description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(sources.ROOT), help="the repository (default: this one)")
    args = parser.parse_args(argv)
    print(table(args.root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
