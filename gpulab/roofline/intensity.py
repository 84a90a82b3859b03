"""Counting an operation's cost, and the roofline model that turns a count into a bound.

What you will learn here:
- a kernel that does ``F`` FLOPs and must move ``Q`` bytes cannot beat ``t >= max(F / P, Q / B)``; dividing by ``t``
  gives the **roofline**: attainable FLOP/s ``= min(P, I * B)`` with the **arithmetic intensity** ``I = F / Q``
  (FLOPs per byte). Below the **ridge point** ``I* = P / B`` a kernel is memory-bound, above it compute-bound;
- how to count ``F`` and ``Q`` for the operations of this course (vector add, softmax, GEMM, naive and tiled
  attention, an LSTM step and a whole LSTM sequence) and read off, before writing a kernel, what bounds it.

Counting conventions (those of :mod:`gpulab.bench`): a multiply-add is 2 FLOPs; a GEMM is ``2*M*N*K``; attention
forward is ``4*B*H*Nq*Nk*D`` (its two GEMMs), halved when causal; an LSTM counts its gate matrix products,
``2 * batch * 4H * (input + H)`` per step (the pointwise cell update, about 10 FLOPs per hidden unit, is left out as
attention's softmax is); softmax counts 5 FLOPs per element (max, subtract, exp, sum, divide). Bytes are the fewest
an implementation of that *algorithm* must move through HBM: each input read once, each output written once, plus
the intermediates the algorithm materialises (naive attention's score matrices; a per-step LSTM's weights and state).

Every size must be a positive integer (5.0, -1 and True are refused with an error that names the argument).
"""

from __future__ import annotations

import dataclasses

import torch

from gpulab import bench, dtypes, runtime

__all__ = [
    "COMPUTE_ROOFS",
    "MEMORY_LEVELS",
    "ROOF_NAMES",
    "Intensity",
    "dtype_and_size",
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
]

COMPUTE_ROOFS = ("fp32", "tf32", "fp16", "bf16")
"""Compute roofs: FP32 FMA (no tensor cores), and tensor cores with TF32, fp16 and bf16 operands."""

MEMORY_LEVELS = ("HBM", "L2", "L1")
"""Memory roofs, slowest first."""

ROOF_NAMES = {
    "fp32": "FP32 FMA",
    "tf32": "TF32 tensor cores",
    "fp16": "fp16 tensor cores",
    "bf16": "bf16 tensor cores",
    "HBM": "HBM",
    "L2": "L2",
    "L1": "L1 (on-chip)",
}
"""Each roof's name on tables and figures."""


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

    def __post_init__(self):
        # Frozen, so fields are set through object.__setattr__; counts become floats, as the helpers make them.
        for field in ("name", "dtype", "note"):
            if not isinstance(getattr(self, field), str):
                value = getattr(self, field)
                raise runtime.ArgumentTypeError(f"{field} must be a string, got {value!r} ({type(value).__name__}).")
        object.__setattr__(self, "flops", runtime.finite_float("flops", self.flops, minimum=0.0))
        nbytes = runtime.finite_float("bytes", self.bytes)
        if nbytes <= 0:
            raise ValueError(
                f"bytes must be > 0, got {self.bytes!r}: an operation that moves no bytes has no arithmetic "
                "intensity (FLOPs per byte); count at least its inputs read and its outputs written."
            )
        object.__setattr__(self, "bytes", nbytes)
        runtime.one_of("compute", self.compute, COMPUTE_ROOFS)

    @property
    def intensity(self) -> float:
        """FLOPs per byte of HBM traffic: the roofline's x axis."""
        return self.flops / self.bytes


_size = runtime.positive_int  # a positive integer size, or a ValueError that names the argument


_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "tf32": 4}  # bytes per element of each roof's dtype


def dtype_and_size(dtype, allow_tf32: bool = False, name: str = "dtype") -> tuple[str, int]:
    """('float32' | 'float16' | 'bfloat16' | 'tf32', bytes per element). 'tf32' means fp32 storage, TF32 math."""
    allow_tf32 = runtime.strict_bool("allow_tf32", allow_tf32)
    if not isinstance(dtype, (str, torch.dtype)):
        raise runtime.ArgumentTypeError(
            f"{name} must be a torch dtype or a name like 'bfloat16', got {dtype!r} ({type(dtype).__name__})."
        )
    if allow_tf32 and isinstance(dtype, str) and dtype.lower() == "tf32":
        return "tf32", 4
    known = "float32, float16, bfloat16" + (" or 'tf32' (fp32 storage, TF32 tensor cores)" if allow_tf32 else "")
    try:
        key = str(dtypes.as_dtype(dtype, name)).replace("torch.", "")
    except ValueError:
        raise ValueError(f"{name}={dtype!r} is not a dtype the roofline knows; use {known}.") from None
    if key not in _ITEMSIZE:
        raise ValueError(f"{name}={dtype!r} has no roof in this course; use {known}.")
    return key, _ITEMSIZE[key]


def vector_add(n, dtype="float32") -> Intensity:
    """``z = x + y`` on n elements: n FLOPs; reads 2n and writes n elements."""
    n = _size("n", n)
    key, s = dtype_and_size(dtype)
    return Intensity(
        f"vector add n={n} {dtypes.short(key)}", float(n), float(3 * n * s), "fp32", key, "read x, y; write z"
    )


def softmax(rows, cols, dtype="float32") -> Intensity:
    """Row-wise softmax of a rows x cols matrix: 5 FLOPs per element (max, subtract, exp, sum, divide); reads the
    matrix once and writes it once (a one-pass kernel that keeps each row on chip)."""
    rows, cols = _size("rows", rows), _size("cols", cols)
    key, s = dtype_and_size(dtype)
    e = rows * cols
    return Intensity(
        f"softmax {rows}x{cols} {dtypes.short(key)}", 5.0 * e, float(2 * e * s), "fp32", key, "read x; write y"
    )


def gemm(m, n, k, dtype="bfloat16") -> Intensity:
    """``C = A @ B`` with A (m, k), B (k, n): 2mnk FLOPs; reads A and B, writes C (all in ``dtype``; 'tf32' means
    fp32 matrices multiplied by TF32 tensor cores)."""
    m, n, k = _size("m", m), _size("n", n), _size("k", k)
    key, s = dtype_and_size(dtype, allow_tf32=True)
    flops, nbytes = 2.0 * m * n * k, float((m * k + k * n + m * n) * s)
    return Intensity(
        f"GEMM {m}x{n}x{k} {dtypes.short(key)}", flops, nbytes, dtypes.short(key), key, "read A, B; write C"
    )


def _attention(kind, batch, heads, seq_q, seq_k, head_dim, dtype, causal):
    """Shared by the two attention counts: validated sizes, FLOPs, Q/K/V/O elements, and a name."""
    names = ("batch", "heads", "seq_q", "seq_k", "head_dim")
    b, h, nq, nk, d = (_size(nm, v) for nm, v in zip(names, (batch, heads, seq_q, seq_k, head_dim)))
    key, s = dtype_and_size(dtype, allow_tf32=True)
    causal = runtime.strict_bool("causal", causal)
    flops = bench.attention_flops(b, h, nq, nk, d, causal=causal)
    qkvo = b * h * (2 * nq * d + 2 * nk * d)  # Q [Nq, D] and O [Nq, D]; K and V [Nk, D]; per batch and head
    name = f"attention {kind} B={b} H={h} N={nq}x{nk} D={d} {dtypes.short(key)}{' causal' if causal else ''}"
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
    return Intensity(name, flops, float((qkvo + scores) * s), dtypes.short(key), key, note)


def attention_tiled(batch, heads, seq_q, seq_k, head_dim, dtype="bfloat16", causal=False) -> Intensity:
    """Tiled (FlashAttention-style) attention: scores live on chip, so the bytes are Q, K, V read once and O written
    once: ``B*H*(2*Nq + 2*Nk)*D`` elements. (A real kernel re-reads K and V once per query tile, mostly from L2;
    this is the minimum.) FLOPs as for :func:`attention_naive`."""
    _, _, _, _, key, s, flops, qkvo, name = _attention("tiled", batch, heads, seq_q, seq_k, head_dim, dtype, causal)
    return Intensity(name, flops, float(qkvo * s), dtypes.short(key), key, "Q, K, V read once, O written once")


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
    return Intensity(f"LSTM step B={b} I={i} H={h} {dtypes.short(key)}", flops, nbytes, dtypes.short(key), key, note)


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
    name = f"LSTM seq B={b} T={t} I={i} H={h} L={n_layers} {dtypes.short(key)}, {how}"
    return Intensity(name, float(flops), float(s * elements), dtypes.short(key), key, how)


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
    """A finite rate or intensity, > 0 (>= 0 with ``allow_zero``), or an error naming ``name``."""
    return runtime.finite_float(name, value, minimum=0.0 if allow_zero else None, positive=not allow_zero)


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
