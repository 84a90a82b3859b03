"""One record per measurement: what a lesson displays, grouped by what was measured, comes from one run.

A lesson reads several records (a lesson's run, probe scripts' records, experiments), and two of them can hold the
same measurement: lesson 5 showed one head of 768 forward+backward as 10.7 ms = 1.55x cuDNN (a record of the first
split backward) in two cells and 6.58 ms = 0.97x (the present one) in three others. The rule: every displayed
number names its :class:`Key` — lesson, case, kernel version, device, problem and clock — and for one key a lesson
shows the newest run only; an older run may appear only under a history label (``history=True``: a cell that says
it is history and what superseded it).

:func:`conflicts` groups displayed values by key and returns the keys shown from two runs without that label;
:func:`check` raises on them. ``tests/course/test_records_shown.py`` runs it on what each lesson loads.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

__all__ = ["Key", "Shown", "conflicts", "check", "CLOCKS"]

CLOCKS = ("device", "wall", "do_bench")
"""A time is device time (``ms``: CUDA events), eager wall time (``wall_ms``), see :mod:`gpulab.bench.records`, or
``triton.testing.do_bench``'s (device time with the L2 cleared before each call: the CS336 leaderboard's clock)."""


@dataclass(frozen=True)
class Key:
    """What one displayed time measures.

    ``case``: the quantity ('LSTM fwd+bwd'); ``version``: the kernel version that ran ('split backward, partial
    sums'); ``problem``: its sizes ('B16 T1024 1x768 bf16'); ``clock``: 'device', 'wall' or 'do_bench' (:data:`CLOCKS`).
    """

    lesson: str
    case: str
    version: str
    device: str
    problem: str
    clock: str

    def __post_init__(self):
        for name in ("lesson", "case", "version", "device", "problem"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise TypeError(f"Key.{name} must be a non-empty str, got {value!r}.")
        if self.clock not in CLOCKS:
            raise ValueError(f"Key.clock must be one of {CLOCKS}, got {self.clock!r}: name the clock of the time.")


@dataclass(frozen=True)
class Shown:
    """A value a lesson displays: its key, the run it comes from (a record file's name), and whether the cell shows
    it as history (labelled as superseded)."""

    key: Key
    run: str
    value: float
    history: bool = False

    def __post_init__(self):
        if not isinstance(self.key, Key):
            raise TypeError(f"Shown.key must be a Key, got {type(self.key).__name__} {self.key!r}.")
        if not isinstance(self.run, str) or not self.run:
            raise TypeError(f"Shown.run must be the record file's name (a non-empty str), got {self.run!r}.")
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            raise TypeError(f"Shown.value must be the displayed number, got {self.value!r}.")
        if not isinstance(self.history, bool):
            raise TypeError(f"Shown.history must be a bool (True: shown under a history label), got {self.history!r}.")


def conflicts(shown) -> dict[Key, list[Shown]]:
    """Keys displayed from two or more runs without the history label, with the values shown for each."""
    shown = list(shown)
    bad = [s for s in shown if not isinstance(s, Shown)]
    if bad:
        raise TypeError(f"shown must be Shown values, got {type(bad[0]).__name__} {bad[0]!r}.")
    groups: dict[Key, list[Shown]] = defaultdict(list)
    for s in shown:
        if not s.history:
            groups[s.key].append(s)
    return {k: v for k, v in groups.items() if len({s.run for s in v}) > 1}


def check(shown) -> None:
    """Raise ValueError naming every key shown from two runs without the history label."""
    found = conflicts(shown)
    if found:
        lines = [
            f"{k.lesson} {k.case} [{k.version}] {k.problem} on {k.device}, {k.clock} time: "
            + ", ".join(f"{s.value:.4g} from {s.run}" for s in v)
            for k, v in found.items()
        ]
        raise ValueError(
            "one measurement shown from several runs (show the newest; an older one only in a cell labelled "
            "history):\n  " + "\n  ".join(lines)
        )
