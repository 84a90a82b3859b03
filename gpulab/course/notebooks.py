"""Executing notebooks (to commit them executed) and grading exercise notebooks.

Grader cells are code cells whose first line is ``# GRADER: <what it checks>``. A grader calls a ``gpulab`` check on
fresh random inputs and *raises* when the work is wrong: printing is not enough, since only an exception fails
nbval (for solutions), the CI exercise check (every grader must fail on the unsolved exercise) and `gpulab grade`.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat

GRADER_MARK = "# GRADER"


def grader_cells(nb) -> list[int]:
    """Indices of the grader cells of a notebook."""
    return [
        i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.lstrip().upper().startswith(GRADER_MARK)
    ]


def grader_title(cell) -> str:
    first = cell.source.lstrip().splitlines()[0]
    return first.split(":", 1)[1].strip() if ":" in first else first


def execute_notebook(path, allow_errors=False, timeout=600, write=False):
    """Run a notebook top to bottom in a fresh kernel (in the notebook's folder); return the executed notebook."""
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    env_hash = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = "0"  # stable set/dict orders in printed output
    try:
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            allow_errors=allow_errors,
            resources={"metadata": {"path": str(path.parent.resolve())}},
        )
        client.execute()
    finally:
        if env_hash is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = env_hash
    if write:
        for cell in nb.cells:
            cell.metadata.pop("execution", None)
        nbformat.write(nb, path)
    return nb


def _error_text(cell) -> str | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return f"{out.get('ename')}: {out.get('evalue')}"
    return None


def grade_notebook(path, timeout=600) -> list[tuple[str, bool, str]]:
    """Run an exercise notebook and report each grader: (title, passed, message)."""
    nb = execute_notebook(path, allow_errors=True, timeout=timeout)
    report = []
    for i in grader_cells(nb):
        cell = nb.cells[i]
        err = _error_text(cell)
        report.append((grader_title(cell), err is None, err or "passed"))
    return report
