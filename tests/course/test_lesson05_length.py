"""Lesson 5 reads as a lesson: its body (the markdown before the first appendix) stays short, and the optimization
log (stall samples, SASS counts, what was tried and dropped, long tables) lives in appendices at the end."""

import re
from pathlib import Path

import nbformat

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "05_fused_rnn.ipynb"
MAX_BODY_WORDS = 1600
APPENDIX = re.compile(r"^#+\s+Appendix\b", re.M)


def body_words(nb) -> tuple[int, bool]:
    """Words of markdown before the first heading that starts with 'Appendix', and whether there is one."""
    words = 0
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        heading = APPENDIX.search(cell.source)
        if heading:
            return words + len(cell.source[: heading.start()].split()), True
        words += len(cell.source.split())
    return words, False


def test_lesson05_body_is_short_and_the_log_is_in_appendices():
    words, has_appendix = body_words(nbformat.read(NOTEBOOK, as_version=4))
    assert has_appendix, f"{NOTEBOOK.name}: no '## Appendix ...' heading; the optimization log belongs in appendices"
    assert words <= MAX_BODY_WORDS, (
        f"{NOTEBOOK.name}: the lesson body has {words} words of markdown (at most {MAX_BODY_WORDS}); move long "
        "explanations, profiler discussion and big tables to the appendices"
    )


def test_the_count_stops_at_the_first_appendix_heading():
    from nbformat.v4 import new_markdown_cell, new_notebook

    nb = new_notebook(cells=[new_markdown_cell("one two three"), new_markdown_cell("four\n\n## Appendix A. x y z")])
    assert body_words(nb) == (4, True)
    assert body_words(new_notebook(cells=[new_markdown_cell("## Appendices are not here")])) == (5, False)
