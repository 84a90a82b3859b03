"""The lab-log lint (gpulab.course.lablog) refuses bad input with an error naming the argument."""

import pytest

from gpulab.course import lablog

BAD = [
    ("findings-not-str", lambda: lablog.findings(3), TypeError, "findings: source must be a str"),
    ("text_findings-none", lambda: lablog.text_findings(None), TypeError, "text_findings: text must be a str"),
    ("scan-one-str", lambda: lablog.scan("README.md"), TypeError, r"paths must be a list .* pass \[path\]"),
    ("scan-int", lambda: lablog.scan(5), TypeError, "paths must be a list of file paths, got int"),
    ("scan-missing-file", lambda: lablog.scan(["/nonexistent/x.py"]), FileNotFoundError, "is not a file"),
]


@pytest.mark.parametrize("call, error, word", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_lablog_refuses_bad_input(call, error, word):
    with pytest.raises(error, match=word):
        call()
