"""Each lesson within the budget a learner finishes: markdown words, code-cell lines, and no printed source listing
over the bound (gpulab.course.budget counts them from the sources and the executed notebooks)."""

import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from gpulab import lessons
from gpulab.course import budget


@pytest.fixture(scope="module")
def problems():
    return budget.problems()


@pytest.mark.parametrize("lesson", [entry.id for entry in lessons.LESSONS], ids=[e.slug for e in lessons.LESSONS])
def test_lesson_within_budget(lesson, problems):
    assert not problems[lesson], f"lesson {lesson} is over its budget:\n  " + "\n  ".join(problems[lesson])


def test_counts_words_of_markdown_and_lines_of_code():
    nb = new_notebook(cells=[new_markdown_cell("## 1. Two words\n\nand $x$ more"), new_code_cell("a = 1\n\n# c")])
    assert budget.counts(nb) == budget.Counts(words=7, code_lines=3, cells=2)


def test_listings_are_cut_at_each_definition_and_the_fold_note_is_not_counted():
    out = "@triton.jit\ndef k(x,\n      y):\n    a = 1\n\n    b = 2\n\n"
    out += "def g():\n    pass\n    # ... 9 more lines: x\n\n"
    out += "n  | ms\n1  | 2\n--- v1\n+++ v2\n@@ v1 line 1 @@\n-a\n+b\n c\n"
    assert budget.split_listings(out) == [("def k(x,", 6), ("def g():", 2), ("--- v1", 6)]


def test_a_long_listing_and_a_large_max_lines_are_problems():
    long = "def f():\n" + "    x = 1\n" * 70
    code = "listing.show(f, max_lines=80)"
    nb = new_notebook(cells=[new_code_cell(code)])
    ran = new_notebook(cells=[new_code_cell(code, outputs=[new_output("stream", name="stdout", text=long)])])
    found, problems = budget.listings(nb, ran)
    assert found == [budget.Listing(0, "def f():", 71)]
    assert problems == ["cell 0: listing.show(..., max_lines=80) prints over 60 lines"]
    _, problems = budget.listings(nb, None)
    assert "no output" in problems[-1]


def test_the_command_prints_every_lesson(capsys):
    assert budget.main([]) == 0
    out = capsys.readouterr().out
    assert all(entry.slug in out for entry in lessons.LESSONS) and "bound" in out
