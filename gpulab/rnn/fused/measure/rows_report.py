"""Lesson 6's records of the one-SM kernels at 8 batch rows per program, read back as tables (no kernels here).

The records (``benchmarks/07_rnn_split/rows/``), made on the GPU by ``scripts/bench05_rows.py`` and offline by
``scripts/sass05_rows.py``:

- ``<gpu>-<date>-rows.jsonl``: the forward (with and without saved gates), the backward and forward+backward as a
  loop calls it, at 16 and 8 rows per program, beside cuDNN's fp16 ``nn.LSTM`` (dense, hidden NH * DH);
- ``<gpu>-<date>-product.jsonl``: the backward's product per gate against all gates at once (8 rows);
- ``<gpu>-<date>-rows_split.jsonl``: the split kernels (one head of 768) at 8 rows;
- ``sm90-rows-sass.jsonl``: the compiled step (sm_90, no GPU): special-function and tensor-core instructions,
  barriers, the longest chain of dependent tensor-core instructions, per step and warp.

:func:`path` finds the newest of a kind and :func:`load` reads it; :func:`rows_table`, :func:`product_table`,
:func:`split_table` and :func:`sass_table` print them; :func:`pick` finds one measurement for the lesson's sentences.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpulab import bench, runtime

__all__ = ["KINDS", "folder", "path", "load", "pick", "rows_table", "product_table", "split_table", "sass_table"]

KINDS = ("rows", "product", "rows_split", "sass")
"""The record kinds of the rows folder: the three GPU runs' parts and the offline SASS counts."""


def folder(root=None) -> Path:
    """The rows records' folder under the results root (:func:`gpulab.bench.results_dir`)."""
    return bench.results_dir(root) / "07_rnn_split" / "rows"


def path(kind: str, gpu: str = "h100", root=None) -> Path:
    """The file of ``kind`` (one of :data:`KINDS`) that :func:`load` reads: the newest ``*-<kind>.jsonl`` of ``gpu``
    (:func:`gpulab.bench.newest`'s order), or for 'sass' ``sm90-rows-sass.jsonl``; FileNotFoundError naming the script
    that makes it."""
    runtime.one_of("kind", kind, KINDS)
    if kind == "sass":
        file = folder(root) / "sm90-rows-sass.jsonl"
        if not file.exists():
            raise FileNotFoundError(f"{file} is missing: run `python scripts/sass05_rows.py {file}` (no GPU needed).")
        return file
    files = bench.record_files(folder(root), gpu, f"*-{kind}.jsonl")
    if not files:
        raise FileNotFoundError(
            f"no {kind!r} record for gpu {gpu!r} in {folder(root)}: run scripts/bench05_rows.py on that GPU."
        )
    return Path(bench.newest(files, part=kind))


def load(kind: str, gpu: str = "h100", root=None) -> list:
    """The records of :func:`path`: a list of :class:`gpulab.bench.Result`, or for 'sass' a list of dicts (compile
    facts, no device)."""
    file = path(kind, gpu, root)
    if kind == "sass":
        return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    return bench.load("07", path=file)


def pick(results, part: str, B: int, NH: int, DH: int, block_b: int, product: str | None = None):
    """The record of ``part`` ('forward', 'forward saving gates', 'backward', 'fwd+bwd as called') at one problem
    and rows per program (and backward product, where the record has several); None if it was not measured."""
    results = bench.result_list("results", results, source=_SOURCE)
    for r in results:
        p = r.params
        if (p.get("part"), p.get("B"), p.get("NH"), p.get("DH"), p.get("block_b")) == (part, B, NH, DH, block_b):
            if product is None or p.get("product") == product:
                return r
    return None


_SOURCE = " (from rows_report.load)"
_PARTS = ("forward", "forward saving gates", "backward", "fwd+bwd as called")


def _problems(results):
    return sorted({(r.params["B"], r.params["NH"], r.params["DH"]) for r in results if r.params.get("part")})


def _cudnn(results, B, NH, DH, training):
    for r in results:
        p = r.params
        if r.case.startswith("cuDNN") and (p.get("B"), p.get("NH"), p.get("DH"), p.get("training")) == (
            B, NH, DH, training,
        ):  # fmt: skip
            return r
    return None


def rows_table(results) -> str:
    """Per problem and rows per program: each part's device and wall ms; cuDNN's dense fp16 LSTM beside."""
    results = bench.result_list("results", results, source=_SOURCE)
    lines = [f"{'problem':14s} {'rows':>4s}" + "".join(f" {p[:20]:>20s}" for p in _PARTS)]
    for B, NH, DH in _problems(results):
        for bb in sorted({r.params["block_b"] for r in results if r.params.get("B") == B and "block_b" in r.params},
                         reverse=True):  # fmt: skip
            cells = []
            for part in _PARTS:
                r = pick(results, part, B, NH, DH, bb)
                cells.append(f"{r.ms:8.3f} / {r.wall_ms:6.3f}  " if r is not None else f"{'-':>20s}")
            lines.append(f"B{B:<3d} {NH:2d} x {DH:<4d} {bb:4d} " + " ".join(cells))
        dense = [_cudnn(results, B, NH, DH, t) for t in (False, True)]
        if all(dense):
            lines.append(f"{'':14s} cuDNN fp16 dense {NH * DH}: forward {dense[0].ms:.3f} / {dense[0].wall_ms:.3f}, "
                         f"fwd+bwd {dense[1].ms:.3f} / {dense[1].wall_ms:.3f}")  # fmt: skip
    return "ms: device / wall (eager, per call)\n" + "\n".join(lines)


def product_table(results) -> str:
    """The backward and forward+backward as called per product, per problem (device / wall ms)."""
    results = bench.result_list("results", results, source=_SOURCE)
    lines = [f"{'problem':14s} {'product':10s} {'backward':>18s} {'fwd+bwd as called':>18s}"]
    for B, NH, DH in _problems(results):
        for product in sorted({r.params.get("product") for r in results if r.params.get("B") == B} - {None}):
            bb = next(r.params["block_b"] for r in results if r.params.get("B") == B and "block_b" in r.params)
            cells = []
            for part in ("backward", "fwd+bwd as called"):
                r = pick(results, part, B, NH, DH, bb, product)
                cells.append(f"{r.ms:8.3f} / {r.wall_ms:6.3f}" if r is not None else f"{'-':>17s}")
            lines.append(f"B{B:<3d} {NH:2d} x {DH:<4d} {product:10s} " + " ".join(cells))
    return "ms: device / wall (eager, per call); 8 rows per program\n" + "\n".join(lines)


def split_table(results) -> str:
    """The split kernels at 8 and 16 rows per program (device / wall ms)."""
    results = bench.result_list("results", results, source=_SOURCE)
    lines = [f"{r.case:60s} {r.ms:8.3f} / {r.wall_ms:6.3f}" for r in results if r.ms == r.ms]
    return "ms: device / wall (eager, per call)\n" + "\n".join(lines)


def sass_table(rows) -> str:
    """The compiled step per kernel, head dim and rows: per step and warp."""
    rows = runtime.record_list("rows", rows, dict, "dicts of compiled-step counts", " (from load('sass'))", False)
    head = (
        f"{'kernel':22s} {'dh':>4s} {'warps':>5s} {'rows':>4s} {'product':10s} {'instr':>6s} {'MUFU':>5s} {'HMMA':>5s} "
    )
    lines = [head + f"{'chain':>5s} {'BAR':>4s} {'regs':>4s}"]
    for r in rows:
        lines.append(
            f"{r['kernel']:22s} {r['dh']:4d} {r['warps']:5d} {r['rows']:4d} {r.get('product', ''):10s} "
            f"{r['instructions']:6.0f} {r['mufu']:5.0f} {r['hmma']:5.0f} {r['hmma_chain']:5d} {r['barriers']:4.0f} "
            f"{r['registers']:4d}"
        )
    return f"sm_90, Triton {rows[0]['triton']}: per time step and warp (chain: dependent HMMAs)\n" + "\n".join(lines)
