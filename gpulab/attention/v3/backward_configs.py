"""Version 3's backward: its launch configuration (the numbered steps, stages, register budgets) and the measured
default per head dim.

What you will learn: which knobs the backward kernel (:mod:`gpulab.attention.v3.backward`) has and which setting the
H100 records chose. The kernel reads a :class:`V3BackwardConfig` only through :func:`constexprs` (compile-time
arguments) and :attr:`V3BackwardConfig.maxnreg` (the register cap its warp specialization needs).
"""

from __future__ import annotations

import dataclasses

from gpulab import runtime

__all__ = ["STEPS", "BLOCK_M", "KEYS_PER_WARPGROUP", "V3BackwardConfig", "MEASURED", "backward_config", "constexprs"]

STEPS = {
    1: "one warpgroup, TMA ring refilled by the same warps",
    2: "+ producer warp, two consumer warpgroups",
    3: "+ dS shared by the consumers: dQ added once per 128 keys",
    4: "+ dQ one block late (consumers a block apart) and the next block's S^T, dP^T under the additions",
    5: "step 3 with dQ through shared memory: a writer warp does the atomic additions, the consumers none",
    6: "step 5 with each consumer's own dS and dS K over its 64 keys (no meeting per block), the writer sums both",
    7: "step 5 on a persistent grid: one program per SM walks the tiles, the next K/V loaded under dK/dV's stores",
}
"""The backward's numbered steps (``V3BackwardConfig.step``)."""

BLOCK_M = 64
"""Query rows per block of the inner loop (one wgmma M of 64 in the transposed products' N)."""
KEYS_PER_WARPGROUP = 64
"""Key rows each consumer warpgroup owns (its dK and dV accumulators: [64, d] fp32 each)."""


@dataclasses.dataclass(frozen=True)
class V3BackwardConfig:
    """The backward's launch: ``step`` (1-7, :data:`STEPS`), ``stages`` Q/dO buffers in the ring; steps 2-6's
    register budgets ``consumer_regs`` (each of the two consumer warpgroups), ``producer_regs`` and steps 5-7's
    ``writer_regs`` (``setmaxnreg``; the producer and the writer share one warpgroup, so its budget is the larger)."""

    step: int = 3
    stages: int = 2
    consumer_regs: int = 240
    producer_regs: int = 24
    writer_regs: int = 24

    def __post_init__(self):
        runtime.one_of("step", self.step, tuple(STEPS))
        runtime.integer("stages", self.stages, minimum=2, maximum=4)
        for name in ("consumer_regs", "producer_regs", "writer_regs"):
            value = runtime.integer(name, getattr(self, name), minimum=24, maximum=256)
            if value % 8:
                raise ValueError(f"{name}={value} must be a multiple of 8 (setmaxnreg's granularity); e.g. 240.")

    @property
    def consumers(self) -> int:
        """Consumer warpgroups per program (step 1: the program's only warpgroup)."""
        return 1 if self.step == 1 else 2

    @property
    def persistent(self) -> bool:
        """Step 7: ``min(tiles, SMs)`` programs, each taking tiles in turn."""
        return self.step == 7

    @property
    def block_n(self) -> int:
        """Keys per program."""
        return KEYS_PER_WARPGROUP * self.consumers

    @property
    def maxnreg(self) -> int | None:
        """Steps 2-7's kernel-wide register cap (the three warpgroups' budgets averaged; steps 5-7's producer and
        writer warps share the third); step 1: None (no cap)."""
        if self.step == 1:
            return None
        other = max(self.producer_regs, self.writer_regs) if self.step >= 5 else self.producer_regs
        return (2 * self.consumer_regs + other) // 3 // 8 * 8


MEASURED = {64: V3BackwardConfig(step=7), 128: V3BackwardConfig(step=5)}
"""The default launch per head dim (:func:`backward_config`): the step with the highest median speed relative to
cuDNN on the newest H100 run that timed several steps on the whole grid (``benchmarks/04_attention/v3/``, ``bwd``
run f: head dim 64 step 7 0.863x vs step 5 0.853x, a margin within the N = 1024 problems' spread; head dim 128 step
5 0.810x vs step 7 0.774x, step 7 slower on every long problem there). Two stages (three measured the same in run
e)."""


def backward_config(head_dim: int, is_causal: bool = False, step: int | None = None) -> V3BackwardConfig:
    """The backward's launch for ``head_dim`` (64 or 128) and ``is_causal``: :data:`MEASURED` unless ``step`` asks
    for another step of the ladder (then with two stages and the default register budgets)."""
    runtime.one_of("head_dim", head_dim, (64, 128))
    runtime.strict_bool("is_causal", is_causal)
    if step is None:
        return MEASURED[head_dim]
    return V3BackwardConfig(step=runtime.one_of("step", step, tuple(STEPS)))


def constexprs(head_dim: int, is_causal: bool, cfg: V3BackwardConfig) -> dict:
    """The kernel's compile-time arguments."""
    if not isinstance(cfg, V3BackwardConfig):
        raise TypeError(f"cfg must be a V3BackwardConfig, got {type(cfg).__name__}; e.g. backward_config(64).")
    return dict(HEAD_DIM=head_dim, STAGES=cfg.stages, IS_CAUSAL=is_causal, STEP=cfg.step,
                CONSUMER_REGS=cfg.consumer_regs, PRODUCER_REGS=cfg.producer_regs,
                WRITER_REGS=cfg.writer_regs)  # fmt: skip
