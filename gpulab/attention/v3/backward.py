"""Lesson 4, version 3: FlashAttention's backward in Gluon (Hopper), one pass per key block with dQ added atomically.

What you will learn: how the backward's five products per block pair map onto Hopper's asynchronous tensor-core
instructions and a producer warp. With ``S = scale Q K^T``, ``P = exp(S - LSE)`` (recomputed from the forward's saved
log-sum-exp), ``D = rowsum(dO * O)`` (one small kernel first), for each key block j and each query block i that sees
it, one consumer warpgroup computes, in the transposed orientation (keys are the rows, so dK and dV stay in its
registers for the whole loop):

    S^T  = K_j Q_i^T            P^T  = exp2(S^T scale log2 e - LSE_i log2 e)     [64 keys, 64 queries]
    dP^T = V_j dO_i^T           dS^T = P^T * (dP^T - D_i)
    dV_j += P^T dO_i            dK_j += dS^T Q_i                                  [64 keys, d], fp32 registers
    dQ_i += dS K_j              (dS through shared memory; fp32 atomic additions into a [B*H, Nq, d] buffer)

``dK`` is scaled once at the end, ``dQ`` once by the host (``dQ = scale * buffer``, cast to the inputs' dtype). The
dK and dV of a key block are each one warpgroup's sums in a fixed order (bit for bit the same every run); dQ's
additions arrive in any order (fp32 rounding differs from run to run).

The kernel is built in numbered steps (``V3BackwardConfig.step``, :data:`STEPS`):

1. one warpgroup per program (64 keys), Q and dO blocks through a ring of TMA stages that the same warps refill
   ``STAGES - 1`` blocks ahead; S^T and dP^T issued together, P^T computed while dP^T's product runs;
2. warp specialization: a producer warp fills the Q/dO ring (and loads K and V once), two consumer warpgroups each own
   64 of the program's 128 keys and share every Q/dO stage (half the loads of step 1 per key);
3. dS shared: both consumers write their halves of dS [64 queries, 128 keys] to shared memory, then each computes
   half of dQ's columns over all 128 keys: one atomic addition per dQ element per 128 keys instead of per 64;
4. step 3 with dQ one query block late (the consumers may be a block apart instead of meeting every block) and the
   next block's S^T and dP^T issued before this block's atomic additions;
5. step 3 with dQ through shared memory: each consumer stores its dQ columns (fp32) in one of two buffers and a writer
   partition (:func:`gpulab.attention.v3.backward_dq.dq_writer`, two warps beside the producer) adds them into the
   global buffer with 4-float atomics; the consumers issue no atomic instruction;
6. step 5 with each consumer's own dS and dS K over its 64 keys (the consumers never meet; the writer sums both);
7. step 5 on a persistent grid (:mod:`gpulab.attention.v3.backward_persistent`): one program per SM walks the
   (head, key block) tiles, the next tile's K, V and first Q/dO blocks loaded while this one's dK, dV are stored;
8. (``V3BackwardConfig.dq_cast``, on steps 5 and 7) no launch around the kernel for dQ: after its additions into a
   query block the writer counts its arrival (one acquire-release atomic per block), and the last program to arrive
   writes ``scale * buffer`` in dQ's dtype and zeros the block and its counter back, so the buffer kept between calls
   (:data:`gpulab.attention.v3.backward_launch.WORKSPACES`) needs no zeroing (:func:`gpulab.attention.v3.backward_dq.
   dq_block_done`). Correct and race-free on the H100, but slower: off by default;
9. (``V3BackwardConfig.fused_prep``, any step) D's launch also zeroes dQ's fp32 buffer
   (:func:`gpulab.attention.shared.attention_preprocess_zero_kernel`): one launch before the kernel instead of two.
   Within the noise: off by default (notes/attention-hopper.md, 'Backward configs');
10. (``V3BackwardConfig.kv_regs``, steps 3, 5 and 7) a consumer's K and/or V slice [64, D] loaded once into
   registers in the wgmma A-operand layout (:func:`gpulab.attention.v3.backward_pair.kv_operand`): S^T = K Q^T and
   dP^T = V dO^T then read only Q and dO from shared memory. Why: per query block a program (128 keys, two
   consumers) moves 23 tiles of 128 D bytes through shared memory (Q and dO landing, 2; S^T, dP^T and dS K reading
   A and B, 4 each; dV and dK reading B, 2 each; dS stored, 1 at D = 128; dQ's fp32 tile written and read, 4): 368 KB
   at D = 128 against 5 * 2 * 64 * 128 * D flops, about 2560 tensor-core clocks at 4096 flops per clock, while
   shared memory delivers 128 bytes per clock (2900 clocks): the bandwidth, not the tensor cores, sets the pace.
   Each of K, V in registers takes two tiles off. It costs D/4 registers per thread each: on at head dim 64, off
   at 128, where 32 more do not fit beside dK, dV and the scores.

:func:`backward_config` picks, on the H100 records (``benchmarks/05_attention_hopper/v3/``, ``bwd`` records;
notes/attention-hopper.md, 'Backward configs'), step 5 (:data:`MEASURED`) and, for query lengths up to 4096 at head dim
64, step 7 (:data:`MEASURED_SHORT`), both with K and V in registers at head dim 64 (step 10); step 4 lost to register
pressure, step 6 to its single dQ buffer and its second dQ product, step 7 at N = 16384 and at head dim 128 to its extra
spills. The plan takes version 3's backward from the length where it took less time than the shipped two-kernel backward
on every problem (:data:`gpulab.attention.plan.V3_BACKWARD_MIN_SEQ`). The host side keeps one launch plan per signature
(:mod:`gpulab.attention.v3.backward_launch`).

:mod:`gpulab.attention.measure.v3_backward_model` replays this order (key blocks, query blocks, the points where P^T and
dS^T are rounded to the inputs' dtype, the fp32 accumulators) in PyTorch;
:mod:`gpulab.attention.measure.v3_compile_check` reads the products and register budgets off the PTX
(:func:`gpulab.attention.measure.v3_compile_check.compile_backward_sm90`).

Grouped-query heads and sliding windows (steps 2, 3, 5, 6, 7; ``GQA_WIN``, :mod:`gpulab.attention.v3.backward_pair`):
a program owns a K/V block of one KV head and visits each query head of its group over the query blocks that see
the block (the window bounds that range; only the blocks an edge of the window crosses are masked), its dK and dV
summed over the group in registers, dQ added at each query head's rows. Plain problems compile none of it.

Shapes: q, o, do [B, Hq, Nq, D], k, v [B, Hkv, Nk, D] (Hkv a divisor of Hq), D in (64, 128), float16 or bfloat16;
lse [B, Hq, Nq] float32 (natural log), the forward's. Entry points: :func:`backward_supported` (version 3's
forward's conditions, grouped heads allowed) and :func:`attention_backward`.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

from gpulab import gluon_compat as compat
from gpulab import runtime
from gpulab.attention.reference import check_window, default_scale
from gpulab.attention.shared import attention_preprocess_kernel, attention_preprocess_zero_kernel
from gpulab.attention.v3.backward_configs import (
    BLOCK_M,
    KEYS_PER_WARPGROUP,
    MEASURED,
    MEASURED_SHORT,
    SHORT_SEQ,
    STEPS,
    V3BackwardConfig,
    backward_config,
    constexprs,
    gqa_win,
)
from gpulab.attention.v3.backward_dq import dq_writer
from gpulab.attention.v3.backward_launch import PLANS, BackwardPlan, persistent_programs
from gpulab.attention.v3.backward_pair import (
    dq_add,
    dq_product,
    first_query,
    key_start,
    kv_operand,
    next_visit_rows,
    pair,
    pair_ds,
    pair_rest,
    query_range,
    scores,
    seq_bounds,
    stats_buffers,
    stats_load,
    stats_slot,
    stats_store,
    store_dkdv,
    visit,
    visit_count,
)
from gpulab.attention.v3.backward_persistent import persistent_backward
from gpulab.attention.v3.forward import smem_layouts, supported

__all__ = ["STEPS", "V3BackwardConfig", "backward_config", "supported", "backward_supported", "attention_backward",
           "constexprs",
           "BLOCK_M", "KEYS_PER_WARPGROUP", "MEASURED", "MEASURED_SHORT", "SHORT_SEQ"]  # fmt: skip
# (the launch configuration lives in backward_configs, the host launch in backward_launch, step 5-6's writer in
# backward_dq; this module re-exports what its callers used to import from here)

# ----------------------------------------------------------------------------------------------------------------
# Step 1: one warpgroup, no partitions. The ring's stage s holds query block i with i % STAGES == s; block i + STAGES
# - 1 is issued at the top of iteration i, into the stage block i - 1 used (its products were waited for, and a
# thread barrier makes sure every warp is past them).
# ----------------------------------------------------------------------------------------------------------------


@gluon.jit
def _step1(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, n_q, n_k, qk_scale, scale,
           HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr):  # fmt: skip
    dtype: gl.constexpr = q_desc.dtype
    bh = gl.program_id(1)
    start_n = gl.program_id(0) * 64
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 64, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 64, HEAD_DIM], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [1, 64, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [1, 64, HEAD_DIM], v_desc.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [64, 64], gl.NVMMASharedLayout.get_default_for([64, 64], dtype))
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(ready.index(st), count=1)
    mbarrier.init(kv_ready, count=1)
    mbarrier.expect(kv_ready, 2 * k_desc.block_type.nbytes)
    compat.async_load(k_desc, [bh, start_n, 0], kv_ready, k_smem)
    compat.async_load(v_desc, [bh, start_n, 0], kv_ready, v_smem)
    lo = first_query(start_n, IS_CAUSAL)
    n_m = gl.cdiv(n_q - lo, 64)
    for i in gl.static_range(STAGES - 1):
        if i < n_m:
            mbarrier.expect(ready.index(i), 2 * q_desc.block_type.nbytes)
            compat.async_load(q_desc, [bh, lo + i * 64, 0], ready.index(i), q_smem.index(i))
            compat.async_load(do_desc, [bh, lo + i * 64, 0], ready.index(i), do_smem.index(i))
    d_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])  # fmt: skip
    dk = gl.zeros([64, HEAD_DIM], gl.float32, layout=d_layout)
    dv = gl.zeros([64, HEAD_DIM], gl.float32, layout=d_layout)
    k_buf = k_smem.reshape([64, HEAD_DIM])
    v_buf = v_smem.reshape([64, HEAD_DIM])
    mbarrier.wait(kv_ready, 0)
    for i in range(n_m):
        nxt = i + STAGES - 1
        if nxt < n_m:
            compat.barrier()  # every warp is done with stage nxt % STAGES (block i - 1)
            sn = nxt % STAGES
            mbarrier.expect(ready.index(sn), 2 * q_desc.block_type.nbytes)
            compat.async_load(q_desc, [bh, lo + nxt * 64, 0], ready.index(sn), q_smem.index(sn))
            compat.async_load(do_desc, [bh, lo + nxt * 64, 0], ready.index(sn), do_smem.index(sn))
        s = i % STAGES
        mbarrier.wait(ready.index(s), (i // STAGES) & 1)
        dk, dv = pair(q_smem.index(s).reshape([64, HEAD_DIM]), do_smem.index(s).reshape([64, HEAD_DIM]), k_buf,
                       v_buf, ds_smem, dk, dv, lse_ptr, delta_ptr, dq_ptr, bh, start_n, lo + i * 64, n_q, qk_scale,
                       HEAD_DIM, IS_CAUSAL)  # fmt: skip
    store_dkdv(dk, dv, dk_ptr, dv_ptr, bh, start_n, n_k, scale, HEAD_DIM)


# ----------------------------------------------------------------------------------------------------------------
# Steps 2-4: partitions. The program owns keys [start_n, start_n + 128): consumer c the 64 from start_n + 64 c. Buffers:
#   k_smem[c], v_smem[c] [1, 64, D]    consumer c's keys and values (the producer loads them once; kv_ready)
#   q_smem[s], do_smem[s] [1, 64, D]   stage s of the Q/dO ring (ready[s]: landed; empty[s]: both consumers done)
#   ds_smem[c] [64, 64]                consumer c's dS
# ----------------------------------------------------------------------------------------------------------------


@gluon.jit
def _producer(descs, bufs, bars, n_q, n_k, stats, gw, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
              STATS_SMEM: gl.constexpr, GQA_WIN: gl.constexpr):  # fmt: skip
    """One warp: K and V of both consumers, then query block after query block into the ring. Visit i (a query
    block; grouped heads: of one of the group's query heads, :func:`~gpulab.attention.v3.backward_pair.visit`) goes
    to stage ``i % STAGES`` once both consumers released its previous use (phase ``(i // STAGES) & 1``; a fresh
    barrier counts as having completed the phase before 0, so the first lap passes). Step 11 (``STATS_SMEM``): the
    block's LSE and D too, into ``stats`` = (lse_ptr, delta_ptr, stats_buffers), loaded a block ahead."""
    q_desc, k_desc, v_desc, do_desc = descs
    q_smem, do_smem, k_smem, v_smem = bufs
    ready, empty, kv_ready = bars[0], bars[1], bars[2]
    bkv = gl.program_id(1)
    start_n = key_start(gw, GQA_WIN)
    mbarrier.expect(kv_ready, 2 * k_desc.block_type.nbytes)
    compat.async_load(k_desc, [bkv, start_n, 0], kv_ready, k_smem)
    compat.async_load(v_desc, [bkv, start_n, 0], kv_ready, v_smem)
    lo, n_m = query_range(start_n, 128, n_q, n_k, gw, IS_CAUSAL, GQA_WIN)
    count = visit_count(n_m, gw, GQA_WIN)
    if STATS_SMEM:
        lse_ptr, delta_ptr, stats_smem = stats
        bh, start_m = next_visit_rows(0, count, lo, n_m, bkv, n_q, gw, GQA_WIN)
        lse, delta = stats_load(lse_ptr, delta_ptr, bh, start_m, n_q, gw, GQA_WIN)
    for i in range(count):
        s = i % STAGES
        mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
        if STATS_SMEM:  # this block's (loaded an iteration ago), then the next block's loads issued
            stats_store(stats_smem, s, lse, delta)
            bh, start_m = next_visit_rows(i + 1, count, lo, n_m, bkv, n_q, gw, GQA_WIN)
            lse, delta = stats_load(lse_ptr, delta_ptr, bh, start_m, n_q, gw, GQA_WIN)
        bh, start_m = visit(i, lo, n_m, bkv, gw, GQA_WIN)
        mbarrier.expect(ready.index(s), 2 * q_desc.block_type.nbytes)
        compat.async_load(q_desc, [bh, start_m, 0], ready.index(s), q_smem.index(s))
        compat.async_load(do_desc, [bh, start_m, 0], ready.index(s), do_smem.index(s))


@gluon.jit
def _loop4(q_smem, do_smem, k_all, k_buf, v_buf, ds_smem, ready, empty, ds_full, ds_free, dk, dv, lse_ptr, delta_ptr,
           dq_ptr, bh, key0, lo, n_m, n_q, qk_scale, CID: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
           IS_CAUSAL: gl.constexpr):  # fmt: skip
    """Step 4: step 3 with dQ one query block late and the next block's scores early. In iteration i a consumer
    writes block i's dS, issues its dK, then computes dS K of block i-1 (whose other half the other consumer wrote
    an iteration ago: the consumers may be a block apart instead of meeting every block), issues block i+1's S^T and
    dP^T, and only then adds block i-1's dQ (the products run under the atomics). Returns (dk, dv)."""
    HALF: gl.constexpr = HEAD_DIM // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, 64, 16])  # fmt: skip
    st = warpgroup_mma_init(gl.zeros([64, 64], gl.float32, layout=s_layout))  # typed like an in-flight product
    dpt = warpgroup_mma_init(gl.zeros([64, 64], gl.float32, layout=s_layout))
    for i in range(n_m):
        s = i % STAGES
        q_buf = q_smem.index(s).reshape([64, HEAD_DIM])
        do_buf = do_smem.index(s).reshape([64, HEAD_DIM])
        if i == 0:
            mbarrier.wait(ready.index(0), 0)
            st, dpt = scores(q_buf, do_buf, k_buf, v_buf)
        b = i % 2
        mbarrier.wait(ds_free.index(b), ((i // 2) & 1) ^ 1)  # both consumers' dS K of block i-2 done
        dk_acc, dv = pair_rest(st, dpt, q_buf, do_buf, ds_smem.index(b).slice(64 * CID, 64, dim=1), dk, dv, lse_ptr,
                            delta_ptr, bh, key0, lo + i * 64, n_q, qk_scale, HEAD_DIM, IS_CAUSAL)  # fmt: skip
        mbarrier.arrive(ds_full.index(b), count=1)
        sn = (i + 1) % STAGES
        if i > 0:
            pb = (i - 1) % 2
            mbarrier.wait(ds_full.index(pb), ((i - 1) // 2) & 1)
            dq = dq_product(ds_smem.index(pb), k_all, CID * HALF, HALF)  # block i-1's dS K, beside block i's dK
            dq, dk = warpgroup_mma_wait(0, deps=(dq, dk_acc))
            mbarrier.arrive(ds_free.index(pb), count=1)
            mbarrier.arrive(empty.index(s), count=1)  # block i's Q and dO read (dK done)
            if i + 1 < n_m:
                mbarrier.wait(ready.index(sn), ((i + 1) // STAGES) & 1)
                st, dpt = scores(q_smem.index(sn).reshape([64, HEAD_DIM]),
                                  do_smem.index(sn).reshape([64, HEAD_DIM]), k_buf, v_buf)  # fmt: skip
            dq_add(dq, dq_ptr, bh, lo + (i - 1) * 64, n_q, CID * HALF, HALF, HEAD_DIM)
        else:
            dk = warpgroup_mma_wait(0, deps=(dk_acc,))
            mbarrier.arrive(empty.index(s), count=1)
            if i + 1 < n_m:
                mbarrier.wait(ready.index(sn), ((i + 1) // STAGES) & 1)
                st, dpt = scores(q_smem.index(sn).reshape([64, HEAD_DIM]),
                                  do_smem.index(sn).reshape([64, HEAD_DIM]), k_buf, v_buf)  # fmt: skip
    if n_m > 0:  # the last block's dQ
        pb = (n_m - 1) % 2
        mbarrier.wait(ds_full.index(pb), ((n_m - 1) // 2) & 1)
        dq = dq_product(ds_smem.index(pb), k_all, CID * HALF, HALF)
        dq = warpgroup_mma_wait(0, deps=(dq,))
        mbarrier.arrive(ds_free.index(pb), count=1)
        dq_add(dq, dq_ptr, bh, lo + (n_m - 1) * 64, n_q, CID * HALF, HALF, HEAD_DIM)
    return dk, dv


@gluon.jit
def _consumer(bufs, bars, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, n_q, n_k, qk_scale, scale, gw,
              CID: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
              STEP: gl.constexpr, KV_REGS: gl.constexpr, STATS_SMEM: gl.constexpr,
              GQA_WIN: gl.constexpr):  # fmt: skip
    """Consumer warpgroup ``CID``: dK, dV of keys ``[start_n + 64 CID, +64)`` over every query block of the ring
    (step 2, causal: a block entirely above this warpgroup's part of the diagonal is released without products);
    grouped heads: the blocks of every query head of the group (``bh`` each one's row, ``bkv`` the KV head's)."""
    q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, stats_smem = bufs
    ready, empty, kv_ready, ds_full, ds_free, dq_full, dq_free = bars
    d_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])  # fmt: skip
    HALF: gl.constexpr = HEAD_DIM // 2
    bkv = gl.program_id(1)  # the KV head's row (batch x KV heads); bhq below: each visit's query head's
    start_n = key_start(gw, GQA_WIN)
    key0 = start_n + 64 * CID
    lo, n_m = query_range(start_n, 128, n_q, n_k, gw, IS_CAUSAL, GQA_WIN)
    dk = gl.zeros([64, HEAD_DIM], gl.float32, layout=d_layout)
    dv = gl.zeros([64, HEAD_DIM], gl.float32, layout=d_layout)
    k_all = k_smem.reshape([128, HEAD_DIM])  # both consumers' keys (step 3's dS K)
    k_buf = k_all.slice(64 * CID, 64, dim=0)
    v_buf = v_smem.reshape([128, HEAD_DIM]).slice(64 * CID, 64, dim=0)
    mbarrier.wait(kv_ready, 0)
    k_op = kv_operand(k_buf, KV_REGS % 2 == 1)  # step 10: in registers for the whole loop
    v_op = kv_operand(v_buf, KV_REGS >= 2)
    if STEP == 4:
        dk, dv = _loop4(q_smem, do_smem, k_all, k_buf, v_buf, ds_smem, ready, empty, ds_full, ds_free, dk, dv, lse_ptr,
               delta_ptr, dq_ptr, bkv, key0, lo, n_m, n_q, qk_scale, CID, HEAD_DIM, STAGES, IS_CAUSAL)  # fmt: skip
    for i in range(visit_count(n_m, gw, GQA_WIN) if STEP != 4 else 0):
        s = i % STAGES
        mbarrier.wait(ready.index(s), (i // STAGES) & 1)
        bhq, start_m = visit(i, lo, n_m, bkv, gw, GQA_WIN)
        q_buf = q_smem.index(s).reshape([64, HEAD_DIM])
        do_buf = do_smem.index(s).reshape([64, HEAD_DIM])
        if STEP == 2:
            if (not IS_CAUSAL) or start_m + 63 >= key0:
                dk, dv = pair(q_buf, do_buf, k_buf, v_buf, ds_smem.index(CID).slice(0, 64, dim=1), dk, dv, lse_ptr,
                               delta_ptr, dq_ptr, bhq, key0, start_m, n_q, qk_scale, HEAD_DIM, IS_CAUSAL, gw,
                               GQA_WIN)  # fmt: skip
            mbarrier.arrive(empty.index(s), count=1)
        elif STEP == 6:
            # Each consumer: its own dS [64 queries, 64 keys] and dS K [64, D] over its keys, in two column halves
            # into its dQ buffer (free once the writer has summed both consumers' previous block): the consumers
            # never wait for each other's dS and may drift apart by up to a block.
            ds_own = ds_smem.index(CID).slice(0, 64, dim=1)
            dk, dv = pair_ds(q_buf, do_buf, k_buf, v_buf, ds_own, dk, dv, lse_ptr, delta_ptr, bhq, key0, start_m, n_q,
                              qk_scale, HEAD_DIM, IS_CAUSAL, None, False, gw, GQA_WIN)  # fmt: skip
            dq = dq_product(ds_own, k_buf, 0, HALF)
            dq, dk = warpgroup_mma_wait(0, deps=(dq, dk))
            mbarrier.arrive(empty.index(s), count=1)  # Q and dO read (dK done); dS K reads ds_own and K only
            dq2 = dq_product(ds_own, k_buf, HALF, HALF)  # the second half runs while the first is stored
            mbarrier.wait(dq_free.index(0), (i & 1) ^ 1)
            dq_smem.index(2 * CID).store(dq)
            dq2 = warpgroup_mma_wait(0, deps=(dq2,))
            dq_smem.index(2 * CID + 1).store(dq2)
            mbarrier.arrive(dq_full.index(0), count=1)
        else:
            # Step 3: dS [64 queries, 128 keys] in one of two shared buffers, each consumer writing its 64 keys'
            # columns; once both have (ds_full), consumer c computes dQ's columns [c D/2, c D/2 + D/2) over all 128
            # keys: one addition per dQ element per 128 keys. ds_free: both have read the buffer (reuse 2 blocks on).
            b = i % 2
            ds_all = ds_smem.index(b)
            mbarrier.wait(ds_free.index(b), ((i // 2) & 1) ^ 1)
            stats = stats_slot(stats_smem, s)  # step 11: the slot's LSE and D
            dk, dv = pair_ds(q_buf, do_buf, k_op, v_op, ds_all.slice(64 * CID, 64, dim=1), dk, dv, lse_ptr,
                              delta_ptr, bhq, key0, start_m, n_q, qk_scale, HEAD_DIM, IS_CAUSAL, stats,
                              STATS_SMEM, gw, GQA_WIN)  # fmt: skip
            mbarrier.arrive(ds_full.index(b), count=1)
            mbarrier.wait(ds_full.index(b), (i // 2) & 1)
            dq = dq_product(ds_all, k_all, CID * HALF, HALF)
            dq, dk = warpgroup_mma_wait(0, deps=(dq, dk))
            mbarrier.arrive(ds_free.index(b), count=1)
            mbarrier.arrive(empty.index(s), count=1)
            if STEP == 5:  # dQ's columns into the writer's buffer b (free once it has added block i - 2's)
                mbarrier.wait(dq_free.index(b), ((i // 2) & 1) ^ 1)
                dq_smem.index(2 * b + CID).store(dq)
                mbarrier.arrive(dq_full.index(b), count=1)
            else:
                dq_add(dq, dq_ptr, bhq, start_m, n_q, CID * HALF, HALF, HEAD_DIM)
    store_dkdv(dk, dv, dk_ptr, dv_ptr, bkv, key0, n_k, scale, HEAD_DIM, gw, GQA_WIN)


@gluon.jit
def _consumer0(bufs, bars, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, n_q, n_k, qk_scale, scale, gw,
               HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, STEP: gl.constexpr,
               KV_REGS: gl.constexpr, STATS_SMEM: gl.constexpr, GQA_WIN: gl.constexpr):  # fmt: skip
    _consumer(bufs, bars, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, n_q, n_k, qk_scale, scale, gw,
              0, HEAD_DIM, STAGES, IS_CAUSAL, STEP, KV_REGS, STATS_SMEM, GQA_WIN)  # fmt: skip


@gluon.jit
def _consumer1(bufs, bars, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, n_q, n_k, qk_scale, scale, gw,
               HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr, STEP: gl.constexpr,
               KV_REGS: gl.constexpr, STATS_SMEM: gl.constexpr, GQA_WIN: gl.constexpr):  # fmt: skip
    _consumer(bufs, bars, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, n_q, n_k, qk_scale, scale, gw,
              1, HEAD_DIM, STAGES, IS_CAUSAL, STEP, KV_REGS, STATS_SMEM, GQA_WIN)  # fmt: skip


@gluon.jit
def _step2(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, dq_out_ptr, cnt_ptr, n_q, n_k,
           qk_scale, scale, gw, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, IS_CAUSAL: gl.constexpr,
           STEP: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr, WRITER_REGS: gl.constexpr,
           DQ_CAST: gl.constexpr, KV_REGS: gl.constexpr, STATS_SMEM: gl.constexpr,
           GQA_WIN: gl.constexpr):  # fmt: skip
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 64, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, 1, 64, HEAD_DIM], do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [1, 128, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [1, 128, HEAD_DIM], v_desc.layout)
    # two dS buffers [64 queries, 128 keys]: step 2 uses buffer c's first 64 columns as consumer c's own dS; step 3
    # alternates between them, both consumers writing each
    ds_smem = gl.allocate_shared_memory(dtype, [2, 64, 128], gl.NVMMASharedLayout.get_default_for([64, 128], dtype))
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ds_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ds_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(STAGES):
        mbarrier.init(ready.index(st), count=1)
        mbarrier.init(empty.index(st), count=2)  # both consumers release a stage
    for b in gl.static_range(2):
        mbarrier.init(ds_full.index(b), count=2)
        mbarrier.init(ds_free.index(b), count=2)
    mbarrier.init(kv_ready, count=1)
    if STEP >= 5:  # dQ's two buffers x two consumers [64 queries, D/2] fp32 (index 2 b + c), 32-byte swizzle units
        dq_layout: gl.constexpr = gl.SwizzledSharedLayout(8, 1, HEAD_DIM // 16, order=[1, 0])
        dq_smem = gl.allocate_shared_memory(gl.float32, [4, 64, HEAD_DIM // 2], dq_layout)
        dq_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        dq_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        for b in gl.static_range(2):
            mbarrier.init(dq_full.index(b), count=2)
            mbarrier.init(dq_free.index(b), count=1)
    else:  # unused
        dq_smem = ds_smem
        dq_full = ds_full
        dq_free = ds_free
    stats_smem = stats_buffers(STAGES)  # step 11's LSE and D slots (unused without STATS_SMEM)
    bufs = (q_smem, do_smem, k_smem, v_smem, ds_smem, dq_smem, stats_smem)
    bars = (ready, empty, kv_ready, ds_full, ds_free, dq_full, dq_free)
    # fmt: off
    if STEP >= 5:
        gl.warp_specialize(
            [(_consumer0, (bufs, bars, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, n_q, n_k, qk_scale, scale, gw,
                           HEAD_DIM, STAGES, IS_CAUSAL, STEP, KV_REGS, STATS_SMEM, GQA_WIN)),
             (_consumer1, (bufs, bars, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, n_q, n_k, qk_scale, scale, gw,
                           HEAD_DIM, STAGES, IS_CAUSAL, STEP, KV_REGS, STATS_SMEM, GQA_WIN)),
             (_producer, ((q_desc, k_desc, v_desc, do_desc), (q_smem, do_smem, k_smem, v_smem), bars, n_q, n_k,
                          (lse_ptr, delta_ptr, stats_smem), gw, STAGES, IS_CAUSAL, STATS_SMEM, GQA_WIN)),
             (dq_writer, (dq_smem, dq_full, dq_free, dq_ptr, dq_out_ptr, cnt_ptr, n_q, n_k, scale, gw, HEAD_DIM,
                          IS_CAUSAL, STEP, DQ_CAST, GQA_WIN))],
            [4, 1, 2], [CONSUMER_REGS, PRODUCER_REGS, WRITER_REGS])
    else:
        gl.warp_specialize(
            [(_consumer0, (bufs, bars, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, n_q, n_k, qk_scale, scale, gw,
                           HEAD_DIM, STAGES, IS_CAUSAL, STEP, KV_REGS, STATS_SMEM, GQA_WIN)),
             (_consumer1, (bufs, bars, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, n_q, n_k, qk_scale, scale, gw,
                           HEAD_DIM, STAGES, IS_CAUSAL, STEP, KV_REGS, STATS_SMEM, GQA_WIN)),
             (_producer, ((q_desc, k_desc, v_desc, do_desc), (q_smem, do_smem, k_smem, v_smem), bars, n_q, n_k,
                          (lse_ptr, delta_ptr, stats_smem), gw, STAGES, IS_CAUSAL, STATS_SMEM, GQA_WIN))],
            [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
    # fmt: on


@gluon.jit(do_not_specialize=["n_q", "n_k", "n_bh", "group", "win_lo", "win_hi"])  # one compile per config
def attention_backward_v3_kernel(
    q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, dq_out_ptr, cnt_ptr, cu_q_ptr,
    cu_k_ptr, n_q, n_k, n_bh, group, win_lo, win_hi, qk_scale, scale, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
    IS_CAUSAL: gl.constexpr, STEP: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr,
    WRITER_REGS: gl.constexpr, DQ_CAST: gl.constexpr, KV_REGS: gl.constexpr, STATS_SMEM: gl.constexpr,
    GQA_WIN: gl.constexpr,
):  # fmt: skip
    """Version 3 backward. Descriptors over q, do [B*Hq, Nq, D] and k, v [B*Hkv, Nk, D], blocks [1, 64, D]; lse
    and delta [B*Hq, Nq] fp32; dq_ptr the fp32 [B*Hq, Nq, D] buffer (zeroed; unscaled dS K added); dk, dv
    [B*Hkv, Nk, D]. ``GQA_WIN`` (0 on plain problems) with ``group`` = Hq // Hkv and the window's ``win_lo``,
    ``win_hi`` (:mod:`gpulab.attention.v3.backward_pair`, 'Grouped-query heads and sliding windows'; unread at 0).
    DQ_CAST (step 8, writer steps 5 and 7): dq_out_ptr [B*H, Nq, D] in q's dtype receives ``scale * buffer`` from the
    last program to add into each query block, which zeros the block and its counter (cnt_ptr int32 [B*H,
    ceil(Nq/64)], zero on entry) back; without DQ_CAST both are unused.
    Grid: (key blocks of 64 * consumers, B*Hkv); step 7 (persistent): (min(tiles, SMs),), n_bh = B*Hkv.
    Packed (``GQA_WIN`` bit 8, step 5): grid (key blocks of the longest sequence, Hkv, sequences), cu_q_ptr,
    cu_k_ptr int32 [S + 1] offsets, n_q = Tq, n_k = Tk, n_bh = Hkv, (win_lo, win_hi) = (-left, right)
    (:func:`gpulab.attention.v3.backward_pair.seq_bounds`; :mod:`gpulab.attention.v3.backward_varlen`)."""
    gw = (group, win_lo, win_hi)
    if GQA_WIN >= 8:
        n_q, n_k, gw = seq_bounds(cu_q_ptr, cu_k_ptr, n_q, n_k, n_bh, gw)
    if STEP == 7:
        persistent_backward(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, dq_out_ptr,
                            cnt_ptr, n_q, n_k, n_bh, qk_scale, scale, gw, HEAD_DIM, STAGES, IS_CAUSAL, CONSUMER_REGS,
                            PRODUCER_REGS, WRITER_REGS, DQ_CAST, KV_REGS, STATS_SMEM, GQA_WIN)  # fmt: skip
    elif STEP == 1:
        _step1(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, n_q, n_k, qk_scale, scale,
               HEAD_DIM, STAGES, IS_CAUSAL)  # fmt: skip
    else:
        _step2(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr, dq_out_ptr, cnt_ptr, n_q,
               n_k, qk_scale, scale, gw, HEAD_DIM, STAGES, IS_CAUSAL, STEP, CONSUMER_REGS, PRODUCER_REGS,
               WRITER_REGS, DQ_CAST, KV_REGS, STATS_SMEM, GQA_WIN)  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# Host side.
# ----------------------------------------------------------------------------------------------------------------


PREPROCESS_ROWS = 64


def backward_supported(q, k, v, causal: bool = False) -> tuple[bool, str]:
    """:func:`supported` for the backward, which also takes grouped-query heads (k, v with Hkv heads, a divisor of
    q's Hq): (True, "") or (False, the reason). Never raises on tensors. Head dim 256 is the forward's only: each
    consumer's dK and dV [64, 256] fp32 alone are 256 registers per thread (``plan.V3_BACKWARD``'s docstring)."""
    if isinstance(q, torch.Tensor) and q.dim() == 4 and q.shape[3] not in (64, 128):
        return False, f"version 3's backward takes head dims 64 and 128, got {q.shape[3]} (version 1's takes it)"
    if all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (q, k, v)) and k.shape == v.shape:
        h, h_kv = q.shape[1], k.shape[1]
        if 0 < h_kv < h and h % h_kv == 0 and k.shape[0] == q.shape[0]:
            if q.shape[0] * h_kv > 65535:
                return False, f"batch * KV heads = {q.shape[0] * h_kv} is over 65535, the grid's second dimension"
            # the checks of equal heads on a view with q's head count (no copy: k's first head, expanded)
            k, v = (t[:, :1].expand(t.shape[0], h, *t.shape[2:]) for t in (k, v))
    return supported(q, k, v, causal)


def _plan(do, q, k, v, o, lse, causal, scale, cfg, window=(-1, -1)) -> BackwardPlan:
    """The checks of a first call (ValueError / TypeError naming the argument) and its
    :class:`~gpulab.attention.v3.backward_launch.BackwardPlan`."""
    ok, why = backward_supported(q, k, v, causal)
    if not ok:
        raise ValueError(f"version 3 cannot run this input: {why}.")
    window = check_window(window, causal)
    for name, t in (("o", o), ("do", do)):
        if not isinstance(t, torch.Tensor) or t.shape != q.shape or t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name} must be a tensor shaped and typed like q {tuple(q.shape)} {q.dtype} on "
                             f"{q.device}, got {getattr(t, 'shape', type(t).__name__)}.")  # fmt: skip
    runtime.require_tensor("lse", lse, dtype=torch.float32, shape=q.shape[:3])
    cfg = cfg or backward_config(q.shape[3], causal, seq=q.shape[2] or None)
    if not isinstance(cfg, V3BackwardConfig):
        raise TypeError(f"cfg must be a V3BackwardConfig or None, got {type(cfg).__name__}.")
    d = q.shape[3]
    programs = None
    if cfg.persistent:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        programs = persistent_programs(q.shape[0] * k.shape[1], k.shape[2], causal, sms)
    flags = gqa_win(q.shape[1] // k.shape[1], window)
    return BackwardPlan(attention_backward_v3_kernel, q, k, default_scale(d, scale), cfg.block_n, cfg.maxnreg,
                        constexprs(d, causal, cfg, flags), smem_layouts(d, cfg.block_n, q.dtype), programs,
                        cfg.fused_prep, window)  # fmt: skip


def attention_backward(do, q, k, v, o, lse, causal: bool = False, scale: float | None = None,
                       cfg: V3BackwardConfig | None = None, window=(-1, -1)):  # fmt: skip
    """``(dq, dk, dv)`` like q, k, v: version 3's backward of ``o = attention(q, k, v)`` with the forward's ``lse``
    ([B, H, Nq] fp32, natural log) and the output gradient ``do``. ``scale`` None means 1/sqrt(D). Raises ValueError
    where :func:`backward_supported` says no; ``o``, ``do`` must be shaped like q and ``lse`` [B, H, Nq] float32.
    k, v with fewer heads than q (a divisor of them): grouped-query heads, query head h reading KV head
    h // (Hq // Hkv), dK and dV summed over each group; ``window``: ``(left, right)``, bottom-right aligned as
    :func:`gpulab.attention.reference.visible_mask` (not with ``causal``; (-1, -1): none). A call like one seen
    before skips the checks and the planning (:data:`gpulab.attention.v3.backward_launch.PLANS`)."""
    try:
        key = tuple((t.__class__, t.shape, t.dtype, t.device) for t in (do, q, k, v, o, lse)) + (causal, scale, cfg)
        key += (window.__class__, *window) if window.__class__ is tuple else (window,)
        hash(key)
    except (AttributeError, TypeError):  # not tensors, or an unhashable argument: the checks say which
        key = None
    if key is None or causal.__class__ is not bool or window.__class__ is not tuple:
        plan = _plan(do, q, k, v, o, lse, causal, scale, cfg, window)
    else:
        plan = PLANS.get(key, lambda: _plan(do, q, k, v, o, lse, causal, scale, cfg, window))
    q, k, v, o, do = (t if t.is_contiguous() and t.data_ptr() % 16 == 0 else t.contiguous() for t in (q, k, v, o, do))
    lse = lse.contiguous()
    n_q, d, bh = plan.n_q, plan.d, plan.bh
    delta = torch.empty(lse.shape, device=q.device, dtype=torch.float32)
    dq_acc = None
    if plan.fused_prep:  # step 9: D and dQ's zeroed buffer in one launch
        dq_acc = torch.empty(q.shape, device=q.device, dtype=torch.float32)
        attention_preprocess_zero_kernel[(triton.cdiv(n_q, PREPROCESS_ROWS), bh)](
            o, do, delta, dq_acc, n_q, HEAD_DIM=d, BLOCK_M=PREPROCESS_ROWS, BLOCK_D=d)  # fmt: skip
    else:
        attention_preprocess_kernel[(triton.cdiv(n_q, PREPROCESS_ROWS), bh)](
            o, do, delta, n_q, HEAD_DIM=d, BLOCK_M=PREPROCESS_ROWS, BLOCK_D=d)  # fmt: skip
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    if torch._C._cuda_getDevice() != plan.device:
        with torch.cuda.device(plan.device):
            return _run(plan, q, k, v, do, lse, delta, dk, dv, dq_acc)
    return _run(plan, q, k, v, do, lse, delta, dk, dv, dq_acc)


def _run(plan, q, k, v, do, lse, delta, dk, dv, dq_acc=None):
    """The launch on the plan's device: step 8 writes dQ in the kernel from its kept zeroed buffer; otherwise dQ's
    fp32 buffer (``dq_acc``: step 9's, zeroed with D; None: zeroed here) is scaled and cast after the kernel."""
    if plan.dq_cast:
        dq_acc, counters = plan.workspace(q)
        dq = torch.empty_like(q)
        plan.launch(q, k, v, do, lse, delta, dq_acc, dk, dv, dq, counters)
        return dq, dk, dv
    if dq_acc is None:
        dq_acc = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    plan.launch(q, k, v, do, lse, delta, dq_acc, dk, dv)
    dq = torch.empty_like(q)
    torch.mul(dq_acc, plan.scale, out=dq)  # scaled and cast in one pass
    return dq, dk, dv
