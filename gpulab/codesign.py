"""Lesson 2: GEMM shapes and hardware co-design.

Based on Anthony et al., "The Case for Co-Designing Model Architectures with Hardware" (2024, arXiv:2401.14489):
almost all of a transformer's (and an LSTM's) FLOPs are matrix products, and how fast a matrix product runs depends
on its *shape*, not only on its FLOP count. Two models with the same parameter count can differ by tens of percent
in throughput because one of them picked sizes the GPU dislikes.

What you will learn:
- a model of GEMM time on a given GPU (a :class:`gpulab.hardware.GPUSpec`): a memory roof, a compute roof, and
  three shape effects that lower the compute roof: **alignment**, **tile quantization** and **wave quantization**;
- to measure each effect on the H100 and to put the model's prediction beside the measurement;
- to check a model configuration (a transformer or a multi-head LSTM) against the paper's sizing rules, and to find
  the nearest compliant sizes.

The model
---------
``C[M, N] = A[M, K] @ B[K, N]`` (``batch`` independent products of that shape) in a dtype of ``s`` bytes moves at
least ``Q = s * batch * (M*K + K*N + M*N)`` bytes (each operand read once, the output written once) and does
``F = 2 * batch * M * N * K`` FLOPs. Its predicted time is the larger of two roofs::

    t = max( F / (P * phi_c * e_align * e_tile * e_wave),   Q * penalty / (B * phi_m) )

- ``P`` is the GPU's tensor-core peak for the dtype and ``B`` its HBM bandwidth (spec sheet); ``phi_c``
  (:data:`PEAK_FRACTION`) and ``phi_m`` (:data:`MEMORY_FRACTION`) are the fractions of them that the best kernels
  reach (sources beside the constants).
- **alignment** ``e_align``: Hopper's fast GEMM path loads tiles with TMA and multiplies with ``wgmma``; both need
  every row of every operand to start on a 16-byte boundary. In the row-major layout torch uses, the row lengths
  (leading dimensions) are K (rows of A, and of B when it is a transposed view) and N (rows of B and C). If K or N
  times the element size is not a multiple of 16 bytes (8 elements of bf16/fp16, 4 of fp32), cuBLAS falls back to
  kernels with narrower loads: ``e_align = 1 / alignment_penalty(K, N)``, :data:`MISALIGNED_PENALTY` for rows
  that are only 2-byte aligned, :data:`PARTIALLY_ALIGNED_PENALTY` for 4- or 8-byte alignment. A K that is aligned
  but not a multiple of the K-tile (64 elements of 16-bit data, 128 bytes, the width of the swizzled tiles) pays
  for a partly filled last K-step: ``e_align *= K / (BK * ceil(K / BK))``, the smaller penalty.
- **tile quantization** ``e_tile``: the output is cut into tiles of ``tm x tn``; every tile costs a full tile's
  work, so the useful fraction is ``M*N / (ceil(M/tm)*tm * ceil(N/tn)*tn)``.
- **wave quantization** ``e_wave``: the ``T = batch * ceil(M/tm) * ceil(N/tn)`` tiles run on the SMs in
  ``W = ceil(T / SMs)`` waves; the last wave may leave SMs idle: ``e_wave = T / (W * SMs)``.

cuBLAS picks its tile per shape; ``tile=None`` models that as the best of a few large Hopper tiles
(:data:`LIBRARY_TILES`). A fixed-tile Triton kernel (:func:`matmul_fixed_tile`) cannot adapt, which is why the wave
sweep measures both.

What the model leaves out, on purpose: launch overhead (microseconds; it matters only for tiny GEMMs), caches (a
small operand re-read from L2 is cheaper than the memory roof says), split-K / stream-K and GEMV kernels (cuBLAS
uses them for awkward or skinny shapes, so for very small M or N the tile quantization here is pessimistic), and
several programs sharing an SM. fp32 without TF32 runs on the FP32 pipes at the spec's fp32 rate; the alignment
rule, derived for the tensor-core path, is applied to it unchanged.

The paper's rules (checked by :func:`check_config`): vocabulary divisible by 64; ``b*s``, ``h/a`` and ``h/t``
divisible by a large power of two (64 here); ``(b*a)/t`` an integer; the microbatch as large as memory allows
(here: until doubling it would buy less than 5% by the model), with b microbatch, s sequence length, h hidden size,
a attention heads, t tensor-parallel size.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import torch

from gpulab import (
    dtypes,
    runtime,  # noqa: F401 - sets interpreter mode before any kernel is defined
)

import triton  # isort: skip
import triton.language as tl  # isort: skip

__all__ = [
    "PEAK_FRACTION",
    "MEMORY_FRACTION",
    "MISALIGNED_PENALTY",
    "PARTIALLY_ALIGNED_PENALTY",
    "alignment_penalty",
    "ALIGNMENT_BYTES",
    "K_TILE_BYTES",
    "LIBRARY_TILES",
    "GemmPrediction",
    "gemm_time",
    "relative_throughput",
    "alignment_efficiency",
    "tile_quantization",
    "wave_quantization",
    "matmul_fixed_tile_kernel",
    "matmul_fixed_tile",
    "matmul_reference",
    "TransformerConfig",
    "LSTMConfig",
    "RuleCheck",
    "KNOWN_CONFIGS",
    "check_config",
    "fix_config",
    "heads_options",
    "format_checks",
    "model_gemms",
    "layer_time",
    "sweep_k",
    "sweep_head_dim",
    "sweep_waves",
    "pair_agreement",
    "format_agreement",
    "plot_tiles",
    "plot_wave_staircase",
    "plot_prediction",
    "plot_sweep",
    "plot_benchmark",
    "benchmark",
]

# ----------------------------------------------------------------------------------------------------------------
# The model's constants, each with its source. Only PARTIALLY_ALIGNED_PENALTY was read off this lesson's own sweep.

MISALIGNED_PENALTY = 675 / 145
"""How much slower a GEMM runs when a row of K or N elements is only 2-byte aligned (an odd count of 16-bit
elements): ~4.66x.

Source: cuBLAS bf16 on the H100, M = N = 8192: K = 4096 ran at 675 TFLOP/s, K = 4095 and K = 4097 at 145 TFLOP/s
(the numbers quoted in the lesson's issue)."""

PARTIALLY_ALIGNED_PENALTY = 680 / 273
"""How much slower a GEMM runs when rows are 4- or 8-byte aligned but not 16-byte aligned: ~2.5x.

Source, and the one constant of this model that comes from this lesson's own sweep: the first H100 run of
`python -m gpulab bench 02` (2026-11-22) measured K = 4092, 4094, 4098 and 4100 (bf16, M = N = 8192) at 271-274
TFLOP/s against 666-695 at the 16-byte-aligned K beside them. The first version of the model charged them the full
2-byte penalty, and misordered those pairs; cuBLAS evidently has a middle path (wider, but not 16-byte, loads)."""

ALIGNMENT_BYTES = 16
"""Rows must start on 16-byte boundaries for TMA loads and the aligned tensor-core kernels (8 bf16/fp16 elements)."""

K_TILE_BYTES = 128
"""Width of one K-step of a Hopper GEMM tile: 128 bytes (64 bf16/fp16 elements), the 128-byte swizzle of TMA tiles."""

PEAK_FRACTION = 0.70
"""Fraction of the spec tensor-core peak the best GEMM sustains: 675 TFLOP/s measured at 8192 x 8192 x 4096 bf16 on
the H100 (issue) / 989.4 TFLOP/s spec / 0.970 (that shape's wave efficiency with the library tiles) = 0.703."""

MEMORY_FRACTION = 0.93
"""Fraction of the spec HBM bandwidth a streaming kernel reaches: 3.10 of 3.35 TB/s, measured on the H100 in lesson 0
(``benchmarks/00_memory_hierarchy``)."""

LIBRARY_TILES = ((128, 256), (256, 128), (128, 128))
"""Output tiles the model lets cuBLAS choose among when ``tile=None`` (largest first; it keeps the most efficient).
Large tiles because Hopper's tensor cores need them to be fed. cuBLAS has more tiles, split-K and stream-K, so on
awkward shapes it can do better than this model of it."""

DEFAULT_TILE = (128, 128)


# ----------------------------------------------------------------------------------------------------------------
# The pieces of the model


_positive_int = runtime.positive_int


def _dtype_key(dtype, spec=None) -> tuple[str, int]:
    """('bfloat16', 2) for any spelling of a dtype the model covers; ValueError naming ``dtype`` otherwise."""
    from gpulab.roofline import dtype_and_size

    key, itemsize = dtype_and_size(dtype, allow_tf32=True)
    if spec is not None and key == "bfloat16" and not spec.has_bf16:
        raise ValueError(f"dtype=bfloat16, but the {spec.name} has no bf16 hardware; use float16 there.")
    return key, itemsize


def _tile(tile) -> tuple[int, int]:
    if not isinstance(tile, (tuple, list)) or len(tile) != 2:
        raise ValueError(f"tile must be a (rows, columns) pair of positive integers or None, got {tile!r}.")
    return _positive_int("tile[0]", tile[0]), _positive_int("tile[1]", tile[1])


def alignment_efficiency(k: int, n: int, dtype="bfloat16") -> tuple[float, tuple[str, ...], float]:
    """``(e_align, misaligned dims, K-step fill)`` for a row-major GEMM with inner size ``k`` and ``n`` columns.

    ``e_align = K / (BK * ceil(K / BK)) / alignment_penalty(K, N)`` with ``BK = K_TILE_BYTES / itemsize`` (64
    elements for 16-bit types).
    """
    k, n = _positive_int("k", k), _positive_int("n", n)
    _, itemsize = _dtype_key(dtype)
    misaligned = tuple(name for name, v in (("K", k), ("N", n)) if (v * itemsize) % ALIGNMENT_BYTES)
    bk = K_TILE_BYTES // itemsize
    k_fill = k / (bk * math.ceil(k / bk))
    return k_fill / alignment_penalty(k, n, dtype), misaligned, k_fill


def alignment_penalty(k: int, n: int, dtype="bfloat16") -> float:
    """Slowdown from the worse-aligned of the row lengths K and N: 1 when both rows are multiples of 16 bytes,
    :data:`PARTIALLY_ALIGNED_PENALTY` when the worse is 4- or 8-byte aligned, :data:`MISALIGNED_PENALTY` below that."""
    k, n = _positive_int("k", k), _positive_int("n", n)
    _, itemsize = _dtype_key(dtype)
    worst = min(_alignment_bytes(v * itemsize) for v in (k, n))
    if worst >= ALIGNMENT_BYTES:
        return 1.0
    return PARTIALLY_ALIGNED_PENALTY if worst >= 4 else MISALIGNED_PENALTY


def _alignment_bytes(row_bytes: int) -> int:
    """The largest power of two (up to 16) that divides a row's length in bytes."""
    return min(row_bytes & -row_bytes, ALIGNMENT_BYTES)


def tile_quantization(m: int, n: int, tile, batch: int = 1) -> tuple[int, float]:
    """``(tiles, e_tile)``: ``batch * ceil(m/tm) * ceil(n/tn)`` tiles, of which the fraction ``e_tile`` is useful."""
    m, n, batch = _positive_int("m", m), _positive_int("n", n), _positive_int("batch", batch)
    tm, tn = _tile(tile)
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
                f"  compute roof {self.compute_ms:.4g} ms (peak {self.peak_tflops:.0f} x {PEAK_FRACTION} x "
                f"{self.efficiency:.3f}), memory roof {self.memory_ms:.4g} ms ({self.bytes / 1e9:.3g} GB)",
            ]
        )


def gemm_time(m, n, k, dtype="bfloat16", gpu="H100", batch=1, tile=DEFAULT_TILE) -> GemmPrediction:
    """Predict the time of ``batch`` GEMMs ``[m, k] @ [k, n]`` in ``dtype`` on ``gpu`` (a name or GPUSpec).

    ``tile`` is the output tile ``(rows, columns)`` of the kernel; ``None`` lets the model choose the most
    efficient of :data:`LIBRARY_TILES`, as cuBLAS picks a tile per shape. See the module docstring for the formula.
    """
    from gpulab import hardware

    m, n, k, batch = (_positive_int(name, v) for name, v in (("m", m), ("n", n), ("k", k), ("batch", batch)))
    spec = hardware.spec(gpu)
    key, itemsize = _dtype_key(dtype, spec)
    peak = spec.peak_tflops(key)
    if peak <= 0 or spec.hbm_gbps <= 0:  # a live GPU missing from the spec table has no rates to model with
        raise ValueError(
            f"gpu={spec.name!r} has no {key} peak or HBM bandwidth in gpulab's spec table; name a known GPU."
        )
    align, misaligned, k_fill = alignment_efficiency(k, n, key if key != "tf32" else "float32")
    candidates = LIBRARY_TILES if tile is None else (_tile(tile),)
    best = None
    for t in candidates:
        tiles, e_tile = tile_quantization(m, n, t, batch)
        waves, e_wave = wave_quantization(tiles, spec.sm_count)
        if best is None or e_tile * e_wave > best[0] * 1.0000001:  # ties keep the earlier (larger) tile
            best = (e_tile * e_wave, t, tiles, e_tile, waves, e_wave)
    _, t, tiles, e_tile, waves, e_wave = best
    flops = 2.0 * batch * m * n * k
    nbytes = float(itemsize) * batch * (m * k + k * n + m * n)
    compute_ms = flops / (peak * 1e12 * PEAK_FRACTION * align * e_tile * e_wave) * 1e3
    # A misaligned shape runs a different, slower kernel: its narrow loads lower the memory roof as well.
    memory_ms = nbytes / (spec.hbm_gbps * 1e9 * MEMORY_FRACTION) * 1e3 * (k_fill / align)
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
    return p.tflops / (p.peak_tflops * PEAK_FRACTION)


# ----------------------------------------------------------------------------------------------------------------
# A fixed-tile matmul in Triton: one program per BLOCK_M x BLOCK_N output tile, whatever the shape.


@triton.jit
def matmul_fixed_tile_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """C[tile] = A[rows of tile, :] @ B[:, columns of tile], accumulated in fp32 over K in steps of BLOCK_K."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        # Ragged edges: rows past M, columns past N and the K tail past K load zeros, which add nothing to the sum.
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (ks[None, :] < K - k0), other=0.0)
        b = tl.load(b_ptrs, mask=(ks[:, None] < K - k0) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """float64 ``a @ b`` on the CPU."""
    return a.detach().to("cpu", torch.float64) @ b.detach().to("cpu", torch.float64)


_require_tensor = runtime.require_tensor


def _block(name, value) -> int:
    value = _positive_int(name, value)
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two (tl.arange needs one), got {value}.")
    return runtime.dot_block(value)  # >= 16: GPUs need tl.dot operands of at least 16 along each dimension


def matmul_fixed_tile(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor | None = None,
    block_m: int = 128,
    block_n: int = 128,
    block_k: int = 64,
    num_warps: int | None = None,
    num_stages: int | None = None,
    allow_tf32: bool = False,
) -> torch.Tensor:
    """``a @ b`` with :func:`matmul_fixed_tile_kernel`: a grid of ``cdiv(M, block_m) x cdiv(N, block_n)`` programs.

    The tile never changes with the shape, so its tile and wave quantization are exactly the model's. Blocks are
    powers of two, raised to at least 16. fp32 inputs use IEEE products unless ``allow_tf32``. Returns ``out``.
    """
    _require_tensor("a", a, 2)
    _require_tensor("b", b, 2)
    dtype = dtypes.require_dtype("a", a.dtype)
    if b.dtype != dtype:
        raise ValueError(f"b has dtype {b.dtype}, but a has {dtype}; pass both in the same dtype.")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"a is {m} x {k} and b is {k2} x {n}: the inner sizes must match.")
    if out is None:
        out = torch.empty((m, n), dtype=dtype, device=a.device)
    else:
        _require_tensor("out", out, 2)
        if tuple(out.shape) != (m, n) or out.dtype != dtype:
            raise ValueError(f"out must be a ({m}, {n}) {dtype} tensor, got {tuple(out.shape)} {out.dtype}.")
    bm, bn, bk = _block("block_m", block_m), _block("block_n", block_n), _block("block_k", block_k)
    if max(a.numel(), b.numel(), out.numel()) >= 2**31:  # the kernel's offsets are 32-bit integers
        raise ValueError(f"a, b and out must each have fewer than 2**31 elements, got {m} x {k} @ {k} x {n}.")
    if m == 0 or n == 0:
        return out
    launch = {}
    if num_warps is not None:
        launch["num_warps"] = num_warps
    if num_stages is not None:
        launch["num_stages"] = num_stages
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    matmul_fixed_tile_kernel[grid](
        a,
        b,
        out,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        out.stride(0),
        out.stride(1),
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        PRECISION=runtime.dot_precision(dtype, allow_tf32),
        **launch,
    )
    return out


# ----------------------------------------------------------------------------------------------------------------
# Model configurations and the paper's rules


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """A GPT-style transformer: vocabulary, hidden size h, heads a, sequence s, microbatch b, tensor-parallel t."""

    name: str
    vocab: int
    hidden: int
    heads: int
    seq: int = 2048
    microbatch: int = 1
    tensor_parallel: int = 1
    layers: int | None = None
    ffn: int | None = None  # MLP width; 4h when None
    source: str = ""


@dataclasses.dataclass(frozen=True)
class LSTMConfig:
    """A multi-head LSTM (block-diagonal recurrence, one block per head, as in FlashRNN / sLSTM)."""

    name: str
    hidden: int
    heads: int
    batch: int
    seq: int
    vocab: int | None = None
    tensor_parallel: int = 1
    layers: int | None = None
    source: str = ""


@dataclasses.dataclass(frozen=True)
class RuleCheck:
    """One rule applied to one config: whether it holds, why it matters, and compliant alternatives (nearest first)."""

    rule: str
    passed: bool
    value: object
    why: str
    nearest: tuple = ()


KNOWN_CONFIGS = {
    "GPT-2 small": TransformerConfig(
        "GPT-2 small",
        vocab=50257,
        hidden=768,
        heads=12,
        seq=1024,
        microbatch=8,
        layers=12,
        source="Radford et al. 2019 / Hugging Face gpt2 config (vocab 50257, n_embd 768, n_head 12, n_ctx 1024); "
        "the per-GPU microbatch was not published: 8 is assumed",
    ),
    "Pythia-2.8B": TransformerConfig(
        "Pythia-2.8B",
        vocab=50304,
        hidden=2560,
        heads=32,
        seq=2048,
        microbatch=16,
        layers=32,
        source="EleutherAI/pythia models/2.8B/pythia-2.8b.yml (hidden 2560, 32 heads, 32 layers, seq 2048, "
        "micro-batch 16, model-parallel 1); vocabulary padded to 50304",
    ),
    "GPT-NeoX-20B": TransformerConfig(
        "GPT-NeoX-20B",
        vocab=50432,
        hidden=6144,
        heads=64,
        seq=2048,
        microbatch=4,
        tensor_parallel=2,
        layers=44,
        source="EleutherAI/gpt-neox configs/20B.yml (hidden 6144, 64 heads, 44 layers, seq 2048, micro-batch 4, "
        "model-parallel 2); vocabulary padded to 50432",
    ),
    "multi-head LSTM (example)": LSTMConfig(
        "multi-head LSTM (example)",
        hidden=768,
        heads=4,
        batch=12,
        seq=1000,
        vocab=50257,
        layers=12,
        source="illustrative (not a published model): GPT-2's tokenizer, 4 heads of 192",
    ),
}

MULTIPLE = 64
"""The power of two the rules ask for: 64 elements = 128 bytes of bf16, one K-step (:data:`K_TILE_BYTES`)."""

MICROBATCH_GAIN = 0.05
"""The microbatch rule passes when doubling the microbatch would speed up the layer's GEMMs per token by < 5%."""

LSTM_STEP_TILE = (16, 64)
"""Tile of the recurrent step's GEMM in the model: 16 batch rows (the M of an ``mma.m16n8k16``) x 64 gate columns."""


def _pow2_factor(x: int) -> int:
    return x & -x if x > 0 else 0


def _nearest_multiple(x: int, q: int) -> int:
    """The multiple of q nearest to x (at least q; ties round up)."""
    lo = (x // q) * q
    hi = lo + q
    return max(q, hi if (x - lo) >= (hi - x) or lo == 0 else lo)


def _round_up(x: int, q: int) -> int:
    return math.ceil(x / q) * q


def _divisors(x: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(x) + 1) if x % d == 0]
    return sorted(set(small + [x // d for d in small]))


def _validate_config(config):
    if isinstance(config, TransformerConfig):
        names = ("vocab", "hidden", "heads", "seq", "microbatch", "tensor_parallel")
        optional = ("layers", "ffn")
    elif isinstance(config, LSTMConfig):
        names = ("hidden", "heads", "batch", "seq", "tensor_parallel")
        optional = ("vocab", "layers")
    else:
        raise TypeError(f"config must be a TransformerConfig or LSTMConfig, got {type(config).__name__}.")
    for name in names:
        _positive_int(f"config.{name}", getattr(config, name))
    for name in optional:
        if getattr(config, name) is not None:
            _positive_int(f"config.{name}", getattr(config, name))


def model_gemms(config) -> list[dict]:
    """The GEMMs of one layer on one GPU (tensor parallelism splits heads and MLP columns over t GPUs).

    Each entry: ``name, m, n, k, batch, count`` (``count`` times per layer and sequence: the LSTM's recurrent step
    runs once per time step). Sizes that the config makes fractional are rounded down (at least 1): the checker
    reports them; the model just needs a shape.
    """
    _validate_config(config)
    t = config.tensor_parallel
    h = config.hidden
    d = lambda x, y: max(1, x // y)  # noqa: E731 - sizes of a (possibly non-compliant) config
    if isinstance(config, TransformerConfig):
        b, s, a = config.microbatch, config.seq, config.heads
        ffn = config.ffn or 4 * h
        hd = d(h, a)
        return [
            dict(name="QKV projection", m=b * s, n=d(3 * h, t), k=h, batch=1, count=1),
            dict(name="attention scores Q K^T", m=s, n=s, k=hd, batch=d(b * a, t), count=1),
            dict(name="attention over values A V", m=s, n=hd, k=s, batch=d(b * a, t), count=1),
            dict(name="attention output projection", m=b * s, n=h, k=d(h, t), batch=1, count=1),
            dict(name="MLP up", m=b * s, n=d(ffn, t), k=h, batch=1, count=1),
            dict(name="MLP down", m=b * s, n=h, k=d(ffn, t), batch=1, count=1),
        ]
    b, s, heads = config.batch, config.seq, config.heads
    hd = d(h, heads)
    return [
        dict(name="input projection (4 gates)", m=b * s, n=d(4 * h, t), k=h, batch=1, count=1),
        dict(name="recurrent step (per time step)", m=b, n=4 * hd, k=hd, batch=d(heads, t), count=s),
    ]


def layer_time(config, gpu="H100", dtype="bfloat16") -> tuple[float, list[tuple[dict, GemmPrediction]]]:
    """Predicted ms of one layer's GEMMs (:func:`model_gemms`, cuBLAS-like tiles; the LSTM step with its tile)."""
    total, parts = 0.0, []
    for g in model_gemms(config):
        tile = LSTM_STEP_TILE if g["name"].startswith("recurrent") else None
        p = gemm_time(g["m"], g["n"], g["k"], dtype=dtype, gpu=gpu, batch=g["batch"], tile=tile)
        total += g["count"] * p.ms
        parts.append((g, p))
    return total, parts


def _tokens(config) -> int:
    return (config.microbatch if isinstance(config, TransformerConfig) else config.batch) * config.seq


def _microbatch_gain(config, gpu, dtype) -> float:
    """How much faster per token the layer's GEMMs would run with twice the microbatch (0.1 = 10%)."""
    field = "microbatch" if isinstance(config, TransformerConfig) else "batch"
    doubled = dataclasses.replace(config, **{field: 2 * getattr(config, field)})
    per_token = layer_time(config, gpu, dtype)[0] / _tokens(config)
    per_token_2 = layer_time(doubled, gpu, dtype)[0] / _tokens(doubled)
    return 1 - per_token_2 / per_token


def _rule_multiple(rule, value, why, nearest, multiple=MULTIPLE) -> RuleCheck:
    """A 'value divisible by multiple' rule; ``value`` may be a fraction (then the rule fails)."""
    if isinstance(value, int):
        ok = value % multiple == 0
        p2 = _pow2_factor(value)
        text = f"{value} = {p2} x {value // p2}: {why}"
    else:
        ok = False
        text = f"{value} is not an integer: {why}"
    return RuleCheck(rule, ok, value, text, () if ok else tuple(nearest))


def _ratio(x: int, y: int):
    """x / y as an int when it divides, else as a float rounded to 3 places (which fails every divisibility rule)."""
    return x // y if x % y == 0 else round(x / y, 3)


def heads_options(hidden: int, heads: int, t: int = 1, multiple: int = MULTIPLE) -> list[int]:
    """Head counts a' that divide ``hidden`` with hidden/a' a multiple of 64 and a' a multiple of the tensor-parallel
    size ``t``, nearest to ``heads`` first."""
    hidden, heads, t = _positive_int("hidden", hidden), _positive_int("heads", heads), _positive_int("t", t)
    opts = [a for a in _divisors(hidden) if (hidden // a) % multiple == 0 and a % t == 0]
    return sorted(opts, key=lambda a: (abs(a - heads), -a))


def _step_tiles_per_row_block(config) -> int:
    """Tiles of one 16-row block of the LSTM's recurrent-step GEMM: (heads/t) x ceil(4 * head_dim / 64)."""
    hd = max(1, config.hidden // config.heads)
    return max(1, config.heads // config.tensor_parallel) * math.ceil(4 * hd / LSTM_STEP_TILE[1])


def check_config(config, gpu="H100", dtype="bfloat16") -> list[RuleCheck]:
    """Apply Anthony et al.'s sizing rules to ``config`` (:class:`TransformerConfig` or :class:`LSTMConfig`).

    Returns one :class:`RuleCheck` per rule, failed or passed, each failure with compliant alternatives, nearest
    first. ``gpu`` and ``dtype`` feed the model behind the microbatch rule and the LSTM's SM-filling rule.
    """
    from gpulab import hardware

    _validate_config(config)
    spec = hardware.spec(gpu)
    _dtype_key(dtype, spec)
    is_tf = isinstance(config, TransformerConfig)
    t, h, s, heads = config.tensor_parallel, config.hidden, config.seq, config.heads
    b, bname = (config.microbatch, "microbatch") if is_tf else (config.batch, "batch")
    checks = []

    if config.vocab is not None:
        checks.append(
            _rule_multiple(
                "vocab divisible by 64",
                config.vocab,
                "the vocabulary is N of the logits GEMM; pad it (the padding rows are never predicted)",
                [{"vocab": _round_up(config.vocab, math.lcm(MULTIPLE, t))}],
            )
        )

    step = MULTIPLE // math.gcd(s, MULTIPLE)  # b*s is a multiple of 64 iff b is a multiple of this
    b_opts = sorted({_nearest_multiple(b, step), _round_up(b, step)}, key=lambda x: (abs(x - b), -x))
    checks.append(
        _rule_multiple(
            "b*s divisible by 64",
            b * s,
            "b*s is M of every projection and MLP GEMM; a ragged last row of tiles wastes work",
            [{bname: x} for x in b_opts] + [{"seq": _nearest_multiple(s, MULTIPLE // math.gcd(b, MULTIPLE))}],
        )
    )

    checks.append(
        _rule_multiple(
            "h/a divisible by 64" if is_tf else "head dim h/heads divisible by 64",
            _ratio(h, heads),
            "the head dimension is K of Q K^T and N of A V"
            if is_tf
            else "the head dimension is K of the recurrent GEMM (and a quarter of its N)",
            [{"heads": a} for a in heads_options(h, heads, t)[:2]]
            + [{"hidden": _nearest_multiple(h, MULTIPLE * math.lcm(heads, t))}],
        )
    )

    if is_tf or t > 1:
        smaller_t = [x for x in (t >> i for i in range(t.bit_length())) if h % x == 0 and (h // x) % MULTIPLE == 0]
        checks.append(
            _rule_multiple(
                "h/t divisible by 64",
                _ratio(h, t),
                "each GPU holds h/t of the columns: N or K of its share of the projections",
                [{"hidden": _nearest_multiple(h, MULTIPLE * t)}] + [{"tensor_parallel": x} for x in smaller_t[:1]],
            )
        )

    if is_tf:
        value = _ratio(b * heads, t)
        ok = isinstance(value, int)
        b_fix = next(x for x in itertools.count(b) if (x * heads) % t == 0)
        a_fix = [{"heads": a} for a in heads_options(h, heads, t)[:1]]
        checks.append(
            RuleCheck(
                "(b*a)/t integer",
                ok,
                value,
                f"b*a = {b * heads} attention GEMMs shared by t = {t} GPUs"
                + ("" if ok else ": some GPUs would get a fraction of a head"),
                () if ok else tuple([{"microbatch": b_fix}] + a_fix),
            )
        )
    else:
        ok = heads % t == 0
        checks.append(
            RuleCheck(
                "heads divisible by t",
                ok,
                _ratio(heads, t),
                f"{heads} heads over t = {t} GPUs" + ("" if ok else ": each GPU must own whole heads"),
                () if ok else ({"heads": _round_up(heads, t)},),
            )
        )
        rows = LSTM_STEP_TILE[0]
        checks.append(
            _rule_multiple(
                "batch divisible by 16",
                b,
                "the batch is M of the recurrent GEMM: every time step pays for whole 16-row tensor-core tiles",
                [{"batch": _round_up(b, rows)}],
                multiple=rows,
            )
        )
        per_block = _step_tiles_per_row_block(config)
        tiles = per_block * math.ceil(b / rows)
        ok = tiles >= spec.sm_count
        checks.append(
            RuleCheck(
                "recurrent step fills the SMs",
                ok,
                tiles,
                f"each time step's GEMM has {tiles} tiles of {rows}x{LSTM_STEP_TILE[1]} for {spec.sm_count} SMs"
                + ("" if ok else f": {spec.sm_count - tiles} SMs idle at every step"),
                () if ok else ({"batch": rows * math.ceil(spec.sm_count / per_block)},),
            )
        )

    gain = _microbatch_gain(config, spec, dtype)
    ok = gain < MICROBATCH_GAIN
    better = b
    while _microbatch_gain(dataclasses.replace(config, **{bname: better}), spec, dtype) >= MICROBATCH_GAIN:
        better *= 2
        if better >= 1 << 16:
            break
    checks.append(
        RuleCheck(
            f"{bname} as large as memory allows",
            ok,
            b,
            f"doubling {bname} {b} -> {2 * b} would make the layer's GEMMs {gain:.1%} faster per token (model); "
            f"the rule asks for < {MICROBATCH_GAIN:.0%}, memory permitting",
            () if ok else ({bname: better},),
        )
    )
    return checks


def fix_config(config, gpu="H100", dtype="bfloat16"):
    """The nearest config that passes every rule, changing as little as possible (a new config; seq and t kept).

    Vocabulary padded up to a multiple of 64; hidden rounded to a multiple of 64*t (transformer) or 64*heads (LSTM);
    transformer heads moved to a count whose head dimension is a multiple of 64 (within a factor of two, the one the
    model predicts fastest); microbatch (batch) raised
    until b*s is a multiple of 64 (and the LSTM batch a multiple of 16 that fills the SMs), then doubled until
    doubling again would pay less than 5%.
    """
    _validate_config(config)
    from gpulab import hardware

    spec = hardware.spec(gpu)
    t, h, s = config.tensor_parallel, config.hidden, config.seq
    changes = {}
    if config.vocab is not None:
        changes["vocab"] = _round_up(config.vocab, math.lcm(MULTIPLE, t))
    if isinstance(config, TransformerConfig):
        h = h if h % (MULTIPLE * t) == 0 else _nearest_multiple(h, MULTIPLE * t)
        a = config.heads
        if h % a or (h // a) % MULTIPLE or a % t:
            # Compliant head counts (a = t always is: h/t is a multiple of 64) within a factor of two of the original;
            # of those, the one the model predicts fastest (unfused attention moves b*a*s^2 scores: fewer, wider
            # heads move less), ties to the nearest.
            opts = heads_options(h, a, t)
            near = [x for x in opts if a / 2 <= x <= 2 * a] or opts[:1]
            trial = lambda x: dataclasses.replace(config, hidden=h, heads=x)  # noqa: E731
            a = min(near, key=lambda x: (round(layer_time(trial(x), gpu, dtype)[0], 9), abs(x - a)))
        changes.update(hidden=h, heads=a, microbatch=_round_up(config.microbatch, MULTIPLE // math.gcd(s, MULTIPLE)))
        field = "microbatch"
    else:
        heads = _round_up(config.heads, t)
        h = h if h % (MULTIPLE * heads) == 0 else _nearest_multiple(h, MULTIPLE * heads)
        step = math.lcm(LSTM_STEP_TILE[0], MULTIPLE // math.gcd(s, MULTIPLE))
        per_block = _step_tiles_per_row_block(dataclasses.replace(config, hidden=h, heads=heads))
        fill = LSTM_STEP_TILE[0] * math.ceil(spec.sm_count / per_block)
        changes.update(hidden=h, heads=heads, batch=_round_up(max(config.batch, fill), step))
        field = "batch"
    fixed = dataclasses.replace(config, **changes)
    while _microbatch_gain(fixed, spec, dtype) >= MICROBATCH_GAIN and getattr(fixed, field) < 1 << 16:
        fixed = dataclasses.replace(fixed, **{field: 2 * getattr(fixed, field)})
    return dataclasses.replace(fixed, name=f"{config.name} (fixed)")


def format_checks(checks, title=None) -> str:
    """The rule checks as a text table: rule, pass/FAIL, value, nearest compliant alternatives, why."""
    lines = [title] if title else []
    for c in checks:
        alt = "; ".join(", ".join(f"{k}={v}" for k, v in d.items()) for d in c.nearest)
        mark = "pass" if c.passed else "FAIL"
        lines.append(f"  {mark}  {c.rule:34s} {str(c.value):>8s}" + (f"   -> try {alt}" if alt else ""))
        lines.append(f"        {c.why}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------
# Sweeps: measure each effect, with the model's prediction attached to every result


def _randn(*shape, dtype, seed):
    """Random normal data made on gpulab's device (fast for GPU-sized operands); never zeros."""
    g = torch.Generator(device=runtime.device).manual_seed(seed)
    return torch.randn(shape, generator=g, device=runtime.device, dtype=torch.float32).to(dtype)


def _check_rows(out, a, b, dtype, context, rows=256):
    """Compare ``rows`` evenly spread rows of ``out`` (all their columns, the first and last row included) with a
    float64 product computed on the same device.

    A full float64 reference of an 8192 x 8192 output would take longer than the whole sweep; spread rows still catch
    wrong tiles, ragged edges and strides (every column tile is in every row).
    """
    from gpulab import check

    m = out.shape[-2]
    idx = torch.linspace(0, m - 1, min(rows, m), device=out.device).round().long().unique()
    ref = a[idx, :].to(torch.float64) @ b.to(torch.float64)
    check.assert_close(out[idx, :], ref, dtype=dtype, name="GEMM output", context=context)


def _impl(name: str) -> str:
    """Honest implementation labels: cuBLAS only on a GPU; the Triton kernel runs in the interpreter on CPU."""
    if name == "torch":
        return "torch.matmul (cuBLAS)" if runtime.on_gpu() else "torch.matmul (CPU)"
    return f"fixed-tile Triton {name}" + ("" if runtime.on_gpu() else " (interpreter)")


def _timing():
    return dict(warmup_ms=runtime.pick(cpu=0, gpu=25), rep_ms=runtime.pick(cpu=5, gpu=100))


def sweep_k(ks=None, m=None, n=None, dtype=None, gpu=None, progress=None, check=True):
    """torch.matmul of ``[m, K] @ [K, n]`` for K around 4096 (GPU; around 64 on CPU): the alignment effect."""
    from gpulab import bench, hardware

    dtype = runtime.as_dtype(dtype or dtypes.default_dtype(), "dtype")
    m = m or runtime.pick(cpu=64, gpu=8192)
    n = n or runtime.pick(cpu=64, gpu=8192)
    offsets = runtime.pick(cpu=(-16, -8, -1, 0, 1, 8, 16), gpu=(-64, -32, -8, -4, -2, -1, 0, 1, 2, 4, 8, 32, 64))
    ks = list(ks or [runtime.pick(cpu=64, gpu=4096) + d for d in offsets])
    spec = hardware.spec(gpu)
    results = []
    for i, k in enumerate(progress(ks) if progress else ks):
        a, b = _randn(m, k, dtype=dtype, seed=i), _randn(k, n, dtype=dtype, seed=1000 + i)
        c = torch.empty(m, n, dtype=dtype, device=runtime.device)
        run = lambda a=a, b=b, c=c: torch.mm(a, b, out=c)  # noqa: E731
        if check:
            c.fill_(float("nan"))  # poison: an element the GEMM never writes shows up as NaN
            _check_rows(run(), a, b, dtype, f"K sweep, {m} x {n} x {k}")
        pred = gemm_time(m, n, k, dtype=dtype, gpu=spec, tile=None)
        results.append(
            bench.measure(
                run,
                lesson="02",
                case=f"K sweep, {_impl('torch')}",
                flops=pred.flops,
                bytes=pred.bytes,
                dtype=dtype,
                shape=[m, n, k],
                impl=_impl("torch"),
                sweep="K",
                x=k,
                x_name="K (inner size)",
                **_timing(),
                **pred.params(),
            )
        )
        del a, b, c
    return results


def sweep_head_dim(head_dims=None, batch_heads=None, seq=None, dtype=None, gpu=None, progress=None, check=True):
    """Batched attention scores ``Q @ K^T`` for head dimensions 60..128: ``batch_heads`` GEMMs of ``seq x seq x d``."""
    from gpulab import bench, hardware

    dtype = runtime.as_dtype(dtype or dtypes.default_dtype(), "dtype")
    bh = batch_heads or runtime.pick(cpu=2, gpu=256)
    s = seq or runtime.pick(cpu=32, gpu=2048)
    head_dims = list(head_dims or (60, 64, 72, 80, 96, 100, 128))
    spec = hardware.spec(gpu)
    results = []
    for i, d in enumerate(progress(head_dims) if progress else head_dims):
        q, k = _randn(bh, s, d, dtype=dtype, seed=i), _randn(bh, s, d, dtype=dtype, seed=1000 + i)
        scores = torch.empty(bh, s, s, dtype=dtype, device=runtime.device)
        run = lambda q=q, k=k, out=scores: torch.bmm(q, k.transpose(1, 2), out=out)  # noqa: E731
        if check:
            scores.fill_(float("nan"))
            run()
            for j in sorted({0, bh // 2, bh - 1}):
                _check_rows(scores[j], q[j], k[j].t(), dtype, f"Q K^T, head {j}, d = {d}")
        pred = gemm_time(s, s, d, dtype=dtype, gpu=spec, batch=bh, tile=None)
        results.append(
            bench.measure(
                run,
                lesson="02",
                case=f"head dim sweep, {_impl('torch')}",
                flops=pred.flops,
                bytes=pred.bytes,
                dtype=dtype,
                shape=[bh, s, s, d],
                impl=_impl("torch"),
                sweep="head dim",
                x=d,
                x_name="head dimension d (K of Q K^T)",
                **_timing(),
                **pred.params(),
            )
        )
        del q, k, scores
    return results


TRITON_GPU_CONFIG = dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3)
"""The fixed tile on the GPU: the first configuration in the autotuning list of Triton's matmul tutorial. With all
three stages buffered its shared memory is 3 x (128x64 + 64x256) x 2 bytes = 144 KB, more than half an SM's 228 KB:
one program per SM, so one tile per SM per wave (the results record ``shared_bytes`` to check it)."""

TRITON_CPU_CONFIG = dict(block_m=16, block_n=32, block_k=16)


def sweep_waves(ns=None, m=None, k=None, dtype=None, gpu=None, progress=None, check=True, impls=("torch", "triton")):
    """``[m, k] @ [k, N]`` for N across wave boundaries, with torch.matmul and the fixed-tile Triton kernel."""
    from gpulab import bench, hardware

    dtype = runtime.as_dtype(dtype or dtypes.default_dtype(), "dtype")
    m = m or runtime.pick(cpu=32, gpu=1536)
    k = k or runtime.pick(cpu=32, gpu=4096)
    ns = list(ns or runtime.pick(cpu=range(16, 129, 16), gpu=range(1024, 8448 + 1, 128)))
    cfg = runtime.pick(cpu=TRITON_CPU_CONFIG, gpu=TRITON_GPU_CONFIG)
    tile = (cfg["block_m"], cfg["block_n"])
    for impl in impls:
        if impl not in ("torch", "triton"):
            raise ValueError(f"impls must name 'torch' and/or 'triton', got {impl!r}.")
    spec = hardware.spec(gpu)
    a = _randn(m, k, dtype=dtype, seed=7)
    results = []
    for i, n in enumerate(progress(ns) if progress else ns):
        b = _randn(k, n, dtype=dtype, seed=2000 + i)
        c = torch.empty(m, n, dtype=dtype, device=runtime.device)
        for impl in impls:
            if impl == "torch":
                run = lambda b=b, c=c: torch.mm(a, b, out=c)  # noqa: E731
                pred, impl_label, kernel = gemm_time(m, n, k, dtype=dtype, gpu=spec, tile=None), _impl("torch"), None
            else:
                run = lambda b=b, c=c: matmul_fixed_tile(a, b, c, **cfg)  # noqa: E731
                pred = gemm_time(m, n, k, dtype=dtype, gpu=spec, tile=tile)
                impl_label, kernel = _impl(f"{tile[0]}x{tile[1]}"), matmul_fixed_tile_kernel
            if check:
                c.fill_(float("nan"))  # poison: an unwritten tile shows up as NaN
                _check_rows(run(), a, b, dtype, f"{impl_label}, {m} x {n} x {k}")
            results.append(
                bench.measure(
                    run,
                    lesson="02",
                    case=f"wave sweep, {impl_label}",
                    impl=impl_label,
                    flops=pred.flops,
                    bytes=pred.bytes,
                    dtype=dtype,
                    shape=[m, n, k],
                    kernel=kernel,
                    sweep="N (waves)",
                    x=n,
                    x_name="N (output columns)",
                    **_timing(),
                    **pred.params(),
                )
            )
        del b, c
    return results


def pair_agreement(results, threshold: float = 0.10) -> dict:
    """Does the model order the measured times? Within each sweep (and implementation), take every pair of results
    whose measured times differ by more than ``threshold`` (slower / faster > 1.1) and check that the model's
    predicted times order them the same way. A pair the model predicts as a tie counts as not ordered.

    Returns ``{"fraction", "agree", "pairs", "ties", "threshold", "by_sweep": {label: {...}}, "misses": [...]}``;
    ``fraction`` is NaN when no pair differs by more than the threshold.
    """
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}.")
    groups: dict = {}
    for r in results:
        if "predicted_ms" in r.params and "sweep" in r.params:
            groups.setdefault(f"{r.params['sweep']} | {r.params.get('impl', r.case)}", []).append(r)
    total = agree = ties = 0
    by_sweep, misses = {}, []
    for label, rs in groups.items():
        rs = sorted(rs, key=lambda r: r.params.get("x", 0))
        g_pairs = g_agree = 0
        for r1, r2 in itertools.combinations(rs, 2):
            m1, m2 = r1.ms, r2.ms
            if not (math.isfinite(m1) and math.isfinite(m2)) or min(m1, m2) <= 0:
                continue
            if max(m1, m2) / min(m1, m2) <= 1 + threshold:
                continue
            p1, p2 = r1.params["predicted_ms"], r2.params["predicted_ms"]
            g_pairs += 1
            pred_sign = 0 if abs(p1 - p2) <= 1e-9 * max(p1, p2) else (1 if p2 > p1 else -1)
            if pred_sign == (1 if m2 > m1 else -1):
                g_agree += 1
            else:
                ties += pred_sign == 0
                misses.append(
                    {
                        "sweep": label,
                        "x": (r1.params.get("x"), r2.params.get("x")),
                        "measured_ms": (m1, m2),
                        "predicted_ms": (p1, p2),
                    }
                )
        by_sweep[label] = {
            "agree": g_agree,
            "pairs": g_pairs,
            "fraction": g_agree / g_pairs if g_pairs else math.nan,
        }
        total += g_pairs
        agree += g_agree
    return {
        "fraction": agree / total if total else math.nan,
        "agree": agree,
        "pairs": total,
        "ties": ties,
        "threshold": threshold,
        "by_sweep": by_sweep,
        "misses": misses,
    }


def format_agreement(agreement: dict, target: float = 0.9) -> str:
    """The pair agreement as text: overall, per sweep, and against the target."""
    f = agreement["fraction"]
    verdict = "no pairs to compare" if math.isnan(f) else ("meets" if f >= target else "MISSES")
    lines = [
        f"model orders {agreement['agree']} of {agreement['pairs']} pairs correctly "
        f"({f:.0%}; pairs whose measured times differ by > {agreement['threshold']:.0%}); "
        f"{verdict} the {target:.0%} target"
        + (f"; {agreement['ties']} pairs predicted as ties" if agreement["ties"] else "")
    ]
    for label, g in agreement["by_sweep"].items():
        frac = "-" if math.isnan(g["fraction"]) else f"{g['fraction']:.0%}"
        lines.append(f"  {label:48s} {g['agree']:4d} / {g['pairs']:4d}  {frac}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------
# Plots


def plot_tiles(m: int, n: int, tile=DEFAULT_TILE, ax=None, gpu=None):
    """The m x n output cut into tiles. The padded part of partial tiles is hatched red (tile quantization); with
    ``gpu`` each tile is coloured by the wave it runs in, in launch order, and the last wave's idle SMs are counted."""
    import matplotlib.patches as patches
    import matplotlib.pyplot as plt

    from gpulab import hardware

    tm, tn = _tile(tile)
    m, n = _positive_int("m", m), _positive_int("n", n)
    tiles, e_tile = tile_quantization(m, n, (tm, tn))
    sms = hardware.spec(gpu).sm_count if gpu is not None else None
    rows, cols = math.ceil(m / tm), math.ceil(n / tn)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 6.5 * min(1.5, max(0.3, rows * tm / (cols * tn)))))
    colours = ("#cfe2f3", "#fce5cd", "#d9ead3", "#e6d7f0", "#fff2cc")  # pale, so the red padding hatch stands out
    for i in range(rows):
        for j in range(cols):
            wave = (i * cols + j) // sms if sms else 0  # launch order: row-major over the tile grid
            ax.add_patch(
                patches.Rectangle(
                    (j * tn, i * tm), tn, tm, fc=colours[wave % len(colours)] if sms else "none", ec="0.35", lw=0.6
                )
            )
            if sms and rows * cols <= 300:
                ax.text((j + 0.5) * tn, (i + 0.5) * tm, str(wave + 1), ha="center", va="center", fontsize=6)
    ax.add_patch(patches.Rectangle((0, 0), n, m, fill=False, ec="k", lw=1.5))
    if cols * tn > n:
        ax.add_patch(patches.Rectangle((n, 0), cols * tn - n, rows * tm, hatch="///", fill=False, ec="C3", lw=0))
    if rows * tm > m:
        ax.add_patch(patches.Rectangle((0, m), cols * tn, rows * tm - m, hatch="///", fill=False, ec="C3", lw=0))
    ax.set_xlim(0, cols * tn)
    ax.set_ylim(rows * tm, 0)
    ax.set_aspect("equal")
    ax.set_xlabel("N (columns of C)")
    ax.set_ylabel("M (rows of C)")
    title = f"{m} x {n} output in {tm}x{tn} tiles: {tiles} tiles, {e_tile:.1%} of their area useful (red: padding)"
    if sms:
        waves, e_wave = wave_quantization(tiles, sms)
        last = tiles - (waves - 1) * sms
        title += (
            f"\n{sms} SMs: {waves} waves (number = wave of each tile); the last runs {last} tiles, "
            f"{sms - last} SMs idle: {e_wave:.1%} of SM slots busy"
        )
    ax.set_title(title, fontsize=9)
    return ax


def plot_prediction(xs, predictions, ax=None, label="model", metric="tflops", xlabel="", **style):
    """A line of the model's predictions (``tflops``, ``ms`` or ``efficiency``) against ``xs``."""
    import matplotlib.pyplot as plt

    if metric not in ("tflops", "ms", "efficiency"):
        raise ValueError(f"metric must be 'tflops', 'ms' or 'efficiency', got {metric!r}.")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.8))
    ys = [getattr(p, metric) for p in predictions]
    ax.plot(list(xs), ys, label=label, **({"lw": 1.5} | style))
    ax.set_xlabel(xlabel)
    ax.set_ylabel({"tflops": "TFLOP/s", "ms": "ms", "efficiency": "shape efficiency"}.get(metric, metric))
    ax.grid(True, alpha=0.3)
    return ax


def plot_wave_staircase(m, k, ns, tile=DEFAULT_TILE, dtype="bfloat16", gpu="H100", ax=None, metric="tflops"):
    """Predicted TFLOP/s (or ms) of ``[m, k] @ [k, N]`` against N for a fixed tile, with the wave boundaries marked.

    In ms it is a staircase (every tile of a wave costs the same, so time is flat until a new wave starts); in
    TFLOP/s a saw-tooth (more useful work in the same time, then a drop when the next wave starts nearly empty).
    """
    from gpulab import hardware

    spec = hardware.spec(gpu)
    tile = _tile(tile)
    ns = list(ns)
    preds = [gemm_time(m, n, k, dtype=dtype, gpu=spec, tile=tile) for n in ns]
    ax = plot_prediction(ns, preds, ax=ax, label=f"model, fixed {tile[0]}x{tile[1]} tile", xlabel="N", metric=metric)
    for n0, n1, p0, p1 in zip(ns, ns[1:], preds, preds[1:]):
        if p1.waves != p0.waves:
            ax.axvline((n0 + n1) / 2, color="0.6", ls=":", lw=1)
            ax.text((n0 + n1) / 2, 0, f" {p1.waves} waves", rotation=90, va="bottom", fontsize=7, color="0.4")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Wave quantization: {m} x N x {k}, {spec.sm_count} SMs ({dtype})", fontsize=10)
    return ax


_SWEEP_ORDER = ("K", "head dim", "N (waves)")


def plot_sweep(results, sweep=None, ax=None, metric="tflops", title=None):
    """Measured (solid) and predicted (dashed, same colour) ``metric`` against the swept size, for one sweep.

    ``metric``: 'tflops', 'ms', or 'relative' (each line divided by its own maximum TFLOP/s, to compare shapes).
    """
    import matplotlib.pyplot as plt

    rs = [r for r in results if "sweep" in r.params and "predicted_ms" in r.params]
    sweeps = sorted({r.params["sweep"] for r in rs}, key=lambda s: (_SWEEP_ORDER + (s,)).index(s))
    if sweep is None:
        if len(sweeps) != 1:
            raise ValueError(f"sweep must name one of {sweeps} (results hold {len(sweeps)} sweeps).")
        sweep = sweeps[0]
    rs = [r for r in rs if r.params["sweep"] == sweep]
    if not rs:
        raise ValueError(f"sweep={sweep!r} has no results; the results hold {sweeps}.")
    if metric not in ("tflops", "ms", "relative"):
        raise ValueError(f"metric must be 'tflops', 'ms' or 'relative', got {metric!r}.")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    cases: dict = {}
    for r in rs:
        cases.setdefault(r.params.get("impl", r.case), []).append(r)
    for i, (case, group) in enumerate(cases.items()):
        group = sorted(group, key=lambda r: r.params["x"])
        xs = [r.params["x"] for r in group]
        if metric == "ms":
            meas, pred = [r.ms for r in group], [r.params["predicted_ms"] for r in group]
        else:
            meas, pred = [r.tflops for r in group], [r.params["predicted_tflops"] for r in group]
            if metric == "relative":
                meas = [v / max(meas) for v in meas]
                pred = [v / max(pred) for v in pred]
        ax.plot(xs, meas, marker="o", ms=3.5, color=f"C{i}", label=f"{case}: measured")
        ax.plot(xs, pred, ls="--", marker="x", ms=3.5, color=f"C{i}", alpha=0.8, label=f"{case}: model")
    ax.set_xlabel(rs[0].params.get("x_name", "x"))
    ax.set_ylabel({"tflops": "TFLOP/s", "ms": "ms", "relative": "TFLOP/s / best of its line"}[metric])
    if metric != "ms":
        ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    dev = rs[0].device or "?"
    ax.set_title(title or f"{sweep} sweep on {dev}", fontsize=10)
    return ax


def plot_benchmark(results, agreement=None):
    """All sweeps side by side, measured and predicted; the pair agreement in the title. Returns the figure."""
    import matplotlib.pyplot as plt

    present = {r.params.get("sweep") for r in results}
    sweeps = [s for s in _SWEEP_ORDER if s in present]
    if not sweeps:
        raise ValueError("results hold no sweep with predictions; run sweep_k, sweep_head_dim or sweep_waves.")
    fig, axes = plt.subplots(1, len(sweeps), figsize=(6.2 * len(sweeps), 4.4), squeeze=False)
    for ax, s in zip(axes[0], sweeps):
        plot_sweep(results, s, ax=ax)
    agreement = agreement or pair_agreement(results)
    dev = results[0].device if results else ""
    if not math.isnan(agreement["fraction"]):
        fig.suptitle(
            f"GEMM shapes on {dev}: measured vs model; the model orders {agreement['agree']}/{agreement['pairs']} "
            f"({agreement['fraction']:.0%}) of pairs differing by > {agreement['threshold']:.0%}",
            fontsize=11,
        )
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------------------------
# The benchmark


def benchmark(progress=None):
    """`python -m gpulab bench 02`: the K, head-dimension and wave sweeps (bf16 on the GPU; tiny fp32 on CPU)."""
    import matplotlib

    matplotlib.use("Agg")
    results = sweep_k(progress=progress)
    results += sweep_head_dim(progress=progress)
    results += sweep_waves(progress=progress)
    agreement = pair_agreement(results)
    where = "" if runtime.on_gpu() else " (CPU: interpreter / CPU timings against the H100 model: not meaningful)"
    print(format_agreement(agreement) + where)
    return results, plot_benchmark(results, agreement)
