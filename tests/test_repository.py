"""The course as a whole: every lesson has its notebook, solution and exercise; the README lists them and names the
test command that CI runs; notebooks are committed executed, top to bottom."""

from pathlib import Path

import nbformat
import pytest

from gpulab import lessons

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))


@pytest.mark.parametrize("lesson", lessons.LESSONS, ids=lambda entry: entry.slug)
def test_lesson_has_its_files(lesson):
    for rel in (lesson.notebook, lesson.solution, lesson.exercise):
        assert (ROOT / rel).exists(), f"lesson {lesson.id} is registered but {rel} does not exist"
    readme = (ROOT / "README.md").read_text()
    assert lesson.notebook in readme and lesson.exercise in readme, f"README's syllabus lacks lesson {lesson.id}"


def test_every_notebook_is_a_registered_lesson():
    slugs = {entry.slug for entry in lessons.LESSONS}
    for path in NOTEBOOKS + sorted((ROOT / "exercises").glob("*.ipynb")):
        assert path.stem in slugs, f"{path.relative_to(ROOT)} is not in gpulab/lessons.py"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make test" in ci
    makefile = (ROOT / "Makefile").read_text()
    test_recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "--nbval notebooks/" in test_recipe and "tests/" in test_recipe and "ruff" in makefile


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_notebook_committed_executed_in_order(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    counts = [c.execution_count for c in code]
    assert None not in counts, f"{path.name}: some cells were never executed; run `make notebooks`"
    assert counts == list(range(1, len(code) + 1)), f"{path.name}: cells executed out of order; run `make notebooks`"
    assert not any(o.output_type == "error" for c in code for o in c.outputs), f"{path.name} has an error output"


@pytest.mark.parametrize("lesson", lessons.LESSONS, ids=lambda entry: entry.slug)
def test_lesson_notebook_states_goals_and_shows_figures(lesson):
    nb = nbformat.read(ROOT / lesson.notebook, as_version=4)
    assert "What you will learn" in nb.cells[0].source, "a lesson opens with its learning goals"
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2, "a lesson shows its ideas and its measurements as figures"
