"""Every "lesson N", "lesson N, section X", "section Nb" and "Appendix X" in the lessons, exercises and solutions
names a lesson, section or benchmark part that exists (gpulab.course.crossrefs)."""

import pytest

from gpulab import lessons
from gpulab.course import crossrefs
from gpulab.course.crossrefs import Reference


def test_every_cross_reference_resolves():
    found = crossrefs.problems()
    assert not found, "cross-references that resolve to nothing:\n  " + "\n  ".join(found)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("as lesson 5 builds", [Reference("lesson 5", "5", None)]),
        ("lessons 4 and 6", [Reference("lessons 4 and 6", "4", None), Reference("lessons 4 and 6", "6", None)]),
        ("lesson 5's section 6b", [Reference("lesson 5's section 6b", "5", "6b")]),
        ("(lesson 5, part 2)", [Reference("lesson 5, part 2", "5", "part 2")]),
        ("lesson 4, part hopper", [Reference("lesson 4, part hopper", "4", "part hopper")]),
        ("section 2 of lesson 3", [Reference("section 2 of lesson 3", "3", "2")]),
        ("Sections 8-9", [Reference("Sections 8-9", None, "8"), Reference("Sections 8-9", None, "9")]),
        ("see Appendix D", [Reference("Appendix D", None, "appendix D")]),
        (
            "lesson 5 (Appendix D there)",
            [Reference("lesson 5", "5", None), Reference("Appendix D there", "5", "appendix D")],
        ),
        ("section 3.2 of the paper; Section 4 of the guide", []),
    ],
)
def test_references_are_found(text, want):
    assert crossrefs.references(text) == want


SECTIONS = {"05": {"1", "6b", "appendix D"}}
OWN = lessons.find("05")


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        (Reference("lesson 5", "5", None), None),
        (Reference("section 6b", None, "6b"), None),
        (Reference("Appendix D", None, "appendix D"), None),
        (Reference("section 4b", None, "4b"), "has no section 4b (its sections: 1, 6b, appendix D)"),
        (Reference("lesson 5, part 2", "5", "part 2"), "has no part '2'"),
        (Reference("lesson 5, part hopper", "5", "part hopper"), None),
        (Reference("lesson 42", "42", None), "there is no lesson 42"),
    ],
)
def test_resolve(ref, why):
    got = crossrefs.resolve(ref, OWN, SECTIONS)
    assert got == why if why is None else why in got


def test_headings_name_numbered_sections_and_appendices():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    from gpulab.course import texts

    cells = [
        new_markdown_cell("# Lesson 5 — x\n\n## 1. One\n### 6b. Two\n## Appendix D. Three\n## Notes"),
        new_code_cell("## 9. no"),
    ]
    assert texts.headings(new_notebook(cells=cells)) == {"1", "6b", "appendix D"}


def test_bench_commands_and_lesson_paths_name_what_exists():
    good = "python -m gpulab bench 04, python -m gpulab bench 07 split, notebooks/00_memory_hierarchy.ipynb"
    assert crossrefs.command_and_path_problems(good + ", benchmarks/00_memory_hierarchy/") == []
    bad = "python -m gpulab bench 42; python -m gpulab bench 07 hopper; exercises/99_none.ipynb"
    found = crossrefs.command_and_path_problems(bad)
    assert len(found) == 3 and "no lesson 42" in found[0] and "no part 'hopper'" in found[1] and "no such" in found[2]
