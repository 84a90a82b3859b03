"""Lesson 4, step 6: block sizes, warps and pipeline stages for the attention kernels, per GPU.

What you will learn: a tile config is a budget. Each program keeps its accumulators in registers and streams
K/V (forward) or Q/dO (backward) tiles through shared memory, ``num_stages`` tiles deep so that the next loads
overlap this step's math. The shared memory one program needs is roughly

    forward:   BLOCK_M * D  (Q)            + stages * 2 * BLOCK_N * D  (K and V tiles)        [elements]
    dK/dV:     2 * BLOCK_N * D  (K and V)  + stages * 2 * BLOCK_M * D  (Q and dO tiles)
    dQ:        2 * BLOCK_M * D  (Q and dO) + stages * 2 * BLOCK_N * D  (K and V tiles)

times the element size, and it must fit the GPU's per-block limit (:attr:`gpulab.hardware.GPUSpec.smem_per_block`,
227 KB on an H100). Larger tiles reuse each load more (fewer bytes per FLOP) but need more registers and shared
memory; when the estimate does not fit, :func:`attention_config` drops a pipeline stage, then halves the tiles.

D here is the head dim padded to a power of two >= 16 (``runtime.dot_block``): ``tl.dot`` wants power-of-two tiles
of at least 16, so a head dim of 80 runs as 128 with the extra columns masked off.

In the interpreter (CPU) the config is small and fixed: 16 x 16 tiles, one stage; the interpreter runs programs
one after another, so small tiles only cost Python overhead, and they exercise the multi-block paths on tiny inputs.

**Autotuning** (on a GPU, opt-in: ``flash_attention(..., autotune=True)``): :func:`candidates` lists a few configs
around the preferred one (each shrunk to fit like the default), :func:`autotune` times each on the real inputs once
per problem key (kind, head dim, dtype, causal, sequence lengths rounded up to powers of two) and keeps the fastest;
:func:`tuned` returns what was chosen, so a benchmark can record it. The default stays the fixed, measured config:
tuning costs a compilation per candidate, and its choice depends on the GPU it ran on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable

import torch

from gpulab import bench, dtypes, hardware, runtime

__all__ = [
    "AttentionConfig",
    "attention_config",
    "smem_estimate",
    "candidates",
    "autotune",
    "autotuned_config",
    "tuned",
    "MAX_HEAD_DIM",
    "HopperConfig",
    "hopper_config",
    "PREFERRED_V2",
    "SHORT_SEQ",
    "PREFERRED_SHORT",
]

MAX_HEAD_DIM = 256
"""The largest head dim the kernels take (SDPA's, FlashAttention's and cuDNN's limit): at 256 a [BLOCK, 256] fp32
accumulator fills the registers of a 64-row tile, so the tiles there are half as tall."""

KINDS = ("forward", "dkdv", "dq")
"""The three attention kernels a config is for: the forward, the dK/dV backward and the dQ backward."""


def _power_of_two(name: str, value, minimum: int = 1) -> int:
    value = runtime.integer(name, value, minimum=minimum)
    if value & (value - 1):
        raise ValueError(
            f"{name} must be a power of two >= {minimum}, got {value}; use {runtime.next_power_of_2(value)}."
        )
    return value


def _head_dim(head_dim) -> int:
    head_dim = runtime.integer("head_dim", head_dim)
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim={head_dim} is not supported; the attention kernels take 1 to {MAX_HEAD_DIM}.")
    return head_dim


def _optional_seq(name: str, value) -> int | None:
    return None if value is None else runtime.positive_int(name, value)


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """One launch configuration: tiles of BLOCK_M queries and BLOCK_N keys, head dim padded to BLOCK_D."""

    block_m: int
    block_n: int
    block_d: int
    num_warps: int
    num_stages: int

    def __post_init__(self):
        for name in ("block_m", "block_n", "block_d"):  # tl.dot wants power-of-two tiles of at least 16
            _power_of_two(name, getattr(self, name), minimum=16)
        _power_of_two("num_warps", self.num_warps)
        runtime.positive_int("num_stages", self.num_stages)

    def launch(self) -> dict:
        """The keyword arguments a kernel launch takes."""
        return {"num_warps": self.num_warps, "num_stages": self.num_stages}


def smem_estimate(kind: str, block_m: int, block_n: int, block_d: int, itemsize: int, num_stages: int) -> int:
    """Bytes of shared memory one program of ``kind`` ('forward', 'dkdv', 'dq') needs, by the formulas above."""
    runtime.one_of("kind", kind, KINDS)
    for name, value in (("block_m", block_m), ("block_n", block_n), ("block_d", block_d), ("itemsize", itemsize),
                        ("num_stages", num_stages)):  # fmt: skip
        runtime.positive_int(name, value)
    if kind == "forward":
        elems = block_m * block_d + num_stages * 2 * block_n * block_d
    elif kind == "dkdv":
        elems = 2 * block_n * block_d + num_stages * 2 * block_m * block_d
    elif kind == "dq":
        elems = 2 * block_m * block_d + num_stages * 2 * block_n * block_d
    else:
        raise ValueError(f"kind={kind!r} is not supported; use 'forward', 'dkdv' or 'dq'.")
    return elems * itemsize


# Starting points (block_m, block_n, num_warps, num_stages) for 16-bit inputs on Hopper/Ampere, by padded head dim;
# the FlashAttention-2 shapes: the forward takes a tall Q tile, dK/dV a tall K tile, dQ a tall Q tile.
# Head dim 128's backward tiles were chosen by measuring on the H100: smaller tiles (dK/dV at (32, 64, 8, 2), dQ at
# (64, 32, 8, 2)) ran about 3x slower than these, and dK/dV with 4 warps spills registers (lesson 4's records hold
# the times of the tiles it uses).
# Head dim 256's tiles are FlashAttention-2's for that head dim (64-row tiles, 8 warps), not yet measured here.
_PREFERRED = {
    "forward": {64: (128, 64, 4, 3), 128: (128, 64, 8, 3), 256: (64, 64, 8, 2)},
    "dkdv": {64: (32, 128, 4, 3), 128: (64, 128, 8, 3), 256: (32, 64, 8, 1)},
    "dq": {64: (128, 32, 4, 3), 128: (128, 32, 4, 3), 256: (64, 32, 8, 2)},
}


SHORT_SEQ = 1024
"""Problems whose query and key lengths are both at most this take :data:`PREFERRED_SHORT`'s tiles where it lists the
kernel and head dim (lesson 4's shortest problems, N = 1,024 with batch 16: a few waves of programs per kernel, where
the tile sets the waves and the programs per SM)."""

PREFERRED_SHORT: dict[str, dict[int, tuple[int, int, int, int]]] = {
    "forward": {},
    "dkdv": {64: (32, 128, 4, 3), 128: (64, 128, 8, 3)},
    "dq": {64: (128, 32, 4, 3), 128: (128, 32, 4, 3)},
}
"""The starting tiles (block_m, block_n, warps, stages) for short problems (:data:`SHORT_SEQ`), by kernel and padded
head dim; a kernel or head dim not listed takes :data:`_PREFERRED`'s. An entry is the long sequences' tile unless
``python -m gpulab bench 05 short`` (the alternatives timed beside it and cuDNN) showed another faster."""


# Alternatives tried by the autotuner, beside the preferred tile above (same meaning: block_m, block_n, warps, stages).
_ALTERNATIVES = {
    "forward": {64: [(128, 128, 8, 3), (64, 64, 4, 3)], 128: [(128, 32, 4, 3), (64, 64, 4, 3)],
                256: [(64, 32, 4, 2), (128, 32, 8, 1)]},
    "dkdv": {64: [(64, 128, 8, 3), (32, 64, 4, 3)], 128: [(32, 128, 8, 2), (64, 64, 8, 2)],
             256: [(32, 32, 4, 2), (64, 32, 8, 1)]},
    "dq": {64: [(64, 64, 4, 3), (128, 64, 8, 3)], 128: [(64, 32, 4, 3), (128, 64, 8, 2)],
           256: [(32, 32, 4, 2), (64, 64, 8, 1)]},
}  # fmt: skip


def _tile_key(block_d: int) -> int:
    """The row of :data:`_PREFERRED` for a padded head dim: 64, 128 or 256."""
    return 64 if block_d <= 64 else 128 if block_d <= 128 else 256


def attention_config(
    kind: str,
    head_dim: int,
    dtype=torch.float16,
    seq_q: int | None = None,
    seq_k: int | None = None,
    gpu=None,
    interpreter: bool | None = None,
) -> AttentionConfig:
    """The config for a kernel of ``kind`` ('forward', 'dkdv', 'dq') at ``head_dim`` and ``dtype``.

    ``gpu`` (a name or GPUSpec; default the live device, or the H100 on CPU) sets the shared-memory budget.
    ``interpreter`` (default: the current mode) selects the small fixed CPU config. Tiles are never larger than the
    sequence needs (rounded up to a power of two >= 16), so a 17-token sequence does not run 128-row tiles. Where both
    lengths are given and at most :data:`SHORT_SEQ`, :data:`PREFERRED_SHORT`'s tile is the starting point.
    """
    runtime.one_of("kind", kind, KINDS)
    block_d = runtime.dot_block(_head_dim(head_dim))
    dtype = dtypes.as_dtype(dtype)
    seq_q, seq_k = _optional_seq("seq_q", seq_q), _optional_seq("seq_k", seq_k)
    interpreter = runtime.INTERPRET if interpreter is None else runtime.strict_bool("interpreter", interpreter)
    if interpreter:
        return AttentionConfig(block_m=16, block_n=16, block_d=block_d, num_warps=4, num_stages=1)
    key = _tile_key(block_d)
    short = seq_q is not None and seq_k is not None and max(seq_q, seq_k) <= SHORT_SEQ
    tile = PREFERRED_SHORT[kind].get(key) if short else None
    return _fit(kind, tile or _PREFERRED[kind][key], block_d, dtype, seq_q, seq_k, gpu)


def _fit(kind, tile, block_d, dtype, seq_q, seq_k, gpu) -> AttentionConfig:
    """``tile`` (block_m, block_n, warps, stages) adapted to the dtype, the sequence lengths and the GPU's budget."""
    spec = hardware.spec(gpu)
    itemsize = torch.empty((), dtype=dtypes.as_dtype(dtype)).element_size()
    block_m, block_n, warps, stages = tile
    if itemsize == 4:  # fp32 tiles are twice the bytes (and the registers): halve the long side
        if block_m >= block_n:
            block_m //= 2
        else:
            block_n //= 2
    if seq_q is not None:
        block_m = min(block_m, runtime.dot_block(seq_q))
    if seq_k is not None:
        block_n = min(block_n, runtime.dot_block(seq_k))
    # Leave a margin: Triton's own layout conversions and the reduction scratch use shared memory too.
    budget = int(0.75 * spec.smem_per_block)
    while smem_estimate(kind, block_m, block_n, block_d, itemsize, stages) > budget:
        if stages > 1:
            stages -= 1
        elif max(block_m, block_n) > 16:
            if block_m >= block_n:
                block_m //= 2
            else:
                block_n //= 2
        else:
            break
    return AttentionConfig(block_m=block_m, block_n=block_n, block_d=block_d, num_warps=warps, num_stages=stages)


# ----------------------------------------------------------------------------------------------------------------
# autotuning (opt-in, GPU)

_TUNED: dict = {}


def candidates(kind, head_dim, dtype=torch.float16, seq_q=None, seq_k=None, gpu=None, interpreter=None):
    """The configs :func:`autotune` tries: the default of :func:`attention_config` first, then the alternatives,
    each fitted to the sequence lengths and the GPU in the same way; duplicates removed. One config in the
    interpreter."""
    first = attention_config(kind, head_dim, dtype, seq_q, seq_k, gpu, interpreter)
    if runtime.INTERPRET if interpreter is None else interpreter:
        return [first]
    out = [first]
    for tile in _ALTERNATIVES[kind][_tile_key(first.block_d)]:
        c = _fit(kind, tile, first.block_d, dtype, seq_q, seq_k, gpu)
        if c not in out:
            out.append(c)
    return out


def tuning_key(kind, head_dim, dtype, is_causal, seq_q, seq_k) -> tuple:
    """What a tuned choice is kept for: sequence lengths rounded up to powers of two (similar lengths share it)."""
    return (kind, head_dim, str(dtypes.as_dtype(dtype)).replace("torch.", ""), bool(is_causal),
            runtime.next_power_of_2(seq_q), runtime.next_power_of_2(seq_k))  # fmt: skip


def autotune(key, configs, run: Callable, timer: Callable | None = None) -> AttentionConfig:
    """The fastest of ``configs`` for ``run(config)`` (which launches the kernel with it), remembered under ``key``.

    ``timer(fn) -> ms`` defaults to :func:`gpulab.bench.time_callable`'s median over a short run. A config that
    fails to compile or launch (e.g. out of resources on this GPU) is skipped; if all fail, the error is raised.
    """
    if not isinstance(key, Hashable):
        raise TypeError(f"key must be hashable (a tuple such as tuning_key(...)), got {type(key).__name__}.")
    if not callable(run):
        raise TypeError(f"run must be callable (run(config) launches the kernel), got {type(run).__name__}.")
    if timer is not None and not callable(timer):
        raise TypeError(f"timer must be callable (timer(fn) -> ms) or None, got {type(timer).__name__}.")
    if key in _TUNED:
        return _TUNED[key][0]
    configs = list(configs)
    if not configs or not all(isinstance(c, AttentionConfig) for c in configs):
        raise ValueError(f"configs must be a non-empty list of AttentionConfig (see candidates()), got {configs!r}.")
    if timer is None:
        timer = lambda fn: bench.time_callable(fn, warmup_ms=5, rep_ms=20).median_ms  # noqa: E731
    times, error = [], None
    for config in configs:
        try:
            times.append((timer(lambda config=config: run(config)), config))
        except Exception as exc:  # noqa: BLE001 - a candidate this GPU cannot run: try the next
            error = exc
    if not times:
        raise error
    ms, best = min(times, key=lambda t: t[0])
    _TUNED[key] = (best, ms, [(c, t) for t, c in times])
    return best


def autotuned_config(kind, head_dim, dtype, is_causal, seq_q, seq_k, run) -> AttentionConfig:
    """The config for one launch of ``kind`` when autotuning is asked for: :func:`autotune` over :func:`candidates`
    under :func:`tuning_key` on a GPU (``run(config)`` launches the kernel with it); the fixed config in the
    interpreter, which is not timed."""
    if runtime.INTERPRET:
        return attention_config(kind, head_dim, dtype, seq_q, seq_k)
    key = tuning_key(kind, head_dim, dtype, is_causal, seq_q, seq_k)
    return autotune(key, candidates(kind, head_dim, dtype, seq_q, seq_k), run)


def tuned() -> dict:
    """What :func:`autotune` chose so far: ``{key: {'config': AttentionConfig, 'ms': best time, 'tried': n}}``."""
    return {k: {"config": v[0], "ms": v[1], "tried": len(v[2])} for k, v in _TUNED.items()}


# ----------------------------------------------------------------------------------------------------------------
# version 2 (Hopper)


@dataclasses.dataclass(frozen=True)
class HopperConfig:
    """Version 2's launch: Q tiles of ``block_m`` rows, K/V tiles of ``block_n``, ``num_stages`` TMA buffers, the loop
    warp-specialized or software-pipelined, one program per tile or one per SM (``persistent``); ``overlap``: the
    next block's scores issued before this block's softmax (:func:`_v2_keys_overlap`)."""

    block_m: int = 64
    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 3
    warp_specialize: bool = False
    persistent: bool = False
    overlap: bool = False

    def __post_init__(self):
        for name in ("block_m", "block_n", "num_warps"):
            value = runtime.integer(name, getattr(self, name), minimum=1)
            if value & (value - 1) or (name != "num_warps" and value < 16):
                raise ValueError(f"{name}={value} must be a power of two (>= 16 for tiles); e.g. 64 or 128.")
        runtime.integer("num_stages", self.num_stages, minimum=1)
        runtime.strict_bool("warp_specialize", self.warp_specialize)
        runtime.strict_bool("persistent", self.persistent)
        runtime.strict_bool("overlap", self.overlap)
        if self.overlap and self.warp_specialize:
            raise ValueError("overlap=True and warp_specialize=True are two ways to overlap the softmax with the "
                             "products; pick one.")  # fmt: skip


# The fastest of the probed configs per (padded head dim, causal), chosen by timing on the H100
# (`python -m gpulab bench 05 hopper`; the sweep's records are in benchmarks/05_attention_hopper/hopper/).
# HopperConfig() is the starting point for any other.
PREFERRED_V2: dict[tuple[int, bool], HopperConfig] = {
    (128, False): HopperConfig(128, 64, 4, 2),
    (128, True): HopperConfig(64, 64, 4, 3),
    (64, False): HopperConfig(64, 128, 4, 2),
    (64, True): HopperConfig(64, 128, 4, 2),
}


def hopper_config(head_dim: int, is_causal: bool = False) -> HopperConfig:
    """Version 2's tiles for ``head_dim`` (1 to 128): the measured choice for its padded width and ``is_causal``,
    else :class:`HopperConfig`'s defaults."""
    head_dim = runtime.integer("head_dim", head_dim, minimum=1, maximum=128)
    is_causal = runtime.strict_bool("is_causal", is_causal)
    return PREFERRED_V2.get((runtime.dot_block(head_dim), is_causal), HopperConfig())
