"""Command line: ``python -m gpulab COMMAND``.

info                 device, runtime mode, versions, spec and measured ceilings
bench NN [--out DIR] run lesson NN's benchmark, write benchmarks/NN_name/<gpu>-<date>.jsonl and .png
bench NN PART        a named part of it (e.g. `bench 05 hopper`): benchmarks/NN_name/<folder>/<gpu>-<date>-PART.jsonl
notebooks [PATH...]  build notebooks from their sources (notebooks/src/) and execute them in place (what gets
                     committed); PATH: a source or a notebook (default: all); --build-only: do not execute
exercises [--check]  generate exercises/ from solutions/ (--check: verify they match and every grader fails)
grade PATH [--speed] run an exercise notebook and report each grader (--speed: on a GPU, also time each task
                     whose answer is a whole op against the solution and the peer; see gpulab.course.speed)
leaderboard          print the speed records of graded tasks (benchmarks/exercises/leaderboard.jsonl)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpulab import bench, hardware, lessons, runtime
from gpulab.bench import index

ROOT = Path(__file__).resolve().parent.parent


def cmd_info(args) -> int:
    info = runtime.describe()
    print("gpulab runtime")
    for k, v in info.items():
        print(f"  {k:15s} {v}")
    s = hardware.spec()
    label = "this GPU" if runtime.on_gpu() else "reference GPU (no CUDA device here)"
    print(f"\n{label}: {s.name}  [{s.source}]")
    print(f"  SMs {s.sm_count}, compute capability {s.compute_capability[0]}.{s.compute_capability[1]}")
    print(f"  HBM {s.hbm_gbps:,.0f} GB/s, L2 {s.l2_bytes / 2**20:.0f} MB, shared memory {s.smem_per_sm // 1024} KB/SM")
    rates = ", ".join(f"{k} {v:,.0f}" for k, v in s.tensor_tflops.items())
    print(f"  FP32 {s.fp32_tflops:.1f} TFLOP/s; tensor cores (TFLOP/s): {rates or 'none'}")
    if runtime.on_gpu():
        print("\nlive properties")
        for k, v in hardware.live_properties().items():
            print(f"  {k:22s} {v}")
    from gpulab.attention.sdpa import sdpa_status  # deferred: only `info` reports the SDPA registration

    sdpa = sdpa_status()
    state = ("active" if sdpa["active"] else "registered, not active") if sdpa["registered"] else sdpa["why"]
    print(f"\nSDPA flash implementation {sdpa['name']!r}: {state}")
    from gpulab import kernel_choice, roofline  # deferred: only `info` needs lesson 1's ceilings and the plans

    print()
    print(kernel_choice.report())

    print()
    print(roofline.ceilings().summary())
    print("\nlesson 0 measurements (stored results)")
    try:
        stored = bench.load("00", gpu=s.name if runtime.on_gpu() else "h100")
        for r in stored:
            if r.case != "working-set sweep" and r.gbps:
                print(f"  {r.case}: {r.gbps:,.0f} GB/s on {r.device} ({r.date})")
        sweep = [r for r in stored if r.case == "working-set sweep" and r.gbps]
        if sweep:
            best = max(sweep, key=lambda r: r.gbps)
            at = best.params.get("working_set_bytes", 0)
            print(f"  peak cached read bandwidth (sweep): {best.gbps:,.0f} GB/s at a {at:,}-byte working set")
    except FileNotFoundError as exc:
        print(f"  none: {exc}")
    return 0


BENCH_COLUMNS = ("case", "provider", "ms", "wall_ms", "gbps", "tflops", "registers", "spills", "status")
CLOCK_NOTE = (
    "ms: device time (CUDA events; host work not counted, what CUDA graphs or torch.compile can reach); "
    "wall ms: eager wall time per call (calls back to back, one synchronize), what a training loop gets."
)


def cmd_bench(args) -> int:
    from tqdm.auto import tqdm  # deferred: only `bench` shows progress bars

    if args.lesson not in lessons.RENAMED and lessons.find(args.lesson) is None:
        print(f"unknown lesson {args.lesson!r}; known: {', '.join(lessons.ids())}", file=sys.stderr)
        return 2
    lesson, moved = lessons.redirect(args.lesson, args.part)  # `bench 04 hopper`: the part is lesson 05's now
    if moved:
        print(moved)
    try:
        benchmark = lessons.benchmark(lesson.id, args.part)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if benchmark is None:
        print(f"lesson {lesson.id} has no benchmark yet", file=sys.stderr)
        return 2
    if not runtime.on_gpu():
        print(
            "note: no CUDA device; running the CPU-interpreter version (numbers are not GPU numbers)", file=sys.stderr
        )
    name = f"{lesson.id} {args.part}" if args.part else lesson.id
    out = benchmark(progress=lambda it: tqdm(it, desc=f"bench {name}"))
    results, figure = out if isinstance(out, tuple) else (out, None)
    print(bench.table(results, columns=BENCH_COLUMNS))
    print(CLOCK_NOTE)
    path = None
    if args.part:  # a part's records go where their readers look: benchmarks/<slug>/<folder>/<gpu>-<date>-<part>.jsonl
        folder = bench.results_dir(args.out) / lesson.slug / lessons.part_folder(lesson.id, args.part)
        path = folder / f"{hardware.gpu_slug(results[0].device)}-{results[0].date}-{args.part}.jsonl"
    part = index.part_key(lesson.id, args.part, args.out)
    before = set(index.current(lesson.id, part, hardware.gpu_slug(results[0].device), args.out))
    path = bench.save(results, lesson.id, root=args.out, path=path, part=part)
    print(f"wrote {path}; {index.INDEX_NAME} names it as the current record of {lesson.id} {part}")
    for old in sorted(before - {path}):
        print(f"superseded: {old} (move it under {index.results_dir(args.out) / index.HISTORY / lesson.id}/)")
    if figure is not None:
        figure.savefig(path.with_suffix(".png"), dpi=120, bbox_inches="tight")
        print(f"wrote {path.with_suffix('.png')}")
    return 0


def _notebook_paths(paths) -> list[tuple[Path | None, Path]]:
    """(source, notebook) for each PATH (a source .py or a notebook .ipynb), or every pair."""
    from gpulab.course import sources

    if not paths:
        return sources.source_paths()
    pairs = []
    for p in map(Path, paths):
        if p.suffix == ".py":
            pairs.append((p, sources.notebook_for(p)))
        elif p.suffix == ".ipynb":
            pairs.append((sources.source_for(p), p))
        else:
            raise SystemExit(f"notebooks: {p} is neither a source (.py in notebooks/src/) nor a notebook (.ipynb).")
    return pairs


def cmd_notebooks(args) -> int:
    import time

    from gpulab.course import execute_notebook, sources

    for src, path in _notebook_paths(args.paths):
        changed = sources.build(src, path)
        print(f"built {path.relative_to(ROOT) if path.is_absolute() else path} from {src.name}"
              f"{'' if changed else ' (unchanged)'}")  # fmt: skip
        if args.build_only:
            continue
        t0 = time.perf_counter()
        execute_notebook(path, write=True)
        print(f"executed {path} in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_exercises(args) -> int:
    from gpulab.course import check_exercises, generate_exercises, grade_notebook

    solutions, exercises = ROOT / "solutions", ROOT / "exercises"
    if not args.check:
        for path in generate_exercises(solutions, exercises):
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    problems = check_exercises(solutions, exercises)
    for path in sorted(exercises.glob("*.ipynb")):
        report = grade_notebook(path)
        if not report:
            problems.append(f"{path.name}: has no grader cells ('# GRADER: ...').")
        for title, passed, _ in report:
            if passed:
                problems.append(f"{path.name}: grader '{title}' passes on the unsolved exercise; it cannot fail.")
        if report and not any(passed for _, passed, _ in report):
            print(f"{path.relative_to(ROOT)}: all {len(report)} graders fail before the work is done")
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    print(f"exercises: {0 if problems else 1} passed, {1 if problems else 0} failed")
    return 1 if problems else 0


def cmd_grade(args) -> int:
    import os  # noqa: PLC0415

    from gpulab.course import grade_notebook, speed  # noqa: PLC0415

    if args.speed:  # read by the graders inside the notebook's kernel, which inherits this environment
        os.environ[speed.ENV] = "1"
        os.environ.setdefault(speed.LABEL_ENV, "solution" if Path(args.path).parent.name == "solutions" else "learner")
    path = Path(args.path)
    if not path.exists() and path.stem in lessons.RENAMED:  # an old lesson's exercise: grade what it became
        new = [path.with_name(Path(e.exercise).name) for e in lessons.successors(path.stem)]
        found = [p for p in new if p.exists()]
        print(f"{path.name} is now {' and '.join(p.name for p in new)}: grading {', '.join(map(str, found)) or 'none'}")
        if not found:
            return 2
        return max(cmd_grade(argparse.Namespace(**{**vars(args), "path": str(p)})) for p in found)
    before = speed.records()
    report = grade_notebook(args.path)
    if not report:
        print(f"{args.path} has no grader cells.")
        return 2
    for title, passed, message in report:
        print(f"{'PASS' if passed else 'FAIL'}  {title}" + ("" if passed else f"\n      {message}"))
    n_pass = sum(p for _, p, _ in report)
    print(f"{n_pass} of {len(report)} graders pass")
    if args.speed:
        print(speed.summary(speed.records()[len(before) :], report))
    return 0 if n_pass == len(report) else 1


def cmd_leaderboard(args) -> int:
    from gpulab.course import speed  # noqa: PLC0415

    print(speed.leaderboard_table(args.path))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpulab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="device, runtime mode, versions, ceilings").set_defaults(fn=cmd_info)
    p = sub.add_parser("bench", help="run a lesson's benchmark and store its results")
    p.add_argument("lesson", help="lesson number, e.g. 00")
    p.add_argument("part", nargs="?", default=None, help="a named part of its benchmark, e.g. `bench 05 hopper`")
    p.add_argument("--out", default=None, help="results root (default: benchmarks/ in the repository)")
    p.set_defaults(fn=cmd_bench)
    p = sub.add_parser("notebooks", help="build notebooks from their sources and execute them in place")
    p.add_argument("paths", nargs="*", help="sources or notebooks (default: every lesson and solution)")
    p.add_argument("--build-only", action="store_true", help="build from the sources, do not execute")
    p.set_defaults(fn=cmd_notebooks)
    p = sub.add_parser("exercises", help="generate exercises/ from solutions/")
    p.add_argument("--check", action="store_true", help="verify exercises/ matches and every grader fails")
    p.set_defaults(fn=cmd_exercises)
    p = sub.add_parser("grade", help="grade an exercise notebook")
    p.add_argument("path")
    p.add_argument("--speed", action="store_true", help="on a GPU, also time the whole-op tasks (leaderboard)")
    p.set_defaults(fn=cmd_grade)
    p = sub.add_parser("leaderboard", help="print the speed records of graded tasks")
    p.add_argument("--path", default=None, help="leaderboard file (default: benchmarks/exercises/leaderboard.jsonl)")
    p.set_defaults(fn=cmd_leaderboard)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
