"""README and ``docs/`` sections generated from the stored records, so the pages say only what the records show.

A generated block sits between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``; :func:`render` returns its
text from the current records (``benchmarks/INDEX.json``), :func:`update` rewrites every block of README.md (its one
results table, :mod:`gpulab.course.results_table`) and of ``docs/*.md`` (the result blocks of ``docs/results.md``),
and ``tests/course/test_readme.py`` fails when a block differs from what the records give (``python -m
gpulab.course.readme`` fixes it).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from gpulab import bench
from gpulab.bench import index
from gpulab.rnn.ladder.benchmark import SAME_MODE_CLOCKS, mode_ms, same_mode
from gpulab.rnn.ladder.plot import find, short_dtype

__all__ = ["SECTIONS", "render", "update", "pages", "results", "main", "prose_figures", "README_ALLOWED"]

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def _current(folder: str) -> tuple[Path, list[bench.Result]]:
    path = bench.current(folder[:2] if folder[:2].isdigit() else folder, "main", None, ROOT / "benchmarks")
    return path, bench.load(folder, path=path)


def _raw(path) -> str:
    return f"Raw records: `{Path(path).relative_to(ROOT)}`."


def lesson00() -> str:
    path, recs = _current("00_memory_hierarchy")
    head = recs[0]
    lines = [
        *_figure(path, f"bandwidth against working set on the {head.device}"),
        f"{head.device}, torch {head.torch}, Triton {head.triton}, {head.date}; device time (median of many calls).",
        "",
        "| measurement | result |",
        "|---|---|",
    ]
    sweep = [r for r in recs if r.case == "working-set sweep" and r.status == "ok"]
    for level in ("L1", "L2", "HBM"):
        at = sorted((r.params["working_set_bytes"], r.gbps / 1e3) for r in sweep if r.params.get("level") == level)
        if not at:
            continue
        sizes = f"{_bytes(at[0][0])} – {_bytes(at[-1][0])}"
        if level == "HBM":  # the smallest of these still partly fit in L2: the plateau is at the largest
            result = f"{at[-1][1]:.2f} TB/s at {_bytes(at[-1][0])} ({at[0][1]:.1f} at {_bytes(at[0][0])}, partly in L2)"
        else:
            result = f"{min(g for _, g in at):.1f} – {max(g for _, g in at):.1f} TB/s"
        lines.append(f"| sweep kernel, working sets {sizes} ({level}) | {result} |")
    for r in recs:
        if r.case != "working-set sweep" and r.status == "ok":
            lines.append(
                f"| {r.case}, {_bytes(r.bytes / 2)} read and written | {r.ms:.3f} ms, {r.gbps / 1e3:.2f} TB/s |"
            )
    lines += ["", _raw(path)]
    return "\n".join(lines) + "\n"


def _verdict(met: bool) -> str:
    return "met" if met else "not met"


def _figure(path, alt) -> list[str]:
    """The figure stored beside a record (same name, .png), as a markdown image line, or nothing."""
    png = Path(path).with_suffix(".png")
    return [f"![{alt}]({png.relative_to(ROOT)})", ""] if png.exists() else []


def _bytes(n) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n:.0f} B"


def lesson01() -> str:
    from gpulab import roofline  # deferred: imports the measurement kernels' modules

    path, _ = _current("01_roofline")
    text = roofline.ceilings("h100").summary()
    return "\n".join([*_figure(path, "the roofline of the H100"), "```", text, "```", "", _raw(path)]) + "\n"


def lesson02() -> str:
    from gpulab import codesign

    path, recs = _current("02_codesign")
    head = recs[0]
    k = {r.params["x"]: r for r in recs if r.params.get("sweep") == "K" and r.status == "ok"}
    lines = [
        *_figure(path, f"GEMM shape sweeps on the {head.device}"),
        f"{head.device}, torch {head.torch}, Triton {head.triton}, {head.date}; device time.",
        "",
    ]
    if k:
        aligned = k.get(4096) or max((r for x, r in k.items() if x % 8 == 0), key=lambda r: r.tflops)
        odd = [r for x, r in k.items() if x % 2 == 1]
        lines.append(
            f"- alignment, 8192 x 8192 x K (cuBLAS): K = {aligned.params['x']} runs at {aligned.tflops:.0f} TFLOP/s; "
            f"odd K (2-byte rows) at {min(r.tflops for r in odd):.0f} – {max(r.tflops for r in odd):.0f}."
        )
    lines += ["", "```", codesign.format_agreement(codesign.pair_agreement(recs)), "```", "", _raw(path)]
    return "\n".join(lines) + "\n"


def lesson04() -> str:
    from gpulab.attention.measure import report as attention_bench
    from gpulab.course import shown

    path, recs = _current("04_flash_attention")
    head = recs[0]
    lines = [
        *_figure(path, f"attention on the {head.device}"),
        f"{head.device}, torch {head.torch}, Triton {head.triton}, {head.date}; TFLOP/s on device time, the same FLOP "
        f"count for every implementation. `gpulab` is `flash_attention` as it dispatched on the H100 in this run: "
        f"version {shown.attention_versions(recs)[0]}'s forward and version 1's backward (version 3's forward at head "
        "dim 128 came later: its own block below).",
        "",
        *(f"- {line}" for line in attention_bench.targets(recs)),
        "",
        _raw(path),
    ]
    return "\n".join(lines) + "\n"


def lesson05_hopper() -> str:
    from gpulab.attention.measure import report as hopper_report  # deferred: imports the kernels' modules

    path = bench.current("05", "hopper", "h100", ROOT / "benchmarks")
    recs = bench.load("05", path=path)
    head = recs[0]
    lines = [
        *_figure(path, f"attention forward, versions 1 and 2 beside SDPA, on the {head.device}"),
        f"{index.banner('05', 'hopper', root=ROOT / 'benchmarks')}; `python -m gpulab bench 05 hopper`. The CS336 "
        f"lines: {index.banner('05', 'hopper/cs336', root=ROOT / 'benchmarks')}.",
        "",
        *(f"- {line}" for line in hopper_report.summary(recs)),
        *(f"- sweeps: {line}" for line in hopper_report.sweep_summary(hopper_report.stored_sweep())[:4]),
        "- the CS336 (2025) leaderboard problem (B 1, N 16k, 16 heads of 64, bf16, causal, forward+backward):",
        *(f"  - {line}" for line in hopper_report.cs336_lines(hopper_report.stored_cs336())),
        "",
        "```",
        hopper_report.grid_table(recs, "forward"),
        "```",
        "",
        _raw(path),
    ]
    return "\n".join(lines) + "\n"


def lesson05_v3() -> str:
    from gpulab.attention.measure import report as hopper_report  # deferred: imports the kernels' modules

    recs = hopper_report.stored_v3()
    head = recs[0]
    path = bench.current("05", "v3", "h100", ROOT / "benchmarks")
    spread = {peer: hopper_report.v3_spread(hopper_report.v3_ratios(recs, peer)) for peer in hopper_report.V3_PEERS}
    wall = hopper_report.v3_spread(hopper_report.v3_ratios(recs, "SDPA cuDNN", clock="wall"))
    problems = hopper_report.v3_best(recs)
    dtypes_run = ", ".join(sorted({key[0] for key in problems}))
    lines = [
        f"{head.device}, torch {head.torch}, Triton {head.triton}, {head.date}; version 3's grid, "
        f"`{path.name}` (every output checked against SDPA's fp32 math before it was timed, each "
        "provider timed twice, the faster round kept; the 200-run race tests and the tunes are the `-race` and `-tune` "
        "records beside it). Ratios: the peer's time / version 3's "
        f"(> 1: version 3 faster), over {len(problems)} of lesson 4's forward problems ({dtypes_run}).",
        "",
        *(f"- vs {peer}: median {m:.2f}x [{lo:.2f}, {hi:.2f}] (device time)" for peer, (m, lo, hi) in spread.items()),
        f"- vs SDPA cuDNN on the wall clock: median {wall[0]:.2f}x [{wall[1]:.2f}, {wall[2]:.2f}]",
        "- version 3's targets on this grid (device time): median >= 0.95x cuDNN: "
        f"{_verdict(spread['SDPA cuDNN'][0] >= 0.95)}; none below 0.85x cuDNN: "
        f"{_verdict(spread['SDPA cuDNN'][1] >= 0.85)}; median >= 1.1x version 2: "
        f"{_verdict(spread['gpulab v2'][0] >= 1.1)}",
        *(f"- {step} vs {before}: median {m:.2f}x [{lo:.2f}, {hi:.2f}]"
          for step, before, (m, lo, hi) in hopper_report.v3_step_gains(recs)),
        "",
        "```",
        hopper_report.v3_table(recs),
        "```",
        "",
    ]  # fmt: skip
    lines.append(_raw(path))
    return "\n".join(lines) + "\n"


def exercises_speed() -> str:
    from gpulab.course import speed  # deferred: the graders' timing code

    # the newest speed run by its records' own dates (two GPUs' runs of one day have the same date in their names)
    files = bench.index.current("exercises", "solutions", None, ROOT / "benchmarks")
    path = max(files, key=lambda p: max(r["date"] for r in speed.records(p)))
    first = speed.records(path)[0]
    lines = [
        f"The solution notebooks' answers, speed-graded on the {first['device']} (torch {first['torch']}, "
        f"{first['date'][:10]}): `ms` device time, `wall ms` eager wall time per call; `x package op` and `x <peer>`: "
        "the answer's time over the package's op's and over the peer's (above 1: the answer takes longer), device "
        "clock.",
        "",
        "```",
        speed.leaderboard_table(path),
        "```",
        "",
        _raw(path),
    ]
    return "\n".join(lines) + "\n"


def lesson03() -> str:
    path, recs = _current("03_cudnn_ladder")
    dts = list(dict.fromkeys(r.dtype for r in recs))
    pairs = same_mode(recs)
    cells = {"naive": [], "best": [], "cudnn": [], "eager": [], "graph": []}
    for dt in dts:
        e, g = find(recs, dt, 0, "eager"), find(recs, dt, 0, "graph")
        cells["naive"].append(f"{mode_ms(e):.0f} / {mode_ms(g):.1f} ms" if e and g else "-")
        ce, cg = find(recs, dt, "cuDNN", "eager"), find(recs, dt, "cuDNN", "graph")
        cells["cudnn"].append(f"{mode_ms(ce):.2f} / {mode_ms(cg):.2f} ms" if ce and cg else "-")
        for mode in ("eager", "graph"):
            p = next((p for p in pairs if p[0] == dt and p[1] == mode), None)
            if p is None:
                cells[mode].append("-")
                continue
            best, cud = p[2], p[3]
            b, c = mode_ms(best), mode_ms(cud)
            cells[mode].append(f"step {best.params['step']}: {b:.2f} ms, {c / b:.2f}x")
            if mode == "graph":
                cells["best"].append(f"step {best.params['step']}: {best.ms:.2f} ms, {best.tflops:.1f} TFLOP/s")
    head = recs[0]
    lines = [
        *_figure(path, f"the LSTM ladder on the {head.device}"),
        f"{head.device}, torch {head.torch}, Triton {head.triton}, {head.date}. {SAME_MODE_CLOCKS}",
        "",
        "| | " + " | ".join(short_dtype(dt) for dt in dts) + " |",
        "|---|" + "---|" * len(dts),
        "| step 0, naive (eager / CUDA graph) | " + " | ".join(cells["naive"]) + " |",
        "| best step (CUDA graph) | " + " | ".join(cells["best"]) + " |",
        "| cuDNN (`nn.LSTM`, same run): eager / graphed | " + " | ".join(cells["cudnn"]) + " |",
        "| best eager step, x cuDNN eager | " + " | ".join(cells["eager"]) + " |",
        "| best graphed step, x cuDNN graphed | " + " | ".join(cells["graph"]) + " |",
        "",
        f"Raw records: `{path.relative_to(ROOT)}`.",
    ]
    return "\n".join(lines) + "\n"


def lesson09() -> str:
    path, recs = _current("09_distributed")
    speed = [r for r in recs if "tokens_per_s" in r.params]
    base = {(r.params["model"], r.params["strategy"]): r for r in speed if r.params["world_size"] == 1}
    head = speed[0]
    lines = [
        f"{head.device} x2 (NVLink), torch {head.torch}, Triton {head.triton}, {head.date}; width "
        f"{head.params['d_model']}, {head.params['num_layers']} layers, {head.params['per_gpu_batch']} strings of "
        f"{head.shape[1]:,} tokens per GPU, bf16; eager wall clock per training step (steps back to back, one "
        "synchronize), tokens/s over all GPUs.",
        "",
        "| model | strategy | GPUs | ms / step | tokens/s | scaling | NCCL kernels (ms) | overlapped (ms) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(speed, key=lambda r: (r.params["model"], r.params["strategy"], r.params["world_size"])):
        q = r.params
        b = base.get((q["model"], q["strategy"]))
        eff = f"{q['tokens_per_s'] / (q['world_size'] * b.params['tokens_per_s']):.0%}" if b else "-"
        lines.append(
            f"| {q['model']} | {q['strategy']} | {q['world_size']} | {r.ms:.2f} | {q['tokens_per_s'] / 1e6:.2f} M | "
            f"{eff} | {q.get('comm_ms', 0):.2f} | {q.get('overlap_ms', 0):.2f} |"
        )
    lines += ["", f"Raw records: `{path.relative_to(ROOT)}`; notebook 09 draws the timeline and the loss curves."]
    return "\n".join(lines) + "\n"


def io_traffic() -> str:
    path, recs = _current("io_traffic")
    recs = sorted(recs, key=lambda r: r.lesson)  # by lesson, then as measured
    head = recs[0]
    dates = " and ".join(sorted({r.date for r in recs}))
    lines = [
        f"Nsight Compute on the {head.device} ({dates}): DRAM bytes read + written by all kernels of one call, "
        "against the fewest bytes the operation must move (each input read once, each output written once).",
        "",
        "| lesson | case | kernels | DRAM read (MB) | DRAM written (MB) | fewest (MB) | counted / fewest |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in recs:
        q = r.params
        ratio = (q["dram_read"] + q["dram_write"]) / r.bytes
        lines.append(
            f"| {r.lesson} | {r.case.replace('ncu ', '')} | {q['kernels']} | {q['dram_read'] / 1e6:,.1f} | "
            f"{q['dram_write'] / 1e6:,.1f} | {r.bytes / 1e6:,.1f} | {ratio:.2f}x |"
        )
    lines += [
        "",
        "Below 1x: outputs that still sat in L2 when the last kernel ended reach DRAM later, outside the count. "
        "Far above 1x: re-reads (the alternating RNN reads its state and gates back every step) and intermediates "
        "that go through DRAM (naive attention writes and reads the N x N scores and probabilities several times).",
        "",
    ]
    seqs = sorted({r.params["seq"] for r in recs if "seq" in r.params})
    if seqs:
        lines += [
            f"Lesson 3's ladder ran at {seqs[0]} time steps (the article's 4 layers, hidden 512, batch 64): ncu "
            "replays every kernel, too slow for 100 steps. ncu also empties the caches before each kernel by default, "
            "so the weights, which fit in L2 and stay there between a real run's kernels, count again for every "
            "kernel that reads them: the ratio measures how many kernels re-read them, not what a warm run fetches.",
            "",
        ]
    lines += [
        f"Raw records: `{path.relative_to(ROOT)}` (`bash scripts/ncu_traffic.sh` on a GPU).",
    ]
    return "\n".join(lines) + "\n"


def _ms(x) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def lesson06() -> str:
    from gpulab.rnn.fused.measure import benchmark as rnn_bench  # deferred: imports the kernels

    path, recs = _current("06_fused_rnn")
    head = recs[0]
    main = [r for r in recs if r.params.get("sweep") in ("main", "dense") and r.status == "ok" and r.ms == r.ms]
    lines = [
        *_figure(path, f"the fused RNN on the {head.device}"),
        f"{head.device}, torch {head.torch}, Triton {head.triton}, {head.date}: LSTM, B = 16, T = 1,024, 12 heads "
        "of 64 (cuDNN: dense hidden 768, with the input product), every case checked against float64 before it was "
        "timed.",
        "",
        "| implementation | dtype | pass | mode | device ms | eager wall ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in main:
        wall = _ms(r.wall_ms) if r.wall_ms and r.params.get("mode") == "eager" else "-"
        lines.append(f"| {r.case} | {short_dtype(r.dtype)} | {r.params.get('pass')} | {r.params.get('mode')} | "
                     f"{_ms(r.ms)} | {wall} |")  # fmt: skip
    lines += ["", "Targets (device time):", "", *(f"- {t.strip()}" for t in rnn_bench.targets(recs)), "", _raw(path)]
    return "\n".join(lines) + "\n"


def lesson07_split() -> str:
    from gpulab.course import shown
    from gpulab.rnn.fused.measure import split_report  # deferred: imports the kernels

    rows, _ = shown.split_now(split_report.load_split("h100"))  # its fwd+bwd rows ran the first split backward
    back = split_report.load_split("h100", record="partials")
    # one head of 768 from the lesson's run, the one record of that measurement (gpulab.course.one_record)
    run = bench.load("06", gpu="h100")
    ours, cudnn_train = shown.run_training(run, "fused"), shown.run_training(run, "cuDNN nn.LSTM (dense)", "float16")
    fwd_768 = {(r.params.get("backend"), r.dtype): r for r in run if r.status == "ok" and r.params.get("pass") == "fwd"
               and r.params.get("mode") == "eager" and (r.params.get("B"), r.params.get("NH"), r.params.get("DH")) ==
               (16, 1, 768)}  # fmt: skip
    fwd, cudnn = fwd_768[("fused", "bfloat16")], fwd_768[("cuDNN nn.LSTM (dense)", "float16")]
    lines = [
        f"*{index.banner('07', 'split', root=ROOT / 'benchmarks')}.*",
        "",
        "```",
        split_report.split_table(rows),
        "```",
        "",
        "The backward kernel alone (device time), which exchanges partial sums of dh through L2 (its first version "
        "exchanged dG):",
        "",
        "```",
        split_report.backward_table(shown.partials_now(back)),
        "```",
        "",
        f"One head of 768 (cuDNN's own problem; cuDNN also computes the input product), from the lesson's run "
        f"(section 8): forward {fwd.wall_ms:.2f} ms against cuDNN fp16's {cudnn.wall_ms:.2f} ms, forward+backward "
        f"{ours.wall_ms:.2f} ms against {cudnn_train.wall_ms:.2f} ms (eager wall clock; device "
        f"{ours.ms:.2f} against {cudnn_train.ms:.2f}). "
        "Notebook 07, explains the "
        f"kernels and the step's budget. Raw records: `{split_report.split_path('h100').relative_to(ROOT)}`, "
        f"`{split_report.split_path('h100', record='partials').relative_to(ROOT)}`.",
    ]
    return "\n".join(lines) + "\n"


def lesson06_versions() -> str:
    from gpulab.course import shown
    from gpulab.rnn.fused.measure import versions_report as report  # deferred: imports the kernels

    rows, _ = shown.versions_now(report.load_versions("h100"))  # b3 is history (the first split backward)
    path = bench.current("06", "versions", "h100", ROOT / "benchmarks")
    by_v = {r.params["version"]: r for r in rows}
    lines = [
        *_figure(path, f"lesson 6's kernel versions, forward and forward+backward, on the {rows[0].device}"),
        f"*{index.banner('06', 'versions', root=ROOT / 'benchmarks')}.*",
        "",
        "```",
        report.versions_table(rows),
        "```",
        "",
        f"From v1 to v4 the forward gets {by_v['v1'].wall_ms / by_v['v4'].wall_ms:.1f}x faster on the eager wall "
        "clock, every version checked against float64 at full size first (`gpulab/rnn/fused/versions/`, notebook 06 "
        f"section 4b). Raw records: `{path.relative_to(ROOT)}`.",
    ]
    if "b1" in by_v and "b2" in by_v:
        lines[-1] += (f" The backward's second stream (b2) gains {by_v['b1'].wall_ms / by_v['b2'].wall_ms:.2f}x over "
                      "the products after the kernel (b1), forward+backward on the wall clock.")  # fmt: skip
    return "\n".join(lines) + "\n"


def _bound_lines(b) -> list[str]:
    """Lesson 8's floors in two README bullets (wall clock, against the SDPA Transformer); none for a run without."""
    if b is None or 1 not in b["L"]:
        return []
    peer = f"; `torch.nn.LSTM` ({b['peer_dtype']}) in the same stack: {b['peer'] - b['FL']:.2f} ms" if b["peer"] else ""
    return [
        f"- floors (each stack without its recurrence or attention): LSTM {b['FL']:.2f} ms, Transformer "
        f"{b['FT']:.2f} ms a step, eager wall clock; against the SDPA Transformer ({b['T']:.2f} ms) a recurrence "
        f"that took no time would bring the LSTM to {b['bound']:.2f}x",
        f"- the one-head LSTM's recurrence: {b['rec'][1]:.2f} ms a step{peer}; 0.8x the SDPA Transformer would leave "
        f"it {b['T'] / 0.8 - b['FL']:.2f} ms",
    ]


def lesson08() -> str:
    from gpulab import tasks  # deferred: imports the models
    from gpulab.tasks import spread

    path, _ = _current("08_state_tracking")
    found = spread.stored_search("h100")
    search_path = bench.current("08", "search", "h100", ROOT / "benchmarks")
    first = spread.search_records(found)[0]
    rates = ", ".join(map(spread.lr_text, first.params["grid_lr"]))
    util = {r.params["phase"]: r for r in found if r.params.get("kind") == "utilization"}
    lines = [
        *_figure(search_path, f"accuracy vs length at the picked settings, every seed, on the {first.device}"),
        f"{first.device}, torch {first.torch}, Triton {first.triton}, {first.date}. Both models tuned by one search "
        f"(`python -m gpulab bench 08 search`): learning rates {rates}"
        f" x warmup {', '.join(str(w) for w in first.params['grid_warmup'])} steps, {first.params['steps']:,} steps "
        f"of {first.shape[0]} strings of {first.params['train_length']} tokens ({short_dtype(first.dtype)}, AdamW, "
        f"{first.params['schedule']} schedule), picked by validation accuracy on strings of the training length "
        "(their own seed; the longer lengths never enter the pick):",
        "",
        "```",
        spread.search_table(found),
        "```",
        "",
        "Then each (task, model) trained again from three seeds at its pick; final-state accuracy (%) on fresh strings "
        "of each length, median over the seeds (min-max where they differ):",
        "",
        "```",
        spread.spread_table(found),
        "```",
        "",
        "Each phase's trainings ran concurrently, one process each on the one GPU: "
        + "; ".join(
            f"{p} {u.params['runs']} trainings in {min(u.params['runs'], u.params['workers'])} processes, "
            f"{u.params['seconds']:.0f} s"
            + (
                f" (GPU busy {u.params['gpu_util_mean']:.0f}% of the sampled time)"
                if u.params.get("gpu_util_mean")
                else ""
            )
            for p, u in util.items()
        )
        + ". The earlier single-seed runs in the lesson's folder are history.",
    ]
    thr = tasks.stored_throughput("h100")
    thr_path = bench.current("08", "throughput", "h100", ROOT / "benchmarks")
    t = thr[0]
    lines += [
        "",
        *_figure(thr_path, f"training throughput by head count on the {t.device}"),
        f"Training throughput ({t.date}; width {t.params['d_model']}, {t.params['num_layers']} layers, "
        f"{t.shape[0]} x {t.shape[1]:,} tokens per step, {short_dtype(t.dtype)}; forward, backward and AdamW):",
        "",
        "```",
        tasks.throughput_table(thr),
        "```",
        "",
        *(f"- {line}" for line in tasks.throughput_summary(thr)),
        *_bound_lines(tasks.throughput_bound(thr)),
        "",
        f"Raw records: `{search_path.relative_to(ROOT)}`, `{thr_path.relative_to(ROOT)}`.",
    ]
    return "\n".join(lines) + "\n"


def results() -> str:
    from gpulab.course import results_table  # deferred: it reads every lesson's records

    return results_table.table()


SECTIONS = {
    "results": results,
    "lesson00": lesson00,
    "lesson01": lesson01,
    "lesson02": lesson02,
    "lesson03": lesson03,
    "lesson04": lesson04,
    "lesson05-hopper": lesson05_hopper,
    "lesson05-v3": lesson05_v3,
    "exercises-speed": exercises_speed,
    "lesson06": lesson06,
    "lesson06-versions": lesson06_versions,
    "lesson07-split": lesson07_split,
    "lesson08": lesson08,
    "lesson09": lesson09,
    "io-traffic": io_traffic,
}
"""Generated README blocks: name -> function returning the block's markdown from the records."""


README_ALLOWED = {
    "3 TB/s": "the H100's HBM bandwidth, spec sheet, rounded (the glossary)",
    "2x": "'2x H200': a count of GPUs, not a measured ratio",
}
"""Figures the README's hand-written prose may state (outside generated blocks), with their reasons."""


def prose_figures(path=None) -> list[str]:
    """Measured-looking figures (:func:`gpulab.course.prose.figures`) in README.md outside its generated blocks and
    not on :data:`README_ALLOWED`: a measured number belongs in a generated block, computed from its record."""
    from gpulab.course import prose  # noqa: PLC0415 - nbformat only where the check runs

    text = (Path(path) if path is not None else ROOT / "README.md").read_text()
    return [f for f in prose.figures(_BLOCK.sub("", text)) if f not in README_ALLOWED]


def render(name: str) -> str:
    if name not in SECTIONS:
        raise ValueError(f"name={name!r} is not a generated README section; known: {sorted(SECTIONS)}.")
    return SECTIONS[name]()


_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s#:]+)(\))")


def _links_from(markdown: str, folder: Path) -> str:
    """A block's links (written relative to the repository root) made relative to ``folder``, where its page is."""
    if Path(folder).resolve() == ROOT:
        return markdown
    return _LINK.sub(lambda m: m.group(1) + Path(os.path.relpath(ROOT / m.group(2), folder)).as_posix() + m.group(3),
                     markdown)  # fmt: skip


def pages() -> list[Path]:
    """The files with generated blocks: README.md and every ``docs/*.md``."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def update(path=None, check: bool = False, page_dir=None) -> list[str]:
    """Rewrite every generated block of ``path`` (default: every file of :func:`pages`) from the records; returns the
    names of blocks that changed. With ``check``, change nothing and return what would change. Links are written
    relative to ``page_dir`` (default: the file's folder; a copy elsewhere names its page's folder)."""
    if path is None:
        return [name for page in pages() for name in update(page, check)]
    path = Path(path)
    text = path.read_text()
    changed = []

    def fill(m):
        body = _links_from(render(m.group("name")), Path(page_dir) if page_dir is not None else path.parent)
        if body != m.group("body"):
            changed.append(m.group("name"))
        return m.group(1) + body + m.group(4)

    new = _BLOCK.sub(fill, text)
    if changed and not check:
        path.write_text(new)
    return changed


def main(argv=None) -> int:
    changed = update(check="--check" in (argv if argv is not None else sys.argv[1:]))
    print(f"README and docs/ blocks {'out of date' if changed else 'up to date'}: {', '.join(changed) or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
