"""Does the ``fused`` kernel fit, and with which tile? A small integer constraint problem, as in FlashRNN's ConstrINT.

What you will learn: the fused RNN kernels keep a head's recurrent weights R *in registers* for the whole
sequence, so whether they can run at all is a question of on-chip capacity, answered before launch.

The unknowns, for one problem (B, NH, DH, function, dtype) on one GPU (a :class:`gpulab.hardware.GPUSpec`):

- ``block_b`` in {16, 32, 64, 128}: batch rows per program (``tl.dot`` needs at least 16 rows);
- ``num_warps`` in {4, 8, 16}: threads per program = 32 * num_warps;
- ``r_on_chip`` in {True, False}: R held in registers for the whole sequence, or re-read at every step (it then
  stays in the SM's L1 cache, if it fits there: the fallback for large head dims, slower by the L1 traffic).

The grid is NH * ceil(B / block_b) programs, each running the whole time loop for one head and batch tile.
Constraints (D = head dim padded to a power of two >= 16, G = gates, e = bytes per element):

1. registers of R:  G_r * D * D * e / 4  (32-bit registers, shared out over the program's threads), or, with
                    r_on_chip False, G_r * D * D * e bytes <= the L1 left beside shared memory
2. live tiles:      ``TILES`` fp32 [block_b, D] tiles (gate accumulators, states, the prefetched Wx, for the
                    backward also dh, dc, dG): ``TILES * block_b * D`` registers
3. per thread:      (1 + 2) / (32 * num_warps) + ``OVERHEAD`` <= the GPU's registers per thread (255)
4. per SM:          a program's registers <= the register file (64 K), i.e. at least one program fits on an SM
5. shared memory:   the layout conversion of h (and dG) between the dot's output and input layouts:
                    (G_r + 1) * block_b * D * 4 bytes <= shared memory per block

Objective: the least estimated time per step. Programs run concurrently; a step costs a fixed latency (the chain
load -> dot -> cell -> store of one step) plus the tensor-core work of the programs sharing an SM; so the score is
``rounds * (LATENCY + programs_per_SM * block_b * G_r * D^2 / RATE)`` with rounds = ceil(programs / slots).
Among equal scores, the fewest warps that leave a thread at most ``ROOMY`` registers (room for the compiler to
issue the prefetch loads early: measured faster on the H100), else the fewest warps.
Nothing satisfies 1-5 when R alone is too big: then :func:`fused_tiling` raises a ValueError that says how much
on-chip memory a head needs and what to do (backend='alternating', more heads, 16-bit dtype).

``stages`` (Wx prefetch depth) is fixed at 1: the kernel loads step t+1's Wx while computing step t, into registers.
Everything is testable on CPU for any GPU in :data:`gpulab.hardware.SPECS`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import torch

from gpulab import hardware, runtime
from gpulab.rnn.functions import get_function

__all__ = ["FusedTiling", "candidates", "fused_tiling", "fits", "explain", "BLOCK_B", "NUM_WARPS"]

BLOCK_B = (16, 32, 64, 128)
NUM_WARPS = (4, 8, 16)
OVERHEAD = 24  # registers per thread for addresses, loop counters, masks, temporaries
ROOMY = 128
L1_RATE = 200.0  # bytes per ns per SM from L1 (about 128 B/clock): the cost of re-reading R every step
LATENCY = 400.0  # ns, one step's dependent chain at small tiles (measured order of magnitude on the H100)
RATE = 4.0e3  # dense FLOP per ns per SM for mma.sync-sized tiles (about 1/2 of peak/SM on an H100)


def tiles(function, direction: str) -> int:
    """Live fp32 [block_b, D] tiles of the forward or backward kernel for ``function`` (constraint 2)."""
    fn = get_function(function)
    if direction == "forward":  # gate accumulators (G_r), states (S), prefetched Wx (G_w)
        return fn.gates_r + fn.states + fn.gates_w
    if direction == "backward":  # dG and the saved gates (G_b each), dh, dc, their prefetched loads, dh accumulator
        return 2 * fn.gates_b + 2 * fn.states + 4
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
    return torch.empty((), dtype=runtime.as_dtype(dtype)).element_size()


def candidates(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, gpu=None, direction="forward"):
    """Every (block_b, num_warps) with its resource counts and whether constraints 1-5 hold."""
    b = runtime.positive_int("batch", batch)
    nh = runtime.positive_int("num_heads", num_heads)
    dh = runtime.positive_int("head_dim", head_dim)
    fn = get_function(function)
    spec = hardware.spec(gpu)
    e = _dtype_size(dtype)
    d = runtime.dot_block(dh)
    r_regs = fn.gates_r * d * d * e / 4
    out = []
    max_bb = max(16, runtime.next_power_of_2(b))
    r_bytes = int(fn.gates_r * d * d * e)
    for on_chip, bb, w in itertools.product((True, False), BLOCK_B, NUM_WARPS):
        if bb > max_bb:
            continue
        threads = 32 * w
        live = tiles(fn, direction) * bb * d + (r_regs if on_chip else 0)
        regs = math.ceil(live / threads) + OVERHEAD
        smem = (fn.gates_r + 1) * bb * d * 4
        programs = nh * math.ceil(b / bb)
        per_sm = min(spec.registers_per_sm // (regs * threads), spec.smem_per_sm // max(smem, 1), 64 // w)
        reason = ""
        if not on_chip and r_bytes > spec.l1_per_sm - smem:
            reason = f"R ({r_bytes // 1024} KB) does not fit the {spec.l1_per_sm // 1024} KB L1 either"
        elif regs > spec.max_registers_per_thread:
            reason = f"{regs} registers per thread > {spec.max_registers_per_thread}"
        elif per_sm < 1:
            reason = f"a program needs {regs * threads} registers > {spec.registers_per_sm} per SM"
        elif smem > spec.smem_per_block:
            reason = f"{smem} B of shared memory > {spec.smem_per_block} per block"
        score = math.inf
        if not reason:
            if not on_chip:
                per_sm = 1  # programs sharing an SM would share (and evict) its L1
            slots = spec.sm_count * per_sm
            rounds = math.ceil(programs / slots)
            on_sm = min(per_sm, math.ceil(programs / spec.sm_count))
            step = LATENCY + on_sm * bb * 2 * fn.gates_r * d * d / RATE
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
    need = fn.gates_r * head_dim * head_dim * _dtype_size(dtype)
    chip = spec.registers_per_sm * 4
    why = "; ".join(dict.fromkeys(c.reason for c in cands if c.block_b == 16 and c.num_warps == NUM_WARPS[-1]))
    dt = str(runtime.as_dtype(dtype)).replace("torch.", "")
    hint = "use backend='alternating' or more heads (a smaller head dim)"
    if _dtype_size(dtype) > 2:
        hint += ", or float16/bfloat16 (half the bytes)"
    raise ValueError(
        f"head dim {head_dim} needs {need / 1e6:.2g} MB of on-chip memory per head for R alone ({fn.gates_r} gates x "
        f"{head_dim}^2 x {dt}), more than one {spec.name} SM holds for the fused {direction} kernel beside "
        f"its working tiles ({chip // 1024} KB of registers, {spec.l1_per_sm // 1024} KB of L1: {why}); {hint}."
    )


def explain(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, gpu=None, direction="forward"):
    """The constraint problem as a table: every candidate, its registers, shared memory, score, and verdict."""
    spec = hardware.spec(gpu)
    lines = [
        f"fused {direction}, {function}, B={batch} NH={num_heads} DH={head_dim} "
        f"{str(runtime.as_dtype(dtype)).replace('torch.', '')} on {spec.name}",
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
            f"chosen: R {'in registers' if best.r_on_chip else 're-read from L1 every step'}, "
            f"block_b={best.block_b}, num_warps={best.num_warps}, stages={best.num_stages}"
        )
    except ValueError as exc:
        lines.append(f"none fits: {exc}")
    return "\n".join(lines)
