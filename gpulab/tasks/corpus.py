"""A real text corpus no one here wrote, with the same bytes on every machine: the reStructuredText sources of
Python 3.11's documentation, as Debian 12 ships them in ``python3.11-doc`` (PSF licence), bytes as tokens.

What you will learn:
- how to make a corpus reproducible: pin the package's exact version and the sha256 of its ``.deb`` *and* of the
  text extracted from it, check both, and fail loudly when either differs (nothing is fetched at training time);
- how to split train and validation without leakage between near-duplicate pages: by *file*, a file's side decided
  by a hash of its path alone (:func:`is_validation`), so the split is the same whatever else is in the package;
- how to stream batches from a corpus without holding it twice: the prepared file is memory-mapped
  (``np.memmap``), a batch copies only its own windows.

``python -m gpulab.tasks.corpus prepare`` (once, on a machine with Debian's archive; the GPU machine has none, so
the prepared file travels there) runs ``apt-get download`` for the pinned package, checks its sha256, reads the
``.rst.txt`` sources out of its ``data.tar.xz`` in Python (no dpkg needed), orders them by path, writes every train
file then every validation file into ``data/python-docs.bin`` and a manifest ``data/python-docs.json`` (the files,
their offsets, the split, the sha256 of the ``.bin``), and checks the ``.bin`` against the pinned sha256.
``--deb PATH`` takes a ``.deb`` downloaded some other way (e.g. from snapshot.debian.org, which keeps every
version); the checks are the same.

Layout of the prepared file: bytes ``[0, train_bytes)`` are the training files, ``[train_bytes, total)`` the
validation files, each in path order, concatenated without separators. :func:`load` memory-maps it;
:func:`cpu_slice` gives a few KB of the same text for CPU tests (cut from the prepared file when it exists, else
from a small committed copy, ``corpus_slice.txt``, checked by its own sha256).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import lzma
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile

import numpy as np
import torch

from gpulab import runtime

__all__ = [
    "PACKAGE",
    "VERSION",
    "DEB_SHA256",
    "TEXT_SHA256",
    "NAME",
    "VAL_FRACTION",
    "Corpus",
    "CorpusError",
    "is_validation",
    "sha256_file",
    "check_sha256",
    "extract",
    "prepare",
    "load",
    "cpu_slice",
    "default_path",
]

PACKAGE = "python3.11-doc"
VERSION = "3.11.2-6+deb12u9"
"""Debian 12's security update of the package (the point release before it, deb12u8, ships different text: one
version, so one corpus everywhere)."""
DEB_SHA256 = "5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be"
SOURCES = "./usr/share/doc/python3.11/html/_sources/"
"""Where the package keeps the documentation's reStructuredText sources (as ``.rst.txt``)."""
TEXT_SHA256 = "cd6fe9489072438fb5d00312e1dd0d43432173162247ae01926e50609f38057b"
"""sha256 of the prepared ``.bin`` (train files, then validation files, in path order)."""
NAME = "python-docs"
VAL_FRACTION = 0.05
SNAPSHOT = "https://snapshot.debian.org/package/python3.11/3.11.2-6%2Bdeb12u9/"

SLICE = pathlib.Path(__file__).with_name("corpus_slice.txt")
SLICE_SHA256 = "17b2f6b4bf2e4691eccad25b90278f60dcd7690e1ef6a90972b342316d8cbfd8"
SLICE_TRAIN_BYTES = 6144
SLICE_VAL_BYTES = 2048


class CorpusError(ValueError):
    """The corpus is missing, or its bytes are not the pinned ones."""


def _path(name: str, value, what: str = "a file path"):
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be {what} (str or Path), got {type(value).__name__} {value!r}.")
    return pathlib.Path(value)


def is_validation(path: str, fraction: float = VAL_FRACTION) -> bool:
    """Whether the file at ``path`` (its path inside the package) belongs to validation: the first byte of
    sha256(path) below ``fraction * 256``. Depends on the path alone, so it never moves with the package's other
    files."""
    if not isinstance(path, str) or not path:
        raise TypeError(f"path must be a non-empty str (a file's path in the package), got {path!r}.")
    fraction = runtime.finite_float("fraction", fraction, minimum=0.0)
    if fraction > 1.0:
        raise ValueError(f"fraction={fraction} is not a fraction; give a number in [0, 1] (e.g. {VAL_FRACTION}).")
    return hashlib.sha256(path.encode()).digest()[0] < fraction * 256


def sha256_file(path) -> str:
    """The sha256 of the file at ``path``, as hex."""
    path = _path("path", path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_sha256(what: str, got: str, allowed, fix: str) -> None:
    """Raise :class:`CorpusError` naming ``what``, the sha256 found and the pinned one(s), and ``fix``, unless
    ``got`` is one of ``allowed``."""
    for name, value in (("what", what), ("got", got), ("fix", fix)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r}.")
    allowed = [allowed] if isinstance(allowed, str) else list(allowed)
    if got not in allowed:
        raise CorpusError(
            f"{what} has sha256 {got}, not the pinned {' or '.join(allowed)}: these are not the corpus's bytes. {fix}"
        )


def _ar_members(data: bytes) -> dict:
    """The members of a Debian package (an ``ar`` archive): name -> bytes."""
    if not data.startswith(b"!<arch>\n"):
        raise CorpusError("the .deb is not an ar archive (no '!<arch>' header); download it again.")
    out, pos = {}, 8
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode().strip())
        out[name] = data[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size % 2)  # members are 2-byte aligned
    return out


def extract(deb) -> list[tuple[str, bytes]]:
    """The documentation sources in the ``.deb`` at ``deb``: ``(path, bytes)`` of every regular ``.rst.txt`` file
    under :data:`SOURCES`, sorted by path (``path`` relative to :data:`SOURCES`)."""
    members = _ar_members(_path("deb", deb, "the path of a .deb").read_bytes())
    if "data.tar.xz" not in members:
        raise CorpusError(f"the .deb has no data.tar.xz (members: {sorted(members)}); is it {PACKAGE}?")
    files = []
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(members["data.tar.xz"]))) as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.startswith(SOURCES) and m.name.endswith(".rst.txt"):
                files.append((m.name[len(SOURCES) :], tar.extractfile(m).read()))
    if not files:
        raise CorpusError(f"the .deb holds no .rst.txt under {SOURCES}; is it {PACKAGE}?")
    return sorted(files)


def default_path() -> pathlib.Path:
    """``data/python-docs.bin`` at the repository root (gitignored)."""
    return pathlib.Path(__file__).resolve().parents[2] / "data" / f"{NAME}.bin"


def _download(version: str, folder: pathlib.Path) -> pathlib.Path:
    fix = (f"On a machine without Debian 12's archive, download {PACKAGE}_{version}_all.deb from {SNAPSHOT} and "
           "pass it with --deb PATH.")  # fmt: skip
    try:
        subprocess.run(["apt-get", "download", f"{PACKAGE}={version}"], cwd=folder, check=True,
                       capture_output=True, text=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        raise CorpusError(f"apt-get download {PACKAGE}={version} failed: {detail.strip()[:300]}. {fix}") from exc
    return next(folder.glob(f"{PACKAGE}_*.deb"))


def prepare(out=None, deb=None) -> pathlib.Path:
    """Write the corpus (``.bin``) and its manifest (``.json`` beside it) from the pinned package; returns the
    ``.bin``'s path. ``deb``: a ``.deb`` already here (else ``apt-get download`` of :data:`VERSION`). Raises
    :class:`CorpusError` if the ``.deb`` or the written text is not the pinned bytes (the ``.bin`` is then
    removed)."""
    out = _path("out", out) if out is not None else default_path()
    deb = _path("deb", deb, "the path of a .deb") if deb is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        deb = _download(VERSION, pathlib.Path(tmp)) if deb is None else deb
        deb_sha = sha256_file(deb)
        fix = f"Use {PACKAGE} {VERSION} exactly: `apt-get download {PACKAGE}={VERSION}`, or {SNAPSHOT}."
        check_sha256(f"the package {deb}", deb_sha, DEB_SHA256, fix)
        files = extract(deb)
    train = [(p, b) for p, b in files if not is_validation(p)]
    val = [(p, b) for p, b in files if is_validation(p)]
    out.parent.mkdir(parents=True, exist_ok=True)
    entries, offset = [], 0
    with open(out, "wb") as f:
        for split, group in (("train", train), ("validation", val)):
            for path, data in group:
                f.write(data)
                entries.append({"path": path, "offset": offset, "bytes": len(data), "split": split})
                offset += len(data)
    text_sha = sha256_file(out)
    manifest = {
        "name": NAME, "package": PACKAGE, "version": VERSION,
        "deb_sha256": deb_sha, "sha256": text_sha, "bytes": offset,
        "train_bytes": sum(len(b) for _, b in train), "validation_bytes": sum(len(b) for _, b in val),
        "val_fraction": VAL_FRACTION, "files": entries,
    }  # fmt: skip
    try:
        check_sha256(f"the prepared corpus {out}", text_sha, TEXT_SHA256,
                     "The extraction differs from the pinned one: report it (gpulab.tasks.corpus).")  # fmt: skip
    except CorpusError:
        out.unlink()
        raise
    out.with_suffix(".json").write_text(json.dumps(manifest, indent=1) + "\n")
    return out


@dataclasses.dataclass
class Corpus:
    """A byte corpus in one memory-mapped file: ``data`` (``np.memmap`` of uint8), train bytes
    ``data[:train_bytes]``, validation bytes ``data[train_bytes:]``, its ``sha256`` and ``name``."""

    data: np.memmap
    train_bytes: int
    sha256: str
    name: str

    def __post_init__(self):
        if not isinstance(self.data, np.ndarray) or self.data.dtype != np.uint8 or self.data.ndim != 1:
            got = f"{type(self.data).__name__}" + (
                f" of {self.data.dtype} {self.data.shape}" if hasattr(self.data, "dtype") else ""
            )
            raise TypeError(f"data must be a 1-D uint8 numpy array (np.memmap of the corpus's file), got {got}.")
        self.train_bytes = runtime.integer("train_bytes", self.train_bytes, minimum=0, maximum=len(self.data))
        for name in ("sha256", "name"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a str, got {getattr(self, name)!r}.")

    @property
    def validation_bytes(self) -> int:
        return len(self.data) - self.train_bytes

    def split(self, split: str) -> np.ndarray:
        """A view (no copy) of the ``"train"`` or ``"validation"`` bytes."""
        runtime.one_of("split", split, ("train", "validation"))
        return self.data[: self.train_bytes] if split == "train" else self.data[self.train_bytes :]

    def batch(self, batch_size: int, length: int, generator: torch.Generator, split: str = "train", device=None):
        """``(x, y)``, int64 [batch_size, length] each: ``batch_size`` windows of ``length + 1`` bytes at random
        offsets (drawn from ``generator``) in ``split``, x the first ``length`` bytes, y the next-byte targets. Only
        the windows are copied out of the map."""
        batch_size, length = runtime.positive_int("batch_size", batch_size), runtime.positive_int("length", length)
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator (seeded), got {type(generator).__name__}.")
        text = self.split(split)
        if len(text) < length + 1:
            raise ValueError(f"length={length} does not fit the {split} split ({len(text)} bytes); use a shorter "
                             "length.")  # fmt: skip
        starts = torch.randint(0, len(text) - length, (batch_size,), generator=generator).numpy()
        return self._windows(text, starts, length, device)

    def windows(self, count: int, length: int, split: str = "validation", device=None):
        """``(x, y)`` of ``count`` windows evenly spaced over ``split`` (the same ones every call: the fixed
        validation set)."""
        count, length = runtime.positive_int("count", count), runtime.positive_int("length", length)
        text = self.split(split)
        if len(text) < length + 1:
            raise ValueError(f"length={length} does not fit the {split} split ({len(text)} bytes); use a shorter "
                             "length.")  # fmt: skip
        starts = np.linspace(0, len(text) - length - 1, count).astype(np.int64)
        return self._windows(text, starts, length, device)

    @staticmethod
    def _windows(text, starts, length, device):
        w = torch.from_numpy(np.stack([np.asarray(text[s : s + length + 1]) for s in starts]).astype(np.int64))
        device = torch.device(device or runtime.device)
        if device.type == "cuda":  # from pinned memory, asynchronously: the host does not wait for the GPU's queue
            w = w.pin_memory().to(device, non_blocking=True)
        return w[:, :-1], w[:, 1:]


def _memmap(path) -> np.memmap:
    return np.memmap(path, dtype=np.uint8, mode="r")


def load(path=None, verify: bool = True) -> Corpus:
    """The prepared corpus at ``path`` (default :func:`default_path`), memory-mapped; ``verify`` checks its sha256
    against :data:`TEXT_SHA256` (about 0.05 s for 11 MB). :class:`CorpusError` if it is missing or differs."""
    path = _path("path", path) if path is not None else default_path()
    manifest = path.with_suffix(".json")
    if not path.exists() or not manifest.exists():
        raise CorpusError(f"no prepared corpus at {path} (and its manifest {manifest.name}); run "
                          "`python -m gpulab.tasks.corpus prepare` on a machine with Debian's archive, or copy "
                          "both files there.")  # fmt: skip
    meta = json.loads(manifest.read_text())
    if verify:
        check_sha256(f"the corpus {path}", sha256_file(path), TEXT_SHA256,
                     "Prepare it again: `python -m gpulab.tasks.corpus prepare`.")  # fmt: skip
    return Corpus(_memmap(path), int(meta["train_bytes"]), meta["sha256"], NAME)


def cpu_slice(path=None) -> Corpus:
    """A few KB of the corpus for CPU runs: the first :data:`SLICE_TRAIN_BYTES` of its train split and the first
    :data:`SLICE_VAL_BYTES` of its validation split, cut from the prepared corpus if it is there (checked), else read
    from the committed copy ``corpus_slice.txt`` (checked by :data:`SLICE_SHA256`). The two are the same bytes."""
    path = _path("path", path) if path is not None else default_path()
    if path.exists() and path.with_suffix(".json").exists():
        full = load(path)
        data = np.concatenate([full.split("train")[:SLICE_TRAIN_BYTES], full.split("validation")[:SLICE_VAL_BYTES]])
        got = hashlib.sha256(data.tobytes()).hexdigest()
        fix = "The prepared corpus and the committed slice disagree: prepare it again."
        check_sha256("the slice cut from the prepared corpus", got, SLICE_SHA256, fix)
        return Corpus(data, SLICE_TRAIN_BYTES, SLICE_SHA256, f"{NAME} (CPU slice)")
    check_sha256(f"the committed slice {SLICE}", sha256_file(SLICE), SLICE_SHA256,
                 "Restore it from git (`git checkout -- gpulab/tasks/corpus_slice.txt`).")  # fmt: skip
    return Corpus(_memmap(SLICE), SLICE_TRAIN_BYTES, SLICE_SHA256, f"{NAME} (CPU slice)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpulab.tasks.corpus", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("prepare", help="download the pinned package, check it, write data/python-docs.bin")
    q.add_argument("--deb", default=None, help="a .deb already downloaded (checked against the pinned sha256)")
    q.add_argument("--out", default=None, help=f"where to write the corpus (default {default_path()})")
    sub.add_parser("check", help="check the prepared corpus's sha256")
    args = p.parse_args(argv)
    try:
        if args.command == "prepare":
            path = prepare(args.out, args.deb)
        else:
            path = default_path()
            load(path)
    except CorpusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    corpus = load(path, verify=False)
    print(f"{path}: {len(corpus.data):,} bytes ({corpus.train_bytes:,} train, {corpus.validation_bytes:,} "
          f"validation), sha256 {corpus.sha256}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
