"""Cross-references in the lessons, exercises and solutions, and whether each resolves.

A reference is found anywhere in a cell's text (markdown, code comments and strings) in these forms:

- ``lesson 5``, ``lessons 4 and 5``, ``lessons 4-6``: each must be a lesson of :data:`gpulab.lessons.LESSONS`;
- ``lesson 5's section 6b``, ``lesson 5, section 2``, ``section 2 of lesson 5``, ``lesson 5's appendix D``: the
  lesson must have that section, i.e. a heading ``## 6b. Title`` (``## Appendix D. Title``) in its source;
- ``section 4b``, ``sections 10-12``, ``Appendix D`` with no lesson named: a section of the lesson the text belongs
  to (a solution's lesson is the lesson of the same name); ``Appendix D there``: of the lesson named last before it
  in the same cell;
- ``lesson 4, part hopper``, ``lesson 4's part hopper``: a named part of the lesson's benchmark (``Lesson.parts``);
  a numbered part (``lesson 5, part 2``) never resolves: lessons have numbered *sections*.

- ``python -m gpulab bench 05 hopper``: the lesson, and the part of its benchmark;
- a path of a lesson's files, ``notebooks/04_x.ipynb``, ``exercises/...``, ``solutions/...``,
  ``benchmarks/04_x/hopper/``: it exists in the repository (a path cut short, ``benchmarks/04_x/h100-``, exists as
  the start of a file's name).

A section number followed by ``.digit`` (``section 3.2`` of a paper) or by ``of the`` is another document's and is
not checked. :func:`problems` lists each reference that does not resolve, with its file, cell and what exists.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

from gpulab import lessons as _lessons
from gpulab.course import sources, texts

__all__ = ["references", "resolve", "command_and_path_problems", "problems", "main"]

_NUM = r"\d+[a-z]?|[A-Z]\b"
_LIST = rf"(?:{_NUM})(?:\s*(?:,|and|or|-|–|to)\s*(?:{_NUM}))*"
_SUB = rf"(?P<kind>part|section|appendix|appendices|sections)\s+(?P<subs>{_LIST}|[a-z][\w-]*)"
_REF = re.compile(
    rf"\b(?:(?P<skind>[Ss]ections?|Appendix|appendix)\s+(?P<secs>{_LIST})(?P<tail>\.\d|\s+of\s+(?:the\b|lesson\s+(?P<of>\d+)))?(?P<there>\s+there\b)?"
    rf"|[Ll]essons?\s+(?P<nums>\d+(?:\s*(?:,|and|or|-|–|to)\s*\d+)*)(?:(?:'s|’s|,)\s+{_SUB})?)"
)


@dataclasses.dataclass(frozen=True)
class Reference:
    text: str  # as written
    lesson: str | None  # the lesson it names ("05"), None for the text's own lesson
    section: str | None  # "6b", "appendix D", "part hopper", "part 2"; None for the whole lesson


def _expand(items: str) -> list[str]:
    """ "4 and 5" -> ["4", "5"], "10-12" -> ["10", "11", "12"], "A, B" -> ["A", "B"]."""
    out = []
    for chunk in re.split(r"\s*(?:,|\band\b|\bor\b)\s*", items.strip()):
        m = re.fullmatch(r"(\S+?)\s*(?:-|–|\bto\b)\s*(\S+)", chunk)
        if m and m[1].isdigit() and m[2].isdigit() and int(m[1]) <= int(m[2]):
            out += [str(n) for n in range(int(m[1]), int(m[2]) + 1)]
        elif m:
            out += [m[1], m[2]]
        elif chunk:
            out.append(chunk)
    return out


def references(text: str) -> list[Reference]:
    """The references in ``text`` (the forms of the module docstring)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a cell's text (str), got {type(text).__name__}.")
    found: list[Reference] = []
    last = None  # the lesson named last: "section 3 there" is its section
    for m in _REF.finditer(text):
        if m["secs"] is not None:
            if m["tail"] and not m["of"]:
                continue  # another document's section
            appendix = m["skind"].lower() == "appendix"
            lesson = m["of"] or (last if m["there"] else None)
            for s in _expand(m["secs"]):
                if appendix != bool(re.fullmatch(r"[A-Z]", s)):
                    continue  # "section A" or "appendix 3": not this course's naming
                found.append(Reference(m[0], lesson, f"appendix {s}" if appendix else s))
            continue
        nums = _expand(m["nums"])
        last = nums[-1]
        if not m["kind"]:
            found += [Reference(m[0], n, None) for n in nums]
            continue
        kind = m["kind"].lower()
        for s in _expand(m["subs"]) if m["subs"][:1].isdigit() or kind.startswith("appendi") else [m["subs"]]:
            name = s if kind.startswith("section") else f"appendix {s}" if kind.startswith("appendi") else f"part {s}"
            found.append(Reference(m[0], nums[-1], name))
    return found


def resolve(ref: Reference, own: _lessons.Lesson, sections: dict[str, set[str]]) -> str | None:
    """Why ``ref`` (in a text of lesson ``own``; ``sections``: lesson id -> its section names) does not resolve, or
    None when it does."""
    if not isinstance(ref, Reference):
        raise TypeError(f"ref must be a crossrefs.Reference (crossrefs.references(text)), got {type(ref).__name__}.")
    if not isinstance(own, _lessons.Lesson):
        raise TypeError(f"own must be the gpulab.lessons.Lesson the text belongs to, got {type(own).__name__}.")
    lesson = own if ref.lesson is None else _lessons.find(ref.lesson)
    if lesson is None:
        return f"{ref.text!r}: there is no lesson {ref.lesson} (lessons: {', '.join(_lessons.ids())})"
    if ref.section is None:
        return None
    if ref.section.startswith("part "):
        part = ref.section.removeprefix("part ")
        if part in lesson.parts:
            return None
        return (
            f"{ref.text!r}: lesson {lesson.id} has no part {part!r} (its benchmark's parts: "
            f"{', '.join(lesson.parts) or 'none'}; lessons have numbered sections: say 'section N')"
        )
    have = sections.get(lesson.id, set())
    if ref.section in have:
        return None
    known = ", ".join(sorted(have, key=_order)) or "none"
    return f"{ref.text!r}: lesson {lesson.id} ({lesson.slug}) has no section {ref.section} (its sections: {known})"


def _order(section: str) -> tuple:
    m = re.match(r"(\d+)(.*)", section)
    return (0, int(m[1]), m[2]) if m else (1, 0, section)


_BENCH = re.compile(r"python -m gpulab bench (\d\d)(?: ([a-z][\w-]*))?")
_PATH = re.compile(r"\b(?:notebooks|exercises|solutions)/\d\d_\w+\.ipynb|\bbenchmarks/\d\d_\w+(?:/[\w.-]+)*/?")


def command_and_path_problems(text: str, root=sources.ROOT) -> list[str]:
    """The ``python -m gpulab bench NN part`` commands and the paths of lesson files in ``text`` that name nothing."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a cell's text (str), got {type(text).__name__}.")
    root = texts.repo_root(root)
    out = []
    for m in _BENCH.finditer(text):
        lesson = _lessons.find(m[1])
        if lesson is None:
            out.append(f"{m[0]!r}: there is no lesson {m[1]}")
        elif m[2] and m[2] not in lesson.parts:
            out.append(
                f"{m[0]!r}: lesson {lesson.id}'s benchmark has no part {m[2]!r} "
                f"(its parts: {', '.join(lesson.parts) or 'none'})"
            )
    for m in _PATH.finditer(text):
        path = m[0].rstrip("/.")
        if not (root / path).exists() and not any((root / path).parent.glob(f"{Path(path).name}*")):
            out.append(f"{m[0]!r}: no such file or folder in the repository")
    return out


def problems(root=sources.ROOT) -> list[str]:
    """Each reference in the lessons and solutions (the exercises are generated from them) that does not resolve."""
    lesson_texts = texts.lessons(root)
    sections = {t.lesson.id: texts.headings(t.nb) for t in lesson_texts}
    out = []
    for text in lesson_texts + texts.solutions(root):
        for i, cell in enumerate(text.nb.cells):
            for ref in references(cell.source):
                why = resolve(ref, text.lesson, sections)
                if why:
                    out.append(f"{text.name}, cell {i}: {why}")
            out += [f"{text.name}, cell {i}: {why}" for why in command_and_path_problems(cell.source, root)]
    return out


def main() -> int:
    found = problems()
    print("\n".join(found) if found else "every cross-reference resolves")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
