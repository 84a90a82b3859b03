"""The HBM ceiling: one number for "how fast HBM goes", defined once, with where it comes from.

Two measurements of HBM exist in the course and they differ: lesson 0's working-set sweep *reads* a large buffer
(read-only streams settle near 93% of the spec on the H100), and lesson 1's copy reads and writes it (about 87%).
The roofline's memory roof is the **copy** (:func:`gpulab.roofline.ceilings`: the best copy kernel of the newest
stored lesson-1 run, checked against PyTorch's own ``copy_``), because a kernel that writes what it reads, as every
kernel of this course does, pays the write too. :func:`hbm_ceiling` returns that one ceiling with its provenance;
the sweep's plateau is :func:`read_plateau`, named as what it is and never called the ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab import hardware

__all__ = ["HBMCeiling", "hbm_ceiling", "read_plateau", "stored_read_plateau"]


@dataclass(frozen=True)
class HBMCeiling:
    """An HBM bandwidth in GB/s, the spec beside it, what measured it and which record it comes from."""

    gbps: float
    spec_gbps: float
    how: str
    source: str

    def __post_init__(self):
        for name in ("gbps", "spec_gbps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise ValueError(f"HBMCeiling.{name} must be a positive bandwidth in GB/s, got {v!r}.")

    @property
    def fraction(self) -> float:
        return self.gbps / self.spec_gbps

    def describe(self, name: str = "HBM ceiling") -> str:
        return (f"{name} {self.gbps / 1e3:.2f} TB/s = {self.fraction:.0%} of the {self.spec_gbps / 1e3:.2f} TB/s "
                f"spec ({self.how}; {self.source})")  # fmt: skip


def hbm_ceiling(gpu="H100", root=None) -> HBMCeiling:
    """The roofline's HBM ceiling of ``gpu``: lesson 1's copy (read + write), from the newest stored record, else the
    spec (then ``how`` says so)."""
    from gpulab.roofline.roofs import ceilings  # deferred: the roofs read records

    c = ceilings(gpu, root=root)
    spec = hardware.spec(c.device if c.mode != "spec" else gpu)
    hbm = [r for r in c.records if r.params.get("ceiling") == "HBM" and r.gbps]
    how = max(hbm, key=lambda r: r.gbps).case + ", read + write" if hbm else "spec sheet (no stored measurement)"
    return HBMCeiling(c.hbm_gbps, spec.hbm_gbps, how, c.source)


def read_plateau(sweep, gpu="H100") -> HBMCeiling:
    """Lesson 0's read-only plateau: the best read bandwidth of ``sweep`` (records of the working-set sweep) at
    working sets of at least 4x L2 (pure HBM). Not the ceiling: a read-only stream skips the write."""
    spec = hardware.spec(gpu)
    hbm = [r for r in sweep if r.params.get("working_set_bytes", 0) >= 4 * spec.l2_bytes and r.gbps]
    if not hbm:
        raise ValueError("sweep has no record past 4x L2: pass lesson 0's 'working-set sweep' records.")
    best = max(hbm, key=lambda r: r.gbps)
    return HBMCeiling(best.gbps, spec.hbm_gbps, "lesson 0's sweep, read-only streams",
                      f"{best.device}, {best.date}")  # fmt: skip


def stored_read_plateau(gpu="H100", root=None) -> HBMCeiling:
    """:func:`read_plateau` of the newest stored lesson-0 run of ``gpu`` (``benchmarks/00_memory_hierarchy``, or
    ``root``); the spec itself (fraction 1, ``how`` says so) when no run of that GPU is stored."""
    from gpulab import bench  # deferred: records are read only when asked

    spec = hardware.spec(gpu)  # a ValueError naming gpu if the name is unknown
    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be a GPU name such as 'H100', got {type(gpu).__name__} {gpu!r}.")
    files = bench.record_files(bench.results_dir(root) / "00_memory_hierarchy", gpu.lower())
    if not files:
        return HBMCeiling(spec.hbm_gbps, spec.hbm_gbps, "spec sheet (no stored lesson-0 sweep)", spec.name)
    path = bench.newest(files)
    sweep = [r for r in bench.load("00", path=path) if r.case == "working-set sweep"]
    found = read_plateau(sweep, gpu)
    return HBMCeiling(found.gbps, found.spec_gbps, found.how, f"{found.source} ({path.parent.name}/{path.name})")
