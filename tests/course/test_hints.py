"""No exercise hint states its answer in its first line, and no task text holds its solution's code
(gpulab.course.hints says how a task, its hints and its solution are read from a solution source)."""

import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from gpulab.course import hints, texts


@pytest.mark.parametrize("name", [t.name for t in texts.solutions()])
def test_no_hint_or_task_text_gives_the_solution(name):
    text = next(t for t in texts.solutions() if t.name == name)
    found = []
    for task in hints.tasks(text.nb):
        found += [
            f"{task.title}: hint {k} gives {g}"
            for k, h in enumerate(task.hints, 1)
            if (g := hints.hint_gives_answer(task, h))
        ]
        found += [f"{task.title}: the task text holds `{line}`" for line in hints.task_gives_code(task)]
    assert not found, f"{name}:\n  " + "\n  ".join(found)


TASK = """## Task 1: a copy

Write `copy(src)`; the code `offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)` is given away here.

<details><summary>Hint 1</summary>

Each program copies one block; the offsets come on the next line:
`offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)`.
</details>

<details><summary>Hint 2</summary>

The mask is `offs < n`, on both the load and the store: `mask = offs < n`.
</details>

<details><summary>Hint 3</summary>

The barrier is `yield`.
</details>
"""
SOLUTION = """def copy(src):
    ### BEGIN SOLUTION
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # the lanes
    mask = offs < n
    for t in range(T):
        yield
    return tl.load(src + offs, mask=mask)
    ### END SOLUTION
"""


def test_a_task_is_its_heading_markdown_hints_and_solution_lines():
    nb = new_notebook(cells=[new_markdown_cell("# Exercises"), new_markdown_cell(TASK), new_code_cell(SOLUTION)])
    (task,) = hints.tasks(nb)
    assert task.title == "Task 1: a copy" and task.cell == 1 and len(task.hints) == 3
    assert "<details>" not in task.text and "Hint" not in task.text
    want = ("offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "mask = offs < n", "for t in range(T):", "yield")
    assert task.solution == (*want, "return tl.load(src + offs, mask=mask)")
    assert hints.key_expressions(["mask = offs < n", "x += tl.sum(a * b, 1)", "return tl.load(src + offs)"]) == [
        "tl.sum(a*b,1)",
        "tl.load(src+offs)",
    ]


def test_a_first_line_with_the_answer_and_a_task_text_with_the_code_are_found():
    nb = new_notebook(cells=[new_markdown_cell(TASK), new_code_cell(SOLUTION)])
    (task,) = hints.tasks(nb)
    assert hints.hint_gives_answer(task, task.hints[0]) is None  # the code comes after the idea
    assert "`mask = offs < n`" in hints.hint_gives_answer(task, task.hints[1])
    assert "`yield`" in hints.hint_gives_answer(task, task.hints[2])
    assert hints.hint_gives_answer(task, "Loop with `for t in range(T):` over the steps.") is None
    assert hints.task_gives_code(task) == ["offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)"]
