"""The syllabus as data: one row per lesson, used by the command line, the README check and result files.

Each lesson's package registers its benchmark *callable* when it is imported
(``lessons.register_benchmark("04", benchmark)`` in ``gpulab/attention/__init__.py``), so importing the syllabus
imports no benchmark; :func:`benchmark` imports the lesson's package (``Lesson.module``) and returns what it
registered. A benchmark function takes ``progress`` (a tqdm-like wrapper for loops) and returns a list of
:class:`gpulab.bench.Result`, plus optionally a matplotlib figure to store beside the result file.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

__all__ = ["Lesson", "LESSONS", "find", "ids", "register_benchmark", "benchmark"]


@dataclasses.dataclass(frozen=True)
class Lesson:
    id: str
    slug: str
    title: str
    module: str  # the package that registers the lesson's benchmark when imported

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
    Lesson("00", "00_memory_hierarchy", "The GPU memory hierarchy", "gpulab.memory"),
    Lesson("01", "01_roofline", "The roofline", "gpulab.roofline"),
    Lesson("02", "02_codesign", "GEMM shapes and hardware co-design", "gpulab.codesign"),
    Lesson("03", "03_cudnn_ladder", "The cuDNN 5 LSTM optimization ladder", "gpulab.rnn.ladder"),
    Lesson("04", "04_attention", "From online softmax to FlashAttention", "gpulab.attention"),
    Lesson("05", "05_fused_rnn", "A fused RNN kernel (FlashRNN-style)", "gpulab.rnn.fused"),
    Lesson("06", "06_state_tracking", "Capstone: state tracking, LSTM vs Transformer", "gpulab.tasks"),
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


_BENCHMARKS: dict[str, Callable] = {}


def register_benchmark(lesson_id: str, fn: Callable) -> Callable:
    """Register ``fn`` as lesson ``lesson_id``'s benchmark (called by the lesson's package when it is imported);
    returns ``fn``, so it also works as a decorator factory's target."""
    entry = find(lesson_id)
    if entry is None:
        raise ValueError(f"lesson_id={lesson_id!r} is not a lesson; known: {', '.join(ids())}.")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}.")
    _BENCHMARKS[entry.id] = fn
    return fn


def benchmark(lesson_id: str) -> Callable | None:
    """Lesson ``lesson_id``'s benchmark callable: imports the lesson's package (``Lesson.module``), which registers
    it; None if the lesson registers none. A ValueError for an unknown lesson."""
    entry = find(lesson_id)
    if entry is None:
        raise ValueError(f"lesson_id={lesson_id!r} is not a lesson; known: {', '.join(ids())}.")
    if entry.id not in _BENCHMARKS:
        importlib.import_module(entry.module)
    return _BENCHMARKS.get(entry.id)
