"""The README's one results table: a line per lesson, each computed from the lesson's current record
(``benchmarks/INDEX.json``, :func:`gpulab.bench.current`) and linking its lesson; the full result blocks are the
``docs/results.md`` page's (:mod:`gpulab.course.readme` writes both).

Each line shows what the lesson ships: lesson 5's line is version 3's forward (the shipped path at head dim 128),
lesson 7's the split kernel that ``flashrnn`` dispatches at one head of 768.
"""

from __future__ import annotations

from pathlib import Path

from gpulab import bench, lessons

__all__ = ["HEADLINES", "table"]

ROOT = Path(__file__).resolve().parents[2]
_BENCH = ROOT / "benchmarks"


def _load(lesson: str, part: str = "main", gpu: str | None = "h100"):
    path = bench.current(lesson, part, gpu, _BENCH)
    return path, bench.load(lesson, path=path)


def _lesson00():
    from gpulab.roofline import hbm

    path, _ = _load("00")
    found = hbm.hbm_ceiling("H100")
    return path, f"HBM bandwidth plateau {found.gbps:,.0f} GB/s ({found.gbps / found.spec_gbps:.0%} of the spec sheet)"


def _lesson01():
    from gpulab import roofline

    path, _ = _load("01")
    c = roofline.ceilings("H100")
    return path, f"measured ceilings: HBM {c.hbm_gbps:,.0f} GB/s, bf16 {c.bf16_tflops:.0f} TFLOP/s (torch.matmul)"


def _lesson02():
    path, recs = _load("02")
    best = max((r for r in recs if r.tflops), key=lambda r: r.tflops)
    return path, f"best GEMM shape {best.tflops:.0f} TFLOP/s ({best.case}, bf16)"


def _lesson03():
    from gpulab.rnn.ladder.benchmark import mode_ms, same_mode

    path, recs = _load("03")
    dtype, _, best, cudnn = next(p for p in same_mode(recs) if p[1] == "graph")
    ratio = mode_ms(cudnn) / mode_ms(best)
    return path, f"best ladder step (step {best.params['step']}, {dtype}, CUDA graph): {ratio:.2f}x cuDNN's speed"


def _lesson04():
    from gpulab.attention.measure import report

    path, recs = _load("04")
    line = next(t for t in report.targets(recs) if t.startswith("forward+backward: gpulab /"))
    return path, line.replace("forward+backward: gpulab", "version 1 forward+backward: gpulab", 1)


def _lesson05():
    from gpulab.attention.measure import report

    path = bench.current("05", "v3", "h100", _BENCH)
    recs = report.stored_v3()
    median, low, high = report.v3_spread(report.v3_ratios(recs, "SDPA cuDNN"))
    n = len(report.v3_best(recs))
    return path, f"version 3 forward: median {median:.2f}x SDPA cuDNN's speed [{low:.2f}, {high:.2f}] over {n} problems"


def _lesson06():
    path, rows = _load("06")

    def training(backend):
        return next(r for r in rows if r.status == "ok" and (r.params.get("backend"), r.params.get("pass"),
                    r.params.get("mode"), r.params.get("NH"), r.params.get("DH"), r.params.get("B")) == (
                    backend, "fwd+bwd", "eager", 12, 64, 16))  # fmt: skip

    ours, alt = training("fused"), training("alternating")
    return path, (f"fused kernel, LSTM fwd+bwd, B 16 T 1024 12x64: {ours.ms:.2f} ms, {alt.ms / ours.ms:.0f}x the "
                  "alternating backend's speed")  # fmt: skip


def _lesson07():
    from gpulab.course import shown

    path, rows = _load("06")
    ours = shown.run_training(rows, "fused")
    cudnn = shown.run_training(rows, "cuDNN nn.LSTM (dense)", "float16")
    q = ours.params
    return path, (f"split kernel, LSTM fwd+bwd, B {q['B']} T {q['T']} {q['NH']}x{q['DH']}: {ours.ms:.2f} ms, "
                  f"{cudnn.ms / ours.ms:.2f}x cuDNN fp16's speed")  # fmt: skip


def _lesson08():
    from gpulab import tasks

    path = bench.current("08", "throughput", "h100", _BENCH)
    summary = tasks.throughput_summary(tasks.stored_throughput("h100"))
    return path, "; ".join(summary[:2])


def _lesson09():
    path, recs = _load("09", gpu=None)
    speed = [r for r in recs if "tokens_per_s" in r.params]
    one = {(r.params["model"], r.params["strategy"]): r for r in speed if r.params["world_size"] == 1}
    two = [r for r in speed if r.params["world_size"] == 2 and (r.params["model"], r.params["strategy"]) in one]
    r = max(two, key=lambda r: r.params["tokens_per_s"])
    gain = r.params["tokens_per_s"] / one[(r.params["model"], r.params["strategy"])].params["tokens_per_s"]
    return path, f"{r.params['model']} with {r.params['strategy']} on 2 GPUs: {gain:.2f}x one GPU's tokens/s"


HEADLINES = {"00": _lesson00, "01": _lesson01, "02": _lesson02, "03": _lesson03, "04": _lesson04, "05": _lesson05,
             "06": _lesson06, "07": _lesson07, "08": _lesson08, "09": _lesson09}  # fmt: skip
"""Lesson id -> a function returning (its current record, the line's text)."""


def table() -> str:
    """The README's results table (Markdown): lesson (linked), the result, device and date, versions, record."""
    lines = ["| lesson | result (device time) | measured on | record |", "|---|---|---|---|"]
    for lesson in lessons.LESSONS:
        path, text = HEADLINES[lesson.id]()
        head = bench.load(lesson.id, path=path)[0]
        rel = path.relative_to(ROOT)
        lines.append(f"| [{lesson.id}. {lesson.title}]({lesson.notebook}) | {text} | {head.device}, {head.date}, "
                     f"torch {head.torch}, Triton {head.triton} | [`{rel.name}`]({rel}) |")  # fmt: skip
    return "\n".join(lines) + "\n"
