"""Lesson 1: the roofline, with the machine's ceilings measured rather than copied from a spec sheet.

What you will learn:
- a kernel that does ``F`` FLOPs and must move ``Q`` bytes cannot beat ``t >= max(F / P, Q / B)``; dividing by ``t``
  gives the **roofline**: attainable FLOP/s ``= min(P, I * B)`` with the **arithmetic intensity** ``I = F / Q``
  (FLOPs per byte). Below the **ridge point** ``I* = P / B`` a kernel is memory-bound, above it compute-bound;
- the roofs are **hierarchical**: each memory level has its own bandwidth (HBM < L2 < L1) and each precision its own
  compute peak (FP32 FMA << TF32 < bf16 = fp16 tensor cores), so the ridge point depends on both;
- how to count ``F`` and ``Q`` for the operations of this course (vector add, softmax, GEMM, naive and tiled
  attention, an LSTM step and a whole LSTM sequence) and read off, before writing a kernel, what bounds it;
- how to measure each ceiling with a microbenchmark small enough to read, and why the measured ceilings, not the
  spec sheet, are what a kernel's speed should be compared with.

Counting conventions (those of :mod:`gpulab.bench`): a multiply-add is 2 FLOPs; a GEMM is ``2*M*N*K``; attention
forward is ``4*B*H*Nq*Nk*D`` (its two GEMMs), halved when causal; an LSTM counts its gate matrix products,
``2 * batch * 4H * (input + H)`` per step (the pointwise cell update, about 10 FLOPs per hidden unit, is left out as
attention's softmax is); softmax counts 5 FLOPs per element (max, subtract, exp, sum, divide). Bytes are the fewest
an implementation of that *algorithm* must move through HBM: each input read once, each output written once, plus
the intermediates the algorithm materialises (naive attention's score matrices; a per-step LSTM's weights and state).

The ceilings, and how each is measured (``measure_ceilings``; every kernel is checked against a float64 reference
before it is timed):

- **HBM**: lesson 0's masked copy kernel (:func:`gpulab.memory.copy`) on 1 GiB of fp32, bytes read + written, timed
  in the same run as PyTorch's ``dst.copy_(src)`` (the peer; the ratio is reported, target >= 0.97).
- **L2**: the working-set sweep of lesson 0 with loads marked ``cache_modifier=".cg"`` (cache in L2 only, bypass
  L1), for working sets from 512 KB to 16 MB; the ceiling is the best of them.
- **L1 / on-chip**: lesson 0's sweep, unchanged, for working sets of 16 to 128 KB, which each SM's L1 holds. Triton
  gives no direct control of shared-memory loads (it decides itself what goes through shared memory), so this is
  an *L1* read bandwidth, the fair "on-chip" figure we can measure from Triton, not a shared-memory benchmark.
- **tensor cores**: ``torch.matmul`` (cuBLAS) on random bf16, fp16, and fp32 with TF32 allowed, at 8192^3 and
  16384^3, two input sets rotated; the ceiling is the best shape. A separate 8192^3 bf16 run in the same session is
  the peer (target >= 0.97). Since the ceiling itself comes from cuBLAS, that ratio checks that the figure is
  stable, not that another implementation is as fast.
- **FP32 FMA** (no tensor cores): :func:`fma_kernel`, where every lane runs four independent chains of
  ``a = a * b + c`` in registers, with no memory traffic in the loop, 2 FLOPs per FMA; the best of a few launch
  configurations. ``torch.matmul`` in IEEE fp32 is timed beside it for comparison.

:func:`ceilings` returns the ceilings without measuring: the newest stored measurement for the GPU
(``benchmarks/01_roofline/``) if there is one, else the spec table; ``Ceilings.source`` says which, and
:func:`plot` prints it on the figure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import numbers
from pathlib import Path

import torch

from gpulab import bench, check, hardware, memory, runtime  # runtime first: sets interpreter mode

import triton  # isort: skip
import triton.language as tl  # isort: skip

__all__ = [
    "Intensity",
    "vector_add",
    "softmax",
    "gemm",
    "attention_naive",
    "attention_tiled",
    "lstm_step",
    "lstm_sequence",
    "course_operations",
    "attainable",
    "ridge_point",
    "bound",
    "Ceilings",
    "COMPUTE_ROOFS",
    "MEMORY_LEVELS",
    "ceilings",
    "FMA_CHAINS",
    "FMA_UNROLL",
    "fma_kernel",
    "fma_chain",
    "fma_reference",
    "fma_closed_form",
    "l2_sweep_kernel",
    "l2_sweep",
    "measure_hbm",
    "measure_cache",
    "measure_matmul",
    "measure_fma",
    "measure_ceilings",
    "targets",
    "Placement",
    "placement",
    "placement_table",
    "intensity_table",
    "plot",
    "benchmark",
]

COMPUTE_ROOFS = ("fp32", "tf32", "fp16", "bf16")
"""Compute roofs: FP32 FMA (no tensor cores), and tensor cores with TF32, fp16 and bf16 operands."""

MEMORY_LEVELS = ("HBM", "L2", "L1")
"""Memory roofs, slowest first."""

_ROOF_NAMES = {
    "fp32": "FP32 FMA",
    "tf32": "TF32 tensor cores",
    "fp16": "fp16 tensor cores",
    "bf16": "bf16 tensor cores",
    "HBM": "HBM",
    "L2": "L2",
    "L1": "L1 (on-chip)",
}


# ----------------------------------------------------------------------------------------------------------------
# Counting: FLOPs and the fewest bytes, per operation


@dataclasses.dataclass(frozen=True)
class Intensity:
    """The cost of one operation: FLOPs, the fewest bytes it must move through HBM, and which compute roof applies.

    ``compute`` is a key of :data:`COMPUTE_ROOFS`: matrix products run on the tensor cores of their dtype ('bf16',
    'fp16', 'tf32'; IEEE fp32 on the FMA units, 'fp32'); pointwise work and reductions always use the FP32 units.
    """

    name: str
    flops: float
    bytes: float
    compute: str
    dtype: str
    note: str = ""

    @property
    def intensity(self) -> float:
        """FLOPs per byte of HBM traffic: the roofline's x axis."""
        return self.flops / self.bytes


_size = runtime.positive_int  # a positive integer size, or a ValueError that names the argument


_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "tf32": 4}
_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "tf32": "tf32"}  # also the compute roof keys


def dtype_and_size(dtype, allow_tf32: bool = False, name: str = "dtype") -> tuple[str, int]:
    """('float32' | 'float16' | 'bfloat16' | 'tf32', bytes per element). 'tf32' means fp32 storage, TF32 math."""
    if allow_tf32 and isinstance(dtype, str) and dtype.lower() == "tf32":
        return "tf32", 4
    known = "float32, float16, bfloat16" + (" or 'tf32' (fp32 storage, TF32 tensor cores)" if allow_tf32 else "")
    try:
        key = str(runtime.as_dtype(dtype, name)).replace("torch.", "")
    except ValueError:
        raise ValueError(f"{name}={dtype!r} is not a dtype the roofline knows; use {known}.") from None
    if key not in _ITEMSIZE:
        raise ValueError(f"{name}={dtype!r} has no roof in this course; use {known}.")
    return key, _ITEMSIZE[key]


def vector_add(n, dtype="float32") -> Intensity:
    """``z = x + y`` on n elements: n FLOPs; reads 2n and writes n elements."""
    n = _size("n", n)
    key, s = dtype_and_size(dtype)
    return Intensity(f"vector add n={n} {_SHORT[key]}", float(n), float(3 * n * s), "fp32", key, "read x, y; write z")


def softmax(rows, cols, dtype="float32") -> Intensity:
    """Row-wise softmax of a rows x cols matrix: 5 FLOPs per element (max, subtract, exp, sum, divide); reads the
    matrix once and writes it once (a one-pass kernel that keeps each row on chip)."""
    rows, cols = _size("rows", rows), _size("cols", cols)
    key, s = dtype_and_size(dtype)
    e = rows * cols
    return Intensity(f"softmax {rows}x{cols} {_SHORT[key]}", 5.0 * e, float(2 * e * s), "fp32", key, "read x; write y")


def gemm(m, n, k, dtype="bfloat16") -> Intensity:
    """``C = A @ B`` with A (m, k), B (k, n): 2mnk FLOPs; reads A and B, writes C (all in ``dtype``; 'tf32' means
    fp32 matrices multiplied by TF32 tensor cores)."""
    m, n, k = _size("m", m), _size("n", n), _size("k", k)
    key, s = dtype_and_size(dtype, allow_tf32=True)
    flops, nbytes = 2.0 * m * n * k, float((m * k + k * n + m * n) * s)
    return Intensity(f"GEMM {m}x{n}x{k} {_SHORT[key]}", flops, nbytes, _SHORT[key], key, "read A, B; write C")


def _attention(kind, batch, heads, seq_q, seq_k, head_dim, dtype, causal):
    """Shared by the two attention counts: validated sizes, FLOPs, Q/K/V/O elements, and a name."""
    names = ("batch", "heads", "seq_q", "seq_k", "head_dim")
    b, h, nq, nk, d = (_size(nm, v) for nm, v in zip(names, (batch, heads, seq_q, seq_k, head_dim)))
    key, s = dtype_and_size(dtype, allow_tf32=True)
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be True or False, got {causal!r}.")
    flops = bench.attention_flops(b, h, nq, nk, d, causal=causal)
    qkvo = b * h * (2 * nq * d + 2 * nk * d)  # Q [Nq, D] and O [Nq, D]; K and V [Nk, D]; per batch and head
    name = f"attention {kind} B={b} H={h} N={nq}x{nk} D={d} {_SHORT[key]}{' causal' if causal else ''}"
    return b, h, nq, nk, key, s, flops, qkvo, name


def attention_naive(batch, heads, seq_q, seq_k, head_dim, dtype="bfloat16", causal=False) -> Intensity:
    """Attention as three kernels: ``S = Q K^T``, ``P = softmax(S)``, ``O = P V``, with S and P stored in HBM.

    FLOPs: ``4*B*H*Nq*Nk*D`` (halved if causal). Bytes: Q, K, V read and O written once, plus the Nq x Nk score
    matrices: S written, S read (softmax), P written, P read (PV): ``4*B*H*Nq*Nk`` elements. A naive causal
    implementation still materialises the full matrices (it masks them), so causal halves the FLOPs, not the bytes.
    """
    b, h, nq, nk, key, s, flops, qkvo, name = _attention("naive", batch, heads, seq_q, seq_k, head_dim, dtype, causal)
    scores = 4 * b * h * nq * nk  # write S, read S, write P, read P
    note = "Q, K, V, O once + S and P written and read back"
    return Intensity(name, flops, float((qkvo + scores) * s), _SHORT[key], key, note)


def attention_tiled(batch, heads, seq_q, seq_k, head_dim, dtype="bfloat16", causal=False) -> Intensity:
    """Tiled (FlashAttention-style) attention: scores live on chip, so the bytes are Q, K, V read once and O written
    once: ``B*H*(2*Nq + 2*Nk)*D`` elements. (A real kernel re-reads K and V once per query tile, mostly from L2;
    this is the minimum.) FLOPs as for :func:`attention_naive`."""
    _, _, _, _, key, s, flops, qkvo, name = _attention("tiled", batch, heads, seq_q, seq_k, head_dim, dtype, causal)
    return Intensity(name, flops, float(qkvo * s), _SHORT[key], key, "Q, K, V read once, O written once")


def _lstm_step_elements(batch, input_size, hidden) -> int:
    # read x_t [B, I], h_{t-1} and c_{t-1} [B, H]; read W [4H, I], U [4H, H], bias [4H]; write h_t, c_t [B, H]
    weights = 4 * hidden * (input_size + hidden) + 4 * hidden
    return batch * input_size + 2 * batch * hidden + weights + 2 * batch * hidden


def lstm_step(batch, input_size, hidden, dtype="bfloat16") -> Intensity:
    """One LSTM step ``gates = x_t W^T + h_{t-1} U^T + b`` followed by the pointwise cell update.

    FLOPs: the two matrix products, ``2 * B * 4H * (I + H)``. Bytes (all tensors in ``dtype``): x_t, h_{t-1},
    c_{t-1}, the weights W (4H x I), U (4H x H) and the bias (4H) read; h_t, c_t written. For small batches the
    weights dominate the bytes and the intensity is about ``2B / itemsize``: batch decides the bound.
    """
    b, i, h = _size("batch", batch), _size("input_size", input_size), _size("hidden", hidden)
    key, s = dtype_and_size(dtype, allow_tf32=True)
    flops, nbytes = 2.0 * b * 4 * h * (i + h), float(s * _lstm_step_elements(b, i, h))
    note = "x_t, h, c, W, U, bias read; h, c written"
    return Intensity(f"LSTM step B={b} I={i} H={h} {_SHORT[key]}", flops, nbytes, _SHORT[key], key, note)


def lstm_sequence(batch, seq, input_size, hidden, dtype="bfloat16", layers=1, weights_on_chip=False) -> Intensity:
    """A whole LSTM over ``seq`` steps and ``layers`` stacked layers (layer l > 0 takes the hidden size as input).

    FLOPs: ``seq * 2 * B * 4H * (I_l + H)`` per layer. Bytes, per layer, in one of two implementations:

    - ``weights_on_chip=False``, **one kernel per step** (a step loop over cuBLAS GEMMs): every step is a
      :func:`lstm_step`, so the weights and the state h, c go through HBM at every step: ``seq`` times its bytes.
    - ``weights_on_chip=True``, **one persistent kernel** (FlashRNN-style) that keeps the weights and the state on
      chip for the whole sequence: the inputs x read once, the weights read once, h_0 and c_0 read, every h_t written
      (the output sequence; h_T is its last row) and c_T written: ``seq*B*(I_l + H) + 3*B*H + weights`` elements.

    Stacked layers run one after another, so layer l reads layer l-1's output sequence from HBM in both.
    """
    b, t = _size("batch", batch), _size("seq", seq)
    i, h, n_layers = _size("input_size", input_size), _size("hidden", hidden), _size("layers", layers)
    key, s = dtype_and_size(dtype, allow_tf32=True)
    if not isinstance(weights_on_chip, bool):
        raise ValueError(f"weights_on_chip must be True or False, got {weights_on_chip!r}.")
    flops = elements = 0
    for layer in range(n_layers):
        il = i if layer == 0 else h
        flops += t * 2.0 * b * 4 * h * (il + h)
        if weights_on_chip:
            elements += t * b * (il + h) + 3 * b * h + 4 * h * (il + h) + 4 * h
        else:
            elements += t * _lstm_step_elements(b, il, h)
    how = "weights on chip" if weights_on_chip else "weights every step"
    name = f"LSTM seq B={b} T={t} I={i} H={h} L={n_layers} {_SHORT[key]}, {how}"
    return Intensity(name, float(flops), float(s * elements), _SHORT[key], key, how)


def course_operations(dtype="bfloat16") -> list[Intensity]:
    """The operations of this course at typical sizes, for the lesson's table and figure."""
    return [
        vector_add(1 << 28, "float32"),
        softmax(8192, 8192, dtype),
        gemm(8192, 8192, 8192, dtype),
        gemm(16, 4096, 4096, dtype),
        attention_naive(8, 16, 4096, 4096, 128, dtype, causal=True),
        attention_tiled(8, 16, 4096, 4096, 128, dtype, causal=True),
        lstm_step(16, 1024, 1024, dtype),
        lstm_sequence(16, 1024, 1024, 1024, dtype, weights_on_chip=False),
        lstm_sequence(16, 1024, 1024, 1024, dtype, weights_on_chip=True),
    ]


# ----------------------------------------------------------------------------------------------------------------
# The model: attainable = min(peak, intensity * bandwidth)


def _rate(name: str, value, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value) or math.isinf(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}.")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}.")
    return float(value)


def attainable(intensity, peak_tflops, bandwidth_gbps) -> float:
    """The roofline: ``min(peak, intensity * bandwidth)`` in TFLOP/s (intensity in FLOP/byte, bandwidth in GB/s)."""
    i = _rate("intensity", intensity, allow_zero=True)
    p, bw = _rate("peak_tflops", peak_tflops), _rate("bandwidth_gbps", bandwidth_gbps)
    return min(p, i * bw / 1e3)  # FLOP/B * GB/s = GFLOP/s; /1e3 -> TFLOP/s


def ridge_point(peak_tflops, bandwidth_gbps) -> float:
    """FLOP per byte at which the memory roof meets the compute roof: ``peak / bandwidth``."""
    return _rate("peak_tflops", peak_tflops) * 1e3 / _rate("bandwidth_gbps", bandwidth_gbps)


def bound(intensity, peak_tflops, bandwidth_gbps) -> str:
    """'memory' if the intensity is below the ridge point, else 'compute' (at the ridge both bounds are equal)."""
    i = _rate("intensity", intensity, allow_zero=True)
    return "compute" if i >= ridge_point(peak_tflops, bandwidth_gbps) else "memory"


# ----------------------------------------------------------------------------------------------------------------
# The ceilings of one machine


def _compute_key(r: bench.Result) -> str:
    """Which compute roof a measured result is held to: params['roof'] if set, else by dtype (fp32 -> FMA units)."""
    roof = r.params.get("roof")
    if roof:
        return roof
    return {"bfloat16": "bf16", "float16": "fp16", "tf32": "tf32"}.get(r.dtype or "", "fp32")


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
        """Ridge point (FLOP/byte) of a compute roof against a memory level."""
        p, bw = self.compute(roof), self.bandwidth(level)
        return ridge_point(p, bw) if (p and bw) else None

    def attainable(self, intensity, roof: str = "bf16", level: str = "HBM") -> float | None:
        """TFLOP/s the roofline allows at ``intensity`` for a compute roof and memory level (None if unknown)."""
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
        results = list(results)
        best: dict[str, bench.Result] = {}
        for r in results:
            key = r.params.get("ceiling")
            if key is None:
                continue
            if key not in MEMORY_LEVELS + COMPUTE_ROOFS:
                raise ValueError(f"a result has params['ceiling']={key!r}; known: {MEMORY_LEVELS + COMPUTE_ROOFS}.")
            rate = r.gbps if key in MEMORY_LEVELS else r.tflops
            if rate is not None and math.isfinite(rate) and (key not in best or rate > _rate_of(best[key], key)):
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
        values = {f"{k.lower()}_gbps" if k in MEMORY_LEVELS else f"{k}_tflops": _rate_of(r, k) for k, r in best.items()}
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
                    case=f"{self.mode}: {_ROOF_NAMES[key]}",
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

    def _spec(self):
        try:
            return hardware.spec(self.device)
        except ValueError:
            return None

    def summary(self) -> str:
        """A table: each ceiling, the spec figure, the fraction of it, the measurement behind it, and the peer ratio."""
        spec = self._spec()
        best = {}
        for r in self.records:
            key = r.params.get("ceiling")
            if key and (key not in best or _rate_of(r, key) > _rate_of(best[key], key)):
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
            sv = _spec_value(spec, key)
            how = best[key].case if key in best else ("spec table" if self.mode == "spec" else "-")
            if key in best and key in peers and peers[key].mode == best[key].mode:
                ratio = _rate_of(best[key], key) / _rate_of(peers[key], key)
                how += f"; {ratio:.2f}x {peers[key].case}"
            spec_cols = f"{_num(sv):>9s} {unit:7s} {v / sv:>7.0%}" if sv else f"{'-':>9s} {'':7s} {'-':>7s}"
            lines.append(f"{_ROOF_NAMES[key]:18s} {_num(v):>9s} {unit:7s} {spec_cols}  {how}")
        for what, ratio, target, met in targets(self):
            note = "" if self.mode == "cuda" else " (interpreter: not a hardware figure)"
            lines.append(f"target {what}: {ratio:.3f} (>= {target}) {'met' if met else 'NOT MET'}{note}")
        return "\n".join(lines)


def _spec_value(spec, key: str) -> float | None:
    """The vendor's figure for a ceiling key (None for L2 and L1, which spec sheets do not give)."""
    if spec is None:
        return None
    if key == "HBM":
        return spec.hbm_gbps
    if key == "fp32":
        return spec.fp32_tflops or None
    return spec.tensor_tflops.get({"tf32": "tf32", "fp16": "float16", "bf16": "bfloat16"}.get(key, key))


def _rate_of(r: bench.Result, key: str) -> float:
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
    name = hardware.live_properties()["name"] if (gpu is None and runtime.on_gpu()) else spec.name
    stored = _stored_records(name, root)
    if stored is None:
        return Ceilings.from_spec(spec)
    path, recs = stored
    first = next(r for r in recs if r.params.get("ceiling") == "HBM")
    return Ceilings.from_results(
        recs, source=f"stored measurement: {first.device}, {first.date} ({path.parent.name}/{path.name})"
    )


def _resolve(c: Ceilings | None) -> Ceilings:
    """The ceilings a function was given, else :func:`ceilings` for this machine's GPU (or the H100)."""
    if c is None:
        return ceilings()
    if not isinstance(c, Ceilings):
        raise ValueError(f"ceilings must be a roofline.Ceilings or None, got {type(c).__name__}.")
    return c


# ----------------------------------------------------------------------------------------------------------------
# Kernel 1: FP32 FMA throughput, no memory traffic in the loop

FMA_CHAINS = 4  # independent accumulators per lane: while one FMA's result is in flight the next chain issues
FMA_UNROLL = 8  # FMAs per chain per loop trip, so the loop counter and branch cost ~1% of the issue slots


@triton.jit
def fma_kernel(x_ptr, out_ptr, n, b, c, iters, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    """out[i] = sum over 4 chains j of the result of ``a = a*b + c`` applied iters*UNROLL times to a = x[j, i]."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # the last block is ragged on small sizes
    a0 = tl.load(x_ptr + offs, mask=mask, other=0.0)  # x is [4, n]: chain j starts from row j
    a1 = tl.load(x_ptr + n + offs, mask=mask, other=0.0)
    a2 = tl.load(x_ptr + 2 * n + offs, mask=mask, other=0.0)
    a3 = tl.load(x_ptr + 3 * n + offs, mask=mask, other=0.0)
    for _ in range(0, iters):
        for _ in tl.static_range(UNROLL):
            a0 = tl.fma(a0, b, c)  # one fused multiply-add = 2 FLOPs, all in registers
            a1 = tl.fma(a1, b, c)
            a2 = tl.fma(a2, b, c)
            a3 = tl.fma(a3, b, c)
    tl.store(out_ptr + offs, (a0 + a1) + (a2 + a3), mask=mask)  # stored, so no FMA can be optimised away


def fma_chain(x: torch.Tensor, iters: int, b: float = 0.75, c: float = 0.25, block: int | None = None, num_warps=4):
    """Run :func:`fma_kernel` on ``x`` [4, n] (float32): ``iters * FMA_UNROLL`` FMAs per chain; returns out [n].

    With |b| < 1 the chains converge to c / (1 - b) (1.0 for the defaults), so no value overflows however long the
    chain; the output is poisoned with NaN before the launch.
    """
    memory._require_tensor("x", x)
    if x.dtype != torch.float32 or x.dim() != 2 or x.shape[0] != FMA_CHAINS or x.shape[1] < 1:
        raise ValueError(f"x must be a float32 tensor of shape [{FMA_CHAINS}, n >= 1], got {x.dtype} {tuple(x.shape)}.")
    if not x.is_contiguous():
        raise ValueError(f"x must be contiguous, got strides {x.stride()}; pass x.contiguous().")
    iters = _size("iters", iters)
    for nm, v in (("b", b), ("c", c)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ValueError(f"{nm} must be a finite number, got {v!r}.")
    n = x.shape[1]
    block = block or runtime.pick(cpu=64, gpu=1024)
    out = check.poisoned(n, dtype=torch.float32, device=x.device)
    fma_kernel[(triton.cdiv(n, block),)](
        x, out, n, float(b), float(c), iters, BLOCK=block, UNROLL=FMA_UNROLL, num_warps=num_warps
    )
    return out


def fma_reference(x: torch.Tensor, steps: int, b: float = 0.75, c: float = 0.25) -> torch.Tensor:
    """float64, step by step: ``a = a*b + c`` ``steps`` times on each chain (row of x), then the sum of the chains."""
    a = x.detach().to(torch.float64)
    for _ in range(steps):
        a = a * b + c
    return a.sum(0)


def fma_closed_form(x: torch.Tensor, steps: int, b: float = 0.75, c: float = 0.25) -> torch.Tensor:
    """float64, for long chains: a_T = a* + b^T (a_0 - a*) with the fixed point a* = c / (1 - b) (needs b != 1)."""
    fixed = c / (1 - b)
    return (fixed + b**steps * (x.detach().to(torch.float64) - fixed)).sum(0)


# ----------------------------------------------------------------------------------------------------------------
# Kernel 2: L2 bandwidth, lesson 0's sweep with L1 bypassed


@triton.jit(do_not_specialize=["n_chunks", "n_programs"])
def l2_sweep_kernel(x_ptr, partial_ptr, n, n_chunks, n_programs, iters, BLOCK: tl.constexpr):
    """:func:`gpulab.memory.sweep_kernel` with one change: loads use ``cache_modifier=".cg"`` (L2 only, not L1)."""
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    chunk = pid % n_chunks
    step = n_programs % n_chunks
    for _ in range(0, iters):
        offs = chunk * BLOCK + lanes
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0, cache_modifier=".cg").to(tl.float32)
        chunk += step
        chunk = tl.where(chunk >= n_chunks, chunk - n_chunks, chunk)
    tl.store(partial_ptr + pid, tl.sum(acc, axis=0))


def l2_sweep(x: torch.Tensor, n: int, programs: int, iters: int, block: int | None = None) -> torch.Tensor:
    """:func:`gpulab.memory.working_set_sweep` through :func:`l2_sweep_kernel`: same checks, same schedule, so
    :func:`gpulab.memory.sweep_reference` is its reference too."""
    block, n_chunks = memory.check_sweep_args(x, n, programs, iters, block)
    partial = check.poisoned(programs, dtype=torch.float32, device=x.device)
    l2_sweep_kernel[(programs,)](
        x, partial, n, n_chunks, programs, iters, BLOCK=block, num_warps=8 if block >= 2048 else 4
    )
    return partial


# ----------------------------------------------------------------------------------------------------------------
# The microbenchmarks


def _measure(fn, case: str, steady: bool = False, **kw) -> bench.Result:
    """:func:`gpulab.bench.measure` for lesson 01. The interpreter is slow and its times mean nothing, so on CPU one
    short round exercises the code path; on a GPU, 25 ms of warm-up and about 100 ms of timed calls.

    ``steady``: 500 ms of warm-up and 300 ms of timing, for the tensor-core products. At ~700 TFLOP/s an H100 runs
    at its power limit and its clock settles only after a few hundred ms; with a short warm-up two measurements of
    the same product differed by 3% in one run, as much as the 0.97 target allows."""
    warm, rep = (500, 300) if steady else (25, 100)
    timing = {"warmup_ms": runtime.pick(cpu=0, gpu=warm), "rep_ms": runtime.pick(cpu=1, gpu=rep)}
    return bench.measure(fn, lesson="01", case=case, **timing, **kw)


def measure_hbm(n: int | None = None) -> list[bench.Result]:
    """The HBM ceiling: lesson 0's copy kernel on ``n`` fp32 elements (1 GiB on a GPU), and torch's copy_ as peer."""
    n = _size("n", n if n is not None else runtime.pick(cpu=(1 << 14) + 3, gpu=1 << 28))
    src = torch.randn(n, device=runtime.device)
    dst = check.poisoned(n, device=runtime.device)
    check.assert_close(memory.copy(src, dst), src, rtol=0.0, name="copy kernel")  # a copy is exact
    peer = check.poisoned(n, device=runtime.device)
    if not torch.equal(peer.copy_(src), src):  # exact, on the device: a second 1 GiB float64 check adds nothing
        raise AssertionError("torch copy_ did not reproduce src exactly.")
    out = []
    for case, fn, kernel, tag in (
        ("HBM: copy kernel (gpulab)", lambda: memory.copy(src, dst), memory.copy_kernel, {"ceiling": "HBM"}),
        ("HBM: torch copy_ (peer)", lambda: peer.copy_(src), None, {"peer_of": "HBM"}),
    ):
        kw = dict(bytes=2 * n * 4, flops=0, dtype=torch.float32, shape=[n], kernel=kernel, level="HBM", roof="fp32")
        out.append(_measure(fn, case, **kw, **tag))
    return out


def measure_cache(level: str, sizes=None, bytes_to_read=None, programs=None, block: int = 4096) -> list[bench.Result]:
    """Read bandwidth of a working set held by ``level``: 'L2' (:func:`l2_sweep`, L1 bypassed) or 'L1' (lesson 0's
    :func:`gpulab.memory.working_set_sweep`). One record per working-set size; the ceiling is the best."""
    if level not in ("L1", "L2"):
        raise ValueError(f"level={level!r}: measure_cache measures 'L1' or 'L2' (HBM: measure_hbm).")
    if sizes is None:
        gpu_sizes = [1 << k for k in (range(19, 25) if level == "L2" else range(14, 18))]
        sizes = runtime.pick(cpu=[16 << 10, 64 << 10] if level == "L2" else [16 << 10], gpu=gpu_sizes)
    sizes = [_size("sizes", w) for w in sizes]
    programs = programs or runtime.pick(cpu=3, gpu=4 * hardware.spec().sm_count)
    bytes_to_read = bytes_to_read or runtime.pick(cpu=128 << 10, gpu=4 << 30)
    sweep = l2_sweep if level == "L2" else memory.working_set_sweep
    kernel = l2_sweep_kernel if level == "L2" else memory.sweep_kernel
    x = memory.sweep_data(max(sizes) // 4)
    out = []
    for w in sizes:
        n = w // 4
        plan = memory.sweep_plan(n, max(bytes_to_read, 2 * w), block, programs)
        run = lambda n=n, plan=plan: sweep(x, n, plan["programs"], plan["iters"], block)
        ref = memory.sweep_reference(x, n, plan["programs"], plan["iters"], block)
        check.assert_close(run(), ref, rtol=1e-4, name=f"{level} sweep sums", context=f"working set {w} bytes")
        case = f"{level}: sweep kernel{' (.cg loads)' if level == 'L2' else ''}"
        kw = dict(bytes=plan["bytes"], flops=plan["bytes"] / 4, dtype=torch.float32, shape=[n], kernel=kernel)
        kw.update(ceiling=level, level=level, roof="fp32", working_set_bytes=w, block=block)
        out.append(_measure(run, case, **kw, programs=plan["programs"], iters=plan["iters"]))
    return out


@contextlib.contextmanager
def _tf32(allowed: bool):
    """Set whether fp32 matmuls may use TF32 tensor cores, and restore the caller's setting afterwards."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


_MATMUL_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}


def measure_matmul(roof: str, shapes=None, sets: int = 2, peer: bool = False, seed: int = 0) -> list[bench.Result]:
    """``torch.matmul`` for a compute roof ('bf16', 'fp16', 'tf32': candidates for its ceiling; 'fp32': IEEE fp32,
    a comparison for the FMA ceiling). Random inputs (never zeros), ``sets`` of them rotated, each shape checked
    against a float64 product of its first rows before it is timed. ``peer=True`` tags the records as the peer of
    the ceiling instead of candidates."""
    if roof not in _MATMUL_DTYPES:
        raise ValueError(f"roof={roof!r}: measure_matmul measures one of {', '.join(_MATMUL_DTYPES)}.")
    dtype = _MATMUL_DTYPES[roof]
    if shapes is None:
        shapes = runtime.pick(cpu=[(96, 80, 112)], gpu=[(8192, 8192, 8192), (16384, 16384, 16384)])
    sets = _size("sets", sets)
    tag = {"peer_of": roof} if (peer or roof == "fp32") else {"ceiling": roof}
    gen = torch.Generator(device=runtime.device).manual_seed(seed)
    out = []
    with _tf32(roof == "tf32"):
        for m, n, k in shapes:
            m, n, k = _size("m", m), _size("n", n), _size("k", k)
            args = [
                (
                    torch.randn(m, k, generator=gen, device=runtime.device, dtype=dtype),
                    torch.randn(k, n, generator=gen, device=runtime.device, dtype=dtype),
                    check.poisoned(m, n, dtype=dtype, device=runtime.device),
                )
                for _ in range(sets)
            ]
            a, b, c = args[0]
            torch.matmul(a, b, out=c)
            rows = min(m, 64)  # a float64 reference of the whole product would cost more than the benchmark
            ref = a[:rows].double() @ b.double()
            check.assert_close(c[:rows], ref, dtype="tf32" if roof == "tf32" else dtype, name=f"torch.matmul {roof}")
            if not torch.isfinite(c).all():  # the rows not compared above must be finite too
                raise AssertionError(f"torch.matmul {roof} {m}x{n}x{k}: the product has NaN or inf elements.")
            case = f"torch.matmul {roof} {m}x{n}x{k}" + (" (peer)" if "peer_of" in tag else "")
            cost = gemm(m, n, k, "tf32" if roof == "tf32" else dtype)
            kw = dict(flops=cost.flops, bytes=cost.bytes, dtype=cost.dtype, shape=[m, n, k], rotate=args)
            matmul = lambda a, b, c: torch.matmul(a, b, out=c)  # noqa: E731
            out.append(_measure(matmul, case, steady=True, **kw, level="HBM", roof=roof, **tag))
            del args, a, b, c, ref
    return out


def measure_fma(configs=None) -> list[bench.Result]:
    """The FP32 FMA ceiling: :func:`fma_kernel` in a few launch configurations ``(block, num_warps, programs per
    SM)``, each checked against float64 (step by step on a short chain, in closed form after the timed runs)."""
    spec = hardware.spec()
    configs = configs or runtime.pick(cpu=[(64, 4, None)], gpu=[(1024, 4, 4), (1024, 4, 8), (2048, 8, 4), (512, 4, 8)])
    out = []
    for block, num_warps, per_sm in configs:
        # On a GPU: one wave of per_sm programs on every SM. On CPU: a few programs with a ragged last block.
        n = spec.sm_count * per_sm * block if per_sm else 2 * block + 3
        x = torch.rand(FMA_CHAINS, n, device=runtime.device) * 4 - 2  # in [-2, 2): far from the fixed point 1.0
        check.assert_close(
            fma_chain(x, 1, block=block, num_warps=num_warps),
            fma_reference(x, FMA_UNROLL),
            name="fma_kernel",
            context=f"block {block}, {FMA_UNROLL} steps",
        )
        # About 10 ms per launch at the spec rate on a GPU; two trips on CPU.
        flops_per_iter = 2 * FMA_CHAINS * FMA_UNROLL * n
        iters = runtime.pick(cpu=2, gpu=max(1, math.ceil(spec.fp32_tflops * 1e12 * 0.010 / flops_per_iter)))
        result = {}

        def fn(x=x, iters=iters, block=block, num_warps=num_warps, result=result):
            result["out"] = fma_chain(x, iters, block=block, num_warps=num_warps)  # kept for the check below

        case = f"FP32 FMA kernel, block {block}, {num_warps} warps"
        kw = dict(flops=float(flops_per_iter * iters), bytes=float((FMA_CHAINS + 1) * n * 4), dtype=torch.float32)
        kw.update(shape=[FMA_CHAINS, n], kernel=fma_kernel, ceiling="fp32", roof="fp32", level="HBM")
        r = _measure(fn, case, **kw, iters=iters, unroll=FMA_UNROLL, chains=FMA_CHAINS, programs=triton.cdiv(n, block))
        steps = iters * FMA_UNROLL
        check.assert_close(
            result["out"], fma_closed_form(x, steps), name="fma_kernel (timed)", context=f"{steps} steps"
        )
        out.append(r)
    return out


def measure_ceilings(progress=None) -> Ceilings:
    """Measure every ceiling of this machine (on CPU: tiny interpreter runs, labelled as such).

    Returns a :class:`Ceilings` whose ``records`` hold every measurement, in the :class:`gpulab.bench.Result`
    format; the best record of each ceiling carries ``vs_spec`` (and ``vs_peer`` where there is a peer).
    """
    steps = [
        ("HBM", lambda: measure_hbm()),
        ("L2", lambda: measure_cache("L2")),
        ("L1", lambda: measure_cache("L1")),
        ("bf16", lambda: measure_matmul("bf16")),
        (
            "bf16 peer",
            lambda: measure_matmul(
                "bf16", shapes=runtime.pick(cpu=[(96, 80, 112)], gpu=[(8192,) * 3]), peer=True, seed=1
            ),
        ),
        ("fp16", lambda: measure_matmul("fp16")),
        ("tf32", lambda: measure_matmul("tf32")),
        ("fp32 matmul", lambda: measure_matmul("fp32", shapes=runtime.pick(cpu=[(96, 80, 112)], gpu=[(8192,) * 3]))),
        ("FP32 FMA", lambda: measure_fma()),
    ]
    records = []
    for _, step in progress(steps) if progress else steps:
        records += step()
        if runtime.on_gpu():
            torch.cuda.empty_cache()
    result = Ceilings.from_results(records)
    _annotate(result)
    return result


def _annotate(c: Ceilings) -> None:
    """Write ``vs_spec`` and ``vs_peer`` into the params of each ceiling's best record (GPU runs only)."""
    if c.mode != "cuda":
        return
    spec = c._spec()
    keys = MEMORY_LEVELS + COMPUTE_ROOFS
    peers = {r.params["peer_of"]: r for r in c.records if r.params.get("peer_of")}
    for key in keys:
        cands = [r for r in c.records if r.params.get("ceiling") == key]
        if not cands:
            continue
        best = max(cands, key=lambda r: _rate_of(r, key))
        best.params["best"] = True
        sv = _spec_value(spec, key)
        if sv:
            best.params["vs_spec"] = _rate_of(best, key) / sv
        if key in peers:
            best.params["vs_peer"] = _rate_of(best, key) / _rate_of(peers[key], key)


def targets(c: Ceilings) -> list[tuple[str, float, float, bool]]:
    """The lesson's targets, relative so they hold on any GPU: (what, ratio, target, met).

    The HBM ceiling >= 0.97 x torch's device copy, and the bf16 ceiling >= 0.97 x torch.matmul at 8192^3, both
    measured in the same run. Empty if the records lack either pair.
    """
    out = []
    peers = {r.params["peer_of"]: r for r in c.records if r.params.get("peer_of")}
    for key in ("HBM", "bf16"):
        v = c.value(key)
        if key in peers and v:
            ratio = v / _rate_of(peers[key], key)
            out.append((f"{key} ceiling / {peers[key].case}", ratio, 0.97, ratio >= 0.97))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Placing results on the roofline


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one result sits: its intensity, achieved and attainable rate, the fraction, and the bound."""

    case: str
    intensity: float | None
    achieved_tflops: float | None
    achieved_gbps: float | None
    roof_tflops: float | None
    fraction: float | None
    bound: str | None
    compute: str
    level: str


def placement(results, ceilings: Ceilings | None = None) -> list[Placement]:
    """Place :class:`gpulab.bench.Result` s (measured) and :class:`Intensity` records (predicted) on the roofline.

    A measured result is held to the roof of its memory level (``params['level']``, default HBM: its bytes are the
    HBM bytes the operation must move) and its compute roof (``params['roof']``, else by dtype). Its fraction is
    achieved / attainable; for a result without FLOPs (a copy) it is achieved / bandwidth. Predictions have no
    achieved rate: they sit on the HBM roof.
    """
    c = _resolve(ceilings)
    out = []
    for r in results:
        if isinstance(r, Intensity):
            roof = c.attainable(r.intensity, r.compute, "HBM")
            bw, p = c.bandwidth("HBM"), c.compute(r.compute)
            bnd = bound(r.intensity, p, bw) if (p and bw) else None
            out.append(Placement(r.name, r.intensity, None, None, roof, None, bnd, r.compute, "HBM"))
            continue
        if not isinstance(r, bench.Result):
            raise ValueError(
                f"results must hold gpulab.bench.Result or roofline.Intensity records, got {type(r).__name__}."
            )
        key, level = _compute_key(r), r.params.get("level", "HBM")
        bw, p = c.bandwidth(level), c.compute(key)
        i = r.intensity if r.flops else (0.0 if r.bytes else None)
        if i is None:
            out.append(Placement(r.case, None, r.tflops, r.gbps, None, None, None, key, level))
            continue
        if i == 0:
            frac = r.gbps / bw if bw else None
            out.append(Placement(r.case, 0.0, 0.0, r.gbps, 0.0, frac, "memory", key, level))
            continue
        roof = attainable(i, p, bw) if (p and bw) else None
        out.append(
            Placement(
                r.case,
                i,
                r.tflops,
                r.gbps,
                roof,
                r.tflops / roof if roof else None,
                bound(i, p, bw) if (p and bw) else None,
                key,
                level,
            )
        )
    return out


def _num(v: float) -> str:
    """1,234 for large numbers, 3 significant digits for small ones (interpreter rates are tiny)."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _f(v, spec="{:.3g}") -> str:
    return "-" if v is None else spec.format(v)


def _label(r) -> str:
    """A row label: the case, and the working set where a result has one (lesson 0's sweep)."""
    if isinstance(r, bench.Result) and "working_set_bytes" in r.params:
        return f"{r.case}, W = {memory._human_bytes(r.params['working_set_bytes'])}"
    return r.name if isinstance(r, Intensity) else r.case


def placement_table(results, ceilings: Ceilings | None = None) -> str:
    """:func:`placement` as text: one row per result, with its roofs ('compute/memory level')."""
    results = list(results)
    rows = placement(results, ceilings)
    labels = [_label(r) for r in results]
    w = max([len("case")] + [len(lab) for lab in labels])
    head = f"{'case':{w}s} {'FLOP/B':>8s} {'roofs':>9s} {'TFLOP/s':>9s} {'GB/s':>9s} {'roof TF/s':>10s}"
    head += f" {'fraction':>8s}  bound"
    lines = [head, "-" * len(head)]
    for lab, p in zip(labels, rows):
        lines.append(
            f"{lab:{w}s} {_f(p.intensity):>8s} {p.compute + '/' + p.level:>9s} {_f(p.achieved_tflops):>9s} "
            f"{_f(p.achieved_gbps, '{:,.0f}'):>9s} {_f(p.roof_tflops):>10s} {_f(p.fraction, '{:.0%}'):>8s}  "
            f"{p.bound or '-'}"
        )
    return "\n".join(lines)


def intensity_table(records, ceilings: Ceilings | None = None) -> str:
    """Intensity records as text: FLOPs, bytes, FLOP/byte, the ridge point of their roof, the attainable rate and
    the bound on ``ceilings`` (default: :func:`ceilings`)."""
    c = _resolve(ceilings)
    w = max([len("operation")] + [len(r.name) for r in records])
    head = f"{'operation':{w}s} {'GFLOP':>10s} {'MB moved':>10s} {'FLOP/B':>8s} {'ridge':>6s} {'max TF/s':>9s}  bound"
    lines = [head, "-" * len(head)]
    for r in records:
        ridge = c.ridge(r.compute, "HBM")
        lines.append(
            f"{r.name:{w}s} {r.flops / 1e9:>10,.3f} {r.bytes / 1e6:>10,.3f} {r.intensity:>8.3g} "
            f"{_f(ridge, '{:.0f}'):>6s} "
            f"{_f(c.attainable(r.intensity, r.compute, 'HBM'), '{:.3g}'):>9s}  "
            f"{bound(r.intensity, c.compute(r.compute), c.bandwidth('HBM')) if ridge else '-'}"
        )
    return "\n".join(lines)


def plot(results=(), ceilings: Ceilings | None = None, ax=None, title=None):
    """Log-log roofline: a roof per memory level (HBM, L2, L1 where known) and per compute precision, and each result
    placed as a point labelled with its fraction of its roof.

    ``results``: :class:`gpulab.bench.Result` s (filled markers at their achieved rate; results without FLOPs, such
    as a copy, have no place on a FLOP/s axis and are left out: see :func:`placement_table`) and :class:`Intensity`
    records (hollow markers on the HBM roof: predictions). ``ceilings`` defaults to :func:`ceilings` (stored
    measurement, else spec table); the title says which.
    """
    import matplotlib.pyplot as plt

    c = _resolve(ceilings)
    results = list(results)
    placed = placement(results, c)
    if ax is None:
        _, ax = plt.subplots(figsize=(8.5, 5))
    peaks = {k: c.compute(k) for k in COMPUTE_ROOFS if c.compute(k)}
    bws = {lvl: c.bandwidth(lvl) for lvl in MEMORY_LEVELS if c.bandwidth(lvl)}
    top = max(peaks.values()) if peaks else 1e3
    xs = [p.intensity for p in placed if p.intensity]
    xmin = min([1e-2] + [x / 3 for x in xs])
    xmax = max([1e4] + [x * 3 for x in xs])

    # Memory roofs: I * B up to the highest compute roof. Compute roofs: flat from the leftmost knee.
    styles = {"HBM": ("C0", "-"), "L2": ("C1", "--"), "L1": ("C2", ":")}
    for lvl, bw in bws.items():
        knee = top * 1e3 / bw
        color, ls = styles[lvl]
        label = f"{_ROOF_NAMES[lvl]} roof, {_num(bw)} GB/s"
        ax.plot([xmin, knee], [xmin * bw / 1e3, top], color=color, ls=ls, lw=2, label=label)
    drawn = []  # (keys, height, values): roofs within 5% of each other share a line (bf16 and fp16 do)
    for k, p in sorted(peaks.items(), key=lambda kv: kv[1]):
        if drawn and abs(p / drawn[-1][1] - 1) < 0.05:
            drawn[-1] = (drawn[-1][0] + [k], max(p, drawn[-1][1]), drawn[-1][2] + [p])
        else:
            drawn.append(([k], p, [p]))
    grays = ["0.55", "0.35", "0.15", "0.0"]
    for (keys, p, vals), g in zip(drawn, grays):
        start = p * 1e3 / max(bws.values()) if bws else xmin  # where it meets the fastest memory roof
        tensor = [k for k in keys if k != "fp32"]
        names = " / ".join(tensor) + " tensor cores" if tensor else _ROOF_NAMES["fp32"]
        rates = " / ".join(dict.fromkeys(_num(v) for v in vals))  # 989 / 989 on paper is just 989
        ax.plot([start, xmax], [p, p], color=g, lw=1.5, label=f"{names} roof, {rates} TFLOP/s")

    # Points: measured results filled, predictions hollow. One legend entry per case.
    # A case measured at several levels (lesson 0's sweep) gets one entry per level, so each shows its own roof.
    levels: dict[str, set] = {}
    for p in placed:
        levels.setdefault(p.case, set()).add(p.level)
    by_case: dict[str, list] = {}
    for p, r in zip(placed, results):
        if p.intensity:
            key = f"{p.case} ({p.level})" if len(levels[p.case]) > 1 else p.case
            by_case.setdefault(key, []).append((p, r))
    colors = [plt.get_cmap("tab10")(i) for i in range(3, 10)] + [plt.get_cmap("tab20")(i) for i in (1, 3, 5, 13)]
    markers = "osD^vPX*h<>p"
    for idx, (case, items) in enumerate(by_case.items()):
        color, marker = colors[idx % len(colors)], markers[idx % len(markers)]
        predicted = isinstance(items[0][1], Intensity)
        ys = [p.roof_tflops if predicted else p.achieved_tflops for p, _ in items]
        fr = [p.fraction for p, _ in items if p.fraction is not None]
        if predicted:
            label = f"{case} (I = {items[0][0].intensity:.3g}, {items[0][0].bound}-bound)"
        elif fr:
            rng = f"{min(fr):.0%}" if len(fr) == 1 or max(fr) - min(fr) < 0.005 else f"{min(fr):.0%}-{max(fr):.0%}"
            label = f"{case}: {rng} of its roof"
        else:
            label = case
        face = "none" if predicted else color
        xs_case = [p.intensity for p, _ in items]
        ax.scatter(xs_case, ys, s=40, zorder=4, label=label, facecolors=face, edgecolors=color, marker=marker)
        if len(items) == 1 and fr and not predicted:
            ax.annotate(
                f"{fr[0]:.0%}", (items[0][0].intensity, ys[0]), textcoords="offset points", xytext=(5, -10), fontsize=7
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(xmin, xmax)
    ys_all = [y for y in [xmin * min(bws.values()) / 1e3 if bws else None] if y]
    ys_all += [p.achieved_tflops or p.roof_tflops for p in placed if p.intensity]
    ax.set_ylim(max(min([y for y in ys_all if y] + [top]) / 3, 1e-6), top * 2.5)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    ax.set_title(title or f"Roofline of the {c.device}\n{c.source}", fontsize=9)
    return ax


# ----------------------------------------------------------------------------------------------------------------
# python -m gpulab bench 01


def benchmark(progress=None):
    """`python -m gpulab bench 01`: every ceiling, the peers, the targets; returns (results, roofline figure)."""
    import matplotlib

    matplotlib.use("Agg")
    c = measure_ceilings(progress=progress)
    print(c.summary())  # the ceilings against the spec, and the targets
    ax = plot(c.records, c)
    return list(c.records), ax.figure
