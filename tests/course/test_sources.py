"""Lesson and solution notebooks are built from jupytext percent sources (gpulab.course.sources): every source
round-trips byte for byte, every committed notebook has exactly its source's cells, ids are stable, solution cells
are tagged, and a changed source or a hand-edited notebook is caught."""

import shutil

import nbformat
import pytest

from gpulab.course import sources

PAIRS = sources.source_paths()


def test_every_lesson_and_solution_has_a_source():
    notebooks = {p.name for p in (sources.ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    notebooks |= {f"solutions/{p.name}" for p in (sources.ROOT / "solutions").glob("*.ipynb")}
    built = {nb.name if nb.parent.name == "notebooks" else f"solutions/{nb.name}" for _, nb in PAIRS}
    assert notebooks == built and len(PAIRS) >= 16


@pytest.mark.parametrize("source", [s for s, _ in PAIRS], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_source_round_trips_byte_for_byte(source):
    assert sources.roundtrip_problems(source) == []


def test_source_headers_name_no_jupytext_version():
    for source, notebook in PAIRS:
        header = source.read_text().split("\n# ---\n", 1)[0]
        assert "jupytext_version" not in header.replace("text_representation.jupytext_version", ""), source.name
        assert "format_version:" not in header, source.name
        assert sources.notebook_text(notebook).split("\n# ---\n", 1)[0] == header, source.name


def test_a_new_notebook_is_built_as_a_rebuild_writes_it(tmp_path):
    source, nb = tmp_path / "01_x.py", tmp_path / "01_x.ipynb"
    source.write_text("# %%\ndef f():\n    return 1\n\n\n# %% [markdown]\n# two blank lines above\n")
    assert any("lines_to_next_cell" in c.metadata for c in sources.read_source(source).cells)
    assert sources.build(source, nb) and not sources.build(source, nb)
    meta = nbformat.read(nb, as_version=4)
    assert "jupytext" not in meta.metadata and not any("lines_to_next_cell" in c.metadata for c in meta.cells)


def test_committed_notebooks_have_their_sources_cells():
    assert sources.stale_notebooks() == []


def test_cell_ids_and_solution_tags():
    for _, notebook in PAIRS:
        nb = nbformat.read(notebook, as_version=4)
        assert [c.id for c in nb.cells] == [f"cell-{i:02d}" for i in range(len(nb.cells))], notebook.name
        for c in nb.cells:
            solution = c.cell_type == "code" and "### BEGIN SOLUTION" in c.source
            assert (sources.SOLUTION_TAG in c.metadata.get("tags", [])) == solution, f"{notebook.name} {c.id}"
    assert any("solution" in s.read_text() for s, nb in PAIRS if nb.parent.name == "solutions")


def test_a_changed_source_is_caught_and_rebuilt_keeping_other_outputs(tmp_path):
    source, notebook = next((s, n) for s, n in PAIRS if n.parent.name == "notebooks")
    root = tmp_path / "repo"
    (root / "notebooks" / "src").mkdir(parents=True)
    (root / "solutions").mkdir()
    src = root / "notebooks" / "src" / source.name
    nb = root / "notebooks" / notebook.name
    shutil.copy(source, src)
    shutil.copy(notebook, nb)
    assert sources.stale_notebooks(root) == [] and not sources.build(src, nb)
    text = src.read_text()
    marker = "# %%\n"
    cut = text.rindex(marker)  # the last code cell: add a line to it
    src.write_text(text[: cut + len(marker)] + "x_added_here = 1\n" + text[cut + len(marker) :])
    problems = sources.stale_notebooks(root)
    assert len(problems) == 1 and "differs from" in problems[0] and "python -m gpulab notebooks" in problems[0]
    before = nbformat.read(nb, as_version=4)
    assert sources.build(src, nb) and sources.stale_notebooks(root) == []
    after = nbformat.read(nb, as_version=4)
    kept = [
        a.outputs == b.outputs
        for a, b in zip(after.cells, before.cells)
        if a.cell_type == "code" and a.source == b.source
    ]
    assert kept and all(kept)  # unchanged cells keep their outputs
    changed = [a for a in after.cells if "x_added_here" in a.source]
    assert len(changed) == 1 and changed[0].outputs == []


def test_paths_that_are_not_sources_are_refused(tmp_path):
    with pytest.raises(ValueError, match="source="):
        sources.notebook_for(tmp_path / "x.py")
    with pytest.raises(ValueError, match="never edited by hand"):
        sources.source_for(tmp_path / "x.ipynb")


def test_solution_notebooks_carry_nbgrader_metadata():
    for _, notebook in PAIRS:
        if notebook.parent.name != "solutions":
            continue
        cells = nbformat.read(notebook, as_version=4).cells
        meta = [c.metadata.get("nbgrader") for c in cells]
        ids = [m["grade_id"] for m in meta if m]
        assert len(ids) == len(set(ids)), f"{notebook.name}: grade_id repeated {ids}"
        for c, m in zip(cells, meta):
            if c.cell_type == "code" and c.source.startswith("# GRADER:"):
                assert m and m["grade"] and m["locked"] and m["points"] == 1 and not m["solution"], (
                    notebook.name,
                    c.id,
                )
            elif "### BEGIN SOLUTION" in c.source:
                assert m and m["solution"] and not m["locked"], (notebook.name, c.id)
            else:
                assert m is None, (notebook.name, c.id)
        assert any(m and m["grade"] for m in meta), f"{notebook.name} has no graded cell"


def test_nbgrader_metadata_follows_the_cells():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb = new_notebook(
        cells=[
            new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
            new_code_cell("# GRADER: my first task\ngrade(f)"),
            new_markdown_cell("### BEGIN SOLUTION\nbecause\n### END SOLUTION"),
            new_code_cell("x = 1"),
        ]
    )
    sources.add_nbgrader_metadata(nb)
    got = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    assert got == ["answer-1", "my-first-task", "answer-2", None]
    assert nb.cells[2].metadata["nbgrader"]["grade"] and nb.cells[2].metadata["nbgrader"]["points"] == 1
