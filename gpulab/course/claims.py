"""Claims that execute: a sentence that compares, ranks or classifies is rendered from the records, or the build fails.

A lesson that says "version 3 is faster than cuDNN on 9 of 12 problems" or "head dims 60 and 100 are memory-bound"
states a fact about its records. Typed into markdown, such a sentence drifts when the records change (one check
found 16 of 134 wrong). A lesson states it through :func:`claim`, in a code cell: the sentence is formatted from values
computed from the records, its predicate is evaluated when the notebook runs, and a false predicate *raises*
(:class:`ClaimError`), so the notebook does not build, nbval fails, and the sentence never reaches a reader::

    slow = [d for d in dims if rows[d].bound == "memory"]
    claim("Head dims {dims} are memory-bound in the model.", holds=slow == [60, 100], dims="and".join(...))

The rendered text displays as Markdown (the cell's last expression, or :func:`show`). :func:`paragraph` joins
claims and plain text into one.

:func:`comparisons` finds the sentences of a lesson source's *markdown* cells that compare, rank or classify (faster,
slower, beats, wins, memory-/compute-bound, "3.1x", met ...); :func:`bypasses` those not on :data:`ALLOWED`, the
sentences about specs, definitions, the math or quoted articles, each with its reason.
``tests/course/test_claims.py`` runs it on every lesson source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Claim", "ClaimError", "claim", "paragraph", "show", "comparisons", "bypasses", "ALLOWED", "PENDING"]


class ClaimError(AssertionError):
    """A lesson's sentence that its records contradict: the notebook must not build with it."""


@dataclass(frozen=True)
class Claim:
    """A sentence checked against the records; displays as Markdown."""

    text: str

    def __post_init__(self):
        if not isinstance(self.text, str):
            raise TypeError(f"Claim.text must be a str, got {type(self.text).__name__}; build claims with claim().")

    def _repr_markdown_(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text

    def __add__(self, other) -> Claim:
        return Claim(f"{self.text} {other}")


def claim(template: str, holds, **values) -> Claim:
    """The sentence ``template.format(**values)`` if ``holds`` is true; raise :class:`ClaimError` if it is false.

    ``holds``: a bool, or a callable taking ``**values`` and returning one (so the predicate and the sentence share
    their numbers). ``values``: what the sentence states, computed from the records.
    """
    if not isinstance(template, str) or not template.strip():
        raise TypeError(f"claim: template must be a non-empty str, got {template!r}; pass the sentence to render")
    verdict = holds(**values) if callable(holds) else holds
    if not isinstance(verdict, bool | int) and not hasattr(verdict, "__bool__"):
        raise TypeError(f"claim: holds must be a bool or a callable returning one, got {type(verdict).__name__}")
    try:
        text = template.format(**values)
    except (KeyError, IndexError) as exc:
        raise TypeError(
            f"claim: template {template!r} names {exc} which is not among values {sorted(values)}"
        ) from None
    if not bool(verdict):
        raise ClaimError(
            f"the lesson would say {text!r}, but its predicate is false for the records it reads "
            f"({', '.join(f'{k}={v!r}' for k, v in values.items()) or 'no values'}). Rewrite the sentence to what "
            "the records show, or rerun the benchmark that should make it true."
        )
    return Claim(text)


def paragraph(*parts) -> Claim:
    """Claims and plain (non-comparative) text joined into one Markdown paragraph."""
    if not parts:
        raise ValueError("paragraph() needs at least one claim or str to join.")
    bad = [p for p in parts if not isinstance(p, Claim | str)]
    if bad:
        raise TypeError(f"paragraph parts must be Claim or str, got {type(bad[0]).__name__} {bad[0]!r}.")
    return Claim(" ".join(str(p).strip() for p in parts if str(p).strip()))


def show(*parts) -> None:
    """Display claims (and plain text) as one Markdown paragraph from inside a cell."""
    from IPython.display import Markdown, display

    display(Markdown(paragraph(*parts).text))


# --- finding comparative sentences typed into markdown --------------------------------------------------------------

_WORDS = (
    r"faster|slower|fastest|slowest|quicker|beats?|beaten|wins?|won|outperforms?|loses|lost to|ahead of|behind|"
    r"(?:memory|compute|latency|bandwidth|launch)[- ]bound|met|meets|misses|within \w+ percent|"
    r"\d+(?:\.\d+)? times (?:faster|slower|more|less|as)"
)
COMPARATIVE = re.compile(rf"\b(?:{_WORDS})\b|(?<![\w.$])\d+(?:\.\d+)?[x×](?!\w)", re.I)
"""Words and forms of a comparing, ranking or classifying sentence."""
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]*\$", re.S)
_CODE = re.compile(r"`[^`\n]*`")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n\s*\n|\n\s*[-|] ")


def markdown_cells(source: str) -> list[str]:
    """The markdown cells of a jupytext percent source, their ``# `` prefixes removed."""
    cells = []
    for chunk in re.split(r"^# %%", source, flags=re.M)[1:]:
        head, _, body = chunk.partition("\n")
        if "[markdown]" in head:
            cells.append(
                "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.split("\n"))
            )
    return cells


def comparisons(markdown: str) -> list[tuple[str, list[str]]]:
    """``(sentence, comparative words)`` for every sentence of ``markdown`` (LaTeX and inline code removed)."""
    if not isinstance(markdown, str):
        raise TypeError(f"markdown must be a str (a markdown cell's text), got {type(markdown).__name__}.")
    text = _CODE.sub("`…`", _MATH.sub("$…$", markdown))
    out = []
    for sentence in _SENTENCE.split(text):
        found = [m.group(0) for m in COMPARATIVE.finditer(sentence)]
        if found:
            out.append((" ".join(sentence.split()), found))
    return out


ALLOWED: dict[tuple[str, str], str] = {}
"""(lesson id, a fragment of the sentence) -> why markdown may state it: a definition, the math, a spec, a quoted
article, or a prediction of the lesson's model (not a measurement). Filled below."""

PENDING: dict[tuple[str, str], str] = {}
"""(lesson id, fragment) of measured comparisons still typed into markdown, to be rendered through :func:`claim`.
Empty: every measured comparison of the lessons is a claim (``tests/course/test_claims.py`` keeps it empty)."""


def _allow(lesson: str, reason: str, *fragments: str, table=ALLOWED) -> None:
    for f in fragments:
        table[(lesson, f)] = reason


def bypasses(path, allowed=None) -> list[tuple[int, str, list[str]]]:
    """``(markdown cell index, sentence, words)`` of comparative sentences in a lesson source not on the allowlist.

    A sentence is allowed when one of the allowlist's fragments for its lesson (the source name's first two
    characters) occurs in it.
    """
    if not isinstance(path, str | Path):
        raise TypeError(f"path must be a lesson source path (str or Path), got {type(path).__name__} {path!r}.")
    path = Path(path)
    if path.suffix != ".py" or not path.is_file():
        raise ValueError(f"path must be an existing jupytext source notebooks/src/NN_name.py, got {str(path)!r}.")
    lesson = path.name[:2]
    table = {**ALLOWED, **PENDING} if allowed is None else allowed
    fragments = [f for (lid, f) in table if lid == lesson]
    out = []
    for i, cell in enumerate(markdown_cells(path.read_text())):
        for sentence, words in comparisons(cell):
            if not any(f in sentence for f in fragments):
                out.append((i, sentence, words))
    return out


def unused(paths, allowed=None) -> list[tuple[str, str]]:
    """Allowlist entries that match no sentence of the given sources (stale entries)."""
    table = {**ALLOWED, **PENDING} if allowed is None else allowed
    said: dict[str, list[str]] = {}
    for p in map(Path, paths):
        said.setdefault(p.name[:2], []).extend(
            s for cell in markdown_cells(p.read_text()) for s, _ in comparisons(cell)
        )
    return [(lid, f) for (lid, f) in table if not any(f in s for s in said.get(lid, []))]


_DEF = "a definition (the roofline's or the memory hierarchy's terms)"
_MATH_R = "the math of the lesson's derivation, not a measurement"
_SPEC = "spec sheets and published hardware facts"
_MODEL = "a prediction of the lesson's model (deterministic code printed beside it), not a measurement"
_QUOTED = "a figure of a quoted article"
_PLAN = "the lesson's plan or a design choice, not a result"
_allow("00", _DEF, "the closer to the arithmetic units, the smaller and faster", "cannot run faster than",
       "It is **memory-bound** when")  # fmt: skip
_allow("01", _DEF, "it is memory-bound, above it compute-bound", "A kernel to the left of it is",
       "the only ways to go faster are", "A kernel to the right is", "the slowest of them all sets the time",
       "a memory-bound kernel at the measured HBM ceiling is done",
       "memory- or compute-bound, and the batch size")  # fmt: skip
_allow("01", _MATH_R, "pointwise and reduction kernels are memory-bound on every GPU in the table",
       "A large square GEMM is compute-bound", "is memory-bound however good the kernel",
       "a step stays memory-bound until the batch", "everything pointwise is memory-bound",
       "a skinny GEMM and an LSTM step at small batch are memory-bound",
       "naive attention is memory-bound by")  # fmt: skip
_allow("01", _SPEC, "latency of one FMA is hidden behind others")
_allow("01", "the lesson's targets, defined (the verdict is printed from the records)", "reaches at least 0.97×")
_allow("02", _MATH_R, "far beyond the H100's ridge point", "so a tile the grid misses cannot pass")  # fmt: skip
_allow("02", _MODEL, "more than 5% faster per token", "A three-factor model orders shapes",
       "a different, slower kernel whose narrow loads",
       "The attention scores are **memory-bound** for every aligned")  # fmt: skip
_allow("02", _PLAN, "predict which shapes run fastest")
_allow("03", _QUOTED, "the article's 2016 ladder")
_allow("03", _MATH_R, "up to ~2x less GEMM time",
       "where a wavefront is latency-bound", "a GPU that finishes each small kernel faster than the host")  # fmt: skip
_allow("03", "about the CPU interpreter, not a GPU result", "so the fused steps look *slower* here")
_allow("03", _PLAN, "compares the fastest step with cuDNN in the same mode", "A step can also get slower in a graph")
_allow("04", _MATH_R, "why naive attention is memory-bound")
_allow("04", "what the autotuner does (its rule), not a result", "keeps the fastest", "above 1, gpulab is faster")
_allow("06", _MATH_R, "why an LSTM's recurrence is", "stays memory-bound on paper")
_allow("08", _QUOTED, "~40% slower than a Transformer", "The FlashRNN article's ratios")
_allow("08", _PLAN, "MLP (4x wide)", "(16x the training length)")
_allow("08", "the task's arithmetic (640 steps vs 40), not a timing", "640 times as easily as 40")
_allow("09", _MATH_R, "DDP hides them behind the backward", "about 1.5x what DDP sends")
_allow("09", _SPEC, "cross a network about ten times slower")

# The solutions' markdown, which is also the exercises' task texts (notebooks/src/solutions/NN_x.py, same lesson ids).
_allow("00", _DEF, "Check the levels from the smallest and fastest outwards")
_allow("01", _DEF, "## Task 3: memory- or compute-bound?", "At or above it: compute-bound.",
       "## Task 4: when does an LSTM step stop being memory-bound?",
       "at which one step with these sizes is compute-bound (intensity at or above the ridge point")  # fmt: skip
_allow("02", _MODEL, "(a misaligned shape runs a slower kernel, for its loads as well as its math)")
_allow("02", _PLAN, "## Task 3: predict which shape is fastest, then measure")
_allow("02", _MATH_R, "Those GEMMs are memory-bound (their arithmetic intensity is about the head dimension")
_allow("06", "the answer's count (tensor-core nanoseconds against a chain of latencies), not a measurement",
       "By this count the kernel is latency-bound")  # fmt: skip
