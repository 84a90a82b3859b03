"""Lesson 4, version 3's backward, steps 5-6: dQ through shared memory, added into global memory by a writer.

What you will learn: how a partition of its own takes the atomic additions off the warps that multiply. In steps 1-4
(:mod:`gpulab.attention.v3.backward`) each consumer warpgroup adds its dQ tile [64 queries, D/2] into the fp32
buffer itself: 32 floats per thread per query block, issued between its tensor-core products. FlashAttention-3 has
the consumers store dQ in shared memory and a separate warp send it with TMA's bulk reduce-add
(``cp.reduce.async.bulk``); Gluon's Hopper API on Triton 3.6 has no bulk reduction and no way to name a shared-memory
address in inline PTX, so here the writer (two warps, 24 registers each, beside the producer warp in the third
warpgroup) loads a few rows at a time from shared memory and adds them with 4-float atomic instructions
(``red.global.add.v4.f32``).

Buffers (fp32; :func:`gpulab.attention.v3.backward.attention_backward_v3_kernel` allocates them with 8-float swizzle
units and phase = row mod D/16, one phase per 32-byte unit of a row of D/2 floats, so that the consumers' stores
from the wgmma layout (eight rows x 32 bytes per instruction) reach every bank once per 128 bytes, and a chunk of the
writer's 8 rows is whole periods, one contiguous tile; a phase of row mod 256/D, two phases for eight 32-byte units
at D = 128, made each of those stores take twice its ideal wavefronts: notes/attention-hopper.md, 'Backward
configs'):
``dq_smem`` [4, 64, D/2]; barriers ``dq_full`` (both consumers stored, count 2) and ``dq_free`` (the writer has read,
count 1), two of each. The dQ additions still arrive in any order (dQ is not bitwise reproducible; dK and dV are).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from gpulab import gluon_compat as compat
from gpulab.attention.v3.backward_pair import (
    key_start,
    persistent_count,
    persistent_tile,
    query_range,
    visit,
    visit_count,
)

__all__ = ["add_block", "dq_writer", "dq_writer_persistent", "dq_block_done"]


@gluon.jit
def dq_block_done(dq_ptr, dq_out_ptr, cnt_ptr, bh, qb, n_q, n_k, scale, HEAD_DIM: gl.constexpr,
                  IS_CAUSAL: gl.constexpr):  # fmt: skip
    """Step 8: called by the writer (both warps) once it has issued all its additions into query block ``qb`` of
    head ``bh``. It counts this program's arrival on the block's counter (``cnt_ptr`` int32 [B*H, ceil(Nq/64)]);
    the program that arrives last (count = the key tiles that add into the block: ceil(Nk/128), causal
    min(ceil(Nk/128), qb // 2 + 1)) reads the block's fp32 sums, writes ``scale * sum`` in dQ's dtype to
    ``dq_out_ptr``, zeros the block and its counter back (ready for the next call: no zeroing launch).

    Memory order: the writer's threads issue their additions (relaxed, gpu scope), meet at a barrier of the writer's
    two warps, then one thread adds 1 to the counter with acquire-release semantics at gpu scope (release: every
    program's additions happen before its arrival; acquire: the last arrival sees them all); the result reaches the
    other threads through the barrier of the scalar atomic's broadcast, and the loads go to L2 (``.cg``), where the
    atomics were performed."""
    HALF: gl.constexpr = HEAD_DIM // 2
    ROWS: gl.constexpr = 2 * (128 // HALF)
    NCH: gl.constexpr = 64 // ROWS
    w_layout: gl.constexpr = gl.BlockedLayout([1, 4], [32 // (HALF // 4), HALF // 4], [2, 1], [1, 0])
    compat.barrier()  # both writer warps have issued this block's additions
    n_kb = gl.cdiv(n_k, 128)
    expected = n_kb
    if IS_CAUSAL:  # key tiles kb with 128 kb <= 64 qb (first_query) add into the block
        expected = gl.minimum(n_kb, qb // 2 + 1)
    cnt = cnt_ptr + bh * gl.cdiv(n_q, 64) + qb
    old = gl.atomic_add(cnt, 1, sem="acq_rel", scope="gpu")
    if old == expected - 1:
        rows0 = gl.arange(0, ROWS, layout=gl.SliceLayout(1, w_layout))
        cols0 = gl.arange(0, HALF, layout=gl.SliceLayout(0, w_layout))
        acc = dq_ptr + bh.to(gl.int64) * n_q * HEAD_DIM  # this head's rows; int32 offsets within
        out = dq_out_ptr + bh.to(gl.int64) * n_q * HEAD_DIM
        for c in gl.static_range(2):  # the additions' chunks [ROWS, D/2]: 4 floats per lane
            for r in range(NCH):
                rows = qb * 64 + r * ROWS + rows0
                offs = rows[:, None] * HEAD_DIM + (c * HALF + cols0)[None, :]
                mask = (rows < n_q)[:, None]
                x = gl.load(acc + offs, mask=mask, other=0.0, cache_modifier=".cg")
                gl.store(out + offs, (x * scale).to(dq_out_ptr.dtype.element_ty), mask=mask)
                gl.store(acc + offs, gl.zeros_like(x), mask=mask)
        gl.atomic_xchg(cnt, 0, sem="relaxed", scope="gpu")


@gluon.jit
def add_block(dq_smem, b, blk, n_rows, HEAD_DIM: gl.constexpr, STEP: gl.constexpr):
    """One query block's dQ tile [64, D] from the writer's buffer ``b`` of ``dq_smem`` (step 5 and 7: consumer c's
    columns at index 2 b + c; step 6: one buffer, the two consumers' tiles, summed c0 + c1) added into
    dQ's fp32 buffer at ``blk`` (the block's first row), 8 rows at a time. A whole block (``n_rows >= 64``) goes
    without a mask: no branch between chunks, so the loads of the next chunks can run ahead of this one's additions
    (with a mask each chunk was a branch of its own, and each load waited for the addition before it:
    notes/attention-hopper.md, 'Backward configs'). The last block of a length that is not a multiple of 64 adds its
    first ``n_rows`` rows only."""
    if n_rows >= 64:
        _add_chunks(dq_smem, b, blk, n_rows, HEAD_DIM, STEP, False)
    else:
        _add_chunks(dq_smem, b, blk, n_rows, HEAD_DIM, STEP, True)


@gluon.jit
def _add_chunks(dq_smem, b, blk, n_rows, HEAD_DIM: gl.constexpr, STEP: gl.constexpr, MASKED: gl.constexpr):
    HALF: gl.constexpr = HEAD_DIM // 2
    ROWS: gl.constexpr = 8  # a chunk: a whole swizzle period, 4 floats per lane of the writer's 2 warps, 8 at D = 128
    NCH: gl.constexpr = 64 // ROWS
    # the same bytes as [buffer * consumer * chunk, ROWS, D/2]: the swizzle repeats every D/16 rows (4 or 8)
    chunks = compat.reinterpret(dq_smem, gl.float32, [4 * 64 // ROWS, ROWS, HALF], dq_smem.layout)
    first = 2 * b * NCH
    w_layout: gl.constexpr = gl.BlockedLayout([1, 4], [32 // (HALF // 4), HALF // 4], [2, 1], [1, 0])
    rows0 = gl.arange(0, ROWS, layout=gl.SliceLayout(1, w_layout))
    cols0 = gl.arange(0, HALF, layout=gl.SliceLayout(0, w_layout))
    for c in gl.static_range(2):  # step 5: consumer c's columns; step 6: column half c
        for r in gl.static_range(NCH):
            if STEP == 6:
                x = chunks.index(c * NCH + r).load(w_layout) + chunks.index((2 + c) * NCH + r).load(w_layout)
            else:
                x = chunks.index(first + c * NCH + r).load(w_layout)
            offs = (r * ROWS + rows0)[:, None] * HEAD_DIM + (c * HALF + cols0)[None, :]  # within the block
            if MASKED:
                gl.atomic_add(blk + offs, x, mask=((r * ROWS + rows0) < n_rows)[:, None], sem="relaxed")
            else:
                gl.atomic_add(blk + offs, x, sem="relaxed")


@gluon.jit
def dq_writer(dq_smem, dq_full, dq_free, dq_ptr, dq_out_ptr, cnt_ptr, n_q, n_k, scale, gw, HEAD_DIM: gl.constexpr,
              IS_CAUSAL: gl.constexpr, STEP: gl.constexpr, DQ_CAST: gl.constexpr,
              GQA_WIN: gl.constexpr = 0):  # fmt: skip
    """Steps 5-6's writer (two warps): for each query block, once both consumers stored their part of dQ (fp32,
    ``dq_full``), add it into dQ's buffer in global memory a few rows at a time (4 floats per atomic instruction)
    and free the buffer (``dq_free``). Step 5: buffer ``i % 2``, consumer c's columns [c D/2, +D/2) at index
    2 b + c. Step 6: one buffer, consumer c's column half h at index 2 c + h; the writer adds the two consumers'
    halves (c0 + c1, always in that order) before the atomic addition. The consumers issue no atomics. Grouped heads
    and windows: the visits of :func:`gpulab.attention.v3.backward_pair.visit`, each into its query head's rows."""
    bh = gl.program_id(1)
    lo, n_m = query_range(key_start(gw, GQA_WIN), 128, n_q, n_k, gw, IS_CAUSAL, GQA_WIN)
    rows = n_q
    if GQA_WIN >= 8:  # packed: dQ's buffer [Hq, Tq, D], n_q the sequence's end
        rows = gw[5]
    head = dq_ptr + bh.to(gl.int64) * rows * HEAD_DIM  # this head's rows; int32 offsets within
    for i in range(visit_count(n_m, gw, GQA_WIN)):
        start_m = lo + i * 64
        if GQA_WIN % 2 == 1:  # the visit's query head
            bh, start_m = visit(i, lo, n_m, gl.program_id(1), gw, GQA_WIN)
            head = dq_ptr + bh.to(gl.int64) * rows * HEAD_DIM
        if STEP == 5:
            b = i % 2
            mbarrier.wait(dq_full.index(b), (i // 2) & 1)
        else:
            b = 0
            mbarrier.wait(dq_full.index(0), i & 1)
        add_block(dq_smem, b, head + start_m * HEAD_DIM, n_q - start_m, HEAD_DIM, STEP)
        mbarrier.arrive(dq_free.index(b), count=1)
        if DQ_CAST:
            dq_block_done(dq_ptr, dq_out_ptr, cnt_ptr, bh, start_m // 64, n_q, n_k, scale, HEAD_DIM, IS_CAUSAL)


@gluon.jit
def dq_writer_persistent(dq_smem, dq_full, dq_free, dq_ptr, dq_out_ptr, cnt_ptr, n_q, n_k, n_bh, scale, gw,
                         HEAD_DIM: gl.constexpr, IS_CAUSAL: gl.constexpr, DQ_CAST: gl.constexpr,
                         GQA_WIN: gl.constexpr = 0):  # fmt: skip
    """Step 7's writer: step 5's (buffer ``g % 2`` for the program's g-th query block, counted over all its tiles),
    tile after tile in :func:`gpulab.attention.v3.backward_pair.persistent_tile`'s order (a tile's ``bh``: its KV
    head; grouped, each visit's query head)."""
    it = 0
    for k in range(persistent_count(n_k, n_bh, IS_CAUSAL)):
        bkv, start_n, lo, n_m = persistent_tile(k, n_q, n_k, n_bh, IS_CAUSAL, gw, GQA_WIN)
        bh = bkv
        head = dq_ptr + bh.to(gl.int64) * n_q * HEAD_DIM
        count = visit_count(n_m, gw, GQA_WIN)
        for i in range(count):
            g = it + i
            b = g % 2
            start_m = lo + i * 64
            if GQA_WIN % 2 == 1:
                bh, start_m = visit(i, lo, n_m, bkv, gw, GQA_WIN)
                head = dq_ptr + bh.to(gl.int64) * n_q * HEAD_DIM
            mbarrier.wait(dq_full.index(b), (g // 2) & 1)
            add_block(dq_smem, b, head + start_m * HEAD_DIM, n_q - start_m, HEAD_DIM, 5)
            mbarrier.arrive(dq_free.index(b), count=1)
            if DQ_CAST:
                dq_block_done(dq_ptr, dq_out_ptr, cnt_ptr, bh, start_m // 64, n_q, n_k, scale, HEAD_DIM, IS_CAUSAL)
        it += gl.maximum(count, 0)
