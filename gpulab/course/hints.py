"""An exercise's hints and task text must not hand over its solution.

A task, in ``notebooks/src/solutions/NN_name.py``, is a markdown cell with a heading (``## Task 2: ...``) followed,
before the next heading, by markdown cells and code cells; its **solution** is every ``### BEGIN SOLUTION`` region of
those code cells, and its **hints** are the ``<details><summary>Hint k</summary> ... </details>`` blocks of its
markdown (the exercise shows them folded, to be opened one at a time). The **task text** is its markdown without
the hints.

Of a solution, a **code line** is a line of a region without its comment, stripped (``else:``, ``pass`` and other
bare keywords are not counted); its **key expressions** are the right-hand sides of its assignments and the values of
its ``return`` lines, of :data:`KEY_CHARS` non-space characters or more. Whitespace is ignored in every comparison.

- A hint **states its answer in its first line** when that line (the first non-blank line after its summary)
  contains a code line of :data:`LINE_CHARS` non-space characters or more, or a key expression, or has an inline code
  span (```...```) that is a whole code line of the solution (``yield``, ``tl.debug_barrier()``); a loop or branch
  header (``for t in range(T):``) gives the structure, not the answer, and is not counted.
- A task text **contains its solution's code** when a code line of :data:`TASK_CHARS` non-space characters or more
  appears in it.
"""

from __future__ import annotations

import dataclasses
import re
import sys

from gpulab.course import exercises, listing, sources, texts

__all__ = ["LINE_CHARS", "KEY_CHARS", "TASK_CHARS", "tasks", "code_lines", "key_expressions"]
__all__ += ["hint_gives_answer", "task_gives_code", "problems", "main"]

LINE_CHARS = 12
KEY_CHARS = 12
TASK_CHARS = 25
_BARE = {"else:", "try:", "finally:", "pass", "return", "continue", "break", "except:", "", ")", "]", "}", "):"}


@dataclasses.dataclass(frozen=True)
class Task:
    title: str
    cell: int  # the heading's cell
    text: str  # the task text: its markdown without the hints
    hints: tuple[str, ...]  # each hint's body
    solution: tuple[str, ...]  # the code lines of its solution regions (comments dropped, stripped)


_CONTROL = re.compile(r"^(?:for|while|if|elif|with|def|async|class)\b")
_HEADING = re.compile(r"^#{1,6}\s+(.+)$", re.M)
_HINT = re.compile(r"<details>\s*<summary>(.*?)</summary>(.*?)</details>", re.S)


def _regions(source: str) -> list[str]:
    lines, inside = [], False
    for line in source.splitlines():
        marker = line.strip()
        if marker in (exercises.BEGIN, exercises.END):
            inside = marker == exercises.BEGIN
        elif inside:
            lines.append(line)
    return lines


def code_lines(region_lines) -> list[str]:
    """The code lines of a solution region's lines (comments dropped, stripped, bare keywords left out)."""
    if isinstance(region_lines, str) or not all(isinstance(x, str) for x in region_lines):
        raise TypeError("region_lines must be a list of a solution region's lines (str), not one string.")
    out = [listing.code_part(line).strip() for line in region_lines]
    return [x for x in out if x not in _BARE and re.search(r"\w", x)]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def key_expressions(lines) -> list[str]:
    """The right-hand sides of the assignments and the values of the returns in solution ``lines``, whitespace
    removed, of :data:`KEY_CHARS` non-space characters or more."""
    if isinstance(lines, str) or not all(isinstance(x, str) for x in lines):
        raise TypeError("lines must be a list of code lines (str), not one string.")
    out = []
    for line in lines:
        m = re.match(r"^(?:return\s+|yield\s+|[\w.\[\], :()*+-]+?\s*(?:[-+*/@|&]|//|\*\*)?=(?!=)\s*)(.+)$", line)
        if m and len(_squash(m[1])) >= KEY_CHARS:
            out.append(_squash(m[1]))
    return out


def tasks(nb) -> list[Task]:
    """The tasks of a solution notebook ``nb`` (those with a solution region in a code cell)."""
    if not hasattr(nb, "cells"):
        raise TypeError(f"nb must be a notebook (nbformat.NotebookNode), got {type(nb).__name__}.")
    found, current = [], None
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            heading = _HEADING.search(cell.source)
            if heading:
                current = {"title": heading[1].strip(), "cell": i, "md": [], "code": []}
                found.append(current)
            if current is not None:
                current["md"].append(cell.source)
        elif current is not None and exercises.has_solution(cell.source):
            current["code"] += _regions(cell.source)
    out = []
    for t in found:
        if not t["code"]:
            continue
        md = "\n\n".join(t["md"])
        hints = tuple(body.strip() for _, body in _HINT.findall(md))
        out.append(Task(t["title"], t["cell"], _HINT.sub("", md), hints, tuple(code_lines(t["code"]))))
    return out


def _spans(line: str) -> list[str]:
    return [_squash(s) for s in re.findall(r"`([^`]+)`", line)]


def hint_gives_answer(task: Task, hint: str) -> str | None:
    """What the first line of ``hint`` gives of ``task``'s solution, or None."""
    if not isinstance(task, Task):
        raise TypeError(f"task must be a hints.Task (hints.tasks(nb)), got {type(task).__name__}.")
    if not isinstance(hint, str):
        raise TypeError(f"hint must be a hint's text (str), got {type(hint).__name__}.")
    first = next((line for line in hint.splitlines() if line.strip()), "")
    flat, spans = _squash(first), _spans(first)
    for line in task.solution:
        if _CONTROL.match(line):
            continue  # a loop or branch header gives the structure, not the answer
        code = _squash(line)
        if (len(code) >= LINE_CHARS and code in flat) or code in spans:
            return f"the solution's line `{line}`"
    for expr in key_expressions(task.solution):
        if expr in flat:
            return f"the solution's key expression `{expr}`"
    return None


def task_gives_code(task: Task) -> list[str]:
    """The solution lines of ``task`` (of :data:`TASK_CHARS` non-space characters or more) that its text holds."""
    if not isinstance(task, Task):
        raise TypeError(f"task must be a hints.Task (hints.tasks(nb)), got {type(task).__name__}.")
    flat = _squash(task.text)
    return [line for line in task.solution if len(_squash(line)) >= TASK_CHARS and _squash(line) in flat]


def problems(root=sources.ROOT) -> list[str]:
    """Every hint that states its answer in its first line and every task text that holds its solution's code."""
    out = []
    for text in texts.solutions(root):
        for task in tasks(text.nb):
            where = f"{text.name}, cell {task.cell} ({task.title})"
            for k, hint in enumerate(task.hints, 1):
                gives = hint_gives_answer(task, hint)
                if gives:
                    out.append(f"{where}: hint {k}'s first line gives {gives}; lead with the idea, not the code")
            held = task_gives_code(task)
            if held:
                out.append(
                    f"{where}: the task text holds {len(held)} of its {len(task.solution)} solution lines "
                    f"(e.g. `{held[0]}`); describe what to compute, not the code"
                )
    return out


def main() -> int:
    found = problems()
    print("\n".join(found) if found else "no hint or task text gives its solution away")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
