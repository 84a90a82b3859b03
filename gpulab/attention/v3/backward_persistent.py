"""Lesson 4, version 3's backward, step 7: step 5 on a persistent grid (one program per SM, tile after tile).

What you will learn: where a short problem's time goes when each program does little. At N = 1024 a program of
steps 2-6 owns 128 keys and visits 16 query blocks (causal: 2 to 16); at one program per SM (the consumers' 240
registers each fill the register file) nothing hides its start (K, V and the first Q, dO blocks loaded before the
first product) or its end (the last dQ additions, dK and dV stored): the next program starts only once this one
has left. Here ``min(tiles, SMs)`` programs each take tiles ``pid, pid + programs, ...``
(:func:`gpulab.attention.v3.backward_pair.persistent_tile`), and the partitions run on across tiles:

- the producer loads the next tile's K and V as soon as both consumers released this tile's (``kv_free``, after
  their last products, before they store dK and dV), then its Q and dO blocks into the same ring;
- the consumers' ring and dS/dQ buffer phases count query blocks over all the program's tiles (``g``), so the first
  blocks of the next tile are already loaded when the consumers finish storing;
- the writer (:func:`gpulab.attention.v3.backward_dq.dq_writer_persistent`) adds dQ block after block, across
  tiles, while the consumers store and start the next tile.

The arithmetic per (key block, query block) pair is step 5's, in the same order (dK, dV bit for bit the same as
step 5's; dQ's additions in any order).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma_wait

from gpulab import gluon_compat as compat
from gpulab.attention.v3.backward_dq import dq_writer_persistent
from gpulab.attention.v3.backward_pair import (
    dq_product,
    kv_operand,
    next_visit_rows,
    pair_ds,
    persistent_count,
    persistent_tile,
    stats_buffers,
    stats_load,
    stats_slot,
    stats_store,
    store_dkdv,
    visit,
    visit_count,
)

__all__ = ["persistent_backward"]


@gluon.jit
def _producer(descs, bufs, bars, n_q, n_k, n_bh, stats, gw, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
              STATS_SMEM: gl.constexpr, GQA_WIN: gl.constexpr):  # fmt: skip
    """One warp: per tile, K and V (once both consumers freed the last tile's), then its query blocks into the ring
    (the program's g-th block to stage ``g % STAGES``); step 11: with their LSE and D, loaded a block ahead (as
    :func:`gpulab.attention.v3.backward._producer`)."""
    q_desc, k_desc, v_desc, do_desc = descs
    q_smem, do_smem, k_smem, v_smem = bufs
    ready, empty, kv_ready, kv_free = bars
    lse_ptr, delta_ptr, stats_smem = stats
    it = 0
    for k in range(persistent_count(n_k, n_bh, IS_CAUSAL)):
        bkv, start_n, lo, n_m = persistent_tile(k, n_q, n_k, n_bh, IS_CAUSAL, gw, GQA_WIN)
        count = visit_count(n_m, gw, GQA_WIN)
        if STATS_SMEM:
            bh, start_m = next_visit_rows(0, count, lo, n_m, bkv, n_q, gw, GQA_WIN)
            lse, delta = stats_load(lse_ptr, delta_ptr, bh, start_m, n_q)
        mbarrier.wait(kv_free, (k & 1) ^ 1)
        mbarrier.expect(kv_ready, 2 * k_desc.block_type.nbytes)
        compat.async_load(k_desc, [bkv, start_n, 0], kv_ready, k_smem)
        compat.async_load(v_desc, [bkv, start_n, 0], kv_ready, v_smem)
        for i in range(count):
            g = it + i
            s = g % STAGES
            mbarrier.wait(empty.index(s), ((g // STAGES) & 1) ^ 1)
            if STATS_SMEM:
                stats_store(stats_smem, s, lse, delta)
                bh, start_m = next_visit_rows(i + 1, count, lo, n_m, bkv, n_q, gw, GQA_WIN)
                lse, delta = stats_load(lse_ptr, delta_ptr, bh, start_m, n_q)
            bh, start_m = visit(i, lo, n_m, bkv, gw, GQA_WIN)
            mbarrier.expect(ready.index(s), 2 * q_desc.block_type.nbytes)
            compat.async_load(q_desc, [bh, start_m, 0], ready.index(s), q_smem.index(s))
            compat.async_load(do_desc, [bh, start_m, 0], ready.index(s), do_smem.index(s))
        it += gl.maximum(count, 0)


@gluon.jit
def _consumer(bufs, bars, lse_ptr, delta_ptr, dk_ptr, dv_ptr, n_q, n_k, n_bh, qk_scale, scale, gw,
              CID: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
              KV_REGS: gl.constexpr, STATS_SMEM: gl.constexpr, GQA_WIN: gl.constexpr):  # fmt: skip
    """Consumer warpgroup ``CID``: per tile, step 5's loop over its query blocks (dK, dV of keys
    ``[start_n + 64 CID, +64)``), K and V freed after the last products, then dK and dV stored."""
    q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, stats_smem = bufs
    ready, empty, kv_ready, kv_free, ds_full, ds_free, dq_full, dq_free = bars
    d_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])  # fmt: skip
    HALF: gl.constexpr = HEAD_DIM // 2
    k_all = k_smem.reshape([128, HEAD_DIM])
    k_buf = k_all.slice(64 * CID, 64, dim=0)
    v_buf = v_smem.reshape([128, HEAD_DIM]).slice(64 * CID, 64, dim=0)
    it = 0
    for k in range(persistent_count(n_k, n_bh, IS_CAUSAL)):
        bkv, start_n, lo, n_m = persistent_tile(k, n_q, n_k, n_bh, IS_CAUSAL, gw, GQA_WIN)
        count = visit_count(n_m, gw, GQA_WIN)
        key0 = start_n + 64 * CID
        dk = gl.zeros([64, HEAD_DIM], gl.float32, layout=d_layout)
        dv = gl.zeros([64, HEAD_DIM], gl.float32, layout=d_layout)
        mbarrier.wait(kv_ready, k & 1)
        k_op = kv_operand(k_buf, KV_REGS % 2 == 1)  # step 10: this tile's K and/or V in registers
        v_op = kv_operand(v_buf, KV_REGS >= 2)
        for i in range(count):
            g = it + i
            s = g % STAGES
            mbarrier.wait(ready.index(s), (g // STAGES) & 1)
            bh, start_m = visit(i, lo, n_m, bkv, gw, GQA_WIN)
            q_buf = q_smem.index(s).reshape([64, HEAD_DIM])
            do_buf = do_smem.index(s).reshape([64, HEAD_DIM])
            b = g % 2
            ds_all = ds_smem.index(b)
            mbarrier.wait(ds_free.index(b), ((g // 2) & 1) ^ 1)
            dk, dv = pair_ds(q_buf, do_buf, k_op, v_op, ds_all.slice(64 * CID, 64, dim=1), dk, dv, lse_ptr,
                             delta_ptr, bh, key0, start_m, n_q, qk_scale, HEAD_DIM, IS_CAUSAL,
                             stats_slot(stats_smem, s), STATS_SMEM, gw, GQA_WIN)  # fmt: skip
            mbarrier.arrive(ds_full.index(b), count=1)
            mbarrier.wait(ds_full.index(b), (g // 2) & 1)
            dq = dq_product(ds_all, k_all, CID * HALF, HALF)
            dq, dk = warpgroup_mma_wait(0, deps=(dq, dk))
            mbarrier.arrive(ds_free.index(b), count=1)
            mbarrier.arrive(empty.index(s), count=1)
            mbarrier.wait(dq_free.index(b), ((g // 2) & 1) ^ 1)
            dq_smem.index(2 * b + CID).store(dq)
            mbarrier.arrive(dq_full.index(b), count=1)
        mbarrier.arrive(kv_free, count=1)  # every product reading K and V of this tile is done
        store_dkdv(dk, dv, dk_ptr, dv_ptr, bkv, key0, n_k, scale, HEAD_DIM)
        it += gl.maximum(count, 0)


@gluon.jit
def _consumer0(bufs, bars, lse_ptr, delta_ptr, dk_ptr, dv_ptr, n_q, n_k, n_bh, qk_scale, scale, gw,
               HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
               KV_REGS: gl.constexpr, STATS_SMEM: gl.constexpr, GQA_WIN: gl.constexpr):  # fmt: skip
    _consumer(bufs, bars, lse_ptr, delta_ptr, dk_ptr, dv_ptr, n_q, n_k, n_bh, qk_scale, scale, gw, 0, HEAD_DIM,
              STAGES, IS_CAUSAL, KV_REGS, STATS_SMEM, GQA_WIN)  # fmt: skip


@gluon.jit
def _consumer1(bufs, bars, lse_ptr, delta_ptr, dk_ptr, dv_ptr, n_q, n_k, n_bh, qk_scale, scale, gw,
               HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
               KV_REGS: gl.constexpr, STATS_SMEM: gl.constexpr, GQA_WIN: gl.constexpr):  # fmt: skip
    _consumer(bufs, bars, lse_ptr, delta_ptr, dk_ptr, dv_ptr, n_q, n_k, n_bh, qk_scale, scale, gw, 1, HEAD_DIM,
              STAGES, IS_CAUSAL, KV_REGS, STATS_SMEM, GQA_WIN)  # fmt: skip


@gluon.jit
def persistent_backward(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, dq_out_ptr,
                        cnt_ptr, n_q, n_k, n_bh, qk_scale, scale, gw, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
                        IS_CAUSAL: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
                        WRITER_REGS: gl.constexpr, DQ_CAST: gl.constexpr, KV_REGS: gl.constexpr,
                        STATS_SMEM: gl.constexpr, GQA_WIN: gl.constexpr):  # fmt: skip
    """Step 7's kernel body (:func:`gpulab.attention.v3.backward.attention_backward_v3_kernel` with STEP = 7): step
    5's buffers plus ``kv_free`` (both consumers done with K and V: count 2). Grid: (min(tiles, SMs),)."""
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 64, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 64, HEAD_DIM], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [1, 128, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [1, 128, HEAD_DIM], v_desc.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [2, 64, 128], gl.NVMMASharedLayout.get_default_for([64, 128], dtype))
    dq_layout: gl.constexpr = gl.SwizzledSharedLayout(8, 1, HEAD_DIM // 16, order=[1, 0])
    dq_smem = gl.allocate_shared_memory(gl.float32, [4, 64, HEAD_DIM // 2], dq_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    kv_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ds_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ds_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    dq_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    dq_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(ready.index(st), count=1)
        mbarrier.init(empty.index(st), count=2)
    for b in gl.static_range(2):
        mbarrier.init(ds_full.index(b), count=2)
        mbarrier.init(ds_free.index(b), count=2)
        mbarrier.init(dq_full.index(b), count=2)
        mbarrier.init(dq_free.index(b), count=1)
    mbarrier.init(kv_ready, count=1)
    mbarrier.init(kv_free, count=2)
    stats_smem = stats_buffers(STAGES)  # step 11's LSE and D slots (unused without STATS_SMEM)
    bufs = (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, stats_smem)
    bars = (ready, empty, kv_ready, kv_free, ds_full, ds_free, dq_full, dq_free)
    # fmt: off
    gl.warp_specialize(
        [(_consumer0, (bufs, bars, lse_ptr, delta_ptr, dk_ptr, dv_ptr, n_q, n_k, n_bh, qk_scale, scale, gw,
                       HEAD_DIM, STAGES, IS_CAUSAL, KV_REGS, STATS_SMEM, GQA_WIN)),
         (_consumer1, (bufs, bars, lse_ptr, delta_ptr, dk_ptr, dv_ptr, n_q, n_k, n_bh, qk_scale, scale, gw,
                       HEAD_DIM, STAGES, IS_CAUSAL, KV_REGS, STATS_SMEM, GQA_WIN)),
         (_producer, ((q_desc, k_desc, v_desc, do_desc), (q_smem, do_smem, k_smem, v_smem),
                      (ready, empty, kv_ready, kv_free), n_q, n_k, n_bh, (lse_ptr, delta_ptr, stats_smem), gw,
                      STAGES, IS_CAUSAL, STATS_SMEM, GQA_WIN)),
         (dq_writer_persistent, (dq_smem, dq_full, dq_free, dq_ptr, dq_out_ptr, cnt_ptr, n_q, n_k, n_bh, scale, gw,
                                 HEAD_DIM, IS_CAUSAL, DQ_CAST, GQA_WIN))],
        [4, 1, 2], [CONSUMER_REGS, PRODUCER_REGS, WRITER_REGS])
    # fmt: on
