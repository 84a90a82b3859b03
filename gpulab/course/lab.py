"""``make lab``: the course in JupyterLab, started one way for a learner, an instructor, root in a container and CI.

- The lab opens ``notebooks/`` from the repository root, where ``nbgrader_config.py`` lives: the course as nbgrader
  sees it (course id ``gpulab``; its source is ``solutions/``, laid out as ``course/source/NN_name/NN_name.ipynb`` by
  :func:`link_course`, links to the solution notebooks, as ``tests/course/test_nbgrader_roundtrip.py`` lays it out).
- Run as root (a container, CI), JupyterLab refuses to start without ``--allow-root``; :func:`lab_command` adds it
  only there.

``python -m gpulab.course.lab [ARGS...]`` links the course and runs the lab in the foreground (extra ARGS go to
``jupyter lab``, e.g. ``--no-browser --port 8889``). ``tests/course/test_lab.py`` starts it headless and checks it
through its REST API.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gpulab import lessons

ROOT = Path(__file__).resolve().parents[2]
COURSE = ROOT / "course"
"""nbgrader's course root (``CourseDirectory.root`` in ``nbgrader_config.py``): ``source/``, ``release/``,
``submitted/`` and the gradebook; not in git."""

__all__ = ["lab_command", "link_course", "ROOT", "COURSE"]


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def lab_command(*extra: str, as_root: bool | None = None) -> list[str]:
    """The ``jupyter lab`` command line of ``make lab``: this Python's JupyterLab on ``notebooks/``, plus
    ``--allow-root`` where the user is root (``as_root`` None: the current user), plus ``extra`` arguments."""
    if as_root is None:
        as_root = _is_root()
    if not isinstance(as_root, bool):
        raise TypeError(f"as_root must be True, False or None (the current user), got {as_root!r}.")
    bad = [a for a in extra if not isinstance(a, str)]
    if bad:
        raise TypeError(f"extra arguments to jupyter lab must be strings, got {bad[0]!r}.")
    return [sys.executable, "-m", "jupyter", "lab", str(ROOT / "notebooks"), *(["--allow-root"] * as_root), *extra]


def link_course(course: Path = COURSE) -> list[Path]:
    """Lay ``solutions/`` out as nbgrader's source tree: ``course/source/NN_name/NN_name.ipynb``, each a link to
    ``solutions/NN_name.ipynb`` (nbgrader copies what a link points to), and under each old assignment id
    (:data:`gpulab.lessons.RENAMED`: ``course/source/04_attention/``) the notebooks of the lessons it became.
    Returns the links; safe to run again."""
    if not isinstance(course, (str, os.PathLike)):
        raise TypeError(f"course must be a folder path (str or Path), got {type(course).__name__} {course!r}.")
    course = Path(course)
    links = []
    for nb in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        link = course / "source" / nb.stem / nb.name
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(nb, link.parent))
        links.append(link)
    for old, new_ids in lessons.RENAMED.items():  # an old assignment id releases the lesson(s) it became
        for entry in (e for e in lessons.LESSONS if e.id in new_ids):
            nb = ROOT / entry.solution
            if not nb.exists():
                continue
            link = course / "source" / old / nb.name
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(os.path.relpath(nb, link.parent))
            links.append(link)
    return links


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    link_course()
    os.chdir(ROOT)  # nbgrader reads nbgrader_config.py from the working directory
    command = lab_command(*argv)
    os.execv(command[0], command)
    return 0  # pragma: no cover - execv does not return


if __name__ == "__main__":
    sys.exit(main())
