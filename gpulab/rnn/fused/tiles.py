"""The tiles and cell variants that the fused forward and backward kernels share (``@triton.jit`` helpers).

Both kernels keep a head's R on chip as *one* tile for all gates and move gates as all-gates tiles
[BLOCK_B, G * BLOCK_D] (G = 4 gate slots for lstm and gru, 1 for elman; column ``slot * BLOCK_D + j`` holds unit j
of gate ``slot``):

- :func:`gate_columns`: the (gate slot, unit) of every column of an all-gates tile;
- :func:`load_r`: head n's R as one tile, transposed for the forward (``h @ R_all^T``) or not for the backward
  (``dG_all @ R_all``);
- :func:`split_gates` / :func:`join_gates`: an all-gates tile to G tiles [BLOCK_B, BLOCK_D] and back (free in the
  tensor cores' output layout);
- :func:`gate_scale`, :func:`lstm_activations_approx`, :func:`cell_tanh`: the one-instruction activations of 16-bit
  kernels on the GPU (:func:`fast_activations` decides), exact cells otherwise;
- :func:`lstm_step_all_gates`: one LSTM step from all-gates tiles with the exact cell (versions v2 and v3);
- :func:`barrier_counter`: the grid barrier's counter of the split kernels (host side).

Generic helpers (the product with its precision, packed 16-bit loads, ``dot_operand``, ``tanh_approx``) live in
:mod:`gpulab.triton_ops`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import dtypes, runtime
from gpulab.rnn.cells import lstm_activations
from gpulab.triton_ops import dot, tanh, tanh_approx

__all__ = [
    "fast_activations",
    "gate_columns",
    "load_r",
    "split_gates",
    "join_gates",
    "gate_scale",
    "lstm_activations_approx",
    "cell_tanh",
    "lstm_step_all_gates",
    "barrier_counter",
]


def fast_activations(dtype) -> bool:
    """Whether the fused kernels use one-instruction activations: 16-bit (bf16) compute on a GPU only."""
    return not runtime.INTERPRET and dtypes.as_dtype(dtype) == torch.bfloat16


@triton.jit
def gate_columns(G: tl.constexpr, BLOCK_D: tl.constexpr):
    """Column index of a [*, G * BLOCK_D] gate tile split into (gate slot, unit): slot = col // BLOCK_D."""
    col = tl.arange(0, G * BLOCK_D)
    return col // BLOCK_D, col % BLOCK_D


@triton.jit
def load_r(r_ptr, n, NH, DH: tl.constexpr, BLOCK_D: tl.constexpr, G_R: tl.constexpr, G: tl.constexpr,
           TRANSPOSED: tl.constexpr):  # fmt: skip
    """Head n's R [G_R, DH, DH] as one tile, gate slots side by side (slots >= G_R and padding are zero).

    TRANSPOSED (the forward): R_all^T [BLOCK_D, G * BLOCK_D], element [k, g * BLOCK_D + j] = R[g, n, j, k], so that
    ``h @ R_all^T`` gives all gates at once. Else (the backward): R_all [G * BLOCK_D, BLOCK_D], element
    [g * BLOCK_D + j, k] = R[g, n, j, k], so that ``dG_all @ R_all`` sums dG_g @ R_g over the gates.
    """
    slot, j = gate_columns(G, BLOCK_D)
    k = tl.arange(0, BLOCK_D)
    row = r_ptr + slot * NH * DH * DH + n * DH * DH + j * DH  # start of row j of R[slot, n]
    ok = (slot < G_R) & (j < DH)
    if TRANSPOSED:
        return tl.load(row[None, :] + k[:, None], mask=ok[None, :] & (k < DH)[:, None], other=0.0)
    else:
        return tl.load(row[:, None] + k[None, :], mask=ok[:, None] & (k < DH)[None, :], other=0.0)


@triton.jit
def split_gates(x, BLOCK_B: tl.constexpr, BLOCK_D: tl.constexpr, G: tl.constexpr):
    """[BLOCK_B, G * BLOCK_D] -> G tiles [BLOCK_B, BLOCK_D] (G = 4; for G = 1 the tile four times)."""
    if G == 1:
        return x, x, x, x
    else:
        x = tl.permute(tl.reshape(x, [BLOCK_B, 2, 2, BLOCK_D]), (0, 3, 1, 2))  # [b, j, a, c]: gate slot 2a + c
        x02, x13 = tl.split(x)
        x0, x2 = tl.split(x02)
        x1, x3 = tl.split(x13)
        return x0, x1, x2, x3


@triton.jit
def join_gates(x0, x1, x2, x3, BLOCK_B: tl.constexpr, BLOCK_D: tl.constexpr, G: tl.constexpr):
    """The inverse of :func:`split_gates`: G tiles [BLOCK_B, BLOCK_D] -> [BLOCK_B, G * BLOCK_D]."""
    if G == 1:
        return x0
    else:
        x = tl.join(tl.join(x0, x2), tl.join(x1, x3))  # [b, j, a, c]
        return tl.reshape(tl.permute(x, (0, 2, 3, 1)), [BLOCK_B, G * BLOCK_D])


@triton.jit
def gate_scale(slot, FAST: tl.constexpr, FUNCTION: tl.constexpr):
    """Per all-gates column: 1/2 for the LSTM's sigmoid gates (slots 0, 1, 3) when FAST, else 1.

    sigmoid(x) = 1/2 + tanh(x / 2) / 2: the kernels fold the 1/2 *inside* into R, Wx and b once (exact: a power
    of two), so the fast cell takes the sigmoid gates' pre-activations already halved and saves a multiply per
    gate and step. The gates saved for the backward are the halved ones (the backward's fast cell expects them).
    """
    if FAST and FUNCTION == 0:
        return tl.where(slot == 2, 1.0, 0.5)
    else:
        return tl.full(slot.shape, 1.0, tl.float32)


@triton.jit
def lstm_activations_approx(i2, f2, z, o2):
    """:func:`gpulab.rnn.cells.lstm_activations` with sigmoid(x) = 0.5 + 0.5 tanh(x / 2) and tanh in one instruction
    each; the sigmoid gates' pre-activations arrive halved (i2 = i / 2, see :func:`gate_scale`)."""
    return 0.5 + 0.5 * tanh_approx(i2), 0.5 + 0.5 * tanh_approx(f2), tanh_approx(z), 0.5 + 0.5 * tanh_approx(o2)


@triton.jit
def cell_tanh(x, FAST: tl.constexpr):
    """tanh in one instruction (FAST: 16-bit dtypes on the GPU) or exactly (:mod:`gpulab.rnn.cells`)."""
    if FAST:
        return tanh_approx(x)
    else:
        return tanh(x)


@triton.jit
def lstm_step_all_gates(h, c, x, rt, bias, IS_FP32: tl.constexpr, PRECISION: tl.constexpr, BLOCK_B: tl.constexpr,
                        DH: tl.constexpr):  # fmt: skip
    """One LSTM step from the all-gates input x = Wx_t (fp32 [BLOCK_B, 4 DH]): (h_t, c_t), fp32 [BLOCK_B, DH]."""
    pre = dot(h.to(rt.dtype), rt, IS_FP32, PRECISION) + x + bias  # [BLOCK_B, 4 DH]: every gate at once
    i, f, z, o = split_gates(pre, BLOCK_B, DH, 4)
    i, f, z, o = lstm_activations(i, f, z, o)
    c = f * c + i * z
    return o * tanh(c), c


_COUNTERS: dict = {}


def persistent_mode(persistent: bool | None) -> bool:
    """Whether a split kernel runs persistent (one launch, a grid barrier per step): ``None`` means yes on a GPU and no
    in the interpreter; ``True`` in the interpreter is refused, since it runs programs one after another and a grid
    barrier there would wait forever."""
    if persistent is None:
        return not runtime.INTERPRET
    if persistent and runtime.INTERPRET:
        raise RuntimeError(
            "persistent=True: the interpreter runs programs one after another, so a grid barrier would wait "
            "forever; use persistent=False (one launch per step, the same math)."
        )
    return persistent


COUNTER_STRIDE = 16
"""int64s between two groups' counters (128 bytes: each group's counter in a cache line of its own)."""


def barrier_counter(device: torch.device, programs: int, groups: int = 1) -> torch.Tensor:
    """The grid barrier's int64 counter for launches of ``programs`` programs on ``device``'s current stream: made
    zero once and never reset (see :mod:`gpulab.rnn.fused.split`), so CUDA-graph replays find it consistent. With
    ``groups`` > 1, one counter per group of programs that wait only for each other (a head and batch tile of
    version 6), :data:`COUNTER_STRIDE` apart."""
    programs, groups = runtime.positive_int("programs", programs), runtime.positive_int("groups", groups)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device, stream, programs, groups)
    counter = _COUNTERS.get(key)
    if counter is None:
        counter = _COUNTERS[key] = torch.zeros(groups * COUNTER_STRIDE, dtype=torch.int64, device=device)
    return counter
