"""Sources in reading size (gpulab.course.listing): folded after max_lines, versions as diffs."""

import pytest

from gpulab.course import listing


def _old(x):
    y = x + 1  # one
    return y * 2


def _new(x):
    y = x + 1  # one, with a new comment
    z = y - 3
    return z * 2


def test_show_folds_long_sources_and_says_where_the_rest_is(capsys):
    listing.show(_new, max_lines=2)
    out = capsys.readouterr().out
    assert "def _new(x):" in out and "return z * 2" not in out
    assert "# ... 2 more lines: " in out and "test_listing.py:" in out and "(4 lines in all)" in out


def test_diff_shows_code_changes_not_comment_changes(capsys):
    listing.diff(_old, _new, context=0)
    out = capsys.readouterr().out.splitlines()
    changed = [line for line in out if line[:1] in ("+", "-") and not line.startswith(("---", "+++"))]
    assert changed == ["-    return y * 2", "+    z = y - 3", "+    return z * 2"]


def test_listing_bad_input():
    with pytest.raises(TypeError, match="fn must be a function"):
        listing.show(3)
    with pytest.raises(ValueError, match="max_lines"):
        listing.show(_old, max_lines=0)
    with pytest.raises(ValueError, match="context"):
        listing.diff(_old, _new, context=-1)
