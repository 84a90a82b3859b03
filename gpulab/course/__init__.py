"""Course machinery: exercise notebooks generated from solutions, notebook execution, and grading."""

from gpulab.course.exercises import check_exercises, generate_exercises, make_exercise, strip_solutions
from gpulab.course.notebooks import execute_notebook, grade_notebook, grader_cells

__all__ = [
    "strip_solutions",
    "make_exercise",
    "generate_exercises",
    "check_exercises",
    "execute_notebook",
    "grade_notebook",
    "grader_cells",
]
