"""The README's generated blocks say what the records say."""

import pytest

from gpulab.course import readme


def test_generated_readme_blocks_match_the_records():
    stale = readme.update(check=True)
    assert not stale, f"README blocks {stale} differ from the records: run `python -m gpulab.course.readme`"


def test_every_section_renders_and_names_its_records():
    for name in readme.SECTIONS:
        assert "benchmarks/" in readme.render(name)


def test_a_changed_record_is_caught(tmp_path):
    text = (readme.ROOT / "docs" / "results.md").read_text().replace("| lstm | ddp | 2 |", "| lstm | ddp | 3 |", 1)
    path = tmp_path / "README.md"
    path.write_text(text)
    assert readme.update(path, check=True, page_dir=readme.ROOT / "docs") == ["lesson09"]


def test_unknown_section_is_refused():
    with pytest.raises(ValueError, match="name"):
        readme.render("lesson99")


def test_readme_prose_states_no_measured_figure_outside_generated_blocks():
    assert readme.prose_figures() == [], "a measured figure typed into the README: generate it from its record"


def test_a_typed_figure_in_readme_prose_is_caught(tmp_path):
    path = tmp_path / "README.md"
    path.write_text("The kernel takes 2.08 ms.\n<!-- generated: lesson04 -->\n0.5 ms\n<!-- end generated -->\n")
    assert readme.prose_figures(path) == ["2.08 ms"]


def test_readme_is_at_most_200_lines_with_one_results_table():
    text = (readme.ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200, "README.md is over 200 lines: move detail to a docs/ page"
    assert text.count("<!-- generated: ") == 1 and "<!-- generated: results -->" in text
    assert "make test" in text


def test_results_table_links_every_lesson_and_names_its_record():
    from gpulab import lessons

    table = readme.render("results")
    for lesson in lessons.LESSONS:
        line = next(row for row in table.splitlines() if f"]({lesson.notebook})" in row)
        assert "benchmarks/" in line and lesson.id in line
