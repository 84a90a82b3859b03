"""Lesson and solution notebooks built from their text sources (jupytext's percent format).

Each notebook has one source: ``notebooks/src/NN_name.py`` for ``notebooks/NN_name.ipynb`` and
``notebooks/src/solutions/NN_name.py`` for ``solutions/NN_name.ipynb``. A source is plain Python that ruff lints;
``# %%`` starts a code cell, ``# %% [markdown]`` a markdown cell (its lines commented), and a solution cell (one with
``### BEGIN SOLUTION``) carries ``tags=["solution"]``.

:func:`build` writes a notebook from its source the way ``jupytext --to ipynb --update`` does: cells whose source did
not change keep their outputs and execution counts, so rebuilding an executed notebook from an unchanged source
changes nothing; cell ids are ``cell-00``, ``cell-01``, ... so that a diff shows which cell moved. Executing is a
separate step (:func:`gpulab.course.notebooks.execute_notebook`); ``python -m gpulab notebooks`` does both.
"""

from __future__ import annotations

import re
from pathlib import Path

import jupytext
import nbformat

from gpulab.course.exercises import has_solution

__all__ = ["ROOT", "SOURCES", "FORMAT", "source_paths", "notebook_for", "source_for", "read_source", "notebook_text"]
__all__ += ["build", "roundtrip_problems", "stale_notebooks", "SOLUTION_TAG", "add_nbgrader_metadata"]

ROOT = Path(__file__).resolve().parents[2]  # the repository
SOURCES = ROOT / "notebooks" / "src"
FORMAT = "py:percent"
SOLUTION_TAG = "solution"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
# the header of a source names no jupytext version, so that a jupytext upgrade does not rewrite every source
HEADER_OPTIONS = {
    "cell_metadata_filter": "tags,-all",
    "notebook_metadata_filter": "-jupytext.text_representation.jupytext_version,"
    "-jupytext.text_representation.format_version",
}


def source_paths(root: Path = ROOT) -> list[tuple[Path, Path]]:
    """Every (source, notebook) pair: the lessons, then the solutions."""
    src = Path(root) / "notebooks" / "src"
    pairs = [(p, Path(root) / "notebooks" / f"{p.stem}.ipynb") for p in sorted(src.glob("[0-9][0-9]_*.py"))]
    pairs += [(p, Path(root) / "solutions" / f"{p.stem}.ipynb") for p in sorted(src.glob("solutions/[0-9][0-9]_*.py"))]
    return pairs


def notebook_for(source) -> Path:
    """The notebook built from ``source`` (a ValueError for a path that is not a lesson or solution source)."""
    source = Path(source).resolve()
    for src, nb in source_paths(_root_of(source)):
        if src.resolve() == source:
            return nb
    raise ValueError(f"source={str(source)!r} is not a lesson or solution source (notebooks/src/[solutions/]NN_x.py).")


def source_for(notebook) -> Path:
    """The source of ``notebook`` (a ValueError naming the notebook when it has none)."""
    notebook = Path(notebook).resolve()
    for src, nb in source_paths(_root_of(notebook)):
        if nb.resolve() == notebook:
            return src
    raise ValueError(
        f"notebook={str(notebook)!r} has no source in notebooks/src/ (lessons: notebooks/src/NN_x.py, solutions: "
        "notebooks/src/solutions/NN_x.py); notebooks are built from their sources, never edited by hand."
    )


def _root_of(path: Path) -> Path:
    for parent in path.parents:
        if (parent / "notebooks" / "src").is_dir():
            return parent
    return ROOT


def read_source(source) -> nbformat.NotebookNode:
    """The notebook that ``source`` describes, without outputs, with stable cell ids and the kernel named."""
    nb = jupytext.read(Path(source), fmt=FORMAT)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"
    add_nbgrader_metadata(nb)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata.setdefault("language_info", {"name": "python"})
    return nb


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def add_nbgrader_metadata(nb) -> None:
    """nbgrader's cell metadata, derived from the cells themselves, so that ``solutions/`` laid out as an nbgrader
    course (``source/<lesson>/``) runs through ``nbgrader generate_assignment`` and ``autograde``: a code cell with a
    ``### BEGIN SOLUTION`` region is an answer cell; a ``# GRADER: title`` cell is a locked, graded test cell worth
    one point (``grade_id``: the title); a markdown answer (a region in markdown) is graded by hand."""
    answers = 0
    for cell in nb.cells:
        first = cell.source.lstrip().splitlines()[0] if cell.source.strip() else ""
        meta = None
        if cell.cell_type == "code" and first.startswith("# GRADER:"):
            meta = {"grade": True, "solution": False, "locked": True, "points": 1,
                    "grade_id": _slug(first.removeprefix("# GRADER:"))}  # fmt: skip
        elif has_solution(cell.source):
            answers += 1
            meta = {"grade": cell.cell_type == "markdown", "solution": True, "locked": False,
                    "grade_id": f"answer-{answers}"}  # fmt: skip
            if cell.cell_type == "markdown":
                meta["points"] = 1
        if meta is not None:
            cell.metadata["nbgrader"] = {**meta, "schema_version": 3, "task": False}


def notebook_text(notebook) -> str:
    """``notebook`` as its percent-format source text (what :func:`read_source` reads back)."""
    nb = nbformat.read(notebook, as_version=4) if isinstance(notebook, (str, Path)) else notebook
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        tags = [t for t in cell.metadata.get("tags", []) if t != SOLUTION_TAG]
        if cell.cell_type == "code" and has_solution(cell.source):
            tags.append(SOLUTION_TAG)
        cell.metadata = {"tags": tags} if tags else {}
    nb.metadata = {"jupytext": dict(HEADER_OPTIONS), "kernelspec": dict(KERNELSPEC)}
    return jupytext.writes(nb, fmt=FORMAT)


def build(source, notebook=None) -> bool:
    """Write ``notebook`` (default: :func:`notebook_for`) from ``source``, keeping the outputs of unchanged cells;
    returns whether the file changed."""
    notebook = Path(notebook) if notebook is not None else notebook_for(source)
    nb = read_source(source)
    before = notebook.read_text() if notebook.exists() else None
    if before is not None:  # keep what unchanged cells had: outputs, execution counts, metadata (by exact source)
        old = nbformat.reads(before, as_version=4)
        unused: dict[tuple[str, str], list] = {}
        for cell in old.cells:
            unused.setdefault((cell.cell_type, cell.source), []).append(cell)
        for cell in nb.cells:
            match = unused.get((cell.cell_type, cell.source))
            if match:
                was = match.pop(0)
                cell.metadata = {**was.metadata, **cell.metadata}  # the source's tags win
                if cell.cell_type == "code":
                    cell.outputs, cell.execution_count = was.outputs, was.execution_count
        nb.metadata = {**old.metadata, "kernelspec": nb.metadata["kernelspec"]}
    nb.metadata.pop("jupytext", None)  # the source's header options are not the notebook's
    for cell in nb.cells:  # nor its blank lines: a new cell is written as a rebuilt one will be
        cell.metadata.pop("lines_to_next_cell", None)
    text = nbformat.writes(nb) + "\n"
    if text == before:
        return False
    notebook.parent.mkdir(parents=True, exist_ok=True)
    notebook.write_text(text)
    return True


def roundtrip_problems(source) -> list[str]:
    """What ``jupytext --test`` would report: the source read as a notebook and written back must be the same text."""
    text = Path(source).read_text()
    again = jupytext.writes(jupytext.reads(text, fmt=FORMAT), fmt=FORMAT)
    if again == text:
        return []
    a, b = text.splitlines(), again.splitlines()
    line = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return [f"{Path(source).name}: py -> ipynb -> py differs first at line {line + 1}"]


def stale_notebooks(root: Path = ROOT) -> list[str]:
    """Notebooks whose cells (type and source) differ from their source's, or that are missing: hand-edited
    notebooks and sources changed without a rebuild both show here."""
    problems = []
    for src, nb_path in source_paths(root):
        if not nb_path.exists():
            problems.append(f"{nb_path.relative_to(root)} is missing; run `python -m gpulab notebooks {src.name}`.")
            continue
        want = [(c.cell_type, c.source) for c in read_source(src).cells]
        have = [(c.cell_type, c.source) for c in nbformat.read(nb_path, as_version=4).cells]
        if want != have:
            first = next((i for i, (a, b) in enumerate(zip(want, have)) if a != b), min(len(want), len(have)))
            problems.append(
                f"{nb_path.relative_to(root)} differs from {src.relative_to(root)} at cell {first}; rebuild it with "
                f"`python -m gpulab notebooks {src.relative_to(root)}` (never edit a notebook by hand)."
            )
    return problems
