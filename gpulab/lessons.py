"""The syllabus as data: one row per lesson, used by the command line, the README check and result files.

A lesson registers its benchmark here as ``"module:function"``; `python -m gpulab bench NN` imports and runs it.
A benchmark function takes ``progress`` (a tqdm-like wrapper for loops) and returns a list of
:class:`gpulab.bench.Result`, plus optionally a matplotlib figure to store beside the result file.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Lesson", "LESSONS", "find", "ids"]


@dataclasses.dataclass(frozen=True)
class Lesson:
    id: str
    slug: str
    title: str
    module: str
    benchmark: str | None = None  # "module:function", None until the lesson lands

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
    Lesson("00", "00_memory_hierarchy", "The GPU memory hierarchy", "gpulab.memory", "gpulab.memory:benchmark"),
    Lesson("01", "01_roofline", "The roofline", "gpulab.roofline", "gpulab.roofline:benchmark"),
    Lesson("02", "02_codesign", "GEMM shapes and hardware co-design", "gpulab.codesign", "gpulab.codesign:benchmark"),
    Lesson(
        "03",
        "03_cudnn_ladder",
        "The cuDNN 5 LSTM optimization ladder",
        "gpulab.rnn.ladder",
        "gpulab.rnn.ladder:benchmark",
    ),
    Lesson(
        "04",
        "04_attention",
        "From online softmax to FlashAttention",
        "gpulab.attention",
        "gpulab.attention.benchmark:benchmark",
    ),
    Lesson(
        "05",
        "05_fused_rnn",
        "A fused RNN kernel (FlashRNN-style)",
        "gpulab.rnn.fused",
        "gpulab.rnn.benchmark:benchmark",
    ),
    Lesson(
        "06",
        "06_state_tracking",
        "Capstone: state tracking, LSTM vs Transformer",
        "gpulab.tasks",
        "gpulab.tasks:benchmark",
    ),
]


def find(lesson: str) -> Lesson | None:
    """The lesson whose id ('00') or slug ('00_memory_hierarchy') is ``lesson``; None if there is none."""
    lesson = str(lesson)
    for entry in LESSONS:
        if lesson in (entry.id, entry.slug) or (lesson.isdigit() and int(lesson) == int(entry.id)):
            return entry
    return None


def ids() -> list[str]:
    return [f"{e.id} ({e.slug})" for e in LESSONS]
