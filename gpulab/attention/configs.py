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
"""

from __future__ import annotations

import dataclasses

import torch

from gpulab import runtime

__all__ = ["AttentionConfig", "attention_config", "smem_estimate", "MAX_HEAD_DIM"]

MAX_HEAD_DIM = 128
"""The largest head dim the kernels take: a [BLOCK, 128] fp32 accumulator already uses most of the registers."""


@dataclasses.dataclass(frozen=True)
class AttentionConfig:
    """One launch configuration: tiles of BLOCK_M queries and BLOCK_N keys, head dim padded to BLOCK_D."""

    block_m: int
    block_n: int
    block_d: int
    num_warps: int
    num_stages: int

    def launch(self) -> dict:
        """The keyword arguments a kernel launch takes."""
        return {"num_warps": self.num_warps, "num_stages": self.num_stages}


def smem_estimate(kind: str, block_m: int, block_n: int, block_d: int, itemsize: int, num_stages: int) -> int:
    """Bytes of shared memory one program of ``kind`` ('forward', 'dkdv', 'dq') needs, by the formulas above."""
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
# Head dim 128's backward tiles were measured on the H100 (bf16, B=4, H=8, N=4096; 2026-11-22): dK/dV at
# (32, 64, 8 warps, 2 stages) and dQ at (64, 32, 8, 2) took 5.5 ms against FlashAttention-2's 2.4 ms; the tiles
# below took 1.85 ms. dK/dV with 4 warps spilled ~270 bytes per thread (255 registers) and ran 2x slower.
_PREFERRED = {
    "forward": {64: (128, 64, 4, 3), 128: (128, 64, 8, 3)},
    "dkdv": {64: (32, 128, 4, 3), 128: (64, 128, 8, 3)},
    "dq": {64: (128, 32, 4, 3), 128: (128, 32, 4, 3)},
}


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
    sequence needs (rounded up to a power of two >= 16), so a 17-token sequence does not run 128-row tiles.
    """
    if kind not in _PREFERRED:
        raise ValueError(f"kind={kind!r} is not supported; use 'forward', 'dkdv' or 'dq'.")
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim={head_dim} is not supported; the attention kernels take 1 to {MAX_HEAD_DIM}.")
    block_d = runtime.dot_block(head_dim)
    if interpreter is None:
        interpreter = runtime.INTERPRET
    if interpreter:
        return AttentionConfig(block_m=16, block_n=16, block_d=block_d, num_warps=4, num_stages=1)

    from gpulab import hardware

    spec = hardware.spec(gpu)
    itemsize = torch.empty((), dtype=runtime.as_dtype(dtype)).element_size()
    block_m, block_n, warps, stages = _PREFERRED[kind][64 if block_d <= 64 else 128]
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
