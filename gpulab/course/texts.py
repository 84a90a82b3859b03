"""The course's text as the checks read it: every lesson and solution source, in syllabus order, parsed once.

The checks of the course's prose (:mod:`.budget`, :mod:`.glossary`, :mod:`.crossrefs`, :mod:`.hints`) read the
notebook sources (``notebooks/src/NN_name.py`` and ``notebooks/src/solutions/NN_name.py``), never execute them.
:func:`lessons` gives one :class:`Text` per lesson of :data:`gpulab.lessons.LESSONS` (in that order), :func:`solutions`
one per solution source that belongs to a lesson. :func:`headings` parses a notebook's numbered section headings
(``## 4. Title``, ``## 6b. Title``, ``## Appendix D. Title``) into the section names that a reference can point at.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import nbformat

from gpulab import lessons as _lessons
from gpulab.course import sources

__all__ = ["lessons", "solutions", "headings", "markdown_cells", "strip_markup", "repo_root"]


@dataclasses.dataclass(frozen=True)
class Text:
    lesson: _lessons.Lesson  # the lesson this text belongs to
    kind: str  # "lesson" or "solution"
    path: Path  # its source
    nb: nbformat.NotebookNode

    @property
    def name(self) -> str:
        return f"{'solutions/' if self.kind == 'solution' else ''}{self.path.stem}"


def repo_root(root) -> Path:
    """``root`` as a Path, checked: the repository's folder (it holds notebooks/src/)."""
    if not isinstance(root, (str, Path)):
        raise TypeError(f"root must be the repository's folder (str or Path), got {type(root).__name__} {root!r}.")
    root = Path(root)
    if not (root / "notebooks" / "src").is_dir():
        raise ValueError(f"root={str(root)!r} has no notebooks/src/ folder; pass the repository's root folder.")
    return root


@functools.lru_cache(maxsize=64)
def _read(path: Path) -> nbformat.NotebookNode:
    """The notebook that the source ``path`` describes (cached: the checks read each source once)."""
    return sources.read_source(path)


def _texts(root, kind: str) -> list[Text]:
    root = repo_root(root)
    folder = root / "notebooks" / "src" / ("solutions" if kind == "solution" else "")
    out = []
    for lesson in _lessons.LESSONS:
        path = folder / f"{lesson.slug}.py"
        if path.exists():
            out.append(Text(lesson, kind, path, _read(path)))
        elif kind == "lesson":
            raise ValueError(f"lesson {lesson.id} ({lesson.slug}) has no source {path}; gpulab/lessons.py names it.")
    return out


def lessons(root=sources.ROOT) -> list[Text]:
    """Every lesson's source, in the order of :data:`gpulab.lessons.LESSONS`."""
    return _texts(root, "lesson")


def solutions(root=sources.ROOT) -> list[Text]:
    """Every lesson's solution source (the exercises are generated from them), in syllabus order."""
    return _texts(root, "solution")


def markdown_cells(text: Text) -> list[tuple[int, str]]:
    """(cell index, source) of each markdown cell."""
    if not isinstance(text, Text):
        raise TypeError(f"text must be a lesson's or solution's Text (texts.lessons()), got {type(text).__name__}.")
    return [(i, c.source) for i, c in enumerate(text.nb.cells) if c.cell_type == "markdown"]


_HEADING = re.compile(r"^#{1,6}\s+(?:(?P<appendix>Appendix)\s+)?(?P<name>\d+[a-z]?|[A-Z])\.\s", re.M)


def headings(nb) -> set[str]:
    """The section names of ``nb``'s numbered headings: ``## 4. X`` gives "4", ``## 6b. X`` gives "6b",
    ``## Appendix D. X`` gives "appendix D"."""
    if not isinstance(nb, nbformat.NotebookNode):
        raise TypeError(f"nb must be a notebook (nbformat.NotebookNode), got {type(nb).__name__}.")
    names = set()
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for m in _HEADING.finditer(cell.source):
            names.add(f"appendix {m['name']}" if m["appendix"] else m["name"])
    return names


_COMMENT = re.compile(r"<!--.*?-->", re.S)
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_TAG = re.compile(r"</?[a-zA-Z][^>]*>")


def strip_markup(markdown: str) -> str:
    """``markdown`` without what a reader does not read as prose: HTML comments and tags, link targets (the link's
    text stays). Fenced code stays (a term used in a code block is used)."""
    if not isinstance(markdown, str):
        raise TypeError(f"markdown must be a cell's text (str), got {type(markdown).__name__}.")
    return _TAG.sub("", _LINK_TARGET.sub("]", _COMMENT.sub("", markdown)))
