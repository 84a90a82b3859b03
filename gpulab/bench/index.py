"""The current record set: ``benchmarks/INDEX.json`` names, per lesson, part and GPU, the record file(s) that the
lessons, the README generator and the website show.

A part is what one benchmark run measures ('main' for a lesson's own benchmark, 'hopper', 'v3/tune', 'split/cross',
...). A new run of a part replaces its entry; the run it supersedes moves to ``benchmarks/history/<lesson>/``, which
no reader opens (:func:`current` refuses a path there). :func:`entries` lists every entry, for the tests and tools.

Layout of the file::

    {"lessons": {"04": {"main": {"nvidia-h100-80gb-hbm3": ["04_flash_attention/nvidia-h100-80gb-hbm3-2026-11-25.jsonl"]}
                        }},
                 "05": {"hopper": {...}}, ...}}
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from gpulab import hardware, runtime

__all__ = ["INDEX_NAME", "HISTORY", "results_dir", "read_index", "entries", "current", "current_file", "parts"]

INDEX_NAME = "INDEX.json"
HISTORY = "history"
"""The folder under ``benchmarks/`` that holds superseded runs and the logs of device sessions."""


def results_dir(root=None) -> Path:
    """Where result files live: ``root`` (a folder path), else ``$GPULAB_BENCHMARKS``, else ``benchmarks/`` at the
    repository root."""
    if root is not None:
        if not isinstance(root, (str, os.PathLike)):
            raise runtime.ArgumentTypeError(
                f"root must be a folder path (str or Path), got {type(root).__name__} {root!r}."
            )
        return Path(root)
    if os.environ.get("GPULAB_BENCHMARKS"):
        return Path(os.environ["GPULAB_BENCHMARKS"])
    return Path(__file__).resolve().parent.parent.parent / "benchmarks"


_root = results_dir


@functools.lru_cache(maxsize=8)
def _read(path: Path, mtime: float) -> dict:
    with path.open() as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("lessons"), dict):
        shape = "{'lessons': {lesson: {part: {gpu: [files]}}}}"
        raise ValueError(f"{path} is not a record index: expected {shape}; rewrite it in that layout.")
    return data["lessons"]


def read_index(root=None) -> dict:
    """``{lesson: {part: {gpu slug: [record file, ...]}}}`` of ``benchmarks/INDEX.json`` (or ``root``'s); {} when the
    folder has no index (a folder of fresh runs, ``$GPULAB_BENCHMARKS``)."""
    path = _root(root) / INDEX_NAME
    return _read(path, path.stat().st_mtime) if path.exists() else {}


def entries(root=None) -> list[tuple[str, str, str, Path]]:
    """Every ``(lesson, part, gpu slug, absolute path)`` the index names, in its order."""
    base = _root(root)
    return [(lesson, part, gpu, base / f)
            for lesson, by_part in read_index(root).items()
            for part, by_gpu in by_part.items()
            for gpu, files in by_gpu.items()
            for f in files]  # fmt: skip


def _lesson_key(lesson) -> str:
    from gpulab import lessons

    if not isinstance(lesson, str) or not lesson:
        raise runtime.ArgumentTypeError(f"lesson must be a lesson id such as '04' (str), got {lesson!r}.")
    entry = lessons.find(lesson) if lesson[:2].isdigit() else None
    return entry.id if entry is not None else lesson


def parts(lesson, root=None) -> list[str]:
    """The parts of ``lesson`` ('04' or '04_flash_attention') that the index names."""
    return list(read_index(root).get(_lesson_key(lesson), {}))


def current(lesson, part: str = "main", gpu: str | None = "h100", root=None) -> list[Path]:
    """The current record files of ``lesson``'s ``part`` on ``gpu`` (a GPU name matched as whole words of the slug,
    as :func:`gpulab.bench.records.record_files` does; None: every GPU's). [] when the index has no such entry."""
    if not isinstance(part, str) or not part:
        raise runtime.ArgumentTypeError(f"part must be a part name such as 'main' or 'hopper', got {part!r}.")
    if gpu is not None and not isinstance(gpu, str):
        raise runtime.ArgumentTypeError(f"gpu must be a GPU name such as 'h100' or None, got {gpu!r}.")
    by_gpu = read_index(root).get(_lesson_key(lesson), {}).get(part, {})
    want = f"-{hardware.gpu_slug(gpu)}-" if gpu else None
    base = _root(root)
    out = [base / f for slug, files in by_gpu.items() if want is None or want in f"-{slug}-" for f in files]
    for p in out:
        if HISTORY in p.relative_to(base).parts[:1]:
            raise ValueError(f"{INDEX_NAME} names {p}, a file under {HISTORY}/; the index names current runs only.")
    return out


def current_file(lesson, part: str = "main", gpu: str | None = "h100", root=None) -> Path | None:
    """The one current ``.jsonl`` record of ``lesson``'s ``part`` on ``gpu`` (the newest GPU's when ``gpu`` is None
    and several have one); None when the index has none."""
    files = [p for p in current(lesson, part, gpu, root) if p.suffix == ".jsonl"]
    return files[-1] if files else None
