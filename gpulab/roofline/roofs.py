"""The ceilings of one machine: the :class:`Ceilings` record, stored measurements, and the lesson's targets.

What you will learn here:
- the roofs are **hierarchical**: each memory level has its own bandwidth (HBM < L2 < L1) and each precision its own
  compute peak (FP32 FMA << TF32 < bf16 = fp16 tensor cores), so the ridge point depends on both;
- why the *measured* ceilings, not the spec sheet, are what a kernel's speed should be compared with.

:func:`ceilings` returns the ceilings without measuring: the newest stored measurement for the GPU
(``benchmarks/01_roofline/``) if there is one, else the spec table; ``Ceilings.source`` says which, and
:func:`gpulab.roofline.plot` prints it on the figure. Measuring them is :mod:`gpulab.roofline.measure`'s job.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

from gpulab import bench, dtypes, hardware, runtime
from gpulab.roofline.intensity import COMPUTE_ROOFS, MEMORY_LEVELS, ROOF_NAMES, attainable, ridge_point

__all__ = ["Ceilings", "ceilings", "targets", "MODES", "resolve", "rate_of", "spec_value", "rate_text"]

MODES = ("cuda", "interpreter", "spec")
"""Where a :class:`Ceilings` came from: measured on a GPU, a CPU interpreter run (code path only), the spec table."""


def rate_text(v: float) -> str:
    """1,234 for large numbers, 3 significant digits for small ones (interpreter rates are tiny)."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


@dataclasses.dataclass(frozen=True)
class Ceilings:
    """The roofs of one GPU: bandwidth per memory level (GB/s) and peak rate per compute roof (TFLOP/s).

    ``source`` says where the numbers come from (a measurement and its date, a stored measurement, or the spec
    table); ``mode`` is 'cuda' (measured on a GPU), 'interpreter' (a CPU run that only exercises the code path) or
    'spec'. ``records`` holds the measurements behind the numbers, in the :class:`gpulab.bench.Result` format: each
    candidate for a ceiling carries ``params['ceiling']`` (a key of :data:`MEMORY_LEVELS` or :data:`COMPUTE_ROOFS`),
    and the ceiling is the best of its candidates.
    """

    device: str
    source: str
    hbm_gbps: float
    l2_gbps: float | None = None
    l1_gbps: float | None = None
    fp32_tflops: float | None = None
    tf32_tflops: float | None = None
    fp16_tflops: float | None = None
    bf16_tflops: float | None = None
    mode: str = "spec"
    date: str = ""
    records: tuple = ()

    def __post_init__(self):
        for field in ("device", "source", "date"):
            value = getattr(self, field)
            if not isinstance(value, str):
                raise runtime.ArgumentTypeError(f"{field} must be a string, got {value!r} ({type(value).__name__}).")
        runtime.one_of("mode", self.mode, MODES)
        object.__setattr__(self, "hbm_gbps", runtime.finite_float("hbm_gbps", self.hbm_gbps, positive=True))
        for field in ("l2_gbps", "l1_gbps", "fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops"):
            value = getattr(self, field)  # None: not known (the spec table gives no cache bandwidths)
            if value is not None:
                object.__setattr__(self, field, runtime.finite_float(field, value, positive=True))
        if isinstance(self.records, (str, bytes)) or not hasattr(self.records, "__iter__"):
            raise runtime.ArgumentTypeError(f"records must be a sequence of gpulab.bench.Result, got {self.records!r}.")
        object.__setattr__(self, "records", tuple(_results("records", self.records)))

    def bandwidth(self, level: str = "HBM") -> float | None:
        """GB/s of a memory level: 'HBM', 'L2' or 'L1' (None if not known)."""
        if level not in MEMORY_LEVELS:
            raise ValueError(f"level={level!r} is not a memory level; use one of {', '.join(MEMORY_LEVELS)}.")
        return getattr(self, f"{level.lower()}_gbps")

    def compute(self, roof: str) -> float | None:
        """TFLOP/s of a compute roof: 'fp32' (FMA units), 'tf32', 'fp16', 'bf16' (tensor cores); None if unknown."""
        if roof not in COMPUTE_ROOFS:
            raise ValueError(f"roof={roof!r} is not a compute roof; use one of {', '.join(COMPUTE_ROOFS)}.")
        return getattr(self, f"{roof}_tflops")

    def value(self, key: str) -> float | None:
        return self.bandwidth(key) if key in MEMORY_LEVELS else self.compute(key)

    def ridge(self, roof: str = "bf16", level: str = "HBM") -> float | None:
        """Ridge point (FLOP/byte) of a compute roof against a memory level (None if either is unknown)."""
        p, bw = self.compute(roof), self.bandwidth(level)
        return ridge_point(p, bw) if (p and bw) else None

    def attainable(self, intensity, roof: str = "bf16", level: str = "HBM") -> float | None:
        """TFLOP/s the roofline allows at ``intensity`` for a compute roof and memory level (None if unknown)."""
        intensity = runtime.finite_float("intensity", intensity, minimum=0.0)
        p, bw = self.compute(roof), self.bandwidth(level)
        return attainable(intensity, p, bw) if (p and bw) else None

    @classmethod
    def from_spec(cls, gpu=None) -> Ceilings:
        """The vendor's figures from :mod:`gpulab.hardware` (no L2 or L1 bandwidth: spec sheets do not give them)."""
        s = hardware.spec(gpu)
        t = s.tensor_tflops
        return cls(
            device=s.name,
            source=f"spec table: {s.name} (vendor figures, not measured)",
            hbm_gbps=float(s.hbm_gbps),
            fp32_tflops=float(s.fp32_tflops) or None,
            tf32_tflops=t.get("tf32"),
            fp16_tflops=t.get("float16"),
            bf16_tflops=t.get("bfloat16"),
            mode="spec",
        )

    @classmethod
    def from_results(cls, results, source: str | None = None) -> Ceilings:
        """Ceilings from measurement records: for each key, the best record whose ``params['ceiling']`` names it.

        Keeps every record (peers included) in ``records``. Raises ValueError if there is no HBM candidate.
        """
        results = _results("results", results)
        if source is not None and not isinstance(source, str):
            raise runtime.ArgumentTypeError(f"source must be a string or None, got {source!r}.")
        best: dict[str, bench.Result] = {}
        for r in results:
            key = r.params.get("ceiling")
            if key is None:
                continue
            if key not in MEMORY_LEVELS + COMPUTE_ROOFS:
                raise ValueError(f"a result has params['ceiling']={key!r}; known: {MEMORY_LEVELS + COMPUTE_ROOFS}.")
            rate = r.gbps if key in MEMORY_LEVELS else r.tflops
            if rate is not None and math.isfinite(rate) and (key not in best or rate > rate_of(best[key], key)):
                best[key] = r
        if "HBM" not in best:
            raise ValueError("results holds no HBM ceiling (no record with params['ceiling'] == 'HBM').")
        ref = best["HBM"]
        mode = ref.mode or "cuda"
        if source is None:
            if mode == "spec":
                source = ref.params.get("source", "spec table")
            elif mode == "interpreter":
                source = (
                    f"Triton interpreter on CPU, {ref.date}: exercises the code path; these are not hardware ceilings"
                )
            else:
                source = f"measured on {ref.device}, {ref.date}"
        values = {f"{k.lower()}_gbps" if k in MEMORY_LEVELS else f"{k}_tflops": rate_of(r, k) for k, r in best.items()}
        return cls(device=ref.device, source=source, mode=mode, date=ref.date, records=tuple(results), **values)

    def to_results(self) -> list[bench.Result]:
        """The records behind these ceilings; for the spec table, one synthetic record per ceiling (1 ms moving or
        computing the spec's rate, ``params['synthetic'] = True``) so they round-trip through :meth:`from_results`."""
        if self.records:
            return list(self.records)
        out = []
        for key in MEMORY_LEVELS + COMPUTE_ROOFS:
            v = self.value(key)
            if v is None:
                continue
            mem = key in MEMORY_LEVELS
            out.append(
                bench.Result(
                    lesson="01",
                    case=f"{self.mode}: {ROOF_NAMES[key]}",
                    ms=1.0,
                    bytes=v * 1e6 if mem else None,  # GB/s * 1 ms
                    flops=None if mem else v * 1e9,  # TFLOP/s * 1 ms
                    device=self.device,
                    mode=self.mode,
                    date=self.date,
                    params={"ceiling": key, "synthetic": True, "source": self.source},
                )
            )
        return out

    def spec(self):
        """The spec-table entry (:class:`gpulab.hardware.GPUSpec`) of this device, or None if the table has none."""
        try:
            return hardware.spec(self.device)
        except ValueError:
            return None

    def summary(self) -> str:
        """A table: each ceiling, the spec figure, the fraction of it, the measurement behind it, and the peer ratio."""
        spec = self.spec()
        best = {}
        for r in self.records:
            key = r.params.get("ceiling")
            if key and (key not in best or rate_of(r, key) > rate_of(best[key], key)):
                best[key] = r
        peers = {r.params["peer_of"]: r for r in self.records if r.params.get("peer_of")}
        lines = [f"Ceilings of the {self.device}", f"source: {self.source}", ""]
        head = f"{'roof':18s} {'value':>17s} {'spec':>17s} {'of spec':>7s}  how"
        lines += [head, "-" * len(head)]
        for key in MEMORY_LEVELS + COMPUTE_ROOFS:
            v = self.value(key)
            if v is None:
                continue
            unit = "GB/s" if key in MEMORY_LEVELS else "TFLOP/s"
            sv = spec_value(spec, key)
            how = best[key].case if key in best else ("spec table" if self.mode == "spec" else "-")
            if key in best and key in peers and peers[key].mode == best[key].mode:
                ratio = rate_of(best[key], key) / rate_of(peers[key], key)
                how += f"; {ratio:.2f}x {peers[key].case}"
            spec_cols = f"{rate_text(sv):>9s} {unit:7s} {v / sv:>7.0%}" if sv else f"{'-':>9s} {'':7s} {'-':>7s}"
            lines.append(f"{ROOF_NAMES[key]:18s} {rate_text(v):>9s} {unit:7s} {spec_cols}  {how}")
        for what, ratio, target, met in targets(self):
            note = "" if self.mode == "cuda" else " (interpreter: not a hardware figure)"
            lines.append(f"target {what}: {ratio:.3f} (>= {target}) {'met' if met else 'NOT MET'}{note}")
        return "\n".join(lines)


def spec_value(spec, key: str) -> float | None:
    """The vendor's figure for a ceiling key (None for L2 and L1, which spec sheets do not give)."""
    if spec is None:
        return None
    if key == "HBM":
        return spec.hbm_gbps
    if key == "fp32":
        return spec.fp32_tflops or None
    return spec.tensor_tflops.get(dtypes.name(key) if key.lower() in dtypes.NAMES else key)  # 'bf16' -> 'bfloat16'


def rate_of(r: bench.Result, key: str) -> float:
    """A record's rate for a ceiling key: GB/s for memory levels, TFLOP/s for compute roofs."""
    v = r.gbps if key in MEMORY_LEVELS else r.tflops
    return v if v is not None else math.nan


def _table_name(gpu) -> str:
    """The spec-table name a GPU name resolves to ('NVIDIA H100 80GB HBM3' -> 'NVIDIA H100 SXM5 80GB'), else itself."""
    name = gpu.name if isinstance(gpu, hardware.GPUSpec) else gpu
    try:
        return hardware.spec(name).name
    except ValueError:
        return name


def _stored_records(gpu, root=None) -> tuple[Path, list[bench.Result]] | None:
    """The newest stored lesson-1 file measured on a GPU (mode 'cuda') that resolves to the same table entry."""
    want = _table_name(gpu)
    folder = bench.results_dir(root) / "01_roofline"
    found = []
    for f in sorted(folder.glob("*.jsonl")) if folder.exists() else []:
        recs = bench.load("01", path=f)
        recs = [r for r in recs if r.mode == "cuda"]
        if recs and any(r.params.get("ceiling") == "HBM" for r in recs) and _table_name(recs[0].device) == want:
            found.append(((f.stem[-10:], f.stat().st_mtime), f, recs))
    if not found:
        return None
    _, path, recs = max(found, key=lambda x: x[0])
    return path, recs


def ceilings(gpu=None, root=None) -> Ceilings:
    """The ceilings of ``gpu`` without measuring: the newest stored measurement, else the spec table.

    ``gpu``: a name ('H100'), a :class:`gpulab.hardware.GPUSpec`, or None for this machine's GPU (the H100, the
    course's reference GPU, on a machine without one). Stored measurements are ``benchmarks/01_roofline/*.jsonl``
    (``root`` or ``$GPULAB_BENCHMARKS`` to look elsewhere). ``.source`` says which one you got.
    """
    spec = hardware.spec(gpu)  # a ValueError naming gpu if the name is unknown, before looking for files
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise runtime.ArgumentTypeError(f"root must be a folder (a str or a Path) or None, got {root!r}.")
    name = hardware.live_properties()["name"] if (gpu is None and runtime.on_gpu()) else spec.name
    stored = _stored_records(name, root)
    if stored is None:
        return Ceilings.from_spec(spec)
    path, recs = stored
    first = next(r for r in recs if r.params.get("ceiling") == "HBM")
    return Ceilings.from_results(
        recs, source=f"stored measurement: {first.device}, {first.date} ({path.parent.name}/{path.name})"
    )


def resolve(c: Ceilings | None) -> Ceilings:
    """The ceilings a function was given, else :func:`ceilings` for this machine's GPU (or the H100)."""
    if c is None:
        return ceilings()
    if not isinstance(c, Ceilings):
        raise runtime.ArgumentTypeError(
            f"ceilings must be a roofline.Ceilings or None, got {type(c).__name__}; get one from roofline.ceilings()."
        )
    return c


def targets(c: Ceilings) -> list[tuple[str, float, float, bool]]:
    """The lesson's targets, relative so they hold on any GPU: (what, ratio, target, met).

    The HBM ceiling >= 0.97 x torch's device copy, and the bf16 ceiling >= 0.97 x torch.matmul at 8192^3, both
    measured in the same run. Empty if the records lack either pair.
    """
    if not isinstance(c, Ceilings):
        raise runtime.ArgumentTypeError(f"c must be a roofline.Ceilings, got {type(c).__name__}.")
    out = []
    peers = {r.params["peer_of"]: r for r in c.records if r.params.get("peer_of")}
    for key in ("HBM", "bf16"):
        v = c.value(key)
        if key in peers and v:
            ratio = v / rate_of(peers[key], key)
            out.append((f"{key} ceiling / {peers[key].case}", ratio, 0.97, ratio >= 0.97))
    return out


def _results(name: str, results) -> list:
    """``results`` as a list of :class:`gpulab.bench.Result`, or an error naming ``name`` and the first stranger."""
    results = list(results)
    for i, r in enumerate(results):
        if not isinstance(r, bench.Result):
            raise runtime.ArgumentTypeError(
                f"{name}[{i}] is a {type(r).__name__}; {name} must hold gpulab.bench.Result."
            )
    return results
