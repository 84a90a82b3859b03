"""Does the ``fused`` kernel fit, and with which tile? A small integer constraint problem, as in FlashRNN's ConstrINT.

What you will learn: the fused RNN kernels keep a head's recurrent weights R *in registers* for the whole
sequence, so whether they can run at all is a question of on-chip capacity, answered before launch.

The unknowns, for one problem (B, NH, DH, function, dtype) on one GPU (a :class:`gpulab.hardware.GPUSpec`):

- ``block_b`` in {16, 32, 64, 128}: batch rows per program (``tl.dot`` needs at least 16 rows);
- ``num_warps`` in {4, 8, 16}: threads per program = 32 * num_warps.

The grid is NH * ceil(B / block_b) programs, each running the whole time loop for one head and batch tile.
Constraints (D = head dim padded to a power of two >= 16, G = gates, e = bytes per element):

1. registers of R:  G_r * D * D * e / 4  (32-bit registers, shared out over the program's threads)
2. live tiles:      ``TILES`` fp32 [block_b, D] tiles (gate accumulators, states, the prefetched Wx, for the
                    backward also dh, dc, dG): ``TILES * block_b * D`` registers
3. per thread:      (1 + 2) / (32 * num_warps) + ``OVERHEAD`` <= the GPU's registers per thread (255)
4. per SM:          a program's registers <= the register file (64 K), i.e. at least one program fits on an SM
5. shared memory:   the layout conversion of h (and dG) between the dot's output and input layouts:
                    (G_r + 1) * block_b * D * 4 bytes <= shared memory per block

Objective: the least estimated time per step. Programs run concurrently; a step costs a fixed latency (the chain
load -> dot -> cell -> store of one step) plus the tensor-core work of the programs sharing an SM; so the score is
``rounds * (LATENCY + programs_per_SM * block_b * G_r * D^2 / RATE)`` with rounds = ceil(programs / slots).
Ties prefer fewer warps. Nothing satisfies 1-5 when R alone is too big: then :func:`fused_tiling` raises a ValueError
that says how much on-chip memory a head needs and what to do (backend='alternating', more heads, 16-bit dtype).

``stages`` (Wx prefetch depth) is fixed at 1: the kernel loads step t+1's Wx while computing step t, into registers.
Everything is testable on CPU for any GPU in :data:`gpulab.hardware.SPECS`.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from gpulab import hardware, runtime
from gpulab.rnn.functions import get_function

__all__ = ["FusedTiling", "candidates", "fused_tiling", "fits", "explain", "BLOCK_B", "NUM_WARPS"]

BLOCK_B = (16, 32, 64, 128)
NUM_WARPS = (4, 8, 16)
OVERHEAD = 40  # registers per thread for addresses, loop counters, masks, temporaries
LATENCY = 400.0  # ns, one step's dependent chain at small tiles (measured order of magnitude on the H100)
RATE = 4.0e3  # dense FLOP per ns per SM for mma.sync-sized tiles (about 1/2 of peak/SM on an H100)


def tiles(function, direction: str) -> int:
    """Live fp32 [block_b, D] tiles of the forward or backward kernel for ``function`` (constraint 2)."""
    fn = get_function(function)
    if direction == "forward":  # accumulators (G_r), states (S), Wx current + next (2 G_w, 16-bit halves them)
        return fn.gates_r + fn.states + 2 * fn.gates_w + 1
    if direction == "backward":  # dG (G_b), dh, dc, saved gates (G_b), c/h loads, dh_rec accumulator, prefetch
        return 2 * fn.gates_b + 2 * fn.states + 4
    raise ValueError(f"direction={direction!r}; use 'forward' or 'backward'.")


@dataclasses.dataclass(frozen=True)
class FusedTiling:
    """One candidate (or the choice): tile, warps, what it needs and whether it fits (``reason`` says why not)."""

    block_b: int
    num_warps: int
    num_stages: int
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
    for bb in BLOCK_B:
        if bb > max_bb:
            continue
        for w in NUM_WARPS:
            threads = 32 * w
            live = tiles(fn, direction) * bb * d
            regs = math.ceil((r_regs + live) / threads) + OVERHEAD
            smem = (fn.gates_r + 1) * bb * d * 4
            programs = nh * math.ceil(b / bb)
            per_sm = min(spec.registers_per_sm // (regs * threads), spec.smem_per_sm // max(smem, 1), 64 // w)
            reason = ""
            if regs > spec.max_registers_per_thread:
                reason = f"{regs} registers per thread > {spec.max_registers_per_thread}"
            elif per_sm < 1:
                reason = f"a program needs {regs * threads} registers > {spec.registers_per_sm} per SM"
            elif smem > spec.smem_per_block:
                reason = f"{smem} B of shared memory > {spec.smem_per_block} per block"
            score = math.inf
            if not reason:
                slots = spec.sm_count * per_sm
                rounds = math.ceil(programs / slots)
                on_sm = min(per_sm, math.ceil(programs / spec.sm_count))
                score = rounds * (LATENCY + on_sm * bb * 2 * fn.gates_r * d * d / RATE)
            out.append(
                FusedTiling(
                    bb,
                    w,
                    1,
                    d,
                    programs,
                    regs,
                    smem,
                    int(fn.gates_r * d * d * e),
                    max(per_sm, 0),
                    score,
                    not reason,
                    reason,
                )  # fmt: skip
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
        return min(ok, key=lambda c: (c.score, c.num_warps, c.block_b))
    fn = get_function(function)
    spec = hardware.spec(gpu)
    need = cands[0].r_bytes
    chip = spec.registers_per_sm * 4
    dt = str(runtime.as_dtype(dtype)).replace("torch.", "")
    hint = "use backend='alternating' or more heads (a smaller head dim)"
    if _dtype_size(dtype) > 2:
        hint += ", or float16/bfloat16 (half the bytes)"
    raise ValueError(
        f"head dim {head_dim} needs {need / 1e6:.2g} MB of on-chip memory per head for R alone ({fn.gates_r} gates x "
        f"{cands[0].block_d}^2 x {dt}), more than the {chip // 1024} KB register file of one {spec.name} SM leaves "
        f"room for in the fused {direction} kernel ({cands[-1].reason}); {hint}."
    )


def explain(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, gpu=None, direction="forward"):
    """The constraint problem as a table: every candidate, its registers, shared memory, score, and verdict."""
    spec = hardware.spec(gpu)
    lines = [
        f"fused {direction}, {function}, B={batch} NH={num_heads} DH={head_dim} "
        f"{str(runtime.as_dtype(dtype)).replace('torch.', '')} on {spec.name}",
        f"{'block_b':>7s} {'warps':>5s} {'progs':>5s} {'regs/thr':>8s} {'smem B':>7s} {'per SM':>6s} "
        f"{'score':>8s}  verdict",
    ]
    for c in candidates(batch, num_heads, head_dim, function, dtype, gpu, direction):
        score = f"{c.score:8.0f}" if c.fits else f"{'-':>8s}"
        lines.append(
            f"{c.block_b:7d} {c.num_warps:5d} {c.programs:5d} {c.registers_per_thread:8d} {c.shared_bytes:7d} "
            f"{c.programs_per_sm:6d} {score}  {'fits' if c.fits else c.reason}"
        )
    try:
        best = fused_tiling(batch, num_heads, head_dim, function, dtype, gpu, direction)
        lines.append(f"chosen: block_b={best.block_b}, num_warps={best.num_warps}, stages={best.num_stages}")
    except ValueError as exc:
        lines.append(f"none fits: {exc}")
    return "\n".join(lines)
