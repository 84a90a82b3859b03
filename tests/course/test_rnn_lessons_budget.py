"""Lessons 6 and 7 (the fused RNN on one SM, one head over many SMs) stay within a learner's budget: at most 2,600
words of markdown and 400 lines of code cells each, no printed source listing over 60 lines, and no lab-log phrase
(gpulab.course.lablog) in a markdown cell or a printed output."""

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from gpulab.course import lablog

ROOT = Path(__file__).resolve().parents[2]
LESSONS = ("06_fused_rnn", "07_rnn_split")
MAX_WORDS, MAX_CODE_LINES, MAX_LISTING = 2600, 400, 60


def budget(nb) -> tuple[int, int]:
    """(words of markdown, lines of code cells) of a notebook."""
    words = sum(len(c.source.split()) for c in nb.cells if c.cell_type == "markdown")
    lines = sum(len(c.source.splitlines()) for c in nb.cells if c.cell_type == "code")
    return words, lines


def longest_listing(nb) -> int:
    """Lines of the longest printed output that starts like a Python source listing (``def`` or a decorator)."""
    longest = 0
    for c in nb.cells:
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            for block in o.get("text", "").split("\n\n"):
                if block.lstrip().startswith(("def ", "@triton.jit", "@gluon.jit", "class ")):
                    longest = max(longest, len(block.splitlines()))
    return longest


def lab_log(nb) -> list:
    texts = []
    for c in nb.cells:
        if c.cell_type == "markdown":
            texts.append(c.source)
        else:
            texts += [o.get("text", "") + o.get("data", {}).get("text/markdown", "") for o in c.get("outputs", [])]
    return [f for t in texts for f in lablog.text_findings(t)]


@pytest.mark.parametrize("slug", LESSONS)
def test_lesson_is_within_budget(slug):
    nb = nbformat.read(ROOT / "notebooks" / f"{slug}.ipynb", as_version=4)
    words, lines = budget(nb)
    assert words <= MAX_WORDS, f"{slug}: {words} words of markdown (at most {MAX_WORDS}); move history to notes/"
    assert lines <= MAX_CODE_LINES, f"{slug}: {lines} lines of code cells (at most {MAX_CODE_LINES})"
    assert longest_listing(nb) <= MAX_LISTING, f"{slug}: a printed listing over {MAX_LISTING} lines; fold it"
    assert not lab_log(nb), f"{slug}: lab-log phrases {lab_log(nb)[:5]}; the history belongs in notes/rnn-*.md"


def test_the_counts_see_what_they_count():
    listing = "def f():\n" + "    x = 1\n" * 70
    nb = new_notebook(cells=[new_markdown_cell("one two three, runs zz to zze"),
                             new_code_cell("a = 1\nb = 2", outputs=[new_output("stream", text=listing)])])  # fmt: skip
    assert budget(nb) == (7, 2)
    assert longest_listing(nb) == 71
    assert [kind for _, kind, _ in lab_log(nb)] == ["run letter"]
