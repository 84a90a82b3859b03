"""The course's lab-log patterns: phrases that belong in a lab notes page (``notes/*.md``), not in the package's
docstrings and comments, the README or the ``docs/`` pages.

A docstring keeps the decision and one pointer to its notes page; which run showed it, when, and what was tried
first are history. :data:`PATTERNS` names each kind of phrase; :func:`findings` lists the matches in a Python
source's comments and string literals (``tokenize``), :func:`text_findings` in a Markdown file's lines.
``tests/course/test_lablog.py`` runs both on ``gpulab/**/*.py``, ``README.md`` and ``docs/*.md``.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

__all__ = ["PATTERNS", "PATTERN", "findings", "text_findings", "scan"]

PATTERNS: dict[str, str] = {
    "run letter": r"\b(?:runs?|bwd[ ]run|tune) (?:zz[a-e]?|[b-hj-z])\b(?!['-])",
    "parenthesised run": r"\((?:run|tune)[ ][a-z]{1,3}\)",
    "issue number": r"(?i:\bissues?[ ]#?\d+)",
    "bare issue": r"(?i:\bthe[ ]issue(?![ ]slot)\b)",
    "device log": r"(?i:\bsession[ -]logs?\b|\bsession-\d{4}-\d\d-\d\d)",
    "unrecorded": r"(?i:\bno[ ]record[ ](?:was[ ])?kept\b)",
    "history banner": r"(?i:^[\s#\"'(`]*history:[ ])",
}
"""Kind of phrase -> its regular expression, matched per line. Run letters are lower case (a capital after
"runs" is a size, as in the runs over T steps); the other kinds ignore case. ``tests/course/test_lablog.py``
lists the phrases each kind must catch."""

PATTERN = re.compile("|".join(f"(?:{p})" for p in PATTERNS.values()), re.MULTILINE)
"""All of :data:`PATTERNS` as one expression."""

_ONE = {name: re.compile(p, re.MULTILINE) for name, p in PATTERNS.items()}


def _matches(text: str) -> list[tuple[str, str]]:
    """(kind, matched text) for every lab-log phrase in ``text``."""
    return [(name, m.group(0)) for name, rx in _ONE.items() for m in rx.finditer(text)]


def findings(source: str) -> list[tuple[int, str, str]]:
    """(line, kind, phrase) for each lab-log phrase in a Python source's comments and string literals.

    Code outside strings and comments is not read (a variable named ``run_k`` is not a phrase)."""
    if not isinstance(source, str):
        raise TypeError(f"findings: source must be a str (a module's text), got {type(source).__name__}")
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.STRING) or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            for line_offset, line in enumerate(tok.string.splitlines()):
                found += [(tok.start[0] + line_offset, kind, text) for kind, text in _matches(line)]
    return found


def text_findings(text: str) -> list[tuple[int, str, str]]:
    """(line, kind, phrase) for each lab-log phrase in a Markdown text, line by line."""
    if not isinstance(text, str):
        raise TypeError(f"text_findings: text must be a str (a page's text), got {type(text).__name__}")
    return [(n, kind, phrase) for n, line in enumerate(text.splitlines(), 1) for kind, phrase in _matches(line)]


def scan(paths) -> list[str]:
    """'path:line: kind: phrase' for each lab-log phrase in ``paths`` (``.py`` files by :func:`findings`, others by
    :func:`text_findings`)."""
    if isinstance(paths, (str, Path)) or not hasattr(paths, "__iter__"):
        raise TypeError(f"scan: paths must be a list of file paths, got {type(paths).__name__}; pass [path] for one.")
    out = []
    for path in map(Path, paths):
        if not path.is_file():
            raise FileNotFoundError(f"scan: {str(path)!r} is not a file; pass the paths of .py or .md files.")
        text = path.read_text(encoding="utf-8")
        found = findings(text) if path.suffix == ".py" else text_findings(text)
        out += [f"{path}:{line}: {kind}: {phrase!r}" for line, kind, phrase in found]
    return out


if __name__ == "__main__":
    import sys

    hits = scan(sys.argv[1:])
    print("\n".join(hits) or "no lab-log phrase")
    sys.exit(1 if hits else 0)
