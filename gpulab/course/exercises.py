"""Exercise notebooks are generated from solution notebooks, nbgrader-style.

In ``solutions/NN_name.ipynb`` a solution region is marked::

    ### BEGIN SOLUTION
    ...the answer...
    ### END SOLUTION

:func:`make_exercise` replaces each region in a code cell by ``# YOUR CODE HERE`` and ``raise NotImplementedError()``
at the region's indentation (in a markdown cell by ``YOUR ANSWER HERE``), and clears outputs, so
``exercises/NN_name.ipynb`` is never edited by hand. :func:`check_exercises` compares what is committed with what the
generator makes, by cell type and normalized source (not cell ids, which differ between runs).
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
MARKDOWN_STUB = ("YOUR ANSWER HERE",)


def strip_solutions(source: str, stub=CODE_STUB) -> str:
    """Replace every BEGIN/END SOLUTION region of ``source`` by ``stub`` lines at the region's indentation."""
    out, inside, indent = [], False, ""
    for number, line in enumerate(source.splitlines(), 1):
        marker = line.strip()
        if marker == BEGIN:
            if inside:
                raise ValueError(f"line {number}: '{BEGIN}' inside another solution region; close it with '{END}'.")
            inside, indent = True, line[: len(line) - len(line.lstrip())]
            out.extend(indent + s for s in stub)
        elif marker == END:
            if not inside:
                raise ValueError(f"line {number}: '{END}' without a '{BEGIN}' before it.")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"a '{BEGIN}' region is never closed; add a '{END}' line.")
    return "\n".join(out)


def has_solution(source: str) -> bool:
    return any(line.strip() == BEGIN for line in source.splitlines())


def make_exercise(nb):
    """The exercise version of a solution notebook (a new notebook; the argument is not changed)."""
    ex = copy.deepcopy(nb)
    for cell in ex.cells:
        if cell.cell_type == "code":
            cell.source = strip_solutions(cell.source)
            cell.outputs = []
            cell.execution_count = None
        elif cell.cell_type == "markdown" and has_solution(cell.source):
            cell.source = strip_solutions(cell.source, MARKDOWN_STUB)
        cell.metadata.pop("execution", None)
    ex.metadata.pop("widgets", None)
    return ex


def _normalized(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, "\n".join(line.rstrip() for line in c.source.strip().splitlines())) for c in nb.cells]


def generate_exercises(solutions="solutions", exercises="exercises") -> list[Path]:
    """Write ``exercises/X.ipynb`` for every ``solutions/X.ipynb``; returns the paths written."""
    written = []
    Path(exercises).mkdir(parents=True, exist_ok=True)
    for src in sorted(Path(solutions).glob("*.ipynb")):
        nb = nbformat.read(src, as_version=4)
        ex = make_exercise(nb)
        dst = Path(exercises) / src.name
        nbformat.write(ex, dst)
        written.append(dst)
    return written


def check_exercises(solutions="solutions", exercises="exercises") -> list[str]:
    """Problems found: exercises missing, extra, or different from what the generator makes. Empty means in sync."""
    problems = []
    sol = {p.name: p for p in Path(solutions).glob("*.ipynb")}
    ex = {p.name: p for p in Path(exercises).glob("*.ipynb")}
    for name in sorted(sol.keys() - ex.keys()):
        problems.append(f"exercises/{name} is missing; run `python -m gpulab exercises`.")
    for name in sorted(ex.keys() - sol.keys()):
        problems.append(f"exercises/{name} has no solutions/{name} to be generated from.")
    for name in sorted(sol.keys() & ex.keys()):
        want = _normalized(make_exercise(nbformat.read(sol[name], as_version=4)))
        have = _normalized(nbformat.read(ex[name], as_version=4))
        if want != have:
            first = next((i for i, (a, b) in enumerate(zip(want, have)) if a != b), min(len(want), len(have)))
            problems.append(
                f"exercises/{name} differs from what solutions/{name} generates (first at cell {first}); "
                "run `python -m gpulab exercises` instead of editing exercises by hand."
            )
        if not any(has_solution(c.source) for c in nbformat.read(sol[name], as_version=4).cells):
            problems.append(f"solutions/{name} has no '{BEGIN}' region: its exercise would have nothing to do.")
    return problems
