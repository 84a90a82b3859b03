"""The language-modelling comparison as two benchmark parts: one search for all three models, then seeds at the
picks, every training alone on the GPU (one after another).

- ``python -m gpulab bench 06 lm-search`` (:func:`bench_lm_search`): every model of :data:`gpulab.tasks.lm.MODELS`
  at every (learning rate, warmup) of the grid, ``search_tokens`` bytes each from ``search_seed``; the pick per
  model is the lowest validation bits per byte at the end (records ``kind "lm-search"``, ``picked`` on the pick);
- ``python -m gpulab bench 06 lm`` (:func:`bench_lm`): each model at its pick (read from the newest ``lm-search``
  records of this device, or ``$GPULAB_LM_SEARCH``, a path) from every seed of ``seeds``, ``final_tokens`` bytes
  each, validated every ``eval_every`` bytes (records ``kind "lm"``: the curve of (tokens, seconds, val_bpb), the
  training throughput on both clocks, and 256 bytes generated from :data:`gpulab.tasks.lm.PROMPT`).

Both print a time estimate first (:func:`estimate`: the stored training-throughput records of lesson 6 scaled to
these models' parameters). Every record names the corpus by its sha256. ``$GPULAB_LM_JOURNAL`` (a file path): each
record is also appended there as one JSON line when it is made, so a run cut short keeps what finished.
``$GPULAB_LM_SEARCH_TOKENS`` and ``$GPULAB_LM_FINAL_TOKENS`` override the two budgets. Without a GPU both parts run
:data:`LM_RUNS` ``"tiny"`` on the committed CPU slice of the corpus (seconds; they check the code path, not the
claim). Tables and the figure: :mod:`.lm_results`.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time

from gpulab import bench, hardware, runtime
from gpulab.tasks import corpus as corpus_mod
from gpulab.tasks.lm import MODELS, PROMPT, build, generate, lstm_width, model_parameters, sizes, train_lm
from gpulab.tasks.lm_results import figure, final_table, search_table

__all__ = [
    "LM_RUNS",
    "runs",
    "estimate",
    "build_width",
    "picks",
    "stored_search",
    "lm_search",
    "lm_final",
    "bench_lm_search",
    "bench_lm",
]

LM_RUNS = {
    # the H200 run: 3 models x 5 rates x 2 warmups at 10 M bytes, then 3 models x 3 seeds at 100 M bytes
    "full": {
        "size": "full",
        "lrs": (5e-4, 1e-3, 2e-3, 4e-3, 8e-3),
        "warmups": (10, 100),
        "search_tokens": 10_000_000,
        "final_tokens": 100_000_000,
        "search_eval_every": 2_500_000,
        "eval_every": 5_000_000,
        "val_windows": 128,
        "search_seed": 0,
        "seeds": (1, 2, 3),
        "weight_decay": 0.1,
    },  # fmt: skip
    # tests and the command without a GPU
    "tiny": {
        "size": "tiny",
        "lrs": (1e-3, 3e-3, 1e-2, 3e-2),
        "warmups": (0, 4),
        "search_tokens": 1_024,
        "final_tokens": 4_096,
        "search_eval_every": 512,
        "eval_every": 1_024,
        "val_windows": 8,
        "search_seed": 0,
        "seeds": (1, 2, 3),
        "weight_decay": 0.1,
    },  # fmt: skip
}
"""The grid (``lrs`` x ``warmups`` steps), the two token budgets, the validation (every ``eval_every`` bytes, on
``val_windows`` windows), the seeds, over the models of ``gpulab.tasks.lm.LM_SIZES[size]``."""

_RUN_KEYS = ("size", "lrs", "warmups", "search_tokens", "final_tokens", "search_eval_every", "eval_every",
             "val_windows", "search_seed", "seeds", "weight_decay")  # fmt: skip
_PART = "lm-search"


def runs(name=None) -> dict:
    """``name`` (a key of :data:`LM_RUNS`; None: 'full' on a GPU, 'tiny' on CPU) or a dict shaped like them, with
    the budgets from ``$GPULAB_LM_SEARCH_TOKENS`` / ``$GPULAB_LM_FINAL_TOKENS`` when set."""
    if name is None:
        name = runtime.pick(cpu="tiny", gpu="full")
    if isinstance(name, dict):
        missing = [k for k in _RUN_KEYS if k not in name]
        if missing:
            raise ValueError(
                f"runs is missing the keys {missing}; shape it like gpulab.tasks.lm_bench.LM_RUNS['tiny']."
            )
        cfg = dict(name)
    elif isinstance(name, str) and name in LM_RUNS:
        cfg = dict(LM_RUNS[name])
    else:
        raise ValueError(f"runs={name!r} is not known; use one of {sorted(LM_RUNS)} or a dict shaped like them.")
    for key, var in (("search_tokens", "GPULAB_LM_SEARCH_TOKENS"), ("final_tokens", "GPULAB_LM_FINAL_TOKENS")):
        if os.environ.get(var):
            cfg[key] = runtime.positive_int(var, int(float(os.environ[var])))
    return cfg


def _corpus(cfg):
    """The prepared corpus for the 'full' size (checked), the CPU slice otherwise."""
    return corpus_mod.load() if cfg["size"] == "full" else corpus_mod.cpu_slice()


_THROUGHPUT_CASE = {"LSTM 1 head": "LSTM 1 head", "LSTM 12 heads": "LSTM 12 heads",
                    "Transformer": "Transformer 12 heads (flash)"}  # fmt: skip


def estimate(cfg, phase: str) -> tuple[float, str]:
    """Seconds the phase (``"search"`` or ``"final"``) should take on a GPU: its tokens per model over the stored
    training throughput of lesson 6 (``benchmarks/06_state_tracking/throughput/``, H100, d 768, bf16) of the same
    kind of model, scaled by the ratio of parameters (a step's work grows with them), plus 2 s per training
    (building, validations, generation) and 20 s per model (compiling its kernels: lesson 6's throughput run
    builds, checks and times a dozen models in about 2 minutes). Returns ``(seconds, how)``; NaN when no record is stored."""
    from gpulab.tasks.results import stored_throughput  # the stored records, read only here

    runtime.one_of("phase", phase, ("search", "final"))
    size = sizes(cfg["size"])
    # the repository's records when $GPULAB_BENCHMARKS points elsewhere (e.g. an output folder of the GPU machine)
    records = stored_throughput("h100") or stored_throughput("h100", pathlib.Path(__file__).parents[2] / "benchmarks")
    stored = {r.case: r for r in records}
    per_model = (len(cfg["lrs"]) * len(cfg["warmups"]), cfg["search_tokens"]) if phase == "search" else (
        len(cfg["seeds"]), cfg["final_tokens"])  # fmt: skip
    total, parts = 0.0, []
    for model in MODELS:
        r = stored.get(_THROUGHPUT_CASE[model])
        if r is None or not r.params.get("tokens_per_s"):
            return math.nan, f"no stored throughput record of {_THROUGHPUT_CASE[model]!r}"
        width = build_width(model, size)
        ours = model_parameters(model, width, size["num_layers"], size["heads"])
        rate = r.params["tokens_per_s"] * r.params["parameters"] / ours
        total += per_model[0] * (per_model[1] / rate + 2.0) + 20.0
        parts.append(f"{model} {rate / 1e6:.1f} M bytes/s")
    return total, f"{per_model[0]} trainings x {per_model[1] / 1e6:g} M bytes per model; " + ", ".join(parts)


def build_width(model: str, size: dict) -> int:
    """The width :func:`gpulab.tasks.lm.build` gives ``model`` at ``size`` (a dict of :data:`LM_SIZES`)."""
    if model == "LSTM 1 head":
        return lstm_width(size["d_model"], size["num_layers"], size["heads"], size["width_multiple"])
    return size["d_model"]


def _journal(r: bench.Result) -> None:
    path = os.environ.get("GPULAB_LM_JOURNAL")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(r.to_dict(), sort_keys=True) + "\n")


def _train(model, cfg, data, lr, warmup, seed, tokens, eval_every, progress=None):
    """Build and train one model; returns (info, out) or (info, None) with ``info['error']``."""
    size = sizes(cfg["size"])
    try:
        m, info = build(model, cfg["size"], seed=seed)
        out = train_lm(m, data, tokens=tokens, batch_size=size["batch_size"], length=size["length"], lr=lr,
                       warmup=warmup, seed=seed, eval_every=eval_every, val_windows=cfg["val_windows"],
                       weight_decay=cfg["weight_decay"], progress=progress)  # fmt: skip
        return m, info, out
    except Exception as exc:  # noqa: BLE001 - recorded, and the other trainings go on
        return None, {"error": f"{type(exc).__name__}: {exc}"[:500]}, None


def _record(kind, case, cfg, data, model, lr, warmup, seed, info, out, **extra) -> bench.Result:
    size = sizes(cfg["size"])
    params = {"kind": kind, "model": model, "lr": lr, "warmup": warmup, "seed": seed, "size": cfg["size"],
              "batch_size": size["batch_size"], "length": size["length"], "corpus": data.name,
              "corpus_sha256": data.sha256, "weight_decay": cfg["weight_decay"], "schedule": "cosine", **info,
              **extra}  # fmt: skip
    if out is not None:
        params.update({k: out[k] for k in ("curve", "steps", "tokens", "seconds", "device_seconds", "tokens_per_s",
                                           "final_loss", "val_bpb")})  # fmt: skip
    r = bench.record(lesson="06", case=case, dtype=size["dtype"], shape=[size["batch_size"], size["length"]],
                     **params)  # fmt: skip
    if out is not None and out["steps"]:
        r.reps = out["steps"]
        r.wall_ms = out["seconds"] * 1e3 / out["steps"]  # a training step, host included
        if not math.isnan(out["device_seconds"]):
            r.ms = out["device_seconds"] * 1e3 / out["steps"]  # the same steps on CUDA events
    _journal(r)
    return r


def lm_search(name=None, progress=None, verbose: bool = True) -> list[bench.Result]:
    """Every model at every grid point from ``search_seed`` (:data:`LM_RUNS`); the pick per model (the lowest final
    validation bits per byte) marked ``picked``. Returns the records (module doc)."""
    cfg = runs(name)
    data = _corpus(cfg)
    grid = {"grid_lr": list(cfg["lrs"]), "grid_warmup": list(cfg["warmups"])}
    out, t0 = [], time.perf_counter()
    for model in MODELS:
        for lr in cfg["lrs"]:
            for warmup in cfg["warmups"]:
                _, info, o = _train(model, cfg, data, lr, warmup, cfg["search_seed"], cfg["search_tokens"],
                                    cfg["search_eval_every"])  # fmt: skip
                r = _record("lm-search", f"{model} lr {lr:g} warmup {warmup}", cfg, data, model, lr, warmup,
                            cfg["search_seed"], info, o, picked=False, **grid)  # fmt: skip
                out.append(r)
                if verbose:
                    print(f"[{time.perf_counter() - t0:.0f} s] {_line(r)}", flush=True)
    for model in MODELS:
        ok = [r for r in out if r.params["model"] == model and math.isfinite(r.params.get("val_bpb", math.nan))]
        if ok:
            min(ok, key=lambda r: r.params["val_bpb"]).params["picked"] = True
    return out


def _line(r: bench.Result) -> str:
    p = r.params
    if "error" in p:
        return f"{r.case}: FAILED {p['error'][:200]}"
    return (f"{r.case}: val {p['val_bpb']:.3f} bits/byte after {p['tokens'] / 1e6:.3g} M bytes, "
            f"{p['seconds']:.1f} s, {p['tokens_per_s'] / 1e6:.2f} M bytes/s")  # fmt: skip


def picks(results) -> dict:
    """``{model: (lr, warmup)}`` of the records marked ``picked`` in ``results`` (``lm-search`` records)."""
    results = bench.result_list("results", results, allow_empty=True)
    return {r.params["model"]: (r.params["lr"], r.params["warmup"]) for r in results
            if r.params.get("kind") == "lm-search" and r.params.get("picked")}  # fmt: skip


def stored_search(cfg) -> tuple[list[bench.Result], pathlib.Path | None]:
    """The search records to pick from: ``$GPULAB_LM_SEARCH`` (a path) if set, else the newest ``lm-search``
    records of this device under ``benchmarks/06_state_tracking/lm/`` at the same size; ([], None) if none."""
    path = os.environ.get("GPULAB_LM_SEARCH")
    if path:
        return bench.load("06", path=path), pathlib.Path(path)
    device = bench.environment()["device"]
    folder = bench.results_dir() / "06_state_tracking" / "lm"
    files = [f for f in bench.record_files(folder, hardware.gpu_slug(device), f"*-{_PART}.jsonl")]
    for f in reversed(bench.by_run(files, _PART)):
        records = bench.load("06", path=f)
        if records and records[0].params.get("size") == cfg["size"]:
            return records, f
    return [], None


def lm_final(name=None, progress=None, search=None, verbose: bool = True) -> list[bench.Result]:
    """Each model at its pick from every seed of ``seeds``, ``final_tokens`` bytes, then 256 bytes generated from
    :data:`gpulab.tasks.lm.PROMPT` (seed 0). ``search``: the search's records (default :func:`stored_search`; on
    CPU without one, the tiny search is run first). Returns the final records (the search's are not repeated)."""
    cfg = runs(name)
    if search is None:
        search, path = stored_search(cfg)
        if not picks(search) and not runtime.on_gpu():
            search, path = lm_search(cfg, verbose=False), None
        if verbose and path is not None:
            print(f"picks from {path}", flush=True)
    chosen = picks(search)
    missing = [m for m in MODELS if m not in chosen]
    if missing:
        raise ValueError(f"no pick for {missing} in the search records; run `python -m gpulab bench 06 {_PART}` first "
                         "(or set GPULAB_LM_SEARCH to its .jsonl).")  # fmt: skip
    data, out, t0 = _corpus(cfg), [], time.perf_counter()
    for seed in cfg["seeds"]:  # seeds outside: a run cut short still has every model at its first seeds
        for model in MODELS:
            lr, warmup = chosen[model]
            m, info, o = _train(model, cfg, data, lr, warmup, seed, cfg["final_tokens"], cfg["eval_every"])
            extra = {"picked_by": "val_bpb at the search budget", "search_tokens": cfg["search_tokens"],
                     "prompt": PROMPT.decode()}  # fmt: skip
            if m is not None and math.isfinite(o["val_bpb"]):  # a diverged model has no distribution to sample
                text = generate(m, PROMPT, 256, seed=0, context=sizes(cfg["size"])["length"])
                extra.update(generated=text.decode("utf-8", errors="replace"), generated_hex=text.hex())
            out.append(_record("lm", f"{model} seed {seed}", cfg, data, model, lr, warmup, seed, info, o, **extra))
            if verbose:
                print(f"[{time.perf_counter() - t0:.0f} s] {_line(out[-1])}", flush=True)
    return out


def _announce(cfg, phase: str) -> None:
    seconds, how = estimate(cfg, phase)
    where = "on the GPU" if runtime.on_gpu() else "on an H100 (this run is the CPU size)"
    print(f"estimate for the {phase} {where}: {seconds / 60:.1f} min ({how})", flush=True)


def bench_lm_search(progress=None, name=None):
    """``python -m gpulab bench 06 lm-search``: :func:`lm_search`, its table printed; returns the records."""
    cfg = runs(name)
    _announce(cfg, "search")
    results = lm_search(cfg, progress)
    print(search_table(results))
    return results


def bench_lm(progress=None, name=None):
    """``python -m gpulab bench 06 lm``: :func:`lm_final`, its table printed; returns ``(results, figure)``."""
    cfg = runs(name)
    _announce(cfg, "final")
    results = lm_final(cfg, progress)
    print(final_table(results))
    return results, figure(results)
