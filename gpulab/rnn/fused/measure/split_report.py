"""Lesson 7: the split-head kernel's stored H100 measurements, read back as tables and a figure.

The records (``python -m gpulab bench 07 split`` on a GPU, :mod:`gpulab.rnn.fused.measure.split_bench`, under
``benchmarks/07_rnn_split/split/``; the stored ones from the probe script it replaced) are JSON lines: an
``env`` line (device, versions, date), then rows of kind ``check`` (the kernels against float64), ``stress``
(repeated launches and CUDA-graph replays), ``time`` (LSTM, B = 16, T = 1024, one head, bf16: the split fused
kernel, ``alternating`` and cuDNN's ``nn.LSTM`` in fp16 and bf16, with ``ms`` the device time and ``wall_ms`` the
eager wall time per call; ``pass_`` 'fwd+bwd' for training), ``sweep`` (the forward per block_u and warps, with
``no_barrier_ms``: the same launch without its barrier) and ``bsweep``/``bsweep2`` (the backward per tiling).
:func:`rows_of` reads the part's :class:`gpulab.bench.Result` records as such rows (their ``params``, ``ms`` and
``wall_ms``). A second record, ``*-cross.jsonl`` (``bench 07 cross``), holds rows of kind ``cross``: the LSTM
forward (one head, T = 1024, bf16) over batch at two head dims, the split kernel beside the one-SM fused kernel
(where it fits) and ``alternating``.
A third, ``*-candidates.jsonl`` (``bench 07 candidates``), holds rows of kind ``candidate``: every
fitting split tiling of lesson 8's LSTM layers, forward and backward kernel, device time, ``chosen`` marking the
chooser's pick at the time of the run. A fourth, ``*-partials.jsonl`` (``bench 07 partials``), holds
rows of kind ``candidate`` with a ``kernel`` ('partials': the backward that exchanges partial sums of dh;
'exchange dG': the version before it, in the stored run; the part times the current kernel only) and rows of kind
``fwd+bwd`` (one head of 768 through ``flashrnn`` beside cuDNN's ``nn.LSTM``, both clocks). A fifth,
``*-parts.jsonl``, is an experiment on the dG exchange (kind ``part``: the kernel with its product and exchange
skipped, ``SKIP_PRODUCT``), whose script was not kept. A sixth, ``*-steps.jsonl`` (``bench 07 steps``,
:mod:`gpulab.rnn.fused.measure.steps_bench`), holds rows of kind ``parts`` (a step of the forward and the backward at
one head of 768 split into its parts by clock stamps, per exchange: :func:`parts_table`) and ``time`` (the forward and
forward+backward with each exchange beside cuDNN: :func:`exchange_table`). A seventh, ``*-called.jsonl`` (``bench 07
called``, :mod:`gpulab.rnn.fused.measure.called_bench`), holds the recurrence as a training loop calls it (kind
``called``) and the tiny step's pieces (kind ``breakdown``): :func:`called_table`.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpulab import runtime
from gpulab.bench.records import by_run, newest, record_files, results_dir
from gpulab.course import palette

__all__ = [
    "load_split",
    "split_path",
    "split_table",
    "step_budget",
    "crossover_table",
    "warps_table",
    "backward_table",
    "training_rows",
    "plot_split",
    "parts_table",
    "exchange_table",
    "exchange_row",
    "hinted_table",
    "load_sass",
    "smem_rows",
    "smem_table",
    "called_table",
    "loop_over_graph",
    "time_row",
    "rows_of",
]

_FOLDER = ("07_rnn_split", "split")


# record -> what writes it (None: an experiment whose script was not kept)
_RECORDS = {"split": "python -m gpulab bench 07 split", "cross": "python -m gpulab bench 07 cross",
            "candidates": "python -m gpulab bench 07 candidates", "partials": "python -m gpulab bench 07 partials",
            "parts": None, "steps": "python -m gpulab bench 07 steps",
            "called": "python -m gpulab bench 07 called", "hinted": "python scripts/bench05_hinted.py OUT"}  # fmt: skip


def split_path(gpu: str = "h100", root=None, record: str = "split") -> Path:
    """The file :func:`load_split` reads: the newest ``*-<record>.jsonl`` of ``gpu`` (:func:`gpulab.bench.newest`'s
    order: date, then tag), or a FileNotFoundError saying which probe writes it."""
    if not isinstance(gpu, str) or not gpu:
        raise TypeError(f"gpu must be a GPU name such as 'h100', got {gpu!r}.")
    if record not in _RECORDS:
        raise ValueError(f"record must be one of {sorted(_RECORDS)}, got {record!r}.")
    folder = results_dir(root).joinpath(*_FOLDER)
    files = record_files(folder, gpu, f"*-{record}.jsonl")
    if not files:
        how = (f"run `{_RECORDS[record]}` on that GPU." if _RECORDS[record]
               else "an experiment whose script was not kept.")  # fmt: skip
        raise FileNotFoundError(f"no {record} records for {gpu!r} in {folder}; {how}")
    return Path(newest(files, part=record))


def _json_lines(path: Path) -> list[dict]:
    """The records of a ``.jsonl`` file, one dict per non-empty line."""
    with path.open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_split(gpu: str = "h100", root=None, record: str = "split") -> list[dict]:
    """The newest split record of ``gpu`` as a list of dicts (the ``env`` line first): ``record='split'`` for
    ``*-split.jsonl`` (checks, times, sweeps), ``'cross'`` for ``*-cross.jsonl`` (the batch crossovers),
    ``'candidates'`` for ``*-candidates.jsonl`` (every split tiling of lesson 8's layers), ``'partials'`` for
    ``*-partials.jsonl`` (the backward's kernels and training beside cuDNN), ``'parts'`` for ``*-parts.jsonl``.
    The file is :func:`split_path`'s."""
    return rows_of(_json_lines(split_path(gpu, root, record)))


_ENV = ("device", "sm_count", "torch", "triton", "mode", "date")


def rows_of(records) -> list[dict]:
    """Record dicts as the tables read them: a probe's rows as they are; :class:`gpulab.bench.Result` dicts (``python
    -m gpulab bench 07 split``, :mod:`gpulab.rnn.fused.measure.split_bench`) flattened to their ``params`` with ``ms``
    and ``wall_ms`` (an ``error`` instead where the provider did not run), after an ``env`` line from the first."""
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise TypeError(f"records must be a list of record dicts, got {type(records).__name__}.")
    results = [r for r in records if "lesson" in r and isinstance(r.get("params"), dict)]
    if not results:
        return records
    rows = [{"kind": "env", **{k: results[0].get(k) for k in _ENV}}]
    for r in records:
        if r not in results:
            rows.append(r)
            continue
        row = dict(r["params"])
        ms = r.get("ms")
        if r.get("status", "ok") == "ok" and isinstance(ms, (int, float)) and ms == ms:
            row.update(ms=ms, wall_ms=r.get("wall_ms"))
        else:
            row["error"] = r.get("status")
        rows.append(row)
    return rows


def _rows(rows, name="rows") -> list[dict]:
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and "kind" in r for r in rows):
        raise TypeError(
            f"{name} must be the list of record dicts that load_split() returns, got {type(rows).__name__}."
        )
    return rows


def time_row(rows, case: str, head_dim: int, training: bool = False) -> dict | None:
    """The ``time`` record of ``case`` (e.g. 'fused split (chosen)', 'cuDNN nn.LSTM float16', 'alternating'; the
    training rows' cases end in ' fwd+bwd' except the split kernel's, 'fused split fwd+bwd') at ``head_dim``, or None
    if the run has none."""
    rows = _rows(rows)
    if not isinstance(case, str):
        raise TypeError(f"case must be a str such as 'cuDNN nn.LSTM float16', got {case!r}.")
    return _time(rows, case, runtime.positive_int("head_dim", head_dim), training)


def _time(rows, case, dh, training):
    for r in rows:
        if r.get("kind") == "time" and r.get("case") == case and r.get("DH") == dh and "ms" in r:
            if (r.get("pass_") == "fwd+bwd") == training:
                return r
    return None


def _env(rows) -> str:
    env = rows[0] if rows and rows[0].get("kind") == "env" else {}
    versions = f"torch {env.get('torch', '?')}, triton {env.get('triton', '?')}"
    return f"{env.get('device', '?')}, {versions}, {env.get('date', '?')}"


def _cell(r, key="ms"):
    return f"{r[key]:8.2f}" if r is not None and r.get(key) is not None else f"{'-':>8s}"


def split_table(rows) -> str:
    """Per head dim, forward and forward+backward: the split kernel, cuDNN fp16/bf16 and alternating on both clocks
    (device ms / eager wall ms), and the split kernel's time over cuDNN fp16's on the wall clock."""
    rows = _rows(rows)
    dims = sorted({r["DH"] for r in rows if r.get("kind") == "time" and r.get("case", "").startswith("fused split")})
    lines = [
        f"{_env(rows)} | LSTM, one head, B = 16, T = 1024, bf16 "
        "(cuDNN: dense nn.LSTM, also computes the input product)",
        f"{'pass':8s} {'DH':>5s} {'split ms':>8s} {'wall':>8s} {'cuDNN16':>8s} {'wall':>8s} {'cuDNNbf':>8s} "
        f"{'altern.':>8s}  split/cuDNN16 (wall)",
    ]
    for training, label in ((False, "fwd"), (True, "fwd+bwd")):
        suffix = " fwd+bwd" if training else ""
        for dh in dims:
            ours = _time(rows, "fused split fwd+bwd" if training else "fused split (chosen)", dh, training)
            fp16 = _time(rows, f"cuDNN nn.LSTM float16{suffix}", dh, training)
            bf16 = _time(rows, f"cuDNN nn.LSTM bfloat16{suffix}", dh, training)
            alt = _time(rows, f"alternating{suffix}", dh, training)
            if ours is None:
                continue
            ratio = f"{ours['wall_ms'] / fp16['wall_ms']:.2f}x" if fp16 and ours.get("wall_ms") else "-"
            lines.append(
                f"{label:8s} {dh:5d} {_cell(ours)} {_cell(ours, 'wall_ms')} {_cell(fp16)} {_cell(fp16, 'wall_ms')} "
                f"{_cell(bf16)} {_cell(alt)}  {ratio}"
            )
    return "\n".join(lines)


def step_budget(rows, head_dim: int = 768) -> str:
    """The forward's step at ``head_dim`` per swept (block_u, warps): ns per step in all, without the barrier, the
    barrier's share; and cuDNN fp16's ns per step (its whole forward / T)."""
    rows = _rows(rows)
    head_dim = runtime.positive_int("head_dim", head_dim)
    sweep = [r for r in rows if r.get("kind") == "sweep" and r.get("DH") == head_dim and "ms" in r]
    if not sweep:
        raise ValueError(f"head_dim={head_dim}: no forward sweep in these records; swept: "
                         f"{sorted({r['DH'] for r in rows if r.get('kind') == 'sweep'})}.")  # fmt: skip
    T = 1024
    lines = [f"forward step at DH = {head_dim} (ns per step, device time / T = {T})",
             f"{'block_u':>7s} {'P':>4s} {'warps':>5s} {'step':>7s} {'no barrier':>10s} {'barrier':>8s}"]  # fmt: skip
    for r in sorted(sweep, key=lambda r: (r["block_u"], r["warps"])):
        step, free = r["ms"] * 1e6 / T, r["no_barrier_ms"] * 1e6 / T
        lines.append(f"{r['block_u']:7d} {r['split']:4d} {r['warps']:5d} {step:7.0f} {free:10.0f} {step - free:8.0f}")
    fp16 = _time(rows, "cuDNN nn.LSTM float16", head_dim, False)
    if fp16:
        lines.append(f"cuDNN fp16 (dense nn.LSTM, input product included): {fp16['ms'] * 1e6 / T:.0f} ns per step")
    return "\n".join(lines)


def parts_table(rows) -> str:
    """The step's budget from in-kernel clocks (``parts`` rows): per direction and exchange, ns per step of each part
    (the backward's in the order of :data:`gpulab.rnn.fused.clocks.BACKWARD_PARTS`: exchange, pointwise, product),
    the stamped step, and the unstamped launch's device time per step (ms * 1e6 / T): a stamp waits for its value,
    so the stamped step is longer than the kernel's own and its parts are a budget, not a profile."""
    rows = _rows(rows)
    parts = [r for r in rows if r.get("kind") == "parts" and "ms" in r and r.get("parts")]
    if not parts:
        raise ValueError("no 'parts' rows in these records: load them with load_split(record='steps').")
    T = 1024
    names = ("inputs", "exchange", "product", "pointwise", "stores", "barrier")  # clocks.PARTS
    lines = [
        f"{_env(rows)} | LSTM, one head of 768, B = 16, T = {T}, bf16: ns per step (clock stamps, one thread per "
        "program, mean over programs and steps)",
        f"{'direction':9s} {'exchange':8s} {'P':>3s} " + " ".join(f"{n:>9s}" for n in names)
        + f" {'stamped':>8s} {'unstamped':>9s}",
    ]  # fmt: skip
    broken = []
    for r in parts:
        if any(not -1e6 < r["parts"].get(n, 0.0) < 1e6 for n in names):  # a stamp the kernel did not write
            broken.append(f"{r['direction']} {r['exchange']}")
            cells = " ".join(f"{'-':>9s}" for n in names)
        else:
            cells = " ".join(f"{r['parts'].get(n, float('nan')):9.0f}" for n in names)
        lines.append(f"{r['direction']:9s} {r['exchange']:8s} {r['programs']:3d} {cells} {r['step_ns']:8.0f} "
                     f"{r['ms'] * 1e6 / T:9.0f}")  # fmt: skip
    if broken:
        lines.append(f"-: {', '.join(broken)}: a stamp missing in that run (the kernel did not write it), so its parts "
                     "are not shown; its whole step is")  # fmt: skip
    return "\n".join(lines)


def hinted_table(rows) -> str:
    """The forward's exchange candidates of ``scripts/bench05_hinted.py`` (``record='hinted'``): per exchange, units
    per program and warps, device and wall ms, the stamped parts (ns per step), then cuDNN fp16 of the same run."""
    rows = _rows(rows)
    cands = [r for r in rows if r.get("kind") == "hinted" and r.get("exchange") and r.get("direction") != "backward"]
    if not cands:
        raise ValueError("no candidate rows in these records: load them with load_split(record='hinted').")
    names = ("exchange", "product", "pointwise", "stores", "barrier")
    lines = [f"{_env(rows)} | LSTM forward, one head of 768, B = 16, T = 1024, bf16; parts: ns per step (stamps)",
             f"{'exchange':8s} {'units':>5s} {'warps':>5s} {'P':>3s} {'ms':>8s} {'wall ms':>8s} "
             + " ".join(f"{n:>9s}" for n in names) + f" {'stamped':>8s}"]  # fmt: skip
    for r in cands:
        if "ms" not in r:
            lines.append(f"{r['exchange']:8s} {r['block_u']:5d} {r['warps']:5d}  {r.get('error', 'not run')}")
            continue
        cells = " ".join(f"{r['parts'][n]:9.0f}" for n in names)
        lines.append(f"{r['exchange']:8s} {r['block_u']:5d} {r['warps']:5d} {r['programs']:3d} {_cell(r)} "
                     f"{_cell(r, 'wall_ms')} {cells} {r['step_ns']:8.0f}")  # fmt: skip
    for r in rows:
        if r.get("kind") == "hinted" and "exchange" not in r and "ms" in r:  # the cuDNN row (no exchange)
            lines.append(f"{'cuDNN nn.LSTM fp16':26s} {_cell(r)} {_cell(r, 'wall_ms')}")
    return "\n".join(lines)


SMEM_BYTES_PER_CLOCK = 128
"""Shared-memory bytes an SM moves per clock (H100: 32 banks of 4 bytes)."""


def load_sass(root=None) -> list[dict]:
    """The split forward's compiled step per tiling (``split/sm90-split-sass.jsonl``, written without a GPU by
    ``python scripts/sass05_split.py``): per step and warp its instructions, HMMAs, barriers and shared-memory bytes
    by instruction kind."""
    path = results_dir(root).joinpath(*_FOLDER, "sm90-split-sass.jsonl")
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python scripts/sass05_split.py {path}` (no GPU needed).")
    return _json_lines(path)


def smem_rows(sass, hinted) -> list[dict]:
    """Per compiled tiling also timed in ``hinted`` (:func:`load_split` ``record='hinted'``): the shared-memory bytes
    per step of the whole program (all warps), the time they take at :data:`SMEM_BYTES_PER_CLOCK` at the stamps' own
    clock (cycles per ns), and the stamped product's ns."""
    if not isinstance(sass, list) or not all(isinstance(r, dict) and "shared_bytes" in r for r in sass) or not sass:
        raise TypeError("sass must be the non-empty list of compiled-step rows that load_sass() returns.")
    timed = {(r.get("exchange"), r.get("block_u"), r.get("warps")): r for r in _rows(hinted)
             if r.get("kind") == "hinted" and "parts" in r and r.get("direction") != "backward"}  # fmt: skip
    out = []
    for c in sass:
        t = timed.get((c["exchange"], c["block_u"], c["warps"]))
        if t is None:
            continue
        ldsm, every = c["shared_bytes"].get("ldsm", 0) * c["warps"], sum(c["shared_bytes"].values()) * c["warps"]
        clock = t["cycles_per_ns"] * SMEM_BYTES_PER_CLOCK
        out.append({"exchange": c["exchange"], "block_u": c["block_u"], "warps": c["warps"], "ldsm_bytes": ldsm,
                    "shared_bytes": every, "ldsm_ns": ldsm / clock, "shared_ns": every / clock,
                    "product_ns": t["parts"]["product"], "hmma_per_warp": c["hmma"],
                    "barriers": c["barriers"]})  # fmt: skip
    return out


def smem_table(rows) -> str:
    """:func:`smem_rows` as a table."""
    if not isinstance(rows, list) or not rows:
        raise ValueError("rows must be the non-empty list that smem_rows() returns (a tiling both compiled and timed).")
    lines = [f"{'exchange':8s} {'units':>5s} {'warps':>5s} {'ldmatrix KB':>11s} {'all smem KB':>11s} "
             f"{'ldmatrix ns':>11s} {'all smem ns':>11s} {'product ns':>10s} {'HMMA/warp':>9s} "
             f"{'BAR':>4s}"]  # fmt: skip
    for r in rows:
        lines.append(f"{r['exchange']:8s} {r['block_u']:5d} {r['warps']:5d} {r['ldsm_bytes'] / 1024:11.0f} "
                     f"{r['shared_bytes'] / 1024:11.0f} {r['ldsm_ns']:11.0f} {r['shared_ns']:11.0f} "
                     f"{r['product_ns']:10.0f} {r['hmma_per_warp']:9d} {r['barriers']:4d}")  # fmt: skip
    return (
        f"per step of one program (all its warps), at {SMEM_BYTES_PER_CLOCK} B per clock; product: the stamps\n"
        + "\n".join(lines)
    )


def exchange_row(rows, exchange: str, training: bool = False) -> dict | None:
    """The ``time`` row of the split kernels with ``exchange`` ('barrier', 'tagged', 'flags', 'hinted'), or for
    ``exchange='cuDNN float16'`` cuDNN's fp16 row, forward or forward+backward (None if the run has none)."""
    rows = _rows(rows)
    suffix = " fwd+bwd" if training else ""
    case = f"cuDNN nn.LSTM float16{suffix}" if exchange == "cuDNN float16" else f"split {exchange}{suffix}"
    for r in rows:
        if r.get("kind") == "time" and r.get("case") == case and bool(r.get("training")) == training and "ms" in r:
            return r
    return None


def exchange_table(rows) -> str:
    """Forward and forward+backward of one head of 768 per exchange beside cuDNN fp16, device ms / eager wall ms."""
    rows = _rows(rows)
    lines = [f"{_env(rows)} | LSTM, one head of 768, B = 16, T = 1024, bf16 (cuDNN: dense nn.LSTM fp16)",
             f"{'pass':8s} {'exchange':14s} {'ms':>8s} {'wall ms':>8s}"]  # fmt: skip
    for training, label in ((False, "fwd"), (True, "fwd+bwd")):
        for e in ("barrier", "tagged", "flags", "hinted", "cuDNN float16"):
            r = exchange_row(rows, e, training)
            if r is not None:
                lines.append(f"{label:8s} {e:14s} {_cell(r)} {_cell(r, 'wall_ms')}")
    return "\n".join(lines)


def loop_over_graph(gpu: str = "h100", root=None) -> list[dict]:
    """Every stored ``bench 07 called`` run of ``gpu``, oldest first (date, then tag): ``{"file", "loop", "graph",
    "ratio", "loop_device", "loop_host"}``, the main problem's loop step and its CUDA graph on the eager wall clock,
    the first over the second, and the loop's device time and host time per step (None where a run did not record
    it; runs without both wall clocks are left out): how the loop's margin over the graph moves from run to run."""
    if not isinstance(gpu, str) or not gpu:
        raise TypeError(f"gpu must be a GPU name such as 'h100', got {gpu!r}.")
    out = []
    for path in by_run(record_files(results_dir(root).joinpath(*_FOLDER), gpu, "*-called.jsonl"), part="called"):
        rows = rows_of(_json_lines(path))
        main = {r.get("mode"): r for r in rows if r.get("kind") == "called" and r.get("problem") == "main"}
        loop, graph = main.get("loop", {}), main.get("graph", {})
        if loop.get("wall_ms") and graph.get("wall_ms"):
            out.append({"file": path.name, "loop": loop["wall_ms"], "graph": graph["wall_ms"],
                        "ratio": loop["wall_ms"] / graph["wall_ms"], "loop_device": loop.get("ms"),
                        "loop_host": loop.get("host_ms")})  # fmt: skip
    return out


def called_table(rows) -> str:
    """Per problem and mode (``called`` rows): device ms, eager wall ms and the host's own ms of a step (``host_ms``,
    where the record has it), and the wall time over the CUDA graph's; then the tiny step's pieces (``breakdown``)
    with their sum, the kernels' device time and one eager op."""
    rows = _rows(rows)
    called = [r for r in rows if r.get("kind") == "called" and "ms" in r]
    if not called:
        raise ValueError("no 'called' rows in these records: load them with load_split(record='called').")
    head = f"{'problem':8s} {'mode':18s} {'ms':>8s} {'wall ms':>8s} {'host ms':>8s}  wall / graph's wall"
    lines = [f"{_env(rows)} | LSTM, bf16, Wx given, flashrnn(backend='fused'), one step = forward+backward", head]
    graphs = {r["problem"]: r for r in called if r["mode"] == "graph"}
    for r in called:
        g = graphs.get(r["problem"])
        ratio = f"{r['wall_ms'] / g['wall_ms']:.2f}x" if g and r["mode"] not in ("graph", "forward") else ""
        host = f"{r['host_ms']:8.3f}" if r.get("host_ms") is not None else f"{'-':>8s}"  # older records: none
        lines.append(f"{r['problem']:8s} {r['mode']:18s} {r['ms']:8.3f} {r['wall_ms']:8.3f} {host}  {ratio}")
    for b in (r for r in rows if r.get("kind") == "breakdown"):
        lines.append(f"\n{b['problem']} step, {b['step_wall_ms']:.3f} ms wall, in pieces (each timed alone):")
        for name, ms in b["pieces_ms"].items():
            lines.append(f"  {name:32s} {ms:8.3f} ms")
        share = b["pieces_sum_ms"] / b["step_wall_ms"]
        lines.append(f"  {'all pieces':32s} {b['pieces_sum_ms']:8.3f} ms ({share:.0%} of the step)")
        if b.get("kernels_device_ms") is not None:
            op = b.get("one_op_ms")
            one = f"; one eager op: {op:.3f} ms wall" if op is not None else ""
            lines.append(f"  kernels: {b['kernels_per_step']} per step, {b['kernels_device_ms']:.3f} ms device time "
                         f"(the graph's replay){one}")  # fmt: skip
    return "\n".join(lines)


def crossover_table(rows) -> str:
    """Per head dim and batch (``cross`` rows): the LSTM forward of the split kernel, the one-SM fused kernel ('-'
    where one SM cannot hold the head) and ``alternating``, device ms / eager wall ms, and the fastest on the wall
    clock with its speed over the runner-up's."""
    rows = [r for r in _rows(rows) if r.get("kind") == "cross" and "ms" in r]
    if not rows:
        raise ValueError("no 'cross' rows in these records: load them with load_split(record='cross').")
    cases = ("split", "one-SM fused", "alternating")
    lines = [
        "LSTM forward, one head, T = 1024, bf16: device ms / eager wall ms",
        f"{'DH':>5s} {'B':>4s} {'split':>15s} {'one-SM fused':>15s} {'alternating':>15s}  fastest (wall)",
    ]
    for dh, batch in sorted({(r["DH"], r["B"]) for r in rows}):
        at = {r["case"]: r for r in rows if r["DH"] == dh and r["B"] == batch}
        cells = [f"{at[c]['ms']:6.2f} / {at[c]['wall_ms']:6.2f}" if c in at else f"{'-':>15s}" for c in cases]
        ranked = sorted((at[c]["wall_ms"], c) for c in cases if c in at)
        lead = f", {ranked[1][0] / ranked[0][0]:.2f}x the runner-up's speed" if len(ranked) > 1 else ""
        lines.append(f"{dh:5d} {batch:4d} {cells[0]:>15s} {cells[1]:>15s} {cells[2]:>15s}  {ranked[0][1]}{lead}")
    return "\n".join(lines)


def warps_table(rows) -> str:
    """Per problem and kernel (``candidate`` rows): the pick's device time at the run, the fastest tiling's, and the
    fastest with the pick's block_u and block_b (the tiles the estimate chose; only the warps differ)."""
    rows = [r for r in _rows(rows) if r.get("kind") == "candidate" and "ms" in r]
    if not rows:
        raise ValueError("no 'candidate' rows in these records: load them with load_split(record='candidates').")
    lines = [
        "LSTM, T = 1024, bf16; device ms (block_u x block_b, warps)",
        f"{'problem':>14s} {'kernel':>8s} {'pick':>22s} {'same tiles, best warps':>24s} {'fastest':>22s}",
    ]
    cell = lambda r: f"{r['ms']:6.2f} ({r['block_u']}x{r['block_b']}, {r['warps']}w)"  # noqa: E731
    for key in sorted({(r["B"], r["NH"], r["DH"], r["direction"]) for r in rows}, key=lambda k: (-k[1], k[3])):
        at = [r for r in rows if (r["B"], r["NH"], r["DH"], r["direction"]) == key]
        pick = next((r for r in at if r.get("chosen")), None)
        fastest = min(at, key=lambda r: r["ms"])
        same = min((r for r in at if pick and (r["block_u"], r["block_b"]) == (pick["block_u"], pick["block_b"])),
                   key=lambda r: r["ms"], default=None)  # fmt: skip
        problem = f"B{key[0]} {key[1]}x{key[2]}"
        lines.append(f"{problem:>14s} {key[3]:>8s} {cell(pick) if pick else '-':>22s} "
                     f"{cell(same) if same else '-':>24s} {cell(fastest):>22s}")  # fmt: skip
    return "\n".join(lines)


def backward_table(rows, steps: int = 1024) -> str:
    """The backward kernels of a ``partials`` record, per problem: the dG exchange (its best of the warps timed),
    the partial-sum exchange (the chooser's pick and the fastest tiling), device ms and us per step; then the
    ``fwd+bwd`` rows (ours and cuDNN's, both clocks)."""
    rows = _rows(rows)
    steps = runtime.positive_int("steps", steps)
    cands = [r for r in rows if r.get("kind") == "candidate" and "ms" in r and "kernel" in r]
    if not cands:
        raise ValueError("no backward 'candidate' rows in these records: load_split(record='partials') has them.")
    us = lambda r: f"{r['ms']:6.2f} ({1e3 * r['ms'] / steps:4.1f} us)"  # noqa: E731
    lines = [
        f"LSTM backward kernel alone, T = {steps}, bf16, device ms (us per step); {_env(rows)}",
        f"{'problem':>12s} {'exchange dG':>17s} {'partials, pick':>17s} {'partials, best':>17s} {'speed-up':>8s}",
    ]
    for key in sorted({(r["B"], r["NH"], r["DH"]) for r in cands}, key=lambda k: (k[2], k[0])):
        at = [r for r in cands if (r["B"], r["NH"], r["DH"]) == key]
        old = min((r for r in at if r["kernel"] != "partials"), key=lambda r: r["ms"], default=None)
        new = [r for r in at if r["kernel"] == "partials"]
        pick = next((r for r in new if r.get("chosen")), None)
        best = min(new, key=lambda r: r["ms"], default=None)
        gain = f"{old['ms'] / pick['ms']:7.2f}x" if old and pick else f"{'-':>8s}"
        problem = f"B{key[0]} {key[1]}x{key[2]}"
        lines.append(f"{problem:>12s} {us(old) if old else '-':>17s} {us(pick) if pick else '-':>17s} "
                     f"{us(best) if best else '-':>17s} {gain}")  # fmt: skip
    train = [r for r in rows if r.get("kind") == "fwd+bwd"]
    if train:
        lines.append("forward+backward (all four gradients; cuDNN's dense nn.LSTM also computes its input product):")
        for r in train:
            lines.append(f"  B{r['B']} {r['NH']}x{r['DH']} {r['case']:58s} {r['ms']:6.2f} ms device, "
                         f"{r['wall_ms']:6.2f} ms wall")  # fmt: skip
    return "\n".join(lines)


def training_rows(rows) -> dict[str, dict]:
    """The ``fwd+bwd`` rows of a ``partials`` record by case, the case's note in parentheses dropped: 'gpulab
    fused', 'cuDNN nn.LSTM float16', 'cuDNN nn.LSTM bfloat16' (both clocks: ``ms``, ``wall_ms``)."""
    train = {r["case"].split(" (")[0]: r for r in _rows(rows) if r.get("kind") == "fwd+bwd"}
    if not train:
        raise ValueError("no 'fwd+bwd' rows in these records: load_split(record='partials') has them.")
    return train


def plot_split(rows, head_dim: int = 768):
    """Two panels: (a) forward time vs head dim (split, cuDNN fp16 and bf16, alternating; device time, log scale);
    (b) the forward step at ``head_dim`` per swept tiling, stacked: the work without the barrier, and the barrier;
    cuDNN fp16's step as a line."""
    import matplotlib.pyplot as plt  # deferred: only the figure needs it

    rows = _rows(rows)
    head_dim = runtime.positive_int("head_dim", head_dim)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    series = [  # (case, palette style): cuDNN's two dtypes one colour, bf16 dashed
        ("fused split (chosen)", palette.style("split", label="gpulab split (chosen tiling)")),
        ("cuDNN nn.LSTM float16", palette.style("cudnn", label="cuDNN fp16")),
        ("cuDNN nn.LSTM bfloat16", palette.style("cudnn", label="cuDNN bf16", linestyle="--", markerfacecolor="none")),
        ("alternating", palette.style("alternating", label="gpulab alternating")),
    ]
    dims = sorted({r["DH"] for r in rows if r.get("kind") == "time" and r.get("case") == series[0][0]})
    for case, style in series:
        pts = [(dh, _time(rows, case, dh, False)) for dh in dims]
        pts = [(dh, r["ms"]) for dh, r in pts if r is not None]
        if pts:
            ax1.plot(*zip(*pts), **style)
    ax1.set_yscale("log")
    ticks = [t for t in (1, 2, 3, 5, 10, 20, 30, 50, 100, 200) if ax1.get_ylim()[0] <= t <= ax1.get_ylim()[1]]
    ax1.set_yticks(ticks, [str(t) for t in ticks])  # plain numbers, not 3 x 10^0
    ax1.minorticks_off()
    ax1.set_xticks(dims, [str(d) for d in dims])
    ax1.set_xlabel("head dim (one head)")
    ax1.set_ylabel("forward, ms (device time)")
    ax1.set_title("LSTM forward, B = 16, T = 1024")
    palette.apply(ax1)
    ax1.legend(fontsize=8)
    sweep = sorted((r for r in rows if r.get("kind") == "sweep" and r.get("DH") == head_dim and "ms" in r),
                   key=lambda r: (r["block_u"], r["warps"]))  # fmt: skip
    labels = [f"u{r['block_u']}\nP{r['split']}\n{r['warps']}w" for r in sweep]
    free = [r["no_barrier_ms"] * 1e6 / 1024 for r in sweep]
    barrier = [(r["ms"] - r["no_barrier_ms"]) * 1e6 / 1024 for r in sweep]
    x = range(len(sweep))
    split = palette.color("split")
    ax2.bar(x, free, color=split, label="gpulab split: step without the barrier")
    ax2.bar(x, barrier, bottom=free, color=split, alpha=0.4, hatch="//", label="gpulab split: the barrier")
    fp16 = _time(rows, "cuDNN nn.LSTM float16", head_dim, False)
    if fp16:
        ax2.axhline(fp16["ms"] * 1e6 / 1024, color=palette.color("cudnn"), ls="--", lw=1, label="cuDNN fp16 step")
    ax2.set_xticks(list(x), labels, fontsize=8)
    ax2.set_ylabel("ns per step")
    ax2.set_title(f"forward step at DH = {head_dim}: block_u, programs P, warps")
    palette.apply(ax2)
    ax2.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig
