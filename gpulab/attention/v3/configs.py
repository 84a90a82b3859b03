"""Lesson 4, version 3: which launch the Gluon forward takes, and where it may run.

:class:`V3Config` is one launch of :mod:`gpulab.attention.v3.forward`'s kernel (its numbered step, K/V stages, consumer
warpgroups, register budgets, persistent programs); :data:`MEASURED` and :data:`MEASURED_SHORT` hold the measured
choice per (head dim, causal) and query length, :func:`v3_config` reads them; :func:`supported` says whether version 3
may run given inputs on this machine (Hopper, a tested Triton, float16/bfloat16, head dim 64, 128 or 256). The kernel
module re-exports every name here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

import torch

from gpulab import gluon_compat, runtime
from gpulab.attention.reference import check_window

__all__ = [
    "HEAD_DIMS",
    "MEASURED",
    "MEASURED_SHORT",
    "NO_SPILL_BY_TRITON",
    "SHORT_N",
    "SHORT_N_BY",
    "short_n",
    "STEPS",
    "V3Config",
    "v3_config",
    "supported",
    "triton_minor",
    "TESTED_TRITON",
    "register_budget",
    "paired",
    "constexprs",
    "window_config",
    "causal_like",
]

HEAD_DIMS = (64, 128, 256)
"""The head dims the forward kernel is compiled for (a TMA box holds at most 256 elements per dimension, a wgmma at most
256 columns: 256 is the kernel's largest). Which of them ``version=None`` takes is the plan's
:data:`gpulab.attention.plan.V3_HEAD_DIMS`."""

STEPS = {1: "producer/consumer partitions", 2: "+ ping-pong", 3: "+ intra-warpgroup overlap"}
"""The kernel's numbered steps (``V3Config.step``); each adds one idea to the one before."""

TESTED_TRITON = gluon_compat.TESTED_TRITON
"""The package's one list of Triton versions measured on the GPU (:data:`gpulab.gluon_compat.TESTED_TRITON`): version 3
compiles on Triton 3.6 to 3.9 (:mod:`gpulab.gluon_compat`), and :func:`supported` takes it where it was measured."""


def register_budget(name: str, value) -> int:
    """``value`` checked as a warpgroup's ``setmaxnreg`` budget: an int from 24 to 256, a multiple of 8 (the
    instruction's granularity); a ValueError naming ``name`` otherwise."""
    value = runtime.integer(name, value, minimum=24, maximum=256)
    if value % 8:
        raise ValueError(f"{name}={value} must be a multiple of 8 (setmaxnreg's granularity); e.g. 240.")
    return value


@dataclasses.dataclass(frozen=True)
class V3Config:
    """Version 3's launch: ``step`` (1-3, :data:`STEPS`), ``block_n`` keys per K/V stage, ``stages`` K/V buffers in
    the ring, ``consumer_regs`` registers per thread of each consumer warpgroup and ``producer_regs`` of the
    producer (``setmaxnreg``; the kernel's cap ``maxnreg`` is their average over the three warpgroups).
    ``persistent``: one program per SM looping over tiles (``q_buffers`` Q tiles per consumer in flight);
    ``pairs`` (persistent only; causal only, ignored otherwise): a program takes a head's tiles in pairs
    (longest, shortest), so every pair has the same number of key blocks and the programs' work is even
    whatever the SM count (:func:`gpulab.attention.measure.v3_schedule_model.persistent_tiles`).
    ``q_regs`` (steps 2-3): each consumer loads its Q tile once per tile into registers (the wgmma A-operand
    layout, 32 registers per thread at d=128) and issues ``S = Q K^T`` with Q from registers, so each score product
    reads only K from shared memory (a third less shared-memory traffic per key block at d=128)."""

    step: int = 3
    block_n: int = 128
    stages: int = 2
    consumers: int = 2
    consumer_regs: int = 240
    producer_regs: int = 24
    persistent: bool = False
    q_buffers: int = 1
    pairs: bool = False
    q_regs: bool = False

    def __post_init__(self):
        runtime.one_of("step", self.step, tuple(STEPS))
        runtime.one_of("block_n", self.block_n, (64, 128))
        runtime.integer("stages", self.stages, minimum=2, maximum=4)
        runtime.one_of("consumers", self.consumers, (2, 3))
        runtime.strict_bool("persistent", self.persistent)
        runtime.one_of("q_buffers", self.q_buffers, (1, 2))
        runtime.strict_bool("pairs", self.pairs)
        runtime.strict_bool("q_regs", self.q_regs)
        if self.q_regs and self.step == 1:
            raise ValueError("q_regs=True loads Q into registers for steps 2-3's loop; step 1 reads it from shared "
                             "memory: use step=2 or 3.")  # fmt: skip
        if self.pairs and not self.persistent:
            raise ValueError(
                "pairs=True orders a persistent program's causal tiles in (longest, shortest) pairs; it needs "
                "persistent=True (one tile per program has no order to choose)."
            )
        for name in ("consumer_regs", "producer_regs"):
            register_budget(name, getattr(self, name))
        asked = self.consumers * self.consumer_regs + self.producer_regs
        if asked > self.maxnreg * (self.consumers + 1):  # setmaxnreg.inc would wait for registers nobody frees
            raise ValueError(
                f"consumer_regs={self.consumer_regs} x {self.consumers} + producer_regs={self.producer_regs} = {asked} "
                f"is over the kernel's cap {self.maxnreg} x {self.consumers + 1} warpgroups; choose budgets whose sum "
                "divides evenly, e.g. 240, 240, 24 (two consumers) or 160 x 3 + 32 (three)."
            )

    @property
    def maxnreg(self) -> int:
        """The kernel-wide register cap: the warpgroups' budgets (the producer's warp counts as a warpgroup) share
        the 64K registers of an SM."""
        return (self.consumers * self.consumer_regs + self.producer_regs) // (self.consumers + 1) // 8 * 8


_C3 = dict(consumers=3, consumer_regs=160, producer_regs=32)  # three consumer warpgroups share 64K registers

_PQ2 = dict(persistent=True, q_buffers=2)

MEASURED: dict[tuple[int, bool], dict] = {
    (128, False): dict(step=3, stages=2, **_PQ2),
    (128, True): dict(step=3, stages=2, **_PQ2, pairs=True, q_regs=True),
    (64, False): dict(step=2, stages=3, persistent=True, **_C3),
    (64, True): dict(step=3, stages=3, **_PQ2, pairs=True, q_regs=True),
    (256, False): dict(step=3, block_n=64, stages=2, persistent=True),
    (256, True): dict(step=3, block_n=64, stages=2, persistent=True, pairs=True),
}
""":class:`V3Config` fields per (head dim, causal): the fastest race-free variant of the tuning part
(``python -m gpulab bench 05 v3-tune``, :mod:`gpulab.attention.measure.v3_bench`) on the H100 for the long sequences
(geometric mean over lesson 4's N above :func:`short_n` at bf16; records in ``benchmarks/05_attention_hopper/v3/``,
every candidate raced 200 times and checked). Persistent programs pay at d=128 non-causal (the next tile's keys and,
with a second Q buffer, its queries load while this tile finishes); three consumer warpgroups at d=64 non-causal; the
causal long problems took paired persistent tiles with Q read from registers (``q_regs``); 64 keys per stage lost
everywhere (notes/attention-hopper.md, 'Forward configs'). d=256 is chosen by the sm_90 compile, not yet timed: the
one shape that fits, two consumers, 64 keys per stage, two stages and one Q buffer (Q 64 KB + K, V 128 KB of shared
memory; O takes 128 fp32 registers per thread; ``q_regs`` spills; ``tests/attention/v3/test_v3_compile.py`` has the
table). ptxas reports no spilled registers for any choice here, in :data:`MEASURED_SHORT` or on the step ladder on
Triton 3.6 to 3.8 (d=256: compiled on 3.6) (:mod:`gpulab.attention.measure.v3_compile_check`, pinned by the compile
tests); on 3.9 one spills (:data:`NO_SPILL_BY_TRITON` replaces it there)."""


NO_SPILL_BY_TRITON: dict[str, dict[tuple[int, bool], dict]] = {
    "3.9": {(64, False): dict(step=3, stages=3, **_PQ2)},
}
"""Per Triton (major.minor), the (head dim, causal) whose :data:`MEASURED` choice spills registers there, and the
choice taken instead for long sequences: one of the race and check parts' variants that ptxas compiles without
spills on that Triton (Triton 3.9's code for three consumer warpgroups at 160 registers spills 172 bytes at d=64;
two consumers on a persistent grid spill none). Not timed on the GPU on that Triton: ``bench 05 v3-tune`` there
decides, as :data:`MEASURED`'s choices were decided on 3.6."""


SHORT_N = 2048
"""Query lengths up to this take :data:`MEASURED_SHORT`'s tiles where it lists the (head dim, causal) and
:data:`SHORT_N_BY` gives no other bound; longer ones :data:`MEASURED`'s (lesson 4's grid has N = 1k, 4k and 16k:
the tune part times each and chooses for N = 1k apart)."""

SHORT_N_BY: Mapping[tuple[int, bool], int] = MappingProxyType({(128, True): 4096})
""":data:`SHORT_N` per (head dim, causal) where the short choice was measured to win further: d=128 causal takes its
short tiles up to N = 4k (the tune part's choice at N = 1k and 4k: paired tiles, Q from shared memory)."""

MEASURED_SHORT: dict[tuple[int, bool], dict] = {
    (64, False): dict(step=1, stages=3, **_PQ2),
    (64, True): dict(step=1, stages=3, **_PQ2, pairs=True),
    (128, True): dict(step=3, stages=2, **_PQ2, pairs=True),
}
""":class:`V3Config` fields per (head dim, causal) for short sequences (N <= :func:`short_n`), where the measured
choice differs from :data:`MEASURED`'s: the tune part's choice for the short group (H100, bf16).
d=64: step 1 on a persistent grid with a second Q buffer (N = 1k; causal, with each head's tiles in (longest,
shortest) pairs: the head-major persistent order left programs up to 30% over the mean work at N = 1k,
:func:`gpulab.attention.measure.v3_schedule_model.persistent_tiles`). d=128 causal: step 3, paired persistent tiles (N =
1k and 4k)."""


def short_n(head_dim: int, is_causal: bool) -> int:
    """The longest query length that takes :data:`MEASURED_SHORT`'s tiles for (``head_dim``, ``is_causal``)."""
    key = (runtime.one_of("head_dim", head_dim, HEAD_DIMS), runtime.strict_bool("is_causal", is_causal))
    return SHORT_N_BY.get(key, SHORT_N)


def v3_config(head_dim: int, is_causal: bool = False, step: int | None = None, seq: int | None = None) -> V3Config:
    """Version 3's tiles for ``head_dim`` (64, 128 or 256), ``is_causal`` and the query length ``seq`` (None: a long
    one): the measured choice (:data:`MEASURED_SHORT` up to :func:`short_n` queries, else :data:`MEASURED`).
    ``step`` (1-3) asks for that step of the lesson's ladder instead, at the same stages, one tile per program and
    two consumer warpgroups (the step-by-step comparison); 128 keys per stage and three stages throughout (d=256: 64
    keys and two stages, what fits in shared memory)."""
    head_dim = runtime.one_of("head_dim", head_dim, HEAD_DIMS)
    is_causal = runtime.strict_bool("is_causal", is_causal)
    if seq is not None:
        seq = runtime.integer("seq", seq, minimum=1)
    if step is not None:
        runtime.one_of("step", step, tuple(STEPS))
        return V3Config(step=step, block_n=64, stages=2) if head_dim == 256 else V3Config(step=step, stages=3)
    short = seq is not None and seq <= short_n(head_dim, is_causal)
    fields = MEASURED_SHORT.get((head_dim, is_causal)) if short else None
    if fields is None:
        fields = NO_SPILL_BY_TRITON.get(gluon_compat.triton_minor(), {}).get((head_dim, is_causal))
    return V3Config(**(fields or MEASURED[(head_dim, is_causal)]))


def triton_minor() -> str:
    """This Triton's ``major.minor`` (what :data:`TESTED_TRITON` lists)."""
    return gluon_compat.triton_minor()


def supported(q, k, v, causal: bool = False, scale: float | None = None, *, enable_gqa: bool = False,
              window_size=(-1, -1)) -> tuple[bool, str]:  # fmt: skip
    """(True, "") when version 3 can take q, k, v here, else (False, the reason): a CUDA GPU of compute capability
    9.x (Hopper), a Triton version in :data:`TESTED_TRITON`, float16 or bfloat16, head dim 64, 128, 256, q [B, H, Nq, D]
    and k, v [B, H, Nk, D] (``enable_gqa``: [B, Hkv, Nk, D] with Hkv dividing H), and ``scale`` None (1/sqrt(D)) or a
    positive number (the kernel takes the row max of the raw scores, ``forward._softmax_block``). Never raises on
    tensors; ``causal`` and ``enable_gqa`` must be bools, ``window_size`` a window
    (:func:`gpulab.attention.reference.check_window`: any window runs, none together with ``causal``)."""
    runtime.strict_bool("causal", causal)
    enable_gqa = runtime.strict_bool("enable_gqa", enable_gqa)
    check_window(window_size, causal)
    if scale is not None and not (isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale > 0):
        return False, (f"version 3 takes a positive scale (it scales the raw scores' row max), got scale={scale!r}; "
                       "versions 1 and 2 take others")  # fmt: skip
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            return False, f"{name} is {type(t).__name__}, not a torch.Tensor"
        if t.dim() != 4:
            return False, f"{name} has shape {tuple(t.shape)}; version 3 takes [B, H, N, D]"
    if (why := gluon_compat.problem() or gluon_compat.untested("version 3 (Gluon)")) is not None:
        return False, why
    if q.device.type != "cuda" or k.device != q.device or v.device != q.device:
        return False, f"version 3 runs on a CUDA GPU; q, k, v are on {q.device}, {k.device}, {v.device}"
    if torch.cuda.get_device_capability(q.device)[0] != 9:
        major, minor = torch.cuda.get_device_capability(q.device)
        return False, f"version 3 needs a Hopper GPU (sm_90); this one is sm_{major}{minor}"
    if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        return False, f"version 3 takes float16 or bfloat16 q, k, v of one dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
    b, h, _, d = q.shape
    if d not in HEAD_DIMS:
        return False, f"version 3 takes head dims {HEAD_DIMS}, got {d}"
    h_kv = k.shape[1] if enable_gqa and k.shape[1] > 0 and h % k.shape[1] == 0 else h
    if tuple(k.shape[:2]) != (b, h_kv) or k.shape != v.shape or k.shape[3] != d:
        heads = "Hkv dividing q's H" if enable_gqa else "q's H (enable_gqa=True for fewer KV heads)"
        return (
            False,
            f"k {tuple(k.shape)} and v {tuple(v.shape)} must be [B, Hkv, Nk, D] with q's B and D and {heads}, q "
            f"{tuple(q.shape)}",
        )
    if q.shape[2] < 1 or k.shape[2] < 1:
        return False, "version 3 needs at least one query and one key"
    if b * h > 65535:
        return False, f"batch * heads = {b * h} is over 65535, the grid's second dimension"
    return True, ""


def paired(is_causal: bool, cfg: V3Config, tiles: int | None = None, sms: int | None = None) -> bool:
    """Whether the launch takes :func:`.tiles.tile`'s (longest, shortest) pairs: causal, persistent, ``cfg.pairs``, and
    (where ``tiles`` and ``sms`` are given) more tiles than SMs: with fewer, pairs would halve the programs."""
    runtime.strict_bool("is_causal", is_causal)
    if not isinstance(cfg, V3Config):
        raise TypeError(f"cfg must be a V3Config (e.g. v3_config(64, True, seq=1024)), got {type(cfg).__name__}.")
    for name, value in (("tiles", tiles), ("sms", sms)):
        if value is not None:
            runtime.integer(name, value, minimum=1)
    return bool(is_causal and cfg.persistent and cfg.pairs and (tiles is None or sms is None or tiles > sms))


def constexprs(head_dim: int, is_causal: bool, cfg: V3Config, pairs: bool | None = None, gqa: bool = False,
               window_size=(-1, -1), varlen: bool = False) -> dict:  # fmt: skip
    """The kernel's compile-time arguments for ``head_dim``, ``is_causal`` and ``cfg`` (``pairs`` None:
    :func:`paired` without sizes, for :func:`causal_like` problems), ``gqa`` (grouped-query heads: K/V rows at
    ``bh // group``) and ``window_size`` (``(left, right)``, each bounded side a flag; the plain problem's flags are
    all False, and its kernel is the one without any of the window's or the groups' code); ``varlen``: a packed batch
    (:mod:`gpulab.attention.v3.varlen_forward`: one tile per program, so never ``pairs``)."""
    left, right = check_window(window_size, runtime.strict_bool("is_causal", is_causal))
    if pairs is None:
        pairs = paired(causal_like(is_causal, (left, right)), cfg)
    return dict(HEAD_DIM=head_dim, BLOCK_N=cfg.block_n, STAGES=cfg.stages, IS_CAUSAL=is_causal, STEP=cfg.step,
                CONSUMERS=cfg.consumers, CONSUMER_REGS=cfg.consumer_regs, PRODUCER_REGS=cfg.producer_regs,
                QBUF=cfg.q_buffers, Q_REGS=cfg.q_regs, PAIRS=bool(pairs),
                GQA=runtime.strict_bool("gqa", gqa), HAS_LEFT=left >= 0, HAS_RIGHT=right >= 0,
                VARLEN=runtime.strict_bool("varlen", varlen))  # fmt: skip


def window_config(head_dim: int, is_causal: bool, window_size=(-1, -1), seq: int | None = None) -> V3Config:
    """The measured tiles (:func:`v3_config`) for a problem with ``window_size``: without a window the problem's own;
    with one the causal problem's (both mask per row on their edge blocks) with Q read from shared memory
    (``q_regs=False``): ptxas spills inside the key loop for a window bounded on the right only with the
    three-consumer d=64 tiles and with d=128's ``q_regs`` (one 4-byte store and load per block), and compiles
    every window without spills so; at d=256 with step 1 (steps 2-3 spill 4-12 bytes outside the key loop there:
    step 3 on Triton 3.6, step 2 on 3.9 for a window bounded on the left and on 3.7 for one bounded on the right
    only). Not timed with windows: the tune part decides, as it did for the tables."""
    left, right = check_window(window_size, runtime.strict_bool("is_causal", is_causal))
    if (left, right) == (-1, -1):
        return v3_config(head_dim, is_causal, seq=seq)
    step = 1 if head_dim == 256 else v3_config(head_dim, True, seq=seq).step
    return dataclasses.replace(v3_config(head_dim, True, seq=seq), q_regs=False, step=step)


def causal_like(is_causal: bool, window_size=(-1, -1)) -> bool:
    """Whether the tiles' work grows down the queries as a causal problem's (SDPA's causal mask, or a window bounded
    on the right only): where :func:`paired` tiles may balance persistent programs."""
    left, right = check_window(window_size, runtime.strict_bool("is_causal", is_causal))
    return bool(is_causal or (left < 0 <= right))
