"""Memory traffic counted, not only modelled: bytes each Triton program loads and stores, in the CPU interpreter.

The roofline (lesson 1) models the *fewest* bytes an operation must move; a kernel can move more (re-reads, spills,
an N x N matrix written and read back). On a GPU, Nsight Compute counts DRAM bytes (``dram__bytes_read.sum``,
``dram__bytes_write.sum``; :func:`parse_ncu_csv` reads its CSV). In Triton's CPU interpreter every ``tl.load`` and
``tl.store`` (plain, masked, block pointer or tensor descriptor) ends in one of two methods of the interpreter's
builder; :func:`count` wraps them for the duration of a ``with`` block and records, per program, the bytes of every
element the mask lets through and which addresses they were:

    with traffic.count(q=q, k=k, v=v, o=o) as c:
        flash_attention(q, k, v)
    c.loaded, c.stored                  # bytes, all programs
    c.by_tensor["k"].loaded             # bytes of k loaded, re-reads included
    c.unique_loaded                     # bytes of distinct addresses loaded: the IO-aware minimum if it matches
    c.touched("k", program=(0, 0, 0))   # which elements of k program (0, 0, 0) loaded: a picture of its tiles

These are the interpreter's accesses, which mirror the kernel's code, not the GPU's caches: a tile loaded twice counts
twice even if L2 would serve the second read. The methods wrapped are internal to Triton (checked for 3.6, 3.7 and
3.9, whose cache arguments differ: 3.9 passes one ``cache_policy`` where 3.6 and 3.7 pass ``cache_modifier`` and
``eviction_policy``, so the wrappers pass on whatever follows the mask): if they move, :func:`count` raises instead of
counting zero.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import numpy as np
import torch

from gpulab import bench, runtime

__all__ = [
    "Counts",
    "Traffic",
    "count",
    "parse_ncu_csv",
    "stored",
    "plot_dram",
    "plot_rows",
    "rows_touched",
    "INTERPRETER_HOOKS",
]

INTERPRETER_HOOKS = ("create_masked_load", "create_masked_store", "set_grid_idx")
"""The methods of Triton's ``InterpreterBuilder`` that :func:`count` wraps (every interpreted load and store passes
through the first two; the CPU suites run it on Triton 3.6, 3.7 and 3.9)."""


@dataclasses.dataclass
class Counts:
    """Bytes loaded and stored (each access counted, re-reads included)."""

    loaded: int = 0
    stored: int = 0

    @property
    def total(self) -> int:
        return self.loaded + self.stored


@dataclasses.dataclass
class _Region:
    name: str
    start: int
    end: int  # exclusive, in bytes
    itemsize: int
    shape: tuple


class Traffic:
    """What :func:`count` saw: totals, per program, per named tensor, and the addresses each program touched."""

    def __init__(self, regions: list[_Region]):
        self._regions = regions
        self.total = Counts()
        self.per_program: dict[tuple, Counts] = {}
        self.by_tensor: dict[str, Counts] = {r.name: Counts() for r in regions}
        self._addresses: dict[tuple[str, tuple, str], list[np.ndarray]] = {}
        self._seen: dict[str, list[tuple[np.ndarray, int]]] = {"load": [], "store": []}
        self.accesses = 0

    def _add(self, kind: str, program: tuple, addresses: np.ndarray, itemsize: int) -> None:
        nbytes = int(addresses.size) * itemsize
        self.accesses += 1
        prog = self.per_program.setdefault(program, Counts())
        for counts in (self.total, prog):
            if kind == "load":
                counts.loaded += nbytes
            else:
                counts.stored += nbytes
        self._seen[kind].append((addresses, itemsize))
        for r in self._regions:
            inside = addresses[(addresses >= r.start) & (addresses < r.end)]
            if inside.size:
                c = self.by_tensor[r.name]
                if kind == "load":
                    c.loaded += int(inside.size) * itemsize
                else:
                    c.stored += int(inside.size) * itemsize
                self._addresses.setdefault((r.name, program, kind), []).append(inside)

    @property
    def loaded(self) -> int:
        return self.total.loaded

    @property
    def stored(self) -> int:
        return self.total.stored

    def _unique(self, kind: str) -> int:
        by_size: dict[int, list[np.ndarray]] = {}
        for a, itemsize in self._seen[kind]:
            by_size.setdefault(itemsize, []).append(a)
        return sum(int(np.unique(np.concatenate(a)).size) * size for size, a in by_size.items())

    @property
    def unique_loaded(self) -> int:
        """Bytes at distinct addresses loaded: what an ideal cache would fetch from memory once."""
        return self._unique("load")

    @property
    def unique_stored(self) -> int:
        """Bytes at distinct addresses stored."""
        return self._unique("store")

    def touched(self, name: str, program=None, kind: str = "load") -> torch.Tensor:
        """A bool tensor shaped like tensor ``name``: True where ``program`` (a grid index (x, y, z), or None for
        any program) made a ``kind`` access ('load' or 'store')."""
        runtime.one_of("kind", kind, ("load", "store"))
        region = next((r for r in self._regions if r.name == name), None)
        if region is None:
            raise ValueError(f"name={name!r} is not a counted tensor; counted: {[r.name for r in self._regions]}.")
        numel = (region.end - region.start) // region.itemsize
        mask = np.zeros(numel, dtype=bool)
        for (n, prog, k), chunks in self._addresses.items():
            if n == name and k == kind and (program is None or tuple(program) == prog):
                for a in chunks:
                    mask[(a - region.start) // region.itemsize] = True
        return torch.from_numpy(mask).reshape(region.shape)


def _check_triton():
    import triton
    from triton.runtime import interpreter

    builder = getattr(interpreter, "interpreter_builder", None)
    missing = [m for m in INTERPRETER_HOOKS if not callable(getattr(builder, m, None))]
    if missing:
        raise RuntimeError(
            f"gpulab.traffic wraps Triton's interpreter internals (InterpreterBuilder.{', '.join(INTERPRETER_HOOKS)});"
            f" Triton {triton.__version__} lacks {missing}. Check that every load and store still passes through one "
            "method of InterpreterBuilder and wrap that one, or install Triton 3.6 (requirements/cpu.txt)."
        )
    return builder


def _region(name: str, t) -> _Region:
    runtime.require_tensor(name, t, device_check=False)
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous to be mapped to its elements; pass {name}.contiguous().")
    start = t.data_ptr()
    return _Region(name, start, start + t.numel() * t.element_size(), t.element_size(), tuple(t.shape))


@contextlib.contextmanager
def count(**tensors):
    """Count every load and store of Triton kernels launched inside the block (interpreter mode only).

    Keyword arguments name tensors whose traffic is also reported separately (``by_tensor``, ``touched``). Raises a
    RuntimeError on a GPU (use Nsight Compute there), on an untested Triton, or if kernels ran but nothing was counted.
    """
    if not runtime.INTERPRET:
        raise RuntimeError(
            "traffic.count needs Triton's CPU interpreter; on a GPU count DRAM bytes with Nsight Compute "
            "(ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum), see gpulab.traffic.parse_ncu_csv."
        )
    builder = _check_triton()
    traffic = Traffic([_region(n, t) for n, t in tensors.items()])
    load, store = builder.create_masked_load, builder.create_masked_store

    def counted_load(ptrs, mask, *args, **kwargs):  # args: other and the cache flags (their names vary by version)
        m = np.broadcast_to(np.asarray(mask.data, dtype=bool), ptrs.data.shape)
        itemsize = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        traffic._add("load", tuple(builder.grid_idx or ()), ptrs.data[m], itemsize)
        return load(ptrs, mask, *args, **kwargs)

    def counted_store(ptrs, value, mask, *args, **kwargs):
        m = np.broadcast_to(np.asarray(mask.data, dtype=bool), ptrs.data.shape)
        itemsize = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        traffic._add("store", tuple(builder.grid_idx or ()), ptrs.data[m], itemsize)
        return store(ptrs, value, mask, *args, **kwargs)

    builder.create_masked_load, builder.create_masked_store = counted_load, counted_store
    try:
        yield traffic
    finally:
        del builder.create_masked_load, builder.create_masked_store  # back to the class's methods


def parse_ncu_csv(text: str) -> list[dict]:
    """Rows of Nsight Compute's ``--csv --metrics dram__bytes_read.sum,dram__bytes_write.sum`` output as dicts:
    ``{"kernel": name, "id": launch id, "dram_read": bytes, "dram_write": bytes}``, one per kernel launch."""
    import csv
    import io

    if not isinstance(text, str):
        raise runtime.ArgumentTypeError(
            f"text must be Nsight Compute's CSV output (a str), got {type(text).__name__}; read the file first."
        )
    units = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9, "B": 1}
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows: dict[str, dict] = {}
    for rec in csv.DictReader(io.StringIO("\n".join(lines))):
        key = rec.get("ID", "")
        row = rows.setdefault(key, {"kernel": rec.get("Kernel Name", ""), "id": key})
        name, unit, value = rec.get("Metric Name"), rec.get("Metric Unit", "byte"), rec.get("Metric Value", "0")
        scale = units.get(unit, 1)
        v = float(value.replace(",", "")) * scale
        if name == "dram__bytes_read.sum":
            row["dram_read"] = v
        elif name == "dram__bytes_write.sum":
            row["dram_write"] = v
        elif name:
            row[name] = v
    return list(rows.values())


def plot_dram(records, ax=None, title=None):
    """Bars of the DRAM bytes Nsight Compute counted (read + written) beside the fewest bytes the operation must move,
    one pair per record of ``scripts/ncu_traffic.py`` (log scale: naive attention is two orders of magnitude off)."""
    import matplotlib.pyplot as plt

    recs = bench.result_list("records", records, source=" (gpulab.traffic.stored())")
    recs = [r for r in recs if "dram_read" in r.params]
    if not recs:
        raise ValueError("records holds no Nsight Compute traffic records (see scripts/ncu_traffic.py).")
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6, 1.1 * len(recs)), 3.5))
    x = np.arange(len(recs))
    counted = [(r.params["dram_read"] + r.params["dram_write"]) / 1e6 for r in recs]
    minimum = [r.bytes / 1e6 for r in recs]
    ax.bar(x - 0.2, minimum, 0.4, label="fewest bytes (each input read once, each output written once)", color="gray")
    ax.bar(x + 0.2, counted, 0.4, label="DRAM bytes counted (ncu: read + write)", color="tab:red")
    for xi, c, m in zip(x, counted, minimum):
        label = f"{c / m:.0f}x" if c / m >= 10 else f"{c / m:.2f}x"
        ax.annotate(label, (xi + 0.2, c), ha="center", va="bottom", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(top=max(counted + minimum) * 30)  # room for the labels and the legend
    ax.set_xticks(x, [r.case.replace("ncu ", "") for r in recs], rotation=20, ha="right")
    ax.set_ylabel("MB")
    ax.set_title(title or f"memory traffic counted on {recs[0].device}")
    ax.legend(fontsize=8, loc="upper left")
    return ax


def rows_touched(traffic: Traffic, name: str, programs, kind: str = "load") -> torch.Tensor:
    """bool [len(programs), R]: which rows of tensor ``name`` (its second-to-last dim, any of the leading dims) each
    program in ``programs`` touched."""
    if not isinstance(traffic, Traffic):
        raise runtime.ArgumentTypeError(
            f"traffic must be a gpulab.traffic.Traffic (from gpulab.traffic.count), got {type(traffic).__name__}."
        )
    out = []
    for prog in programs:
        t = traffic.touched(name, program=prog, kind=kind)
        if t.dim() < 2:
            raise ValueError(f"{name} has shape {list(t.shape)}; rows need at least 2 dimensions.")
        out.append(t.reshape(-1, t.shape[-2], t.shape[-1]).any(0).any(-1))
    return torch.stack(out)


def plot_rows(traffic: Traffic, name: str, programs, ax=None, title=None, kind: str = "load"):
    """A picture of :func:`rows_touched`: one row per program, one column per row of ``name``; dark = touched."""
    import matplotlib.pyplot as plt

    grid = rows_touched(traffic, name, programs, kind)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 0.35 * len(programs) + 1))
    ax.imshow(grid.numpy(), cmap="Greys", aspect="auto", interpolation="nearest", vmin=0, vmax=1)
    ax.set_yticks(range(len(programs)), [f"program {p[0] if len(p) else p}" for p in programs])
    ax.set_xlabel(f"row of {name}")
    ax.set_title(title or f"rows of {name} each program {'loads' if kind == 'load' else 'stores'}")
    return ax


def stored(lesson: str | None = None, root=None) -> list:
    """The newest Nsight Compute traffic records under ``benchmarks/io_traffic/`` (only ``lesson``'s if given)."""
    folder = Path(root) if root is not None else bench.results_dir() / "io_traffic"
    try:
        path = bench.newest(folder)
    except FileNotFoundError:
        hint = "run `bash scripts/ncu_traffic.sh` on a GPU"
        raise FileNotFoundError(f"no traffic records in {folder}; {hint}.") from None
    return [r for r in bench.load("io_traffic", path=path) if lesson is None or r.lesson == lesson]
