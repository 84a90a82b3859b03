"""Exercise notebooks are generated from solution notebooks by nbgrader's own ``ClearSolutions``.

In ``solutions/NN_name.ipynb`` a solution region is marked::

    ### BEGIN SOLUTION
    ...the answer...
    ### END SOLUTION

:func:`make_exercise` checks every region first (:func:`check_regions`: nbgrader drops a stray END line silently),
then runs nbgrader's ``ClearSolutions``, which replaces each region in a code cell by ``# YOUR CODE HERE`` and
``raise NotImplementedError()`` at the region's indentation (in a markdown cell by ``YOUR ANSWER HERE``), and clears
outputs, so ``exercises/NN_name.ipynb`` is never edited by hand and is exactly what ``nbgrader generate_assignment``
releases. :func:`check_exercises` compares what is committed with what the generator makes, by cell type and
normalized source (not cell ids, which differ between runs).
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat

from gpulab import runtime

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
MARKDOWN_STUB = ("YOUR ANSWER HERE",)


def check_regions(source: str, where: str = "") -> None:
    """A ValueError naming the line unless every BEGIN/END SOLUTION region of ``source`` is well formed: no region
    inside another, none left open, no END without its BEGIN."""
    if not isinstance(source, str):
        raise runtime.ArgumentTypeError(f"source must be a cell's text (str), got {type(source).__name__}.")
    at = f"{where}, " if where else ""
    inside = False
    for number, line in enumerate(source.splitlines(), 1):
        marker = line.strip()
        if marker == BEGIN:
            if inside:
                raise ValueError(f"{at}line {number}: '{BEGIN}' inside another solution region; close it with '{END}'.")
            inside = True
        elif marker == END:
            if not inside:
                raise ValueError(f"{at}line {number}: '{END}' without a '{BEGIN}' before it.")
            inside = False
    if inside:
        raise ValueError(f"{at}a '{BEGIN}' region is never closed; add a '{END}' line.")


def has_solution(source: str) -> bool:
    return any(line.strip() == BEGIN for line in source.splitlines())


def make_exercise(nb):
    """The exercise version of a solution notebook (a new notebook; the argument is not changed), made by nbgrader's
    ``ClearSolutions`` after :func:`check_regions` on every cell."""
    try:
        from nbgrader.preprocessors import ClearSolutions
    except ImportError as exc:
        raise ImportError(
            "generating exercises runs nbgrader's ClearSolutions: install the grading extra, "
            "`pip install -e '.[grading]'` (make setup does)."
        ) from exc
    if not isinstance(nb, nbformat.NotebookNode):
        raise runtime.ArgumentTypeError(f"nb must be a notebook (nbformat.read), got {type(nb).__name__}.")
    for index, cell in enumerate(nb.cells):
        check_regions(cell.source, f"cell {index}")
    clear = ClearSolutions(
        code_stub={"python": "\n".join(CODE_STUB)}, text_stub=MARKDOWN_STUB[0], enforce_metadata=False
    )
    ex, _ = clear.preprocess(copy.deepcopy(nb), {"language": "python"})
    for cell in ex.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
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
