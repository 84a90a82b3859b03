"""The lab-log lint: no docstring or comment of the package, and no line of the README or of ``docs/``, carries lab
history (run letters, issue numbers, session logs); that history lives in ``notes/*.md``."""

from pathlib import Path

import pytest

from gpulab.course import lablog

ROOT = Path(__file__).resolve().parents[2]

CAUGHT = [
    ("as run k showed", "run letter"),
    ("runs q, r and s", "run letter"),
    ("the race (run zz)", "parenthesised run"),
    ("run zze kept the forward", "run letter"),
    ("bwd run m found", "run letter"),
    ("tune c kept it", "run letter"),
    ("filed as issue 39", "issue number"),
    ("Issue 38's targets", "issue number"),
    ("see the issue for why", "bare issue"),
    ("the session log has it", "device log"),
    ("benchmarks/04/session-2026-11-25.log", "device log"),
    ("no record kept", "unrecorded"),
    ("history: the probe's run", "history banner"),
]

PASSED = [
    "runs T steps",
    "run the kernel",
    "runs in order",
    "one issue slot per cycle",
    "tune the block size",
    "the run's records",
    "run i-th",
    "a history of the kernel",
]


@pytest.mark.parametrize("phrase, kind", CAUGHT, ids=[p for p, _ in CAUGHT])
def test_patterns_catch_lab_log_phrases(phrase, kind):
    assert kind in {k for _, k, _ in lablog.text_findings(phrase)}
    assert lablog.findings(f"x = 1  # {phrase}\n"), "a comment is read"
    assert lablog.findings(f'"""{phrase}"""\n'), "a docstring is read"


@pytest.mark.parametrize("phrase", PASSED)
def test_patterns_pass_plain_prose(phrase):
    assert lablog.text_findings(phrase) == []


def test_code_is_not_read():
    assert lablog.findings("run_k = issue_38 = 1\n") == []


def test_bad_input_names_the_argument():
    with pytest.raises(TypeError, match="source must be a str"):
        lablog.findings(Path("x.py"))


def test_no_lab_log_in_package_readme_or_docs():
    files = sorted((ROOT / "gpulab").rglob("*.py")) + [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    hits = lablog.scan(files)
    assert not hits, "lab history belongs in notes/*.md:\n" + "\n".join(hits)
