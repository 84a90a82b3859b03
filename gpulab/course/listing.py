"""Sources in a lesson, in reading size: a function folded after a few dozen lines, a version as a diff on the last.

A lesson that prints a 160-line kernel in one cell asks the reader to scroll past it. :func:`show` prints a function's
source up to ``max_lines`` and says how many lines follow and where they are; :func:`diff` prints what one version of
a kernel changes on the one before (a unified diff of their sources, the names aligned), so each version reads as
its change.
"""

from __future__ import annotations

import difflib
import inspect
from pathlib import Path

__all__ = ["show", "diff", "source_lines", "code_part"]


def _unwrap(fn):
    fn = getattr(fn, "fn", fn)  # a @triton.jit kernel: its Python function
    if not callable(fn):
        raise TypeError(f"fn must be a function or a @triton.jit kernel, got {type(fn).__name__} {fn!r}.")
    return fn


def _where(fn) -> str:
    path = Path(inspect.getsourcefile(fn) or "?")
    parts = path.parts
    rel = "/".join(parts[parts.index("gpulab") :]) if "gpulab" in parts else path.name
    return f"{rel}:{inspect.getsourcelines(fn)[1]}"


def source_lines(fn) -> list[str]:
    """The source lines of ``fn`` (a function or a ``@triton.jit`` kernel)."""
    return inspect.getsource(_unwrap(fn)).splitlines()


def show(fn, max_lines: int = 40) -> None:
    """Print ``fn``'s source, folded after ``max_lines`` lines with a note of how many follow and where."""
    if not isinstance(max_lines, int) or isinstance(max_lines, bool) or max_lines < 1:
        raise ValueError(f"max_lines must be a positive int, got {max_lines!r}.")
    fn = _unwrap(fn)
    lines = source_lines(fn)
    print("\n".join(lines[:max_lines]))
    if len(lines) > max_lines:
        print(f"    # ... {len(lines) - max_lines} more lines: {_where(fn)} ({len(lines)} lines in all)")
    print()


def code_part(line: str) -> str:
    """A line without its trailing comment (a '#' outside quotes is good enough for kernel sources)."""
    quote = None
    for i, ch in enumerate(line):
        if ch in "\"'" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None:
            return line[:i].rstrip()
    return line.rstrip()


def diff(old, new, context: int = 1) -> None:
    """Print what ``new`` changes on ``old``: its lines that differ in code ('-' removed, '+' added, ``context``
    unchanged lines around each change); the function name of ``new`` put in place of ``old``'s, and lines that
    differ only in their comments counted as unchanged (shown as ``new`` has them)."""
    if not isinstance(context, int) or isinstance(context, bool) or context < 0:
        raise ValueError(f"context must be a non-negative int, got {context!r}.")
    old_fn, new_fn = _unwrap(old), _unwrap(new)
    a = [line.replace(old_fn.__name__, new_fn.__name__) for line in source_lines(old_fn)]
    b = source_lines(new_fn)
    matcher = difflib.SequenceMatcher(None, [code_part(x) for x in a], [code_part(x) for x in b], autojunk=False)
    out = [f"--- {old_fn.__name__}", f"+++ {new_fn.__name__}"]
    for group in matcher.get_grouped_opcodes(context):
        out.append(f"@@ {old_fn.__name__} line {group[0][1] + 1}, {new_fn.__name__} line {group[0][3] + 1} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [f" {line}" for line in b[j1:j2]]
            else:
                out += [f"-{line}" for line in a[i1:i2]] + [f"+{line}" for line in b[j1:j2]]
    print("\n".join(out) if len(out) > 2 else f"{new_fn.__name__}: no change on {old_fn.__name__}")
    print()
