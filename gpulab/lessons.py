"""The syllabus as data: one row per lesson, used by the command line, the README check and result files.

Each lesson names its benchmark once, here, as ``"package.module:function"`` (``Lesson.benchmark``);
:func:`benchmark` resolves that name (one import, when the benchmark is asked for, so importing the syllabus or a
lesson's kernels imports no benchmark). A benchmark function takes ``progress`` (a tqdm-like wrapper for loops) and
returns a list of :class:`gpulab.bench.Result`, plus optionally a matplotlib figure to store beside the result file.

A lesson's benchmark may have named parts (``Lesson.parts``: part name -> ``"package.module:function"``, the same
kind of function), the measurements its notebook and the README cite beyond the main benchmark
(``python -m gpulab bench 05 hopper``); ``benchmark(id, part)`` resolves one, and :func:`part_folder` names the folder
under the lesson's results where its records go (where their readers look), as ``<gpu>-<date>-<part>.jsonl``.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Callable

__all__ = [
    "Lesson", "LESSONS", "RENAMED", "MOVED_PARTS", "find", "successors", "redirect", "ids", "benchmark", "part_folder",
]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Lesson:
    id: str
    slug: str
    title: str
    module: str  # the lesson's package
    benchmark: str | None = None  # "package.module:function", the lesson's benchmark; None where it has none
    parts: dict[str, str] = dataclasses.field(default_factory=dict)  # part name -> "package.module:function"
    folders: dict[str, str] = dataclasses.field(default_factory=dict)  # part -> its records' folder, if not its name

    @property
    def notebook(self) -> str:
        return f"notebooks/{self.slug}.ipynb"

    @property
    def exercise(self) -> str:
        return f"exercises/{self.slug}.ipynb"

    @property
    def solution(self) -> str:
        return f"solutions/{self.slug}.ipynb"


LESSONS: list[Lesson] = [
    Lesson("00", "00_memory_hierarchy", "The GPU memory hierarchy", "gpulab.memory", "gpulab.memory.measure:benchmark"),
    Lesson("01", "01_roofline", "The roofline", "gpulab.roofline", "gpulab.roofline.measure:benchmark"),
    Lesson(
        "02",
        "02_codesign",
        "GEMM shapes and hardware co-design",
        "gpulab.codesign",
        "gpulab.codesign.benchmark:benchmark",
    ),
    Lesson(
        "03",
        "03_cudnn_ladder",
        "The cuDNN 5 LSTM optimization ladder",
        "gpulab.rnn.ladder",
        "gpulab.rnn.ladder.benchmark:benchmark",
    ),
    Lesson(
        "04",
        "04_flash_attention",
        "FlashAttention in Triton",
        "gpulab.attention",
        "gpulab.attention.measure.benchmark:benchmark",
    ),
    Lesson(
        "05",
        "05_attention_hopper",
        "FlashAttention on Hopper",
        "gpulab.attention",
        parts={
            "hopper": "gpulab.attention.measure.hopper_bench:hopper",
            "cs336": "gpulab.attention.measure.hopper_bench:cs336",
            "fused": "gpulab.attention.measure.hopper_bench:fused",
            "v3": "gpulab.attention.measure.v3_bench:bench_v3",
            "v3-headline": "gpulab.attention.measure.v3_bench:headline_v3",
            "v3-check": "gpulab.attention.measure.v3_bench:check_v3",
            "v3-race": "gpulab.attention.measure.v3_bench:race_v3",
            "v3-tune": "gpulab.attention.measure.v3_bench:tune_v3",
            "features": "gpulab.attention.measure.features_bench:features",
            "short": "gpulab.attention.measure.short_bench:short",
        },
        folders={
            "cs336": "hopper/cs336",
            "fused": "hopper/fused",
            **{p: "v3" for p in ("v3-headline", "v3-check", "v3-race", "v3-tune")},
        },
    ),
    Lesson(
        "06",
        "06_fused_rnn",
        "A fused RNN on one SM",
        "gpulab.rnn.fused",
        "gpulab.rnn.fused.measure.benchmark:benchmark",
        parts={
            "versions": "gpulab.rnn.fused.measure.versions_bench:versions",
            "lstm-grid": "gpulab.rnn.fused.measure.lstm_grid:lstm_grid",
            "lstm-tiles": "gpulab.rnn.fused.measure.lstm_tiles:lstm_tiles",
            "lstm-large": "gpulab.rnn.fused.measure.lstm_grid:lstm_large",
        },
    ),
    Lesson(
        "07",
        "07_rnn_split",
        "One head over many SMs",
        "gpulab.rnn.fused",
        parts={
            "split": "gpulab.rnn.fused.measure.split_bench:split",
            "cross": "gpulab.rnn.fused.measure.split_bench:cross",
            "candidates": "gpulab.rnn.fused.measure.split_bench:candidates",
            "partials": "gpulab.rnn.fused.measure.split_bench:partials",
            "steps": "gpulab.rnn.fused.measure.steps_bench:steps",
            "called": "gpulab.rnn.fused.measure.called_bench:called",
        },
        folders={"cross": "split", "candidates": "split", "partials": "split", "steps": "split", "called": "split"},
    ),
    Lesson(
        "08",
        "08_state_tracking",
        "Capstone: state tracking, LSTM vs Transformer",
        "gpulab.tasks",
        "gpulab.tasks.experiments:benchmark",
        parts={
            "throughput": "gpulab.tasks.experiments:throughput",
            "search": "gpulab.tasks.search:bench_search",
            "lm-search": "gpulab.tasks.lm_bench:bench_lm_search",
            "lm": "gpulab.tasks.lm_bench:bench_lm",
        },
        folders={"lm-search": "lm"},
    ),
    Lesson("09", "09_distributed", "Scaling out: the capstone on several GPUs with torchrun", "gpulab.distributed"),
]

RENAMED: dict[str, tuple[str, ...]] = {
    "04_attention": ("04", "05"),
    "05_fused_rnn": ("06", "07"),
    "06_state_tracking": ("08",),
    "07_distributed": ("09",),
}
"""An old lesson slug -> the ids of the lesson(s) it became (the course had eight lessons, 00-07, before it had ten)."""

OLD_IDS: dict[str, str] = {slug: slug[:2] for slug in RENAMED}

MOVED_PARTS: dict[tuple[str, str], str] = {
    **{("04", p): "05" for p in ("hopper", "cs336", "fused", "v3", "v3-headline", "v3-check", "v3-race", "v3-tune",
                                 "features")},
    **{("05", p): "06" for p in ("versions", "lstm-grid")},
    **{("05", p): "07" for p in ("split", "cross", "candidates", "partials", "steps", "called")},
    **{("06", p): "08" for p in ("throughput", "search", "lm-search", "lm")},
}  # fmt: skip
"""(old lesson id, part) -> the lesson that runs that part now: ``bench 04 hopper`` runs ``bench 05 hopper``."""


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def find(lesson: str) -> Lesson | None:
    """The lesson whose id ('00') or slug ('00_memory_hierarchy') is ``lesson``; None if there is none. An old slug
    (:data:`RENAMED`: '04_attention', '05_fused_rnn', '06_state_tracking', '07_distributed') resolves to the first
    lesson it became, with a message on stderr naming every one (:func:`successors` returns them all)."""
    if not isinstance(lesson, (str, int)) or isinstance(lesson, bool):
        raise TypeError(f"lesson must be a lesson id such as '04' or a slug, got {lesson!r}.")
    lesson = str(lesson)
    for entry in LESSONS:
        if lesson in (entry.id, entry.slug) or (lesson.isdigit() and int(lesson) == int(entry.id)):
            return entry
    if lesson in RENAMED:
        new = successors(lesson)
        _note(f"lesson {lesson} is now {' and '.join(f'lesson {e.id} ({e.slug})' for e in new)}: using {new[0].slug}")
        return new[0]
    return None


def successors(slug: str) -> list[Lesson]:
    """The lessons an old slug became (``'04_attention'`` -> lessons 04 and 05); ``[find(slug)]`` for a current
    lesson's id or slug. A ValueError for anything else."""
    if not isinstance(slug, str):
        raise TypeError(f"slug must be a lesson slug such as '04_attention' (str), got {slug!r}.")
    if slug in RENAMED:
        return [_by_id(i) for i in RENAMED[slug]]
    entry = _lesson(slug)
    return [entry]


def _by_id(lesson_id: str) -> Lesson:
    return next(e for e in LESSONS if e.id == lesson_id)


def redirect(lesson, part: str | None = None) -> tuple[Lesson, str | None]:
    """The lesson that runs ``lesson``'s ``part`` now, and a message when that is not the lesson named: an old name
    of a part that moved (:data:`MOVED_PARTS`: ``('04', 'hopper')`` -> lesson 05) or an old slug. A ValueError for
    an unknown lesson; an unknown part is left for :func:`benchmark` to refuse (naming the lesson's parts)."""
    entry = _lesson(lesson)
    if part is None or not isinstance(part, str) or part in entry.parts:
        return entry, None
    old_id = OLD_IDS.get(str(lesson), entry.id)
    moved = MOVED_PARTS.get((old_id, part))
    if moved is None:
        return entry, None
    new = _by_id(moved)
    message = f"lesson {old_id}'s part {part} is now lesson {new.id} ({new.slug}): running bench {new.id} {part}"
    return new, message


def ids() -> list[str]:
    """Every lesson as "id (slug)", for error messages and help."""
    return [f"{e.id} ({e.slug})" for e in LESSONS]


_RESOLVED: dict[tuple[str, str | None], Callable] = {}


def _lesson(lesson_id) -> Lesson:
    entry = find(lesson_id)
    if entry is None:
        raise ValueError(f"lesson_id={lesson_id!r} is not a lesson; known: {', '.join(ids())}.")
    return entry


def _check_part(entry: Lesson, part) -> str:
    if not isinstance(part, str):
        raise TypeError(f"part must be a str naming a part of lesson {entry.id}'s benchmark, got {part!r}.")
    if part not in entry.parts:
        known = ", ".join(entry.parts) if entry.parts else "none"
        moved = MOVED_PARTS.get((entry.id, part))
        hint = f"; it is lesson {moved}'s now: benchmark({moved!r}, {part!r})" if moved else ""
        raise ValueError(
            f"part={part!r} is not a part of lesson {entry.id}'s benchmark; its parts: {known} "
            f"(or no part for the main benchmark){hint}."
        )
    return part


def benchmark(lesson_id: str, part: str | None = None) -> Callable | None:
    """Lesson ``lesson_id``'s benchmark callable, resolved from ``Lesson.benchmark`` (``"package.module:function"``)
    on first use; None if the lesson has none. With ``part``, that named part of it (``Lesson.parts``). A ValueError
    for an unknown lesson or part (naming the lesson's parts)."""
    entry = _lesson(lesson_id)
    spec = entry.benchmark if part is None else entry.parts[_check_part(entry, part)]
    if spec is None:
        return None
    if (entry.id, part) not in _RESOLVED:
        module, _, name = spec.partition(":")
        _RESOLVED[entry.id, part] = getattr(importlib.import_module(module), name)
    return _RESOLVED[entry.id, part]


def part_folder(lesson_id: str, part: str) -> str:
    """The folder, under the lesson's results (``benchmarks/<slug>/``), where part ``part``'s records go."""
    entry = _lesson(lesson_id)
    return entry.folders.get(_check_part(entry, part), part)
