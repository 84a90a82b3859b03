"""The syllabus as data: one row per lesson, used by the command line, the README check and result files.

Each lesson names its benchmark once, here, as ``"package.module:function"`` (``Lesson.benchmark``);
:func:`benchmark` resolves that name (one import, when the benchmark is asked for, so importing the syllabus or a
lesson's kernels imports no benchmark). A benchmark function takes ``progress`` (a tqdm-like wrapper for loops) and
returns a list of :class:`gpulab.bench.Result`, plus optionally a matplotlib figure to store beside the result file.

A lesson's benchmark may have named parts (``Lesson.parts``: part name -> ``"package.module:function"``, the same
kind of function), the measurements its notebook and the README cite beyond the main benchmark
(``python -m gpulab bench 04 hopper``); ``benchmark(id, part)`` resolves one, and :func:`part_folder` names the folder
under the lesson's results where its records go (where their readers look), as ``<gpu>-<date>-<part>.jsonl``.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

__all__ = ["Lesson", "LESSONS", "find", "ids", "benchmark", "part_folder"]


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
        "04_attention",
        "From online softmax to FlashAttention",
        "gpulab.attention",
        "gpulab.attention.measure.benchmark:benchmark",
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
        },
        folders={
            "cs336": "hopper/cs336",
            "fused": "hopper/fused",
            **{p: "v3" for p in ("v3-headline", "v3-check", "v3-race", "v3-tune")},
        },
    ),
    Lesson(
        "05",
        "05_fused_rnn",
        "A fused RNN kernel (FlashRNN-style)",
        "gpulab.rnn.fused",
        "gpulab.rnn.fused.measure.benchmark:benchmark",
        parts={
            "split": "gpulab.rnn.fused.measure.split_bench:split",
            "cross": "gpulab.rnn.fused.measure.split_bench:cross",
            "candidates": "gpulab.rnn.fused.measure.split_bench:candidates",
            "partials": "gpulab.rnn.fused.measure.split_bench:partials",
            "versions": "gpulab.rnn.fused.measure.versions_bench:versions",
            "steps": "gpulab.rnn.fused.measure.steps_bench:steps",
            "called": "gpulab.rnn.fused.measure.called_bench:called",
            "lstm-grid": "gpulab.rnn.fused.measure.lstm_grid:lstm_grid",
        },
        folders={"cross": "split", "candidates": "split", "partials": "split", "steps": "split", "called": "split"},
    ),
    Lesson(
        "06",
        "06_state_tracking",
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
    Lesson("07", "07_distributed", "Scaling out: the capstone on several GPUs with torchrun", "gpulab.distributed"),
]


def find(lesson: str) -> Lesson | None:
    """The lesson whose id ('00') or slug ('00_memory_hierarchy') is ``lesson``; None if there is none."""
    if not isinstance(lesson, (str, int)) or isinstance(lesson, bool):
        raise TypeError(f"lesson must be a lesson id such as '04' or a slug, got {lesson!r}.")
    lesson = str(lesson)
    for entry in LESSONS:
        if lesson in (entry.id, entry.slug) or (lesson.isdigit() and int(lesson) == int(entry.id)):
            return entry
    return None


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
        raise ValueError(
            f"part={part!r} is not a part of lesson {entry.id}'s benchmark; its parts: {known} "
            f"(or no part for the main benchmark)."
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
