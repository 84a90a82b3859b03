"""Bad input to the course checks (budget, glossary, cross-references, hints, the texts they read) is refused with
an error naming the argument, what it got and what is allowed."""

import re

import pytest
from nbformat.v4 import new_notebook

from gpulab import lessons
from gpulab.course import book_check, budget, crossrefs, glossary, hints, texts
from gpulab.course.crossrefs import Reference

TERM = glossary.parse([{"term": "PTX", "uses": [r"\bPTX\b"], "meaning": "m", "lesson": "04"}])[0]
GOOD = {"term": "x", "uses": ["x"], "meaning": "m", "lesson": "04"}


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: budget.counts("notebooks/04_attention.ipynb"), TypeError, "nb must be a notebook"),
        (lambda: budget.split_listings(None), TypeError, "output must be"),
        (lambda: budget.listings(None), TypeError, "nb must be a notebook"),
        (lambda: budget.listings(new_notebook(), "x.ipynb"), TypeError, "executed must be"),
        (lambda: budget.problems("/nonexistent"), ValueError, "root=.*no notebooks/src"),
        (lambda: budget.problems(3), TypeError, "root must be"),
        (lambda: budget.table("/nonexistent"), ValueError, "root=.*no notebooks/src"),
        (lambda: texts.lessons("/nonexistent"), ValueError, "root=.*no notebooks/src"),
        (lambda: texts.solutions(None), TypeError, "root must be"),
        (lambda: texts.repo_root(5), TypeError, "root must be"),
        (lambda: book_check.redirect_target(None), TypeError, "html must be"),
        (lambda: texts.headings("notebooks/05_fused_rnn.ipynb"), TypeError, "nb must be a notebook"),
        (lambda: texts.markdown_cells(new_notebook()), TypeError, "text must be"),
        (lambda: texts.strip_markup(3), TypeError, "markdown must be"),
        (lambda: glossary.definition_forms("PTX", "**PTX**"), TypeError, "term must be"),
        (lambda: glossary.first_use(None, "PTX"), TypeError, "term must be"),
        (lambda: glossary.check(["PTX"]), TypeError, "terms must be"),
        (lambda: glossary.render("PTX"), TypeError, "terms must be"),
        (lambda: glossary.uses("wavefront"), TypeError, "term must be"),
        (lambda: glossary.page_problems("/nonexistent.md"), ValueError, "is not a file"),
        (lambda: glossary.write_page(None), ValueError, "is not a file"),
        (lambda: glossary.main(["--bogus"]), SystemExit, "usage"),
        (lambda: crossrefs.references(None), TypeError, "text must be"),
        (lambda: crossrefs.resolve("lesson 5", lessons.find("05"), {}), TypeError, "ref must be"),
        (lambda: crossrefs.resolve(Reference("lesson 5", "5", None), "05", {}), TypeError, "own must be"),
        (lambda: crossrefs.problems("/nonexistent"), ValueError, "root=.*no notebooks/src"),
        (lambda: crossrefs.command_and_path_problems(None), TypeError, "text must be"),
        (lambda: crossrefs.command_and_path_problems("x", "/nonexistent"), ValueError, "root=.*no notebooks/src"),
        (lambda: hints.hint_gives_answer("Task 1", "hint"), TypeError, "task must be"),
        (lambda: hints.hint_gives_answer(hints.Task("t", 0, "", (), ()), None), TypeError, "hint must be"),
        (lambda: hints.task_gives_code(None), TypeError, "task must be"),
        (lambda: hints.tasks("solutions/00_memory_hierarchy.ipynb"), TypeError, "nb must be"),
        (lambda: hints.code_lines("a = 1"), TypeError, "region_lines must be"),
        (lambda: hints.key_expressions("a = 1"), TypeError, "lines must be"),
        (lambda: hints.problems("/nonexistent"), ValueError, "root=.*no notebooks/src"),
    ],
)
def test_bad_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_budget_main_refuses_an_unknown_option(capsys):
    with pytest.raises(SystemExit):
        budget.main(["--bogus"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("entries", "error", "match"),
    [
        ("PTX", TypeError, "entries must be"),
        ([], TypeError, "entries must be"),
        ([{**GOOD, "extra": 1}], ValueError, "'x' has fields"),
        ([{**GOOD, "uses": "x"}], ValueError, "uses='x'"),
        ([{**GOOD, "uses": ["("]}], ValueError, "bad pattern"),
        ([{**GOOD, "uses": ["a*"]}], ValueError, "empty string"),
        ([{**GOOD, "lesson": 4}], ValueError, "lesson=4"),
        ([{**GOOD, "meaning": "a\nb"}], ValueError, "one line"),
        ([GOOD, GOOD], ValueError, "listed twice"),
    ],
)
def test_bad_glossary_entries_are_named(entries, error, match):
    with pytest.raises(error, match=re.escape(match)):
        glossary.parse(entries)


def test_the_terms_given_to_check_must_be_terms():
    assert glossary.check([TERM])[0].term is TERM
