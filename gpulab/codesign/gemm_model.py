"""Lesson 2, the model: how long a GEMM takes on a given GPU, and which of its sizes cost time.

What you will learn here:
- a model of GEMM time on a GPU (a :class:`gpulab.hardware.GPUSpec`): a memory roof, a compute roof, and three shape
  effects that lower the compute roof: **alignment**, **tile quantization** and **wave quantization**;
- to read the model's record of one prediction (:class:`GemmPrediction`): where the time goes and why.

``C[M, N] = A[M, K] @ B[K, N]`` (``batch`` independent products of that shape) in a dtype of ``s`` bytes moves at
least ``Q = s * batch * (M*K + K*N + M*N)`` bytes (each operand read once, the output written once) and does
``F = 2 * batch * M * N * K`` FLOPs. Its predicted time is the larger of two roofs::

    t = max( F / (P * phi_c * e_align * e_tile * e_wave),   Q * penalty / (B * phi_m) )

- ``P`` is the GPU's tensor-core peak for the dtype and ``B`` its HBM bandwidth (spec sheet); ``phi_c``
  (:data:`PEAK_FRACTION`) and ``phi_m`` (:data:`MEMORY_FRACTION`) are the fractions of them that the best kernels
  reach, read from the stored H100 runs (:func:`model_constants`, this lesson's K sweep; :func:`memory_fraction`,
  lesson 0's sweep) and applied to every GPU.
- **alignment** ``e_align``: Hopper's fast GEMM path loads tiles with TMA and multiplies with ``wgmma``; both need
  every row of every operand to start on a 16-byte boundary. In the row-major layout torch uses, the row lengths
  (leading dimensions) are K (rows of A, and of B when it is a transposed view) and N (rows of B and C). If K or N
  times the element size is not a multiple of 16 bytes (8 elements of bf16/fp16, 4 of fp32), cuBLAS falls back to
  kernels with narrower loads: ``e_align = 1 / alignment_penalty(K, N)``, :data:`MISALIGNED_PENALTY` for rows
  that are only 2-byte aligned, :data:`PARTIALLY_ALIGNED_PENALTY` for 4- or 8-byte alignment (both read from the
  K sweep by :func:`model_constants`). A K that is aligned
  but not a multiple of the K-tile (64 elements of 16-bit data, 128 bytes, the width of the swizzled tiles) pays
  for a partly filled last K-step: ``e_align *= K / (BK * ceil(K / BK))``, the smaller penalty.
- **tile quantization** ``e_tile``: the output is cut into tiles of ``tm x tn``; every tile costs a full tile's
  work, so the useful fraction is ``M*N / (ceil(M/tm)*tm * ceil(N/tn)*tn)``.
- **wave quantization** ``e_wave``: the ``T = batch * ceil(M/tm) * ceil(N/tn)`` tiles run on the SMs in
  ``W = ceil(T / SMs)`` waves; the last wave may leave SMs idle: ``e_wave = T / (W * SMs)``.

cuBLAS picks its tile per shape; ``tile=None`` models that as the best of a few large Hopper tiles
(:data:`LIBRARY_TILES`). A fixed-tile Triton kernel (:func:`gpulab.codesign.matmul.matmul_fixed_tile`) cannot
adapt, which is why the wave sweep measures both.

What the model leaves out, on purpose: launch overhead (microseconds; it matters only for tiny GEMMs), caches (a
small operand re-read from L2 is cheaper than the memory roof says), split-K / stream-K and GEMV kernels (cuBLAS
uses them for awkward or skinny shapes, so for very small M or N the tile quantization here is pessimistic), and
several programs sharing an SM. fp32 without TF32 runs on the FP32 pipes at the spec's fp32 rate; the alignment
rule, derived for the tensor-core path, is applied to it unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics

from gpulab import hardware, runtime
from gpulab.roofline import dtype_and_size

# PEAK_FRACTION, MISALIGNED_PENALTY, PARTIALLY_ALIGNED_PENALTY and MEMORY_FRACTION are module attributes read from
# the records on first use (__getattr__ below), so they are not in __all__ (gpulab.codesign exports them).
__all__ = [
    "memory_fraction",
    "GemmConstants",
    "FALLBACK",
    "model_constants",
    "ALIGNMENT_BYTES",
    "K_TILE_BYTES",
    "LIBRARY_TILES",
    "DEFAULT_TILE",
    "GemmPrediction",
    "gemm_time",
    "relative_throughput",
    "alignment_penalty",
    "alignment_efficiency",
    "tile_quantization",
    "wave_quantization",
]

# ----------------------------------------------------------------------------------------------------------------
# The model's constants, each with its source. Three are measured, and read from this lesson's newest stored run
# (model_constants); the memory fraction from lesson 0's (memory_fraction); the rest are hardware rules.

ALIGNMENT_BYTES = 16
"""Rows must start on 16-byte boundaries for TMA loads and the aligned tensor-core kernels (8 bf16/fp16 elements)."""

K_TILE_BYTES = 128
"""Width of one K-step of a Hopper GEMM tile: 128 bytes (64 bf16/fp16 elements), the 128-byte swizzle of TMA tiles."""


@dataclasses.dataclass(frozen=True)
class GemmConstants:
    """The model's three measured constants, with where each comes from.

    - ``peak_fraction`` ``phi_c``: the fraction of the spec tensor-core peak the best GEMM sustains;
    - ``misaligned_penalty`` ``pi_2``: how much slower a GEMM runs when a row of K or N is only 2-byte aligned;
    - ``partially_aligned_penalty`` ``pi_4,8``: the same for rows 4- or 8-byte (not 16-byte) aligned;
    - ``source``: the record file they were read from, or ``"typed fallback"``; ``how``: one line per constant.
    """

    peak_fraction: float
    misaligned_penalty: float
    partially_aligned_penalty: float
    source: str
    how: tuple[str, ...]

    def __post_init__(self):
        for name in ("peak_fraction", "misaligned_penalty", "partially_aligned_penalty"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"GemmConstants.{name} must be a positive finite number, got {v!r}.")
        if not 0 < self.peak_fraction <= 1:
            raise ValueError(f"GemmConstants.peak_fraction must be in (0, 1], got {self.peak_fraction!r}.")

    def describe(self) -> str:
        """The three values and their provenance, a line each."""
        return "\n".join([f"the model's measured constants, from {self.source}:"] + [f"  {h}" for h in self.how])


FALLBACK = GemmConstants(
    peak_fraction=0.70,
    misaligned_penalty=675 / 145,
    partially_aligned_penalty=680 / 273,
    source="typed fallback",
    how=(
        "PEAK_FRACTION = 0.70: 675 TFLOP/s quoted for cuBLAS bf16 at 8192 x 8192 x 4096 on an H100 when the model "
        "was built / 989.4 spec / 0.970 wave efficiency (no stored lesson-2 run)",
        "MISALIGNED_PENALTY = 675 / 145: the same quote, 145 TFLOP/s at K = 4095 and 4097 (no stored lesson-2 run)",
        "PARTIALLY_ALIGNED_PENALTY = 680 / 273: the first H100 run of `python -m gpulab bench 02` (2026-11-22), "
        "K = 4092-4100 against the aligned K beside them (no stored lesson-2 run)",
    ),
)
"""What the model uses where no lesson-2 run of the GPU is stored (a clone without ``benchmarks/``), typed, each with
its source: the figures the model was first built with. The spec (fraction 1, no penalty) would not do here: it
erases the alignment effect the lesson is about."""


def model_constants(gpu="H100", root=None) -> GemmConstants:
    """:class:`GemmConstants` read from the newest stored lesson-2 run of ``gpu`` (``benchmarks/02_codesign``, or
    ``root``), device time (``ms``); :data:`FALLBACK` for each constant the run cannot give (no run stored, or no
    case of its kind).

    The run's K sweep (``8192 x 8192 x K`` in bf16 through cuBLAS, K around 4096) is read case by case:

    - each **aligned** case (K and N 16-byte aligned, K a multiple of the 64-element K-step, so ``e_align = 1``) gives
      the rate per unit of shape efficiency ``R = TFLOP/s / (e_tile * e_wave)`` (the library tiles,
      :data:`LIBRARY_TILES`, on the GPU's SMs); ``R_ref`` is their median, and ``PEAK_FRACTION = R_ref / P_peak``;
    - each **misaligned** case (a row only 2-byte aligned: K = 4095, 4097) gives the penalty that makes the model
      reproduce it, ``R_ref * e_tile * e_wave * k_fill / TFLOP/s``; ``MISALIGNED_PENALTY`` is their mean;
    - each **partially aligned** case (4- or 8-byte: K = 4092, 4094, 4098, 4100) the same;
      ``PARTIALLY_ALIGNED_PENALTY`` is their mean.

    Only records whose status is ``ok`` (checked against float64 before timing) count.
    """
    if root is None and gpu == "H100":
        return _constants()
    return _read_constants(gpu, root)


@functools.cache
def _constants() -> GemmConstants:
    return _read_constants("H100", None)


def _read_constants(gpu, root) -> GemmConstants:
    from gpulab import bench  # deferred: records are read only when asked

    spec = hardware.spec(gpu)  # a ValueError naming gpu if the name is unknown
    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be a GPU name such as 'H100', got {type(gpu).__name__} {gpu!r}.")
    files = bench.record_files(bench.results_dir(root) / "02_codesign", gpu.lower())
    if not files:
        return FALLBACK
    path = bench.newest(files)
    groups: dict[str, list] = {"aligned": [], "partial": [], "misaligned": []}
    dtypes: set[str] = set()
    for r in bench.load("02", path=path):
        if not _usable_k_case(r):
            continue
        m, n, k = (int(v) for v in r.shape)
        itemsize = dtype_key(r.dtype)[1]
        worst = min(_alignment_bytes(v * itemsize) for v in (k, n))
        bk = K_TILE_BYTES // itemsize
        k_fill = k / (bk * math.ceil(k / bk))
        shape_eff = _best_tile_efficiency(m, n, 1, spec.sm_count)
        kind = "aligned" if worst >= ALIGNMENT_BYTES else ("partial" if worst >= 4 else "misaligned")
        if kind == "aligned" and k_fill < 1:
            continue  # a partly filled last K-step: e_align < 1, not a reference
        groups[kind].append((k, r.tflops, shape_eff, k_fill))
        dtypes.add(dtype_key(r.dtype)[0])
    if not groups["aligned"]:
        return FALLBACK
    rates = sorted(t / eff for _, t, eff, _ in groups["aligned"])
    ref = statistics.median(rates)
    peak = min(spec.peak_tflops(d) for d in dtypes)  # bf16 and fp16: one tensor-core rate
    run = f"{path.parent.name}/{path.name}"
    ks = ", ".join(str(k) for k, *_ in groups["aligned"])
    how = [f"PEAK_FRACTION = {ref / peak:.3f} = {ref:.0f} / {peak:g} TFLOP/s (spec): the median over the aligned "
           f"K = {ks} of TFLOP/s / (e_tile * e_wave)"]  # fmt: skip
    values = {"peak_fraction": min(ref / peak, 1.0)}
    for kind, name, attr in (("misaligned", "MISALIGNED_PENALTY", "misaligned_penalty"),
                             ("partial", "PARTIALLY_ALIGNED_PENALTY", "partially_aligned_penalty")):  # fmt: skip
        cases = groups[kind]
        if not cases:
            values[attr] = getattr(FALLBACK, attr)
            how.append(f"{name} = {values[attr]:.2f}: typed fallback (this run has no such case)")
            continue
        penalties = [ref * eff * fill / t for _, t, eff, fill in cases]
        values[attr] = max(statistics.fmean(penalties), 1.0)
        how.append(f"{name} = {values[attr]:.2f}: mean over K = {', '.join(str(k) for k, *_ in cases)} of the "
                   "penalty that reproduces each")  # fmt: skip
    return GemmConstants(**values, source=f"{run} (device time)", how=tuple(how))


def _usable_k_case(r) -> bool:
    """A checked K-sweep record of a 16-bit GEMM with a device time."""
    return (
        r.params.get("sweep") == "K"
        and r.status == "ok"
        and r.dtype in ("bfloat16", "float16")
        and r.shape is not None
        and len(r.shape) == 3
        and r.ms is not None
        and math.isfinite(r.ms)
        and r.ms > 0
        and r.tflops is not None
        and r.tflops > 0
    )


def _best_tile_efficiency(m: int, n: int, batch: int, sm_count: int) -> float:
    """``e_tile * e_wave`` of the best of :data:`LIBRARY_TILES` (the choice :func:`gemm_time` makes for tile=None)."""
    best = 0.0
    for t in LIBRARY_TILES:
        tiles, e_tile = tile_quantization(m, n, t, batch)
        best = max(best, e_tile * wave_quantization(tiles, sm_count)[1])
    return best


def memory_fraction(root=None) -> float:
    """``phi_m``: the fraction of the spec HBM bandwidth a streaming kernel reaches, read from the records: lesson 0's
    read-only plateau on the H100 over its spec (:func:`gpulab.roofline.stored_read_plateau`, the newest stored
    ``benchmarks/00_memory_hierarchy`` run; 1.0, the spec, where none is stored). The model applies the H100's
    fraction to every GPU. Also available as :data:`MEMORY_FRACTION` (read on first use)."""
    if root is None:
        return _memory_fraction_default()
    from gpulab.roofline import stored_read_plateau

    return stored_read_plateau("H100", root).fraction


@functools.cache
def _memory_fraction_default() -> float:
    from gpulab.roofline import stored_read_plateau

    return stored_read_plateau("H100").fraction


def _phi_c() -> float:
    return model_constants().peak_fraction


_MEASURED = {
    "PEAK_FRACTION": "peak_fraction",
    "MISALIGNED_PENALTY": "misaligned_penalty",
    "PARTIALLY_ALIGNED_PENALTY": "partially_aligned_penalty",
}


def __getattr__(name):  # the measured constants are read from the records when first asked for, not typed in
    if name == "MEMORY_FRACTION":
        return memory_fraction()
    if name in _MEASURED:
        return getattr(model_constants(), _MEASURED[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


LIBRARY_TILES = ((128, 256), (256, 128), (128, 128))
"""Output tiles the model lets cuBLAS choose among when ``tile=None`` (largest first; it keeps the most efficient).
Large tiles because Hopper's tensor cores need them to be fed. cuBLAS has more tiles, split-K and stream-K, so on
awkward shapes it can do better than this model of it."""

DEFAULT_TILE = (128, 128)


# ----------------------------------------------------------------------------------------------------------------
# The pieces of the model


_positive_int = runtime.positive_int


def dtype_key(dtype, spec=None) -> tuple[str, int]:
    """('bfloat16', 2) for any spelling of a dtype the model covers; ValueError naming ``dtype`` otherwise."""
    key, itemsize = dtype_and_size(dtype, allow_tf32=True)
    if spec is not None and key == "bfloat16" and not spec.has_bf16:
        raise ValueError(f"dtype=bfloat16, but the {spec.name} has no bf16 hardware; use float16 there.")
    return key, itemsize


def check_tile(tile, name: str = "tile") -> tuple[int, int]:
    """``(rows, columns)`` of an output tile: a pair of positive integers; a clear error naming ``name`` otherwise."""
    if not isinstance(tile, (tuple, list)) or len(tile) != 2:
        raise runtime.ArgumentTypeError(
            f"{name} must be a (rows, columns) pair of positive integers, got {tile!r}; e.g. {name}=(128, 128)."
        )
    return _positive_int(f"{name}[0]", tile[0]), _positive_int(f"{name}[1]", tile[1])


def alignment_efficiency(k: int, n: int, dtype="bfloat16") -> tuple[float, tuple[str, ...], float]:
    """``(e_align, misaligned dims, K-step fill)`` for a row-major GEMM with inner size ``k`` and ``n`` columns.

    ``e_align = K / (BK * ceil(K / BK)) / alignment_penalty(K, N)`` with ``BK = K_TILE_BYTES / itemsize`` (64
    elements for 16-bit types).
    """
    k, n = _positive_int("k", k), _positive_int("n", n)
    _, itemsize = dtype_key(dtype)
    misaligned = tuple(name for name, v in (("K", k), ("N", n)) if (v * itemsize) % ALIGNMENT_BYTES)
    bk = K_TILE_BYTES // itemsize
    k_fill = k / (bk * math.ceil(k / bk))
    return k_fill / alignment_penalty(k, n, dtype), misaligned, k_fill


def alignment_penalty(k: int, n: int, dtype="bfloat16") -> float:
    """Slowdown from the worse-aligned of the row lengths K and N: 1 when both rows are multiples of 16 bytes,
    :data:`PARTIALLY_ALIGNED_PENALTY` when the worse is 4- or 8-byte aligned, :data:`MISALIGNED_PENALTY` below that."""
    k, n = _positive_int("k", k), _positive_int("n", n)
    _, itemsize = dtype_key(dtype)
    worst = min(_alignment_bytes(v * itemsize) for v in (k, n))
    if worst >= ALIGNMENT_BYTES:
        return 1.0
    c = model_constants()
    return c.partially_aligned_penalty if worst >= 4 else c.misaligned_penalty


def _alignment_bytes(row_bytes: int) -> int:
    """The largest power of two (up to 16) that divides a row's length in bytes."""
    return min(row_bytes & -row_bytes, ALIGNMENT_BYTES)


def tile_quantization(m: int, n: int, tile, batch: int = 1) -> tuple[int, float]:
    """``(tiles, e_tile)``: ``batch * ceil(m/tm) * ceil(n/tn)`` tiles, of which the fraction ``e_tile`` is useful."""
    m, n, batch = _positive_int("m", m), _positive_int("n", n), _positive_int("batch", batch)
    tm, tn = check_tile(tile)
    rows, cols = math.ceil(m / tm), math.ceil(n / tn)
    return batch * rows * cols, (m * n) / (rows * tm * cols * tn)


def wave_quantization(tiles: int, sm_count: int) -> tuple[int, float]:
    """``(waves, e_wave)``: ``ceil(tiles / SMs)`` waves; ``e_wave = tiles / (waves * SMs)`` of the SM slots busy."""
    tiles, sm_count = _positive_int("tiles", tiles), _positive_int("sm_count", sm_count)
    waves = math.ceil(tiles / sm_count)
    return waves, tiles / (waves * sm_count)


@dataclasses.dataclass(frozen=True)
class GemmPrediction:
    """What :func:`gemm_time` predicts for one GEMM, and why. Times in ms, rates in TFLOP/s."""

    m: int
    n: int
    k: int
    batch: int
    dtype: str
    gpu: str
    tile: tuple[int, int]
    flops: float
    bytes: float
    peak_tflops: float
    compute_ms: float
    memory_ms: float
    alignment_efficiency: float
    misaligned: tuple[str, ...]
    k_fill: float
    tile_efficiency: float
    tiles: int
    waves: int
    wave_efficiency: float
    sm_count: int

    @property
    def ms(self) -> float:
        return max(self.compute_ms, self.memory_ms)

    @property
    def tflops(self) -> float:
        return self.flops / (self.ms * 1e-3) / 1e12

    @property
    def bound(self) -> str:
        """Which roof binds: 'compute' or 'memory'."""
        return "compute" if self.compute_ms >= self.memory_ms else "memory"

    @property
    def efficiency(self) -> float:
        """Product of the three shape efficiencies: the fraction of the compute roof this shape can use."""
        return self.alignment_efficiency * self.tile_efficiency * self.wave_efficiency

    def params(self, prefix: str = "predicted_") -> dict:
        """The prediction as flat JSON-friendly fields, to attach to a :class:`gpulab.bench.Result`."""
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, got {type(prefix).__name__}.")
        return {
            f"{prefix}ms": self.ms,
            f"{prefix}tflops": self.tflops,
            f"{prefix}bound": self.bound,
            f"{prefix}alignment_eff": self.alignment_efficiency,
            f"{prefix}tile_eff": self.tile_efficiency,
            f"{prefix}wave_eff": self.wave_efficiency,
            f"{prefix}tile": list(self.tile),
            f"{prefix}waves": self.waves,
            "model_gpu": self.gpu,
        }

    def explain(self) -> str:
        """A few lines that say where the time goes."""
        mis = (
            f"misaligned {'/'.join(self.misaligned)} (x{self.k_fill / self.alignment_efficiency:.2f})"
            if self.misaligned
            else "aligned"
        )
        shape = f"{self.batch} x " if self.batch > 1 else ""
        return "\n".join(
            [
                f"GEMM {shape}{self.m} x {self.n} x {self.k} ({self.dtype}) on {self.gpu}: "
                f"{self.ms:.4g} ms, {self.tflops:.0f} TFLOP/s ({self.bound}-bound)",
                f"  alignment {self.alignment_efficiency:.3f}: {mis}, last K-step {self.k_fill:.0%} full",
                f"  tiles {self.tile[0]}x{self.tile[1]}: {self.tiles} tiles, "
                f"{self.tile_efficiency:.3f} of their area useful",
                f"  waves: {self.tiles} tiles / {self.sm_count} SMs = {self.waves} wave{'s' * (self.waves != 1)}, "
                f"{self.wave_efficiency:.3f} of SM slots busy",
                f"  compute roof {self.compute_ms:.4g} ms (peak {self.peak_tflops:.0f} x {_phi_c():.3f} x "
                f"{self.efficiency:.3f}), memory roof {self.memory_ms:.4g} ms ({self.bytes / 1e9:.3g} GB)",
            ]
        )


def gemm_time(m, n, k, dtype="bfloat16", gpu="H100", batch=1, tile=DEFAULT_TILE) -> GemmPrediction:
    """Predict the time of ``batch`` GEMMs ``[m, k] @ [k, n]`` in ``dtype`` on ``gpu`` (a name or GPUSpec).

    ``tile`` is the output tile ``(rows, columns)`` of the kernel; ``None`` lets the model choose the most
    efficient of :data:`LIBRARY_TILES`, as cuBLAS picks a tile per shape. See the module docstring for the formula.
    Sizes are positive integers (5.0 and True are refused); ``dtype`` is float32, float16, bfloat16 or 'tf32'.
    """
    m, n, k, batch = (_positive_int(name, v) for name, v in (("m", m), ("n", n), ("k", k), ("batch", batch)))
    spec = hardware.spec(gpu)
    key, itemsize = dtype_key(dtype, spec)
    peak = spec.peak_tflops(key)
    if peak <= 0 or spec.hbm_gbps <= 0:  # a live GPU missing from the spec table has no rates to model with
        raise ValueError(
            f"gpu={spec.name!r} has no {key} peak or HBM bandwidth in gpulab's spec table; name a known GPU."
        )
    align, misaligned, k_fill = alignment_efficiency(k, n, key if key != "tf32" else "float32")
    candidates = LIBRARY_TILES if tile is None else (check_tile(tile),)
    best = None
    for t in candidates:
        tiles, e_tile = tile_quantization(m, n, t, batch)
        waves, e_wave = wave_quantization(tiles, spec.sm_count)
        if best is None or e_tile * e_wave > best[0] * 1.0000001:  # ties keep the earlier (larger) tile
            best = (e_tile * e_wave, t, tiles, e_tile, waves, e_wave)
    _, t, tiles, e_tile, waves, e_wave = best
    flops = 2.0 * batch * m * n * k
    nbytes = float(itemsize) * batch * (m * k + k * n + m * n)
    compute_ms = flops / (peak * 1e12 * model_constants().peak_fraction * align * e_tile * e_wave) * 1e3
    # A misaligned shape runs a different, slower kernel: its narrow loads lower the memory roof as well.
    memory_ms = nbytes / (spec.hbm_gbps * 1e9 * memory_fraction()) * 1e3 * (k_fill / align)
    return GemmPrediction(
        m=m,
        n=n,
        k=k,
        batch=batch,
        dtype=key,
        gpu=spec.name,
        tile=tuple(t),
        flops=flops,
        bytes=nbytes,
        peak_tflops=peak,
        compute_ms=compute_ms,
        memory_ms=memory_ms,
        alignment_efficiency=align,
        misaligned=misaligned,
        k_fill=k_fill,
        tile_efficiency=e_tile,
        tiles=tiles,
        waves=waves,
        wave_efficiency=e_wave,
        sm_count=spec.sm_count,
    )


def relative_throughput(m, n, k, dtype="bfloat16", gpu="H100", batch=1, tile=DEFAULT_TILE) -> float:
    """Predicted TFLOP/s as a fraction of the best the GPU sustains (``PEAK_FRACTION`` of its peak): in (0, 1].

    1.0 means an ideal shape: aligned, no wasted tile area, whole waves, compute-bound.
    """
    p = gemm_time(m, n, k, dtype=dtype, gpu=gpu, batch=batch, tile=tile)
    return p.tflops / (p.peak_tflops * model_constants().peak_fraction)
