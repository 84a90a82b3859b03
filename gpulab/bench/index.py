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
import re
from pathlib import Path

from gpulab import hardware, runtime

__all__ = [
    "INDEX_NAME",
    "HISTORY",
    "results_dir",
    "read_index",
    "entries",
    "current",
    "current_file",
    "parts",
    "describe",
    "banner",
    "record_set",
    "part_key",
]

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


def describe(path) -> dict[str, str]:
    """What a record file says it ran on: ``{'device', 'torch', 'triton', 'date'}``, each the first value a record of
    the file names ('' where none does; a record of compiled code only names its ``target`` instead of a device)."""
    if not isinstance(path, (str, os.PathLike)):
        raise runtime.ArgumentTypeError(f"path must be a record file path (str or Path), got {type(path).__name__}.")
    found = {"device": "", "torch": "", "triton": "", "date": "", "target": ""}
    with Path(path).open() as f:
        for line in f:
            if not line.strip():
                continue
            record = json.loads(line)
            for field, value in found.items():
                if not value and record.get(field):
                    found[field] = str(record[field])
            if all(found[k] for k in ("device", "torch", "triton", "date")):
                break
    if not found["device"]:
        found["device"] = f"compiled for {found['target']}, not run" if found["target"] else "no device named"
    found["date"] = found["date"][:10]
    del found["target"]
    return found


def banner(lesson, part: str = "main", gpu: str | None = "h100", root=None, tags=None) -> str:
    """One line naming what a display of ``lesson``'s ``part`` shows: the current record file(s) the index names
    (``tags``: only those whose name holds ``-<tag>-`` for one of them, e.g. ``("z", "zz")`` of a part of tagged
    runs), and the device, versions and date they name (``describe``); one clause per distinct device, versions and
    date. ValueError when the index names no such record of that part and GPU."""
    base = _root(root)
    if tags is not None:
        tags = runtime.record_list("tags", [tags] if isinstance(tags, str) else tags, str, "run tags")
    files = [p for p in current(lesson, part, gpu, root) if p.suffix == ".jsonl"
             and (tags is None or any(f"-{t}-" in f"-{p.stem}-" for t in tags))]  # fmt: skip
    if not files:
        known = ", ".join(parts(lesson, root)) or "none"
        raise ValueError(
            f"{INDEX_NAME} names no .jsonl record of lesson {lesson!r}, part {part!r}, gpu {gpu!r}, tags {tags!r} "
            f"(its parts: {known}); pass a part and GPU it names, or save a run of it (python -m gpulab bench)."
        )
    runs: dict[str, list[str]] = {}
    for p in files:
        d = describe(p)
        versions = ", ".join(f"{k} {d[k.lower()]}" for k in ("torch", "Triton") if d[k.lower()])
        what = ", ".join(x for x in (d["device"], versions, d["date"]) if x)
        runs.setdefault(what, []).append(f"`{p.relative_to(base).as_posix()}`")
    shown = "; ".join(f"{', '.join(names)}: {what}" for what, names in runs.items())
    return f"Record ({_lesson_key(lesson)} {part}): {shown}"


def record_set(lesson, part: str, files, root=None) -> list[Path]:
    """Make ``files`` (record file paths under the results folder) the current record set of ``lesson``'s ``part``
    on the GPU their names start with (``<gpu slug>-YYYY-MM-DD...``), in ``INDEX.json`` of ``root`` (created if
    missing). Returns the files the entry named before that it no longer names: superseded runs, which belong under
    ``history/<lesson>/`` (moving them is left to the caller: a lesson may still read one by name)."""
    if not isinstance(part, str) or not part:
        raise runtime.ArgumentTypeError(f"part must be a part name such as 'main' or 'hopper', got {part!r}.")
    base = _root(root)
    files = runtime.record_list("files", files, (str, os.PathLike), "record file paths")
    rel, slugs = [], set()
    for f in files:
        p = Path(f) if Path(f).is_absolute() else base / f
        try:
            r = p.resolve().relative_to(base.resolve())
        except ValueError:
            raise ValueError(
                f"files: {str(f)!r} is not under the results folder {base}; save it there first."
            ) from None
        if HISTORY in r.parts[:1]:
            raise ValueError(f"files: {str(f)!r} is under {HISTORY}/; the index names current runs only.")
        m = _SLUG.match(p.name)
        if m is None:
            raise ValueError(
                f"files: {p.name!r} is not named <gpu slug>-YYYY-MM-DD[-tag].jsonl; save it under that name."
            )
        rel.append(r.as_posix())
        slugs.add(m.group(1))
    if len(slugs) != 1:
        raise ValueError(f"files must be the records of one GPU, got names of {sorted(slugs)}; index each GPU apart.")
    path = base / INDEX_NAME
    data = json.loads(path.read_text()) if path.exists() else {}
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a record index; rewrite it as {{'lessons': {{...}}}}.")
    by_gpu = data.setdefault("lessons", {}).setdefault(_lesson_key(lesson), {}).setdefault(part, {})
    slug = slugs.pop()
    before = by_gpu.get(slug, [])
    by_gpu[slug] = sorted(set(rel))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return [base / f for f in before if f not in by_gpu[slug]]


_SLUG = re.compile(r"^(.+?)-\d{4}-\d{2}-\d{2}")


def part_key(lesson, part: str | None, root=None) -> str:
    """The index's name for the records of ``python -m gpulab bench <lesson> <part>``: 'main' for the lesson's own
    run; else the first of the part's name, its folder (``gpulab.lessons.part_folder``) when the folder is named for
    it, and ``<folder>/<part>`` (less a leading ``<folder>-``) that the index already names ('cs336' ->
    'hopper/cs336', 'v3-tune' -> 'v3/tune', 'cross' -> 'split/cross'); for a part the index does not name yet, the
    last of those."""
    key = _lesson_key(lesson)
    if part is None or part == "main":
        return "main"
    from gpulab import lessons  # deferred: the lessons table imports the benchmarks' modules by name only

    folder = lessons.part_folder(key, part)
    leaf = folder.rsplit("/", 1)[-1]
    own = part.removeprefix(f"{leaf}-")
    names = [part] + ([folder] if leaf == part else []) + [f"{folder}/{part}", f"{folder}/{own}"]
    known = read_index(root).get(key, {})
    return next((n for n in names if n in known), folder if leaf == part else f"{folder}/{own}")
