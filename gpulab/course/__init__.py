"""Course machinery: exercise notebooks generated from solutions (:mod:`.exercises`), notebook execution and
grading (:mod:`.notebooks`), and the graders the exercise notebooks call (:mod:`.grading` and one module per lesson).

Submodules are imported on first use, so the graders work where Jupyter's packages (nbformat, nbclient) are not
installed, e.g. on a bare GPU machine running `pytest -m gpu`.
"""

import importlib

_EXPORTS = {
    "check_regions": "exercises",
    "make_exercise": "exercises",
    "generate_exercises": "exercises",
    "check_exercises": "exercises",
    "execute_notebook": "notebooks",
    "grade_notebook": "notebooks",
    "grader_cells": "notebooks",
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"gpulab.course.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'gpulab.course' has no attribute {name!r}")
