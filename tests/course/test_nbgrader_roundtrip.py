"""solutions/ as an nbgrader course, unchanged (issue 23): ``nbgrader generate_assignment`` releases the exercise and
``nbgrader autograde`` scores a solved submission full marks on every auto-graded cell and an unsolved one zero.
Lesson 0 only (the fastest notebook); the metadata of every lesson is checked in test_sources.py."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.course import sources

pytest.importorskip("nbgrader")
pytestmark = pytest.mark.pipeline  # the course step of `make test`, beside nbval (about 25 s on two cores)

LESSON = "00_memory_hierarchy"


def _nbgrader(root, *args):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # alembic
    run = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args], cwd=root, capture_output=True, text=True, timeout=300, env=env
    )
    assert run.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"


def test_solutions_run_through_nbgrader(tmp_path):
    from nbgrader.api import Gradebook

    root = tmp_path / "course"
    (root / "source" / LESSON).mkdir(parents=True)
    shutil.copy(sources.ROOT / "solutions" / f"{LESSON}.ipynb", root / "source" / LESSON)
    (root / "nbgrader_config.py").write_text(
        'c = get_config()\nc.CourseDirectory.course_id = "gpulab"\nc.Execute.timeout = 300\n'
    )
    _nbgrader(root, "generate_assignment", LESSON, "--force")
    released = root / "release" / LESSON / f"{LESSON}.ipynb"
    assert "raise NotImplementedError()" in released.read_text()  # nbgrader's own ClearSolutions ran
    for student, notebook in (("solved", root / "source" / LESSON / f"{LESSON}.ipynb"), ("unsolved", released)):
        (root / "submitted" / student / LESSON).mkdir(parents=True)
        shutil.copy(notebook, root / "submitted" / student / LESSON)
        _nbgrader(root, "db", "student", "add", student)
    _nbgrader(root, "autograde", LESSON, "--force")
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        solved, unsolved = (gb.find_submission(LESSON, s) for s in ("solved", "unsolved"))
        auto = sum(c.max_score for c in gb.find_notebook(LESSON, LESSON).grade_cells if c.cell_type == "code")
        assert solved.code_score == auto > 0, (solved.code_score, auto)
        assert unsolved.code_score == 0
