"""One head on several SMs: how many programs share a head, and with which tiles.

What you will learn: when R of one head does not fit one SM (:mod:`gpulab.rnn.fused.tiling` says so: one head of 768
needs 4.7 MB for an LSTM in bf16, an SM holds 227 KB), the head can still stay on chip, spread over P programs on
P SMs. Program p owns ``block_u`` hidden units of the head, *all gates* of them, and so the slice of R that
produces them: R_p^T [DH, G * block_u], held on chip for the whole sequence. Every step each program needs the
whole h_{t-1} (every unit feeds every gate) but produces only its units of h_t, so the programs exchange h through
L2 and wait for each other at a grid barrier once per step (:mod:`gpulab.rnn.fused.split`).

The unknowns (beside those of the one-SM chooser): ``block_u`` in {8, 16, 32, 64} units per program (so
P = ceil(DH / block_u)); ``block_k``, the width of the chunks R_p^T is held in (at most :data:`MAX_CHUNKS` chunks,
each a power of two >= 16, so a head dim like 768 = 3 x 256 wastes nothing); ``block_b`` and ``num_warps``.
Constraints (e bytes per element, G gate slots, S states):

1. shared memory: the R slice G * block_u * block_k * chunks * e, plus the h chunks and the gate tile converted to
   the tensor cores' layout, <= shared memory per block;
2. registers: the live tiles per thread <= the GPU's registers per thread;
3. residency: NH * P * ceil(B / block_b) programs all resident at once (programs_per_SM * SMs), since each waits
   for all others every step; the launch is cooperative, which refuses rather than deadlocks.

Objective, the estimated time of one step (ns): the barrier (a fixed round trip through L2 plus a little per arriving
program) + reading h_{t-1} from L2 (one round trip, plus its bytes per SM and for all programs together against
L2's bandwidth) + streaming the R slice from shared memory into the tensor cores + the product. Fewer, fatter
programs read less h in total but each streams more R; lesson 7's records sweep block_u on the H100 against this
estimate.

Whether a problem runs on one SM per head or split is :func:`gpulab.rnn.fused.plan.choose`'s decision (one SM
whenever that fits: no barrier at all).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import torch

from gpulab import dtypes, hardware, runtime
from gpulab.rnn.functions import get_function
from gpulab.rnn.fused import tiling

__all__ = [
    "SplitTiling",
    "split_candidates",
    "split_tiling",
    "explain_split",
    "BLOCK_U",
    "NUM_WARPS",
    "MAX_CHUNKS",
    "MEASURED",
    "MEASURED_EXCHANGE",
]

BLOCK_U = (8, 16, 32, 64)
BLOCK_B = (16, 32, 64, 128)  # batch rows per program (the one-SM kernels also take 8: .tiling; the split ones here
# are measured from 16 rows, where each program's product, not its activations, is the step's cost)
NUM_WARPS = (2, 4, 8)  # small tiles: a split program holds [block_b, G * block_u] gates, a few K of values
MAX_CHUNKS = 4  # R_p^T is held as at most this many [block_k, G * block_u] tiles (the kernel names each one)
# Calibrated on the H100 (lesson 7's split records: the same kernel timed with and without its barrier, B = 16)
BARRIER_NS = 500.0  # one grid barrier: the release of h_t, an atomic to L2, the spin that sees the last arrival
ARRIVAL_NS = 1.0  # each arriving program's atomic at one L2 address (too small to see up to 128 programs)
H_LATENCY_NS = 600.0  # the round trip of the h_{t-1} read through L2 that every step starts with
L2_SM_RATE = 110.0  # bytes per ns one SM reads from L2 (about 64 B/clock)
L2_RATE = 5500.0  # bytes per ns all SMs together read from L2
SMEM_RATE = 220.0  # bytes per ns one SM streams from shared memory (128 B/clock)
MEASURED = {
    ("forward", 192): (None, 4),
    ("forward", 512): (None, 4),
    ("forward", 1024): (None, 4),
    ("backward", 192): (16, 4),
    ("backward", 256): (16, 8),
    ("backward", 512): (16, 8),
    ("backward", 768): (16, 8),
}
"""(direction, head dim) -> (block_u or None, warps): the tiling that won on the H100 where the estimate ranks
otherwise (the estimate does not model warps, and it prices the backward's extra programs above what they cost); from
lesson 7's ``split``, ``candidates`` and ``partials`` records. The chooser takes the best-scored fitting candidate of
that block_u and warps, on Hopper GPUs only. The measurements: ``notes/rnn-split.md``."""

MEASURED_EXCHANGE: dict[tuple[str, str, int], tuple[str, int, int]] = {("forward", "lstm", 768): ("hinted", 8, 4)}
"""(direction, function, head dim) -> (exchange, block_u, warps): where a split kernel's records show another exchange
than the counter barrier faster *and* its GPU tests passed, on Hopper GPUs, 16-bit dtypes, one head and one batch
tile (B <= 16): the LSTM forward at 768 with the hinted words (:mod:`gpulab.rnn.fused.exchange`) in 8 units and 4
warps (with 2 warps the words in flight spill). The backward keeps the barrier. ``tests/rnn/fused/test_rnn_exchange.py``
holds every entry to the records; the runs behind it: ``notes/rnn-split.md``."""


@dataclasses.dataclass(frozen=True)
class SplitTiling:
    """One candidate (or the choice) for a head split over ``split`` programs; ``reason`` says why it does not fit."""

    block_b: int
    block_u: int
    block_k: int
    chunks: int
    num_warps: int
    split: int  # P: programs per head (and batch tile)
    programs: int  # NH * P * batch tiles, all resident at once
    registers_per_thread: int
    shared_bytes: int
    programs_per_sm: int
    score: float  # estimated ns per step
    fits: bool
    reason: str = ""
    exchange: str = "barrier"  # how the programs exchange their tile each step (gpulab.rnn.fused.exchange.EXCHANGES)

    def launch(self) -> dict:
        """Keyword arguments for the (cooperative) kernel launch."""
        return {"num_warps": self.num_warps, "num_stages": 1}


def chunking(head_dim: int) -> tuple[int, int]:
    """``(block_k, chunks)``: the fewest power-of-two chunks (>= 16 wide, at most :data:`MAX_CHUNKS`) that cover
    ``head_dim`` with the least padding, then the fewest chunks; e.g. 768 -> (256, 3), 300 -> (128, 3),
    1024 -> (1024, 1), 256 -> (256, 1)."""
    dh = runtime.positive_int("head_dim", head_dim)
    best = None
    for k in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096):
        n = math.ceil(dh / k)
        if n <= MAX_CHUNKS and (best is None or k * n <= best[0] * best[1]):
            best = (k, n)
    if best is None:
        k = runtime.next_power_of_2(math.ceil(dh / MAX_CHUNKS))
        best = (k, math.ceil(dh / k))
    return best


def split_candidates(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, gpu=None, direction="forward"):
    """Every (block_u, block_b, num_warps) of a split head with its resources, estimate and verdict.

    ``direction`` 'backward': the reverse-time kernel (:mod:`gpulab.rnn.fused.split_backward`) holds the
    same bytes of R (the rows of its units), multiplies [block_b, G * block_u] by [G * block_u, block_k] per chunk,
    and exchanges partial sums of dh (in the compute dtype): each program writes block_b x DH values and reads as
    many (DH / block_u shares of its block_u units), all in flight at once; block_u must be at least 16 (a
    product's depth for elman)."""
    if direction not in ("forward", "backward"):
        raise ValueError(f"direction={direction!r}; use 'forward' or 'backward'.")
    b = runtime.positive_int("batch", batch)
    nh = runtime.positive_int("num_heads", num_heads)
    dh = runtime.positive_int("head_dim", head_dim)
    fn = get_function(function)
    spec = hardware.spec(gpu)
    e = torch.empty((), dtype=dtypes.as_dtype(dtype)).element_size()
    g = tiling.slots(fn)
    block_k, chunks = chunking(dh)
    max_bb = max(16, runtime.next_power_of_2(b))
    out = []
    for bu, bb, w in itertools.product(BLOCK_U, BLOCK_B, NUM_WARPS):
        if bb > max_bb or g * bu < 16 or bu > runtime.next_power_of_2(dh):
            continue
        if direction == "backward" and bu < 16:
            continue
        split = math.ceil(dh / bu)
        threads = 32 * w
        r_bytes = g * bu * block_k * chunks * e
        if direction == "forward":  # gate tiles, states, one chunk of h (16-bit: 2 per register)
            live = (6 * g * bu + 2 * fn.states * bu) * bb + bb * block_k * e // 4
            smem = r_bytes + bb * block_k * chunks * e + g * bb * bu * e  # R, h's chunks, the gate tile
            x_bytes = bb * block_k * chunks * e  # h_{t-1}, read
        else:  # gate tiles, states, the split shares of its units in flight, one chunk of its own share (fp32)
            live = (4 * g * bu + 2 * fn.states * bu) * bb + bb * bu * split * e // 4 + bb * block_k
            smem = r_bytes + bb * block_k * 4 + g * bb * bu * e  # R, a share's chunk for its store, dG's operand
            x_bytes = 2 * bb * block_k * chunks * e  # partial sums of dh, written and read
        regs = math.ceil(live / threads) + tiling.OVERHEAD
        programs = nh * split * math.ceil(b / bb)
        per_sm = min(spec.registers_per_sm // (regs * threads), spec.smem_per_sm // smem, 64 // w)
        reason = ""
        if smem > spec.smem_per_block:
            reason = f"the R slice ({r_bytes // 1024} KB) and buffers need {smem} B > {spec.smem_per_block} per block"
        elif regs > spec.max_registers_per_thread:
            reason = f"{regs} registers per thread > {spec.max_registers_per_thread}"
        elif per_sm < 1:
            reason = f"a program needs {regs * threads} registers > {spec.registers_per_sm} per SM"
        elif programs > per_sm * spec.sm_count:
            reason = f"{programs} programs > {per_sm * spec.sm_count} resident at once ({per_sm} per SM)"
        score = math.inf
        if not reason:
            on_sm = min(per_sm, math.ceil(programs / spec.sm_count))
            h_read = max(on_sm * x_bytes / L2_SM_RATE, programs * x_bytes / L2_RATE)
            product = on_sm * (r_bytes / SMEM_RATE + bb * 2 * fn.gates_r * bu * block_k * chunks / tiling.RATE)
            score = BARRIER_NS + ARRIVAL_NS * programs + H_LATENCY_NS + h_read + product
        out.append(SplitTiling(bb, bu, block_k, chunks, w, split, programs, regs, smem, max(per_sm, 0), score,
                               not reason, reason))  # fmt: skip
    return out


def split_tiling(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, gpu=None, direction="forward"):
    """The best fitting :class:`SplitTiling` (on Hopper, the :data:`MEASURED` block_u and warps where listed; then
    the least estimated step time, fewer programs, fewer warps), or a
    ValueError saying why none fits and what to do instead. In the interpreter (no ``gpu`` named) the fewest
    programs win instead: there every program is a Python loop run one after another."""
    cands = split_candidates(batch, num_heads, head_dim, function, dtype, gpu, direction)
    ok = [c for c in cands if c.fits]
    spec = hardware.spec(gpu)
    if ok:
        if runtime.INTERPRET and gpu is None:
            return min(ok, key=lambda c: (c.programs, c.num_warps, c.score))
        hopper = spec.compute_capability[0] == 9
        key = (direction, get_function(function).name, head_dim)
        xch = MEASURED_EXCHANGE.get(key) if hopper and batch <= 16 and num_heads == 1 else None
        if xch is not None and torch.empty((), dtype=dtypes.as_dtype(dtype)).element_size() == 2:
            hit = [c for c in ok if (c.block_u, c.num_warps, c.block_b) == (xch[1], xch[2], 16)]
            if hit:
                return dataclasses.replace(min(hit, key=lambda c: c.score), exchange=xch[0])
        block_u, warps = MEASURED.get((direction, head_dim), (None, None)) if hopper else (None, None)

        def measured(c):
            return c.num_warps == warps and block_u in (None, c.block_u)

        return min(ok, key=lambda c: (not measured(c), c.score, c.programs, c.num_warps, c.block_b))
    why = "; ".join(dict.fromkeys(c.reason for c in cands if c.block_b == 16)) or "no candidate"
    raise ValueError(
        f"the fused {direction} kernel cannot hold head dim {head_dim} ({num_heads} head(s), batch {batch}, "
        f"{function}) on {spec.name} even split over several SMs ({why}); use backend='alternating' (R read from "
        "memory every step), fewer heads per call or a smaller batch per call, or a 16-bit dtype."
    )


def explain_split(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, gpu=None) -> str:
    """The split candidates as a table: tiles, programs, registers, shared memory, estimated step, verdict."""
    spec = hardware.spec(gpu)
    lines = [
        f"split head, {function}, B={batch} NH={num_heads} DH={head_dim} {dtypes.name(dtype)} on {spec.name}",
        f"{'block_u':>7s} {'P':>4s} {'block_b':>7s} {'warps':>5s} {'progs':>5s} {'regs':>5s} {'smem KB':>7s} "
        f"{'ns/step':>8s}  verdict",
    ]
    for c in split_candidates(batch, num_heads, head_dim, function, dtype, spec):
        score = f"{c.score:8.0f}" if c.fits else f"{'-':>8s}"
        lines.append(
            f"{c.block_u:7d} {c.split:4d} {c.block_b:7d} {c.num_warps:5d} {c.programs:5d} {c.registers_per_thread:5d} "
            f"{c.shared_bytes / 1024:7.1f} {score}  " + ("fits" if c.fits else c.reason)
        )
    return "\n".join(lines)
