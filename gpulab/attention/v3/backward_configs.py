"""Version 3's backward: its launch configuration (the numbered steps, stages, register budgets) and the measured
default per head dim.

What you will learn: which knobs the backward kernel (:mod:`gpulab.attention.v3.backward`) has and which setting the
H100 records chose. The kernel reads a :class:`V3BackwardConfig` only through :func:`constexprs` (compile-time
arguments) and :attr:`V3BackwardConfig.maxnreg` (the register cap its warp specialization needs).
"""

from __future__ import annotations

import dataclasses

from gpulab import runtime
from gpulab.attention.v3.configs import register_budget

__all__ = ["STEPS", "KERNEL_STEPS", "KV_REGS", "BLOCK_M", "KEYS_PER_WARPGROUP", "V3BackwardConfig", "MEASURED",
           "MEASURED_SHORT", "SHORT_SEQ", "backward_config", "constexprs", "GROUPED_STEPS", "gqa_win",
           "VARLEN_STEPS"]  # fmt: skip

STEPS = {
    1: "one warpgroup, TMA ring refilled by the same warps",
    2: "+ producer warp, two consumer warpgroups",
    3: "+ dS shared by the consumers: dQ added once per 128 keys",
    4: "+ dQ one block late (consumers a block apart) and the next block's S^T, dP^T under the additions",
    5: "step 3 with dQ through shared memory: a writer warp does the atomic additions, the consumers none",
    6: "step 5 with each consumer's own dS and dS K over its 64 keys (no meeting per block), the writer sums both",
    7: "step 5 on a persistent grid: one program per SM walks the tiles, the next K/V loaded under dK/dV's stores",
    8: "steps 5 and 7 with dQ scaled and cast by the last program to add into each query block (arrival counters), "
    "which zeros the block back: no zeroing and no cast launch around the kernel (V3BackwardConfig.dq_cast)",
    9: "any step with D's launch also zeroing dQ's fp32 buffer: one launch before the kernel instead of two "
    "(V3BackwardConfig.fused_prep)",
    10: "steps 3, 5 and 7 with each consumer's K and/or V slice loaded once into registers: S^T = K Q^T and "
    "dP^T = V dO^T read only Q and dO from shared memory (V3BackwardConfig.kv_regs)",
    11: "steps 3, 5 and 7 with each query block's LSE and D brought by the producer into its ring slot, loaded a "
    "block ahead: the consumers read them from shared memory instead of waiting for global loads "
    "(V3BackwardConfig.stats_smem)",
}
"""The backward's numbered steps: 1-7 the kernel's structure (``V3BackwardConfig.step``), 8 a change to the writer
steps 5 and 7 (``V3BackwardConfig.dq_cast``, with ``writer_regs=32``: 24 spill at head dim 64), 9 to D's launch
(``fused_prep``), 10 to the consumers' operands (``kv_regs``), 11 to where LSE and D come from (``stats_smem``).
In the defaults: step 10 at head dim 64 only (at 128, K or V in registers push the consumers past their 240 registers)
and step 11 everywhere; steps 8 and 9 in none (slower, and within the noise). Why each was kept or dropped:
notes/attention-hopper.md, 'Backward configs'."""
KERNEL_STEPS = (1, 2, 3, 4, 5, 6, 7)
"""The values of ``V3BackwardConfig.step``."""
KV_REGS = {"none": 0, "k": 1, "v": 2, "kv": 3}
"""Step 10's values of ``V3BackwardConfig.kv_regs`` and the kernel's ``KV_REGS`` bits (1: K, 2: V in registers)."""

BLOCK_M = 64
"""Query rows per block of the inner loop (one wgmma M of 64 in the transposed products' N)."""
KEYS_PER_WARPGROUP = 64
"""Key rows each consumer warpgroup owns (its dK and dV accumulators: [64, d] fp32 each)."""


@dataclasses.dataclass(frozen=True)
class V3BackwardConfig:
    """The backward's launch: ``step`` (1-7, :data:`STEPS`), ``stages`` Q/dO buffers in the ring; steps 2-6's
    register budgets ``consumer_regs`` (each of the two consumer warpgroups), ``producer_regs`` and steps 5-7's
    ``writer_regs`` (``setmaxnreg``; the producer and the writer share one warpgroup, so its budget is the larger);
    ``dq_cast`` (step 8, with steps 5 and 7 only): dQ's scale and cast done in the kernel by the last program to add
    into each query block, the fp32 buffer and the arrival counters kept zeroed between calls; ``fused_prep`` (step
    9, not with ``dq_cast``, which needs no zeroing): D's launch also zeroes dQ's fp32 buffer
    (:func:`gpulab.attention.shared.attention_preprocess_zero_kernel`); ``kv_regs`` (step 10, steps 3, 5 and 7:
    :data:`KV_REGS`): which of the consumer's K and V slices [64, D] are loaded once into registers as the A operand
    of S^T's and dP^T's wgmma (D/4 registers per thread each) instead of read from shared memory every block;
    ``stats_smem`` (step 11, steps 3, 5 and 7): the producer warp loads each query block's LSE and D a block ahead
    and stores them beside its Q and dO in the ring slot, where the consumers read them."""

    step: int = 3
    stages: int = 2
    consumer_regs: int = 240
    producer_regs: int = 24
    writer_regs: int = 24
    dq_cast: bool = False
    fused_prep: bool = False
    kv_regs: str = "none"
    stats_smem: bool = False

    def __post_init__(self):
        runtime.one_of("step", self.step, KERNEL_STEPS)
        runtime.strict_bool("dq_cast", self.dq_cast)
        if self.dq_cast and self.step not in (5, 7):
            raise ValueError(f"dq_cast=True needs a writer step (5 or 7), got step={self.step}; e.g. "
                             f"V3BackwardConfig(step=5, dq_cast=True).")  # fmt: skip
        runtime.strict_bool("fused_prep", self.fused_prep)
        if self.fused_prep and self.dq_cast:
            raise ValueError("fused_prep=True zeroes the dQ buffer that dq_cast=True keeps zeroed without a launch: "
                             "choose one, e.g. V3BackwardConfig(step=5, fused_prep=True).")  # fmt: skip
        runtime.one_of("kv_regs", self.kv_regs, tuple(KV_REGS))
        if self.kv_regs != "none" and self.step not in (3, 5, 7):
            raise ValueError(f"kv_regs={self.kv_regs!r} needs step 3, 5 or 7 (their scores take K and V as operands "
                             f"apart from dS K), got step={self.step}; e.g. V3BackwardConfig(step=5, "
                             f"kv_regs={self.kv_regs!r}).")  # fmt: skip
        runtime.strict_bool("stats_smem", self.stats_smem)
        if self.stats_smem and self.step not in (3, 5, 7):
            raise ValueError(f"stats_smem=True needs step 3, 5 or 7 (a producer warp and the consumers' shared "
                             f"loop), got step={self.step}; e.g. "
                             f"V3BackwardConfig(step=5, stats_smem=True).")  # fmt: skip
        runtime.integer("stages", self.stages, minimum=2, maximum=4)
        for name in ("consumer_regs", "producer_regs", "writer_regs"):
            register_budget(name, getattr(self, name))

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


MEASURED = {64: V3BackwardConfig(step=5, kv_regs="kv", stats_smem=True), 128: V3BackwardConfig(step=5, stats_smem=True)}
"""The default launch per head dim for query lengths over :data:`SHORT_SEQ` (:func:`backward_config`): the step
with the highest median speed relative to cuDNN on those problems of the newest H100 run that timed several steps on
the whole grid (step 5 at both head dims, two stages), with step 10's ``kv_regs`` and step 11's ``stats_smem`` chosen
the same way (notes/attention-hopper.md, 'Backward configs')."""

SHORT_SEQ = 4096
"""Query lengths up to which :data:`MEASURED_SHORT` applies."""

MEASURED_SHORT = {64: V3BackwardConfig(step=7, kv_regs="kv", stats_smem=True)}
"""The default launch per head dim for query lengths up to :data:`SHORT_SEQ`, chosen as :data:`MEASURED` on the
grid's N = 1024 and 4096 problems: step 7 (persistent) at head dim 64; head dim 128 keeps step 5 (step 7's extra
spills there cost more than the shorter tails gain) (notes/attention-hopper.md, 'Backward configs')."""


def backward_config(head_dim: int, is_causal: bool = False, step: int | None = None,
                    seq: int | None = None) -> V3BackwardConfig:  # fmt: skip
    """The backward's launch for ``head_dim`` (64 or 128), ``is_causal`` and query length ``seq`` (None: long):
    :data:`MEASURED_SHORT` up to :data:`SHORT_SEQ` where it has the head dim, else :data:`MEASURED`; or, with
    ``step``, that step of the ladder (two stages, the default register budgets)."""
    runtime.one_of("head_dim", head_dim, (64, 128))
    runtime.strict_bool("is_causal", is_causal)
    if seq is not None:
        seq = runtime.positive_int("seq", seq)
    if step is None:
        if seq is not None and seq <= SHORT_SEQ and head_dim in MEASURED_SHORT:
            return MEASURED_SHORT[head_dim]
        return MEASURED[head_dim]
    return V3BackwardConfig(step=runtime.one_of("step", step, KERNEL_STEPS))


GROUPED_STEPS = (2, 3, 5, 6, 7)
"""The steps that take grouped-query heads and windows (``GQA_WIN``): those whose partitions loop over the visits of
:func:`gpulab.attention.v3.backward_pair.visit` (steps 1 and 4 keep their own loops and take plain problems)."""


VARLEN_STEPS = (5,)
"""The steps that take packed batches of variable lengths (``GQA_WIN`` bit 8): the writer step 5, every default's."""


def gqa_win(group: int, window=(-1, -1), varlen: bool = False) -> int:
    """The kernel's ``GQA_WIN``: bit 1 grouped heads (``group`` > 1), bit 2 a window's left side, bit 4 its right
    side (``window`` = (left, right), -1 unbounded), bit 8 a packed batch of variable lengths (``varlen``:
    :mod:`gpulab.attention.v3.backward_varlen`); 0 on a plain problem."""
    runtime.positive_int("group", group)
    runtime.strict_bool("varlen", varlen)
    if not isinstance(window, tuple) or len(window) != 2 or not all(type(w) is int and w >= -1 for w in window):
        raise ValueError(f"window must be a pair (left, right) of ints >= -1, got {window!r}; e.g. (-1, -1).")
    return (group > 1) + 2 * (window[0] >= 0) + 4 * (window[1] >= 0) + 8 * varlen


def constexprs(head_dim: int, is_causal: bool, cfg: V3BackwardConfig, gqa_window: int = 0) -> dict:
    """The kernel's compile-time arguments; ``gqa_window``: :func:`gqa_win`'s."""
    if not isinstance(cfg, V3BackwardConfig):
        raise TypeError(f"cfg must be a V3BackwardConfig, got {type(cfg).__name__}; e.g. backward_config(64).")
    runtime.integer("gqa_window", gqa_window, minimum=0, maximum=15)
    if gqa_window >= 8 and (cfg.step not in VARLEN_STEPS or cfg.dq_cast):
        raise ValueError(f"packed variable-length batches run in steps {VARLEN_STEPS} without dq_cast, got "
                         f"step={cfg.step}, dq_cast={cfg.dq_cast}; pass V3BackwardConfig(step=5).")  # fmt: skip
    if gqa_window and cfg.step not in GROUPED_STEPS:
        raise ValueError(f"grouped-query heads and windows run in steps {GROUPED_STEPS}, got step={cfg.step}; "
                         "pass V3BackwardConfig(step=5) or None.")  # fmt: skip
    if gqa_window >= 2 and cfg.dq_cast:
        raise ValueError("dq_cast=True counts each query block's arrivals as the full or causal problem has them, "
                         "not a window's; pass dq_cast=False with a window.")  # fmt: skip
    return dict(HEAD_DIM=head_dim, STAGES=cfg.stages, IS_CAUSAL=is_causal, STEP=cfg.step,
                CONSUMER_REGS=cfg.consumer_regs, PRODUCER_REGS=cfg.producer_regs,
                WRITER_REGS=cfg.writer_regs, DQ_CAST=cfg.dq_cast, KV_REGS=KV_REGS[cfg.kv_regs],
                STATS_SMEM=cfg.stats_smem, GQA_WIN=gqa_window)  # fmt: skip
