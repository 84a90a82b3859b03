"""Lesson 4, version 3: the forward's producer warp, which only issues TMA copies.

:func:`producer` is one partition of :func:`gpulab.attention.v3.forward.attention_forward_v3_kernel` (the buffers and
barriers it fills are described there): per tile, the consumers' Q tiles, then the tile's K and V blocks into the ring
of shared-memory stages. Padded problems take their tiles from :func:`gpulab.attention.v3.tiles.tile`, packed batches
(``VARLEN``) from :func:`gpulab.attention.v3.tiles.varlen_tile`, which reads the sequence's offsets on the device.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from gpulab import gluon_compat as compat
from gpulab.attention.v3 import tiles

__all__ = ["producer"]


@gluon.jit
def producer(descs, bufs, bars, cu, n_q, n_k, n_bh, group, left, right, n_tiles, CONSUMERS: gl.constexpr,
             BLOCK_N: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, QBUF: gl.constexpr,
             PAIRS: gl.constexpr, GQA: gl.constexpr, HAS_LEFT: gl.constexpr, HAS_RIGHT: gl.constexpr,
             VARLEN: gl.constexpr):  # fmt: skip
    """One warp: per tile, the consumers' Q tiles (once each has stored its previous output), then K and V block by
    block into the ring, from the tile's first key ``lo`` on. With grouped-query heads (``GQA``) q's row
    ``bh = b Hq + h`` reads k's and v's row ``bh // group = b Hkv + h // group`` (Hq = group Hkv): SDPA's KV head
    ``h // (Hq // Hkv)``, nothing copied. The g-th K/V block overall goes to stage ``g % STAGES`` once every
    consumer released that stage's previous use (phase ``(g // STAGES) & 1``; a fresh barrier counts as having
    completed the phase before 0, so the first lap waits on parity 1 and passes).

    ``VARLEN``: ``bh`` is the head ``h`` of descriptors over packed [H, T, D] views, and rows are offset by the
    sequence's first query row ``q0`` and first key row ``k0`` (``cu = (cu_q, cu_k)``; ``n_k`` holds the query tiles
    of the longest sequence, ``n_bh`` the heads, ``cu[2]`` the sequences). A tile past its sequence's end is skipped
    (by every partition alike, so the phases stay in step); a tile's last copies run on into the next sequence's
    rows: the consumers mask them."""
    q_desc, k_desc, v_desc = descs
    q_smem, k_smem, v_smem = bufs
    q_ready, q_empty, k_ready, v_ready, k_empty, v_empty, turn = bars
    it = 0
    tile_i = 0
    for tile in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        if VARLEN:
            bh, start_m, lo, n_blocks, first_full, full, q0, k0, len_q, len_k = tiles.varlen_tile(tile, cu[0],
                cu[1], n_k, n_bh, cu[2], left, right, 64 * CONSUMERS, BLOCK_N, HAS_LEFT, HAS_RIGHT)  # fmt: skip
            live = start_m < len_q  # a tile past its sequence's end: the consumers skip it too
        else:
            bh, start_m, lo, n_blocks, first_full, full = tiles.tile(tile, n_q, n_k, n_bh, left, right,
                64 * CONSUMERS, BLOCK_N, IS_CAUSAL, PAIRS, HAS_LEFT, HAS_RIGHT)  # fmt: skip
            q0 = 0
            k0 = 0
            live = True
        if live:
            kv_bh = bh
            if GQA:
                kv_bh = bh // group
            qb = (tile_i % QBUF) * CONSUMERS
            for c in gl.static_range(CONSUMERS):
                mbarrier.wait(q_empty.index(qb + c), ((tile_i // QBUF) & 1) ^ 1)
                mbarrier.expect(q_ready.index(qb + c), q_desc.block_type.nbytes)
                compat.async_load(q_desc, [bh, q0 + start_m + c * 64, 0], q_ready.index(qb + c), q_smem.index(qb + c))
            for j in range(n_blocks):
                g = it + j
                s = g % STAGES
                phase = (g // STAGES) & 1
                mbarrier.wait(k_empty.index(s), phase ^ 1)
                mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
                compat.async_load(k_desc, [kv_bh, k0 + lo + j * BLOCK_N, 0], k_ready.index(s), k_smem.index(s))
                mbarrier.wait(v_empty.index(s), phase ^ 1)
                mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
                compat.async_load(v_desc, [kv_bh, k0 + lo + j * BLOCK_N, 0], v_ready.index(s), v_smem.index(s))
            it += n_blocks
            tile_i += 1
