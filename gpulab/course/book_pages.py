"""Pages of the course website that stand for something else: the page at an old lesson's address.

The course had eight lessons (00-07) before it had ten (:data:`gpulab.lessons.RENAMED`); each old lesson's page
(``lessons/04_attention``) and its exercise page stay, linking the lessons it became and sending the browser on to the
first, so an old link or bookmark still lands on the lesson. :func:`gpulab.course.book.generate` writes them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["redirect_page"]

ROOT = Path(__file__).resolve().parents[2]


def redirect_page(old: str, new: list, root: Path = ROOT, suffix: str = "") -> str:
    """The page at an old lesson's address (``lessons/04_attention``): it links the lessons it became and sends the
    browser on to the first (an orphan page, in no table of contents)."""
    if not isinstance(old, str) or not old:
        raise TypeError(f"old must be an old lesson slug such as '04_attention' (str), got {old!r}.")
    if not isinstance(new, list) or not new or not all(hasattr(e, "slug") and hasattr(e, "title") for e in new):
        raise TypeError(f"new must be a non-empty list of gpulab.lessons.Lesson (what {old} became), got {new!r:.80}.")
    if suffix not in ("", "_exercise"):
        raise ValueError(f"suffix must be '' (the lesson's page) or '_exercise', got {suffix!r}.")
    docs = [(e, f"{e.slug}{suffix}" + (".ipynb" if (root / (e.exercise if suffix else e.notebook)).exists() else ".md"))
            for e in new]  # fmt: skip
    links = " and ".join(f"[{e.id}. {e.title}]({doc})" for e, doc in docs)
    return (
        f'---\norphan: true\n---\n# {old}{suffix}: moved\n\n```{{raw}} html\n<meta http-equiv="refresh" '
        f'content="0; url={docs[0][0].slug}{suffix}.html">\n```\n\nThis lesson is now {links}.\n'
    )
