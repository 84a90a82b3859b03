"""A comparison a skeptic accepts: both models tuned by the same search, several seeds, the spread kept.

What you will learn:
- a fair comparison gives both contenders the same tuning: one grid of learning rates x warmup steps, one fixed
  budget of *steps* (not seconds: a step count reproduces on any machine and does not depend on what else runs);
- the pick is made on **validation strings of the training length only**, drawn from their own seed (apart from the
  training strings and from the test strings), never on the longer test lengths: choosing by the test would tune
  the very thing the lesson measures (length generalization);
- one run is an anecdote: each (task, model) is trained again from several seeds at the pick, and the records keep
  every seed, so the table can give the median and the range and the plot every seed's point;
- the models are small (a step launches many short kernels and waits on the host), so one training leaves the GPU
  mostly idle: independent trainings run concurrently, one per process (:func:`run_all`), and the record says how
  busy the GPU was (``nvidia-smi`` sampled during each phase).

``python -m gpulab bench 08 search`` runs :func:`bench_search` at ``SEARCH["full"]`` on a GPU (about 4 to 8 minutes
on an H100) and writes ``benchmarks/08_state_tracking/search/<gpu>-<date>-search.jsonl``; ``SEARCH["cpu"]`` (the
notebook) and ``SEARCH["tiny"]`` (tests, and the command without a GPU) run the same code in seconds. The records:

- ``kind "search"``, one per (task, model, lr, warmup) at ``search_seed``: ``val_accuracy`` and ``val_loss`` on
  ``val_samples`` strings of the training length (seed :func:`val_seed`), the grid (``grid_lr``, ``grid_warmup``),
  the budget (``steps``, ``batch_size``, ``schedule``) and ``picked`` (True on the one row per (task, model) that
  :func:`gpulab.tasks.spread.pick` chose);
- ``kind "accuracy"``, one per (task, model, seed, test length) at the pick: ``accuracy`` of the final state on
  fresh strings (seed ``seed + 1000 + length``), with the seed's own ``val_accuracy``;
- ``kind "utilization"``, one per phase: runs, worker processes, seconds, the GPU's utilization.

Readers (the pick, the spread table, the plot): :mod:`.spread`.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import multiprocessing
import os
import statistics
import subprocess
import threading
import time
import traceback

import torch
import torch.nn.functional as F

from gpulab import bench, dtypes, runtime
from gpulab.tasks.data import get_task
from gpulab.tasks.experiments import lstm_or_fallback, make_model, sized, warm_up
from gpulab.tasks.models import count_parameters
from gpulab.tasks.spread import MODELS, figure, pick, search_table, spread_table
from gpulab.tasks.training import accuracy_vs_length, model_device, train

__all__ = ["SEARCH", "VAL_SEED", "val_seed", "validate", "train_one", "run_all", "search", "bench_search"]

_MODEL_SIZES = {
    "full": {
        "lstm": {"d_model": 64, "num_heads": 1, "num_layers": 2},
        "transformer": {"d_model": 64, "num_heads": 4, "num_layers": 2},
    },
    "small": {
        "lstm": {"d_model": 16, "num_heads": 1, "num_layers": 1},
        "transformer": {"d_model": 16, "num_heads": 2, "num_layers": 1},
    },
}

SEARCH = {
    # the H100 run: 2 tasks x 2 models x 4 rates x 2 warmups = 32 searched trainings, then 2 x 2 x 3 seeds = 12
    "full": {
        "tasks": ("parity", "modsum5"),
        "train_length": 40,
        "test_lengths": (10, 20, 40, 80, 160, 320, 640),
        "lrs": (3e-4, 1e-3, 3e-3, 1e-2),
        "warmups": (0, 150),
        "steps": 1500,
        "batch_size": 128,
        "schedule": "cosine",
        "search_seed": 0,
        "seeds": (1, 2, 3),
        "val_samples": 1024,
        "samples": 1024,
        "dtype": "float32",
        **_MODEL_SIZES["full"],
        "workers": 16,
    },
    # the lesson notebook on CPU: one task, two rates, a few seconds in all
    "cpu": {
        "tasks": ("parity",),
        "train_length": 8,
        "test_lengths": (4, 8, 16, 32),
        "lrs": (1e-3, 1e-2),
        "warmups": (0,),
        "steps": 60,
        "batch_size": 16,
        "schedule": "cosine",
        "search_seed": 0,
        "seeds": (1, 2, 3),
        "val_samples": 64,
        "samples": 64,
        "dtype": "float32",
        **_MODEL_SIZES["small"],
        "workers": 1,
    },
    # tests and `python -m gpulab bench 08 search` without a GPU: every code path
    "tiny": {
        "tasks": ("parity",),
        "train_length": 6,
        "test_lengths": (3, 6, 12),
        "lrs": (1e-3, 1e-2),
        "warmups": (0, 2),
        "steps": 6,
        "batch_size": 8,
        "schedule": "cosine",
        "search_seed": 0,
        "seeds": (1, 2, 3),
        "val_samples": 16,
        "samples": 16,
        "dtype": "float32",
        **_MODEL_SIZES["small"],
        "workers": 1,
    },
}
"""The search's sizes: the grid (``lrs`` x ``warmups``), the budget (``steps`` of ``batch_size`` strings of
``train_length`` tokens, ``schedule``), the seeds, the evaluation and the number of worker processes."""

_KEYS = ("tasks", "train_length", "test_lengths", "lrs", "warmups", "steps", "batch_size", "schedule", "search_seed",
         "seeds", "val_samples", "samples", "dtype", "lstm", "transformer", "workers")  # fmt: skip

VAL_SEED = 500_000
"""Validation strings of seed ``s`` are drawn from ``VAL_SEED + s``: apart from the training strings (seed ``s``)
and from the test strings (``s + 1000 + length``, :func:`gpulab.tasks.accuracy_vs_length`)."""


def val_seed(seed: int) -> int:
    """The seed of the validation strings of a run seeded with ``seed``."""
    return VAL_SEED + runtime.integer("seed", seed)


def _size(size) -> dict:
    return sized(size, SEARCH, _KEYS, "gpulab.tasks.search.SEARCH['tiny']")


def validate(model: torch.nn.Module, task, length: int, samples: int, seed: int, batch_size: int = 256):
    """``(accuracy, loss)`` of the final state on ``samples`` fresh strings of ``length`` tokens drawn from ``seed``:
    the fraction right and the mean cross-entropy of the last position (the loss breaks ties between rates that get
    every validation string right). Eval mode, no gradients; the model's mode is restored."""
    task = get_task(task)
    length, samples = runtime.positive_int("length", length), runtime.positive_int("samples", samples)
    seed, batch_size = runtime.integer("seed", seed), runtime.positive_int("batch_size", batch_size)
    device, gen = model_device(model), torch.Generator().manual_seed(seed)
    was_training = model.training
    model.eval()
    correct, loss, seen = 0, 0.0, 0
    try:
        with torch.no_grad():
            while seen < samples:
                b = min(batch_size, samples - seen)
                x, y = task.sample(b, length, generator=gen, device=device)
                last = model(x)[:, -1].float()
                correct += int((last.argmax(-1) == y[:, -1]).sum())
                loss += float(F.cross_entropy(last, y[:, -1], reduction="sum"))
                seen += b
    finally:
        model.train(was_training)
    return correct / seen, loss / seen


_SPEC_KEYS = ("task", "model", "sizes", "dtype", "steps", "batch_size", "train_length", "schedule", "val_samples",
              "samples", "lr", "warmup", "seed", "test_lengths")  # fmt: skip


def _check_spec(spec) -> None:
    if not isinstance(spec, dict):
        raise TypeError(
            f"spec must be a dict of one training's settings (as search() builds), got {type(spec).__name__}."
        )
    missing = [k for k in _SPEC_KEYS if k not in spec]
    if missing:
        raise ValueError(f"spec is missing the keys {missing}; build specs as gpulab.tasks.search.search() does.")
    runtime.one_of("spec['model']", spec["model"], MODELS)


def train_one(spec: dict) -> dict:
    """One training of the search (runs in a worker process): build ``spec["model"]`` for ``spec["task"]`` from
    ``spec["seed"]``, train ``spec["steps"]`` steps at ``spec["lr"]`` after ``spec["warmup"]`` warmup steps, then
    validate at the training length (and, when ``spec["test_lengths"]`` is not empty, test at those lengths).
    Returns ``spec`` with what was found (``val_accuracy``, ``val_loss``, ``final_loss``, ``train_seconds``,
    ``parameters``, the LSTM's ``backend`` or the Transformer's ``attention``, ``accuracy`` per test length)."""
    _check_spec(spec)
    task, kind, seed = get_task(spec["task"]), spec["model"], spec["seed"]
    dtype = dtypes.as_dtype(spec["dtype"])
    out = dict(spec)
    if kind == "LSTM":
        model, backend, note = lstm_or_fallback(task, seed, dtype, **spec["sizes"])
        out.update({"backend": backend, **({"note": note} if note else {})})
    else:
        model = make_model(kind, task, seed=seed, dtype=dtype, **spec["sizes"])
        out["attention"] = model.blocks[0].mixer.attention
    warm_up(model, task, spec["batch_size"], spec["train_length"])  # compile outside the timed training
    log = train(model, task, steps=spec["steps"], batch_size=spec["batch_size"], length=spec["train_length"],
                lr=spec["lr"], seed=seed, schedule=spec["schedule"], warmup=spec["warmup"])  # fmt: skip
    out["val_accuracy"], out["val_loss"] = validate(
        model, task, spec["train_length"], spec["val_samples"], val_seed(seed)
    )
    out.update(final_loss=log.final_loss, train_seconds=log.seconds, steps_run=log.steps)
    out["parameters"] = count_parameters(model)
    if spec["test_lengths"]:
        acc = accuracy_vs_length(model, task, spec["test_lengths"], samples=spec["samples"], seed=seed + 1000)
        out["accuracy"] = {int(n): a for n, a in acc.items()}
    return out


def _safe(spec: dict) -> dict:
    try:
        return train_one(spec)
    except Exception as exc:  # noqa: BLE001 - recorded, and the other runs go on
        traceback.print_exc()
        return {**spec, "error": f"{type(exc).__name__}: {exc}"[:500]}


def _init_worker() -> None:
    torch.set_num_threads(1)  # one core per process: the models are tiny, the processes many


def _line(run: dict) -> str:
    """One finished training in a line (the bench's progress log)."""
    head = f"{run['task']} {run['model']} lr {run['lr']:g} warmup {run['warmup']} seed {run['seed']}"
    if "error" in run:
        return f"{head}: FAILED {run['error'][:200]}"
    tail = "".join(f" {n}:{a:.3f}" for n, a in run.get("accuracy", {}).items())
    return (f"{head}: val {run['val_accuracy']:.3f} (loss {run['val_loss']:.3g}), "
            f"{run['train_seconds']:.0f} s{'; test' + tail if tail else ''}")  # fmt: skip


def run_all(specs: list[dict], workers: int = 1, progress=None, verbose: bool = False, journal=None) -> list[dict]:
    """:func:`train_one` of every spec, in order; ``workers`` > 1 runs them concurrently, one per process (spawned:
    each opens its own CUDA context on the one GPU). A run that raises returns its spec with ``error``.
    ``verbose``: print a line per finished training (the GPU bench's log; the notebook's CPU run stays quiet);
    ``journal``: a file path to which each finished training is appended as one JSON line, as it finishes (a run
    cut short keeps what had finished)."""
    workers = runtime.positive_int("workers", workers)
    if isinstance(specs, (str, bytes, dict)) or not hasattr(specs, "__iter__"):
        raise TypeError(f"specs must be a list of dicts (one per training), got {type(specs).__name__}.")
    specs = list(specs)
    for s in specs:
        _check_spec(s)

    def report(run):
        if verbose:
            print(_line(run), flush=True)
        if journal is not None:
            with open(journal, "a") as f:
                f.write(json.dumps({**run, "environment": bench.environment()}) + "\n")

    if workers == 1 or len(specs) <= 1:
        out = []
        for s in progress(specs) if progress is not None else specs:
            out.append(_safe(s))
            report(out[-1])
        return out
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(
        min(workers, len(specs)), mp_context=ctx, initializer=_init_worker
    ) as p:
        futures = [p.submit(_safe, s) for s in specs]
        done = concurrent.futures.as_completed(futures)
        for f in progress(done) if progress is not None else done:
            report(f.result())
        return [f.result() for f in futures]


class _Utilization:
    """Samples the GPU's utilization (%) with ``nvidia-smi`` every 500 ms while the block runs (nothing on CPU)."""

    def __enter__(self):
        self.samples, self.proc = [], None
        if runtime.on_gpu():
            try:
                self.proc = subprocess.Popen(
                    ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "500"],
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                )  # fmt: skip
                self.thread = threading.Thread(target=self._read, daemon=True)
                self.thread.start()
            except OSError:
                self.proc = None
        return self

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.samples.append(float(line.split(",")[0]))
            except ValueError:
                pass

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
            self.thread.join(timeout=2)

    def summary(self) -> dict:
        s = self.samples
        return {"gpu_util_samples": len(s), "gpu_util_mean": statistics.fmean(s) if s else None,
                "gpu_util_median": statistics.median(s) if s else None}  # fmt: skip


def _common(cfg, task, kind) -> dict:
    return {
        "task": task, "model": kind, "sizes": cfg["lstm"] if kind == "LSTM" else cfg["transformer"],
        "dtype": cfg["dtype"], "steps": cfg["steps"], "batch_size": cfg["batch_size"],
        "train_length": cfg["train_length"], "schedule": cfg["schedule"], "val_samples": cfg["val_samples"],
        "samples": cfg["samples"],
    }  # fmt: skip


_RUN_KEYS = ("task", "model", "lr", "warmup", "seed", "steps", "batch_size", "train_length", "schedule",
             "val_samples", "val_accuracy", "val_loss", "final_loss", "train_seconds", "parameters", "backend",
             "attention", "note")  # fmt: skip


def _record(run: dict, kind: str, workers: int, **extra) -> bench.Result:
    params = {k: run[k] for k in _RUN_KEYS if k in run}
    params.update(run["sizes"])
    params.update(kind=kind, val_length=run["train_length"], val_seed=val_seed(run["seed"]), workers=workers, **extra)
    if "error" in run:
        params["error"] = run["error"]
    r = bench.record(
        lesson="08",
        case=f"{run['task']} {run['model']}" + (f" lr {run['lr']:g} warmup {run['warmup']}" * (kind == "search")),
        dtype=run["dtype"],
        shape=[run["batch_size"], run["train_length"]],
        **params,
    )
    if "train_seconds" in run and run.get("steps_run"):  # the training's wall time per step (runs sharing the GPU)
        r.wall_ms, r.reps = run["train_seconds"] * 1e3 / run["steps_run"], run["steps_run"]
    return r


def search(
    size=None, progress=None, workers: int | None = None, verbose: bool = False, journal=None
) -> list[bench.Result]:
    """The whole search at ``size`` (a name in :data:`SEARCH` or a dict shaped like them): every grid point at
    ``search_seed``, the pick per (task, model) by validation at the training length
    (:func:`gpulab.tasks.spread.pick`), then every seed at the pick, tested at ``test_lengths``. ``workers``
    processes run the trainings of a phase concurrently (default: the size's); ``verbose`` prints a line per
    training, ``journal`` (a file path) keeps each as a JSON line as it finishes (:func:`run_all`). Returns the
    records (module doc)."""
    cfg = _size(size)
    if workers is None:  # the size's, at most one per CPU core (each process drives its trainings from the host)
        workers = min(cfg["workers"], os.cpu_count() or 1)
    workers = runtime.positive_int("workers", workers)
    grid = {"grid_lr": list(cfg["lrs"]), "grid_warmup": list(cfg["warmups"])}
    specs = [
        {**_common(cfg, t, m), "lr": lr, "warmup": w, "seed": cfg["search_seed"], "test_lengths": ()}
        for t in cfg["tasks"] for m in MODELS for lr in cfg["lrs"] for w in cfg["warmups"]
    ]  # fmt: skip
    t0 = time.perf_counter()
    with _Utilization() as util:
        runs = run_all(specs, workers, progress, verbose, journal)
    phases = [("search", len(specs), time.perf_counter() - t0, util.summary())]  # workers used: min(workers, runs)
    if verbose:
        print(f"[{phases[0][2]:.0f} s] search: {len(specs)} trainings on {workers} worker(s)", flush=True)
    out = [_record(run, "search", workers, **grid, picked=False) for run in runs]
    chosen = pick(out)
    for r in chosen.values():
        r.params["picked"] = True
    seeds = [
        {**_common(cfg, t, m), "lr": chosen[t, m].params["lr"], "warmup": chosen[t, m].params["warmup"], "seed": s,
         "test_lengths": tuple(cfg["test_lengths"])}
        for t in cfg["tasks"] for m in MODELS if (t, m) in chosen for s in cfg["seeds"]
    ]  # fmt: skip
    t1 = time.perf_counter()
    with _Utilization() as util:
        runs = run_all(seeds, workers, progress, verbose, journal)
    phases.append(("seeds", len(seeds), time.perf_counter() - t1, util.summary()))
    if verbose:
        print(f"[{time.perf_counter() - t0:.0f} s] seeds: {len(seeds)} trainings at the pick", flush=True)
    for run in runs:
        if "error" in run:
            out.append(_record(run, "accuracy", workers, **grid, picked_by="val_accuracy"))
            continue
        for n, acc in run["accuracy"].items():
            out.append(_record(run, "accuracy", workers, **grid, picked_by="val_accuracy", test_length=n,
                               accuracy=acc))  # fmt: skip
    for phase, n, seconds, u in phases:
        out.append(bench.record(lesson="08", case=f"{phase} phase", kind="utilization", phase=phase, runs=n,
                                workers=min(workers, n), seconds=seconds, **u))  # fmt: skip
    return out


def bench_search(progress=None, size=None, workers: int | None = None):
    """``python -m gpulab bench 08 search``: :func:`search`, its tables printed; returns ``(results, figure)``."""
    results = search(size, progress, workers, verbose=True)
    print(search_table(results))
    print()
    print(spread_table(results))
    for r in results:
        if r.params.get("kind") == "utilization":
            util = r.params.get("gpu_util_mean")
            busy = f", GPU busy {util:.0f}% of samples' time" if util is not None and not math.isnan(util) else ""
            print(f"{r.case}: {r.params['runs']} trainings, {r.params['workers']} worker(s), "
                  f"{r.params['seconds']:.0f} s{busy}")  # fmt: skip
        elif "error" in r.params:
            print(f"FAILED {r.case}: {r.params['error']}")
    return results, figure(results)
