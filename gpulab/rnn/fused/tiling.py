"""Does the ``fused`` kernel fit, and with which tile? A small integer constraint problem, as in FlashRNN's ConstrINT.

What you will learn: the fused RNN kernels keep a head's recurrent weights R *on chip* for the whole sequence, so
whether they can run at all is a question of on-chip capacity, answered before launch.

The unknowns, for one problem (B, NH, DH, function, dtype) on one GPU (a :class:`gpulab.hardware.GPUSpec`):

- ``block_b`` in {8, 16, 32, 64, 128}: batch rows per program. The tensor cores multiply 16 rows at a time, so a
  tile of 8 rows costs the product (and the registers) of 16; but the *activations* are computed only for the rows
  the tile has, and they are what an SM runs out of first at small tiles (see the objective);
- ``num_warps`` in {4, 8, 16}: threads per program = 32 * num_warps;
- ``r_on_chip`` in {True, False}: R loaded once and kept for the whole sequence, or re-read at every step (from L1
  at best). Both stage R through shared memory: the kernels multiply by R as *one* tile for all gates,
  R_all [DH, G * DH], and Triton keeps a ``tl.dot`` operand in shared memory (measured: the compiled kernels'
  shared memory is R_all plus one [block_b, G * DH] layout-conversion buffer). So re-reading costs the same
  capacity and only adds traffic: it never wins, and is listed for comparison.

The grid is NH * ceil(B / block_b) programs, each running the whole time loop for one head and batch tile.
Constraints (D = head dim padded to a power of two >= 16, G = 4 gate slots (gru's 3 recurrent gates padded to 4;
1 for elman), e = bytes per element):

1. shared memory:  R_all, G * D * D * e, plus the conversion buffer G * block_b * D * e
                   <= shared memory per block (and per SM, for several programs on one SM)
2. live tiles:     ``tiles(function, direction)`` [block_b, D] tiles of 32-bit registers (fp32 gate
                   pre-activations, states, the prefetched 16-bit inputs, the 64-bit addresses of the all-gates
                   tiles), calibrated on the compiled kernels' register counts (Triton 3.6, H100)
3. per thread:     tiles * max(block_b, 16) * D / (32 * num_warps) + ``OVERHEAD`` <= registers per thread (255)
4. per SM:         a program's registers <= the register file (64 K), i.e. at least one program fits on an SM

Objective: the least estimated time per step. Programs run concurrently; a step costs a fixed latency (the chain
load -> dot -> cell -> store of one step) plus, for the programs sharing an SM, their tensor-core work and their
activations: each unit's gates and cell take ``specials(function, direction)`` special-function instructions
(tanh; the LSTM forward 5 per unit), and an SM issues only 16 of those per clock (``SFU_RATE`` per ns). One head of
64 at 16 rows is 16 x 64 x 5 / 16 = 320 clocks of them per step, a large share of a step at this size: 8 rows halve
them and use twice the SMs (lesson 6's Appendix H and its records, ``benchmarks/07_rnn_split/rows/``). So the
score is ``rounds * (LATENCY + programs_per_SM * (max(block_b, 16) * 2 * G_r * D^2 / RATE + block_b * D *
specials / SFU_RATE))`` with rounds = ceil(programs / slots).
Among equal scores, the fewest warps that leave a thread at most ``ROOMY`` = 240 registers, else the fewest warps.
Why the tie-break: on the H100 (B = 16, bf16) 4 warps beat 8 at DH 16 to 64 in both directions, and at DH 128
four warps do not fit (the estimate exceeds 255 registers), so 8 win; lesson 6's records hold the times.
Nothing satisfies 1-4 when R alone is too big: then :func:`fused_tiling` raises a ValueError that says how much
on-chip memory a head needs and what to do (backend='alternating', more heads, 16-bit dtype).

``stages`` is fixed at 1 (no Triton software pipelining): the kernels prefetch their inputs themselves.
Everything is testable on CPU for any GPU in :data:`gpulab.hardware.SPECS`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import torch

from gpulab import dtypes, hardware, runtime
from gpulab.rnn.functions import get_function

__all__ = ["FusedTiling", "candidates", "fused_tiling", "fits", "explain", "specials", "BLOCK_B", "NUM_WARPS"]

BLOCK_B = (8, 16, 32, 64, 128)
MMA_ROWS = 16  # rows the tensor cores multiply at a time: a tile of fewer rows is padded to this (product, registers)
NUM_WARPS = (4, 8, 16)
OVERHEAD = 24  # registers per thread for scalars, loop counters, temporaries
ROOMY = 240  # prefer the fewest warps whose threads stay below this many registers (the cap is 255)
L1_RATE = 200.0  # bytes per ns per SM from L1 (about 128 B/clock): the cost of re-reading R every step
LATENCY = 400.0  # ns, one step's dependent chain at small tiles (measured order of magnitude on the H100)
RATE = 4.0e3  # dense FLOP per ns per SM for mma.sync-sized tiles (about 1/2 of peak/SM on an H100)
SFU_RATE = 28.0  # special-function results per ns per SM (16 per clock at about 1.75 GHz)


def slots(function) -> int:
    """Gate slots of the kernels' all-gates tiles: 4 (lstm; gru's gates padded to 4) or 1 (elman)."""
    return 4 if get_function(function).gates_b > 1 else 1


def specials(function, direction: str) -> int:
    """Special-function instructions (tanh) per unit and step: the LSTM forward 5 (three sigmoids as tanh, the cell
    input, tanh(c)), its backward 1 (tanh(c) again, from the saved activations); the GRU 3 (two sigmoids, the
    candidate's tanh) both ways (its backward recomputes them from the pre-activations); Elman 1."""
    fn = get_function(function)
    if direction not in ("forward", "backward"):
        raise ValueError(f"direction={direction!r}; use 'forward' or 'backward'.")
    if fn.name == "lstm":
        return 5 if direction == "forward" else 1
    return 3 if fn.name == "gru" else 1


def tiles(function, direction: str) -> int:
    """Live [block_b, D] tiles of 32-bit registers of the forward or backward kernel (constraint 2).

    Calibrated on the compiled kernels' register counts (Triton 3.6, sm_90, LSTM at DH 64: 229 registers per thread
    at 4 warps and 128 at 8 in the forward, 168 and 96 in the backward, i.e. 26 and 18 tiles): per gate slot the
    fp32 pre-activations, the addresses of the all-gates loads and stores, and the inputs prefetched ahead (two in
    the forward's loop, unrolled by two), and the fp32 states (and in the backward dh, dc and the gate gradients).
    """
    fn = get_function(function)
    g = slots(fn)
    if direction == "forward":
        return 6 * g + 2 * fn.states - 2
    if direction == "backward":
        return 4 * g + 2
    raise ValueError(f"direction={direction!r}; use 'forward' or 'backward'.")


@dataclasses.dataclass(frozen=True)
class FusedTiling:
    """One candidate (or the choice): tile, warps, what it needs and whether it fits (``reason`` says why not)."""

    block_b: int
    num_warps: int
    num_stages: int
    r_on_chip: bool
    block_d: int
    programs: int
    registers_per_thread: int
    shared_bytes: int
    r_bytes: int
    programs_per_sm: int
    score: float
    fits: bool
    reason: str = ""

    def launch(self) -> dict:
        """Keyword arguments for the kernel launch."""
        return {"num_warps": self.num_warps, "num_stages": self.num_stages}


def _dtype_size(dtype) -> int:
    return torch.empty((), dtype=dtypes.as_dtype(dtype)).element_size()


def candidates(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, gpu=None, direction="forward"):
    """Every (r_on_chip, block_b, num_warps) with its resource counts and whether constraints 1-4 hold."""
    b = runtime.positive_int("batch", batch)
    nh = runtime.positive_int("num_heads", num_heads)
    dh = runtime.positive_int("head_dim", head_dim)
    fn = get_function(function)
    spec = hardware.spec(gpu)
    e = _dtype_size(dtype)
    d = runtime.dot_block(dh)
    g = slots(fn)
    out = []
    max_bb = max(16, runtime.next_power_of_2(b))
    r_bytes = int(g * d * d * e)  # R_all, the gate slots side by side
    for on_chip, bb, w in itertools.product((True, False), BLOCK_B, NUM_WARPS):
        if bb > max_bb:
            continue
        threads = 32 * w
        regs = math.ceil(tiles(fn, direction) * max(bb, MMA_ROWS) * d / threads) + OVERHEAD
        smem = r_bytes + g * bb * d * e  # R_all staged for the tensor cores + one layout-conversion buffer
        programs = nh * math.ceil(b / bb)
        per_sm = min(spec.registers_per_sm // (regs * threads), spec.smem_per_sm // max(smem, 1), 64 // w)
        reason = ""
        if smem > spec.smem_per_block:
            reason = f"R_all ({r_bytes // 1024} KB) and a {bb}-row buffer need {smem} B of shared memory > "
            reason += f"{spec.smem_per_block} per block"
        elif regs > spec.max_registers_per_thread:
            reason = f"{regs} registers per thread > {spec.max_registers_per_thread}"
        elif per_sm < 1:
            reason = f"a program needs {regs * threads} registers > {spec.registers_per_sm} per SM"
        score = math.inf
        if not reason:
            if not on_chip:
                per_sm = 1  # programs sharing an SM would share (and evict) its L1
            resident = spec.sm_count * per_sm  # programs that run at once
            rounds = math.ceil(programs / resident)
            on_sm = min(per_sm, math.ceil(programs / spec.sm_count))
            product = max(bb, MMA_ROWS) * 2 * fn.gates_r * d * d / RATE
            step = LATENCY + on_sm * (product + bb * d * specials(fn, direction) / SFU_RATE)
            score = rounds * (step + (0 if on_chip else r_bytes / L1_RATE))
        out.append(
            FusedTiling(bb, w, 1, on_chip, d, programs, regs, smem, r_bytes, max(per_sm, 0), score, not reason, reason)
        )
    return out


def fits(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, gpu=None, direction="both") -> bool:
    """Whether the fused kernels (``direction``: 'forward', 'backward' or 'both') fit on ``gpu``."""
    dirs = ("forward", "backward") if direction == "both" else (direction,)
    return all(any(c.fits for c in candidates(batch, num_heads, head_dim, function, dtype, gpu, d)) for d in dirs)


def fused_tiling(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, gpu=None, direction="forward"):
    """The best fitting :class:`FusedTiling`; ValueError saying why when none fits (and what to do instead)."""
    cands = candidates(batch, num_heads, head_dim, function, dtype, gpu, direction)
    ok = [c for c in cands if c.fits]
    if ok:
        return min(ok, key=lambda c: (c.score, c.registers_per_thread > ROOMY, c.num_warps, c.block_b))
    fn = get_function(function)
    spec = hardware.spec(gpu)
    need = slots(fn) * head_dim * head_dim * _dtype_size(dtype)
    why = "; ".join(dict.fromkeys(c.reason for c in cands if c.block_b == 16 and c.num_warps == NUM_WARPS[-1]))
    dt = dtypes.name(dtype)
    hint = "use backend='alternating' or more heads (a smaller head dim)"
    if _dtype_size(dtype) > 2:
        hint += ", or float16/bfloat16 (half the bytes)"
    raise ValueError(
        f"head dim {head_dim} needs {need / 1e6:.2g} MB of on-chip memory per head for R alone ({slots(fn)} gate "
        f"slots x {head_dim}^2 x {dt}), more than one {spec.name} SM holds for the fused {direction} kernel beside "
        f"its working tiles ({spec.smem_per_block // 1024} KB of shared memory per block: {why}); {hint}."
    )


def explain(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, gpu=None, direction="forward"):
    """The constraint problem as a table: every candidate, its registers, shared memory, score, and verdict."""
    spec = hardware.spec(gpu)
    lines = [
        f"fused {direction}, {function}, B={batch} NH={num_heads} DH={head_dim} {dtypes.name(dtype)} on {spec.name}",
        f"{'R':>8s} {'block_b':>7s} {'warps':>5s} {'progs':>5s} {'regs/thr':>8s} {'smem B':>7s} {'per SM':>6s} "
        f"{'score':>8s}  verdict",
    ]
    for c in candidates(batch, num_heads, head_dim, function, dtype, gpu, direction):
        score = f"{c.score:8.0f}" if c.fits else f"{'-':>8s}"
        lines.append(
            f"{'on chip' if c.r_on_chip else 'from L1':>8s} {c.block_b:7d} {c.num_warps:5d} {c.programs:5d} "
            f"{c.registers_per_thread:8d} {c.shared_bytes:7d} {c.programs_per_sm:6d} {score}  "
            + ("fits" if c.fits else c.reason)
        )
    try:
        best = fused_tiling(batch, num_heads, head_dim, function, dtype, gpu, direction)
        lines.append(
            f"chosen: R {'on chip' if best.r_on_chip else 're-read every step'}, "
            f"block_b={best.block_b}, num_warps={best.num_warps}, stages={best.num_stages}"
        )
    except ValueError as exc:
        lines.append(f"none fits: {exc}")
    return "\n".join(lines)
