"""Build a lesson or solution notebook from a list of (kind, source) cells; see README.md in this folder."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[2]  # the repository


def build(cells, path):
    """Write ``cells`` (("md" | "code", source) pairs) to ``path`` as an unexecuted notebook with stable cell ids."""
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for kind, src in cells:
        src = src.strip("\n")
        nb.cells.append(new_markdown_cell(src) if kind == "md" else new_code_cell(src))
    for i, c in enumerate(nb.cells):
        c["id"] = f"cell-{i:02d}"
    nbformat.write(nb, str(path))
