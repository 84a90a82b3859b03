"""The history labels of the lessons: what a cell prints before it displays a run that a newer one supersedes.

Their own module so that :mod:`gpulab.course.one_record` (the check) and :mod:`gpulab.course.shown` (what lessons 4
and 5 display) both read them without importing each other. Both re-export them.
"""

from __future__ import annotations

__all__ = ["LABELS", "history_label"]

# fmt: off
LABELS: dict[tuple[str, str], str] = {
    ("04", "hopper"):
        "earlier run: the Hopper probe's run (`benchmarks/04_attention/hopper/`, recorded before lesson 4's section 8 "
        "run of the same day). That run is the record of version 2's forward, of forward+backward as "
        "`flash_attention` shipped it that day, of cuDNN and of FlashAttention-2 (section 12's runs time the shipped "
        "path again, version 3's forward at head dim 128 included); this run is shown for what only it timed "
        "(version 1 beside version 2, version 2's TMA backward, two small problems) and for ratios within it",
    ("04", "cs336"):
        "earlier run: the CS336 run (`benchmarks/04_attention/hopper/cs336/`, with the Hopper probe); the record of "
        "its device and wall times is lesson 4's section 8 run (bf16, d 64, N 16384, causal) and the probe's grid;"
        " its do_bench times, the leaderboard's clock, are this run's for versions 1 and 2 and FlashAttention-2;"
        " cuDNN and the shipped path were timed on that clock again by version 3's backward runs (section 12),"
        " the newer record of those two",
    ("05", "versions"):
        "earlier run: the version ladder's run (`benchmarks/05_fused_rnn/versions/`). Lesson 5's section 8 run, newer,"
        " is the record of v4 (the package's forward, 12 x 64), b2 (its backward), v5 (one head of 768) and cuDNN;"
        " v1-v3 and b1 were timed only here, and the gains are ratios within this run",
    ("05", "split"):
        "earlier run: the split probe's run (`benchmarks/05_fused_rnn/split/`, 2026-11-24). At head dim 768 lesson 5's"
        " section 8 run, newer, is the record of the split kernel, cuDNN and alternating (the next line reads it);"
        " the other head dims and the ratios are this run's",
    ("05", "cross"):
        "earlier run: the crossover run (`benchmarks/05_fused_rnn/split/*-cross.jsonl`, 2026-11-24). At one head of "
        "768 and B = 16, lesson 5's section 8 run, newer, is the record of the split kernel and alternating; the "
        "other rows and the ratios are this run's",
    ("05", "v6 rows8 z"):
        "earlier run: the first two rows8 records of 2026-11-27 (`benchmarks/05_fused_rnn/v6/*-27-z-rows8.jsonl`"
        " and `*-27-zz-rows8.jsonl`), one tree before the forward's late inputs in 8-row tiles; Appendix I shows the"
        " current rows8 record (`*-27-zze-rows8.jsonl`)",
    ("05", "v6 rows8 zzc"):
        "earlier run: two rows8 records of 2026-11-27 (`benchmarks/05_fused_rnn/v6/*-27-zzc-rows8.jsonl` and "
        "`*-27-zzd-rows8.jsonl`), the same forward as the current rows8 record, which Appendix I shows; shown for the "
        "spread of runs of one forward",
}
# fmt: on
"""(lesson, run) -> the history label a cell prints before it displays that run: what it is, which newer run is the
record, what it is still shown for."""


def history_label(lesson: str, run: str) -> str:
    """The label a cell prints before it displays a run that a newer one supersedes (:data:`LABELS`)."""
    if (lesson, run) not in LABELS:
        raise ValueError(f"(lesson, run) must be one of {sorted(LABELS)}, got {(lesson, run)!r}; add its label.")
    return LABELS[(lesson, run)] + "."
