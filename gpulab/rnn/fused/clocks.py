"""Clock stamps inside a kernel: where a step of the split kernels spends its time.

What you will learn: a profiler times whole kernels; a persistent kernel's step (a few microseconds, a thousand in
one launch) needs its own clocks. A stamp is the SM's cycle counter (``%clock64``) read *after* a value has arrived:
the read is predicated on the value, so the instruction waits for the register (a load's data, a product's result)
instead of being scheduled before it. One thread's stamp (element [0, 0] of the tile) is stored per program and step
into a small int64 buffer [programs, T + 1, 8]; row T holds the cycle counter and the global timer (ns) at the start
and the end of each program, which convert cycles to ns. Behind a constexpr flag (``TIMING``), so the kernel that
runs without it is unchanged. GPU only (inline PTX): the interpreter has no clock.

The stamps of a step (each a stamp after the named value arrived):

0. the step's input projections (loaded one step ahead), 1. h_{t-1} from the other programs, 2. the recurrent
product, 3. the cell (pointwise), 4. the stores issued, 5. the barrier passed (= 4 where the load is the barrier,
see :mod:`.exchange`). The backward (:data:`BACKWARD_PARTS`): 1. the shares of dh, 2. the cell's backward, 3. the
products, 4. their stores, 5. the barrier.

:func:`step_parts` turns a buffer into the mean ns per step of each part.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import runtime

__all__ = [
    "clock_after",
    "globaltimer_after",
    "keep",
    "clock_buffer",
    "step_parts",
    "PARTS",
    "BACKWARD_PARTS",
    "CLOCK_AFTER",
    "GLOBALTIMER_AFTER",
]

PARTS = ("inputs", "exchange", "product", "pointwise", "stores", "barrier")
"""The forward's parts of a step, stamp k-1 to stamp k (``inputs``: the previous step's stamp 5 to this step's
stamp 0)."""
BACKWARD_PARTS = ("inputs", "exchange", "pointwise", "product", "stores", "barrier")
"""The split backward's parts (its steps run from T-1 down): the shares of dh gathered, the cell's backward, the
products that make this program's shares of dh_{t-1}, their stores, the barrier."""


CLOCK_AFTER = tl.constexpr(
    "{ .reg .pred p; setp.ne.b32 p, $1, 0x7fc00001; @p mov.u64 $0, %clock64; @!p mov.u64 $0, 0; }"
)
"""The stamp's PTX: the register read is predicated on ``$1`` (the value waited for), so it issues once ``$1`` is
there. Shared with the Gluon kernels' stamps (:mod:`gpulab.rnn.fused.gluon_ops`)."""
GLOBALTIMER_AFTER = tl.constexpr(
    "{ .reg .pred p; setp.ne.b32 p, $1, 0x7fc00001; @p mov.u64 $0, %globaltimer; @!p mov.u64 $0, 0; }"
)
"""The same for ``%globaltimer`` (ns)."""


@triton.jit
def clock_after(dep):
    """``%clock64`` read once ``dep`` (a 32-bit tile) is in registers: int64, the shape of ``dep``."""
    return tl.inline_asm_elementwise(CLOCK_AFTER, "=l,r", [dep], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def globaltimer_after(dep):
    """``%globaltimer`` (ns) read once ``dep`` (a 32-bit tile) is in registers: int64, the shape of ``dep``."""
    return tl.inline_asm_elementwise(GLOBALTIMER_AFTER, "=l,r", [dep], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def keep(ptr, stamp, ROWS: tl.constexpr, COLS: tl.constexpr):
    """Store element [0, 0] of ``stamp`` [ROWS, COLS] at ``ptr`` (the other threads store nothing)."""
    r = tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, COLS)[None, :]
    tl.store(ptr + r * 0 + c * 0, stamp, mask=(r == 0) & (c == 0))


def clock_buffer(programs: int, steps: int, device) -> torch.Tensor:
    """A zeroed stamp buffer for a launch of ``programs`` programs over ``steps`` steps: [programs, steps + 1, 8]."""
    programs, steps = runtime.positive_int("programs", programs), runtime.positive_int("steps", steps)
    return torch.zeros((programs, steps + 1, 8), dtype=torch.int64, device=device)


def step_parts(stamps: torch.Tensor, skip: int = 8, backward: bool = False) -> dict:
    """Mean ns per step of each part (:data:`PARTS`, or :data:`BACKWARD_PARTS` for the reverse-time kernel, whose step t
    follows step t + 1) over programs and steps (the first and last ``skip`` steps left out), ``step_ns`` (stamp 0 to
    the next step's stamp 0), ``cycles_per_ns`` (the SM clock the launch ran at) and ``programs``. The mean over
    programs: every program waits for the slowest, so one program's wait is the others' work."""
    if not isinstance(stamps, torch.Tensor) or stamps.dim() != 3 or stamps.shape[2] != 8:
        raise TypeError(
            f"stamps must be a clock_buffer tensor [programs, T + 1, 8] filled by a kernel, got "
            f"{type(stamps).__name__} {list(getattr(stamps, 'shape', []))}."
        )
    skip = runtime.nonnegative_int("skip", skip)
    s = stamps.detach().to("cpu", torch.float64)
    steps = s.shape[1] - 1
    cal = s[:, steps]
    cycles_per_ns = float(((cal[:, 2] - cal[:, 0]) / (cal[:, 3] - cal[:, 1])).mean())
    lo, hi = skip, steps - skip - 1
    if hi <= lo:
        raise ValueError(f"stamps of {steps} steps: need more than {2 * skip + 1} to leave {skip} out at each end.")
    st = s[:, lo : hi + 1, :6]
    if backward:  # in the order the steps ran
        st = st.flip(1)
    names = BACKWARD_PARTS if backward else PARTS
    parts = {"inputs": (st[:, 1:, 0] - st[:, :-1, 5]).mean()}
    for k, name in enumerate(names[1:], start=1):
        parts[name] = (st[:, :, k] - st[:, :, k - 1]).mean()
    out = {name: float(v) / cycles_per_ns for name, v in parts.items()}
    out["step_ns"] = float((st[:, 1:, 0] - st[:, :-1, 0]).mean()) / cycles_per_ns
    out["cycles_per_ns"] = cycles_per_ns
    out["programs"] = int(s.shape[0])
    return out
