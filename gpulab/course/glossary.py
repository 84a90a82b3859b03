"""The course's glossary (:data:`gpulab.course.glossary_terms.TERMS`) and the check that every term is defined at or
before its first use.

Each entry is a dict::

    {
        "term": "TMA",  # as the glossary page shows it
        "uses": [r"\bTMA\b"],  # regular expressions (Python ``re``) that find its uses in a lesson's prose
        "meaning": "Hopper's tensor memory accelerator: ...",  # one line
        "lesson": "05",  # the lesson (its id in gpulab/lessons.py) that defines it
    }

**Uses** are searched, in the order of :data:`gpulab.lessons.LESSONS`, in every markdown cell of every lesson
(HTML comments, tags and link targets removed; heading lines skipped, since a heading announces what the section
below it defines). **A definition** is a markdown cell where a use of the term appears in one of these forms:

- bold: ``**TMA**``, or a bold span of at most six words that contains a use (``**tensor memory accelerator
  (TMA)**``); a bold span that ends in ``.``, ``:``, ``?`` or ``!`` is a run-in heading, not a definition;
- italic, as a term is introduced: ``*reduce-scatter*``, ``_swizzle_``, an italic span of at most four words;
- followed by a parenthesised gloss of three words or more: ``PTX (NVIDIA's virtual instruction set)``,
  ```ldmatrix` (one instruction that loads ...)``; a parenthesis that only points elsewhere (``PTX (see ...)``,
  ``(lesson 4)``, ``(section 2)``) is no gloss;
- at the start of a parenthesis, followed by a comma or a colon and a gloss of two words or more:
  ``torch.matmul (cuBLAS, NVIDIA's matrix-multiply library)``, ``(DDP: PyTorch's DistributedDataParallel)``;
- the first column of a table row, or one of its parts split at ``/`` and ``,``: ``| L2 | one per chip | 50 MB |``.

A lesson's opening cell (the one with its ``# Lesson N`` title and "What you will learn") previews what the lesson
teaches: a use there counts only when the term is not defined later in that same lesson (a definition there, in one
of the forms above, counts like any other).

A definition in the same cell as the first use counts as before it. :func:`check` reports, for each term, the
lesson and cell of its first use and of its definition (or that it has none), and where the glossary says it is
defined; :func:`render` writes the glossary table of ``docs/glossary.md`` (which the website shows) from the data.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

from gpulab import lessons
from gpulab.course import sources, texts

__all__ = [
    "load",
    "parse",
    "definition_forms",
    "first_use",
    "check",
    "render",
    "uses",
    "page_problems",
    "write_page",
    "main",
]

PAGE = sources.ROOT / "docs" / "glossary.md"


@dataclasses.dataclass(frozen=True)
class Term:
    term: str
    uses: tuple[re.Pattern, ...]
    meaning: str
    lesson: str


@dataclasses.dataclass(frozen=True)
class Finding:
    term: Term
    use: tuple[int, str, int, str] | None  # (lesson's position, lesson id, cell, the text used) of the first use
    definition: tuple[int, str, int, str] | None  # the same for the first definition

    @property
    def ok(self) -> bool:
        return self.use is None or (self.definition is not None and self.definition[::2] <= self.use[::2])

    @property
    def in_its_lesson(self) -> bool:
        return self.definition is not None and self.definition[1] == self.term.lesson

    def report(self, slugs: dict[str, str]) -> str:
        t = self.term
        if self.use is None:
            return f"{t.term!r}: never used in a lesson; drop it from glossary_terms.py or fix its `uses` patterns"
        used = f"first used in lesson {self.use[1]} ({slugs[self.use[1]]}), cell {self.use[2]} ({self.use[3]!r})"
        if self.definition is None:
            later = "it is never defined"
        else:
            later = f"its definition comes later, in lesson {self.definition[1]}, cell {self.definition[2]}"
        return (
            f"{t.term!r}: {used}, but {later}; define it in that cell or before (as **{t.term}** or "
            f"'{t.term} (a gloss of three words or more)'), or reword the use (the glossary says lesson {t.lesson})"
        )


_KEYS = {"term", "uses", "meaning", "lesson"}


def parse(entries, where: str = "gpulab/course/glossary_terms.py") -> list[Term]:
    """The terms of a list of glossary ``entries`` (dicts); a ValueError naming the entry for a missing or bad field."""
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise TypeError(f"entries must be a non-empty list of dicts with keys {sorted(_KEYS)}, got {entries!r:.80}.")
    terms, seen = [], set()
    for n, entry in enumerate(entries, 1):
        name = entry.get("term", f"entry {n}")
        if set(entry) != _KEYS:
            raise ValueError(f"{where}: {name!r} has fields {sorted(entry)}; each term has exactly {sorted(_KEYS)}.")
        uses = entry["uses"]
        if not isinstance(uses, list) or not uses or not all(isinstance(u, str) and u for u in uses):
            raise ValueError(f"{where}: {name!r} uses={uses!r}; give a non-empty list of regular expressions (str).")
        if not isinstance(entry["lesson"], str) or not re.fullmatch(r"\d\d", entry["lesson"]):
            raise ValueError(f'{where}: {name!r} lesson={entry["lesson"]!r}; give a lesson id such as "04".')
        if not isinstance(entry["meaning"], str) or not entry["meaning"].strip() or "\n" in entry["meaning"]:
            raise ValueError(f"{where}: {name!r} meaning={entry['meaning']!r}; give its meaning in one line.")
        if name in seen:
            raise ValueError(f"{where}: {name!r} is listed twice; keep one entry.")
        seen.add(name)
        try:
            patterns = tuple(re.compile(u) for u in uses)
        except re.error as exc:
            raise ValueError(f"{where}: {name!r} has a bad pattern in uses={uses!r}: {exc}") from exc
        if any(p.search("") for p in patterns):
            raise ValueError(f"{where}: {name!r} uses={uses!r} has a pattern that matches the empty string.")
        terms.append(Term(name, patterns, entry["meaning"].strip(), entry["lesson"]))
    return terms


def load() -> list[Term]:
    """The course's terms, :data:`gpulab.course.glossary_terms.TERMS`."""
    from gpulab.course.glossary_terms import TERMS

    return parse(TERMS)


_HEADING_LINE = re.compile(r"^#{1,6}\s.*$", re.M)
_BOLD = re.compile(r"\*\*(.+?)\*\*", re.S)
_ITALIC = re.compile(r"(?<![*\w])([*_])(?![*_\s])([^*_\n]+?)\1(?![*\w])")
_POINTER = re.compile(r"(?i)^(?:see|cf\.|lesson|section|appendix|part|task|table|figure|fig\.|eq\.|\d)")


_ROW = re.compile(r"^\|([^|\n]+)\|.*\|\s*$", re.M)
_PREVIEW = re.compile(r"^#\s", re.M)


def _bold_defines(pattern: re.Pattern, span: str) -> bool:
    span = span.replace("`", "").strip()
    return len(span.split()) <= 6 and span[-1:] not in ".:?!" and bool(pattern.search(span))


def _row_defines(pattern: re.Pattern, first: str) -> bool:
    return any(pattern.fullmatch(part.strip()) for part in re.split(r"[/,]", first.replace("`", "")))


def _prose(markdown: str) -> str:
    return _HEADING_LINE.sub("", texts.strip_markup(markdown))


def _gloss_after(text: str, end: int) -> bool:
    rest = text[end:]
    m = re.match(r"`?\*{0,2}\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)", rest)
    return bool(m) and len(m[1].split()) >= 3 and not _POINTER.match(m[1].strip())


def _opens_gloss(text: str, start: int, end: int) -> bool:
    before, rest = text[:start], text[end:]
    return (
        bool(re.search(r"\(\s*`?$", before))
        and bool(re.match(r"`?\s*[,:]\s*[^()\s]+\s+[^()\s]+", rest))
        and not _POINTER.match(rest.lstrip("`,: "))
    )


def definition_forms(term: Term, markdown: str) -> list[str]:
    """The definitions of ``term`` in a markdown cell (the forms of the module docstring), as the text matched."""
    if not isinstance(term, Term):
        raise TypeError(f"term must be a glossary Term (glossary.load()), got {type(term).__name__}.")
    text = _prose(markdown)
    found = []
    for pattern in term.uses:
        found += [m[0] for m in _BOLD.finditer(text) if _bold_defines(pattern, m[1])]
        found += [
            m[0] for m in _ITALIC.finditer(text) if len(m[2].split()) <= 4 and pattern.search(m[2].replace("`", ""))
        ]
        found += [m[0] for m in pattern.finditer(text) if _gloss_after(text, m.end())]
        found += [m[0] for m in pattern.finditer(text) if _opens_gloss(text, m.start(), m.end())]
        found += [m[0].strip() for m in _ROW.finditer(text) if _row_defines(pattern, m[1])]
    return found


def first_use(term: Term, markdown: str) -> str | None:
    """The first use of ``term`` in a markdown cell's prose, or None."""
    if not isinstance(term, Term):
        raise TypeError(f"term must be a glossary Term (glossary.load()), got {type(term).__name__}.")
    text = _prose(markdown)
    hits = [m for p in term.uses if (m := p.search(text))]
    return min(hits, key=lambda m: m.start())[0] if hits else None


def check(terms=None, root=sources.ROOT) -> list[Finding]:
    """For each term (default: :func:`load`), its first use and first definition in the lessons, in syllabus order."""
    terms = load() if terms is None else terms
    if not isinstance(terms, list) or not all(isinstance(t, Term) for t in terms):
        raise TypeError(
            "terms must be a list of glossary Terms (glossary.load()) or None for the course's (glossary_terms.TERMS)."
        )
    cells = [
        (n, text.lesson.id, i, src, bool(_PREVIEW.search(src)))
        for n, text in enumerate(texts.lessons(root))
        for i, src in texts.markdown_cells(text)
    ]
    findings = []
    for term in terms:
        definition = next(
            ((n, lesson, i, forms[0]) for n, lesson, i, src, _ in cells if (forms := definition_forms(term, src))),
            None,
        )
        use = None
        for n, lesson, i, src, preview in cells:
            if (hit := first_use(term, src)) and not (preview and definition and lesson == definition[1]):
                use = (n, lesson, i, hit)
                break
        findings.append(Finding(term, use, definition))
    return findings


def uses(term: Term, root=sources.ROOT) -> list[tuple[str, int, str]]:
    """Every use of ``term`` in the lessons' markdown, as (lesson id, cell, the text used), in syllabus order."""
    if not isinstance(term, Term):
        raise TypeError(f"term must be a glossary Term (glossary.load()), got {type(term).__name__}.")
    out = []
    for text in texts.lessons(root):
        for i, src in texts.markdown_cells(text):
            prose = _prose(src)
            out += [(text.lesson.id, i, m[0]) for p in term.uses for m in p.finditer(prose)]
    return out


def render(terms=None) -> str:
    """The glossary table of ``docs/glossary.md``: one row per term, its meaning and the lesson that defines it."""
    terms = load() if terms is None else terms
    if not isinstance(terms, list) or not all(isinstance(t, Term) for t in terms):
        raise TypeError(
            "terms must be a list of glossary Terms (glossary.load()) or None for the course's (glossary_terms.TERMS)."
        )
    rows = ["| term | meaning |", "|---|---|"]
    rows += [
        f"| {t.term} | {t.meaning} (lesson {int(t.lesson)}) |" for t in sorted(terms, key=lambda t: t.term.lower())
    ]
    return "\n".join(rows) + "\n"


_TABLE = re.compile(r"(\*\*Glossary\.\*\*\s*\n\s*\n)(\|.*?\n)(?=\s*\n|\Z)", re.S)


def page_problems(page=PAGE, terms=None) -> list[str]:
    """Whether ``docs/glossary.md``'s table is the one :func:`render` writes from the terms."""
    text = _page(page).read_text()
    m = _TABLE.search(text)
    if m is None:
        return [f"{page}: no '**Glossary.**' paragraph followed by a table"]
    if m[2] != render(terms):
        return [
            f"{page}'s table differs from gpulab/course/glossary_terms.py; "
            "run `python -m gpulab.course.glossary --write`"
        ]
    return []


def _page(page) -> Path:
    if not isinstance(page, (str, Path)) or not Path(page).is_file():
        raise ValueError(f"page={page!r} is not a file; the glossary page is docs/glossary.md.")
    return Path(page)


def write_page(page=PAGE, terms=None) -> None:
    """Write :func:`render`'s table into ``page`` in place of its glossary table."""
    text = _page(page).read_text()
    m = _TABLE.search(text)
    if m is None:
        raise ValueError(f"page={str(page)!r} has no '**Glossary.**' paragraph followed by a table to replace.")
    Path(page).write_text(text[: m.start(2)] + render(terms) + text[m.end(2) :])


def main(argv=None) -> int:
    """``python -m gpulab.course.glossary``: each term's first use and definition; ``--write``: the page's table."""
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--write"]:
        write_page()
        return 0
    if argv:
        raise SystemExit(f"usage: python -m gpulab.course.glossary [--write]; got {argv!r}")
    slugs = {e.id: e.slug for e in lessons.LESSONS}
    bad = 0
    for f in check():
        if f.ok:
            d = f.definition
            print(
                f"ok   {f.term.term!r}: defined in lesson {d[1]}, cell {d[2]}" if d else f"ok   {f.term.term!r}: unused"
            )
        else:
            bad += 1
            print(f"FAIL {f.report(slugs)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
