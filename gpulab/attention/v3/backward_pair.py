"""Version 3's backward: the work of one (key block, query block) pair for one consumer warpgroup, shared by the
kernel's steps (:mod:`gpulab.attention.v3.backward`, one key block per program, and
:mod:`gpulab.attention.v3.backward_persistent`, several per program).

What you will learn: the backward's five products per block pair as asynchronous wgmma groups, which of them is
waited for where, and where dS goes through shared memory. The math is in :mod:`gpulab.attention.v3.backward`'s
docstring; this module holds the pieces its steps are assembled from.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

from gpulab import gluon_compat as compat

__all__ = ["kv_operand", "stats_buffers", "stats_load", "stats_slot", "stats_store", "scores", "pair_ds", "pair_rest",
           "dq_product", "dq_add", "pair", "store_dkdv", "first_query", "window_mask", "query_range", "visit",
           "visit_count", "next_visit_rows", "persistent_count", "persistent_tile", "stats_row",
           "seq_bounds", "key_start", "varlen_mask"]  # fmt: skip

# ----------------------------------------------------------------------------------------------------------------
# Grouped-query heads and sliding windows: the compile-time GQA_WIN (bit 1: grouped heads, bit 2: a window's left
# side, bit 4: its right side; 0 on a plain problem, where none of the code below is compiled in) and the runtime
# gw = (group, win_lo, win_hi): Hq // Hkv, and the least and greatest j - i at which query i sees key j
# (win_lo = Nk - Nq - left, win_hi = Nk - Nq + right, the window aligned bottom-right).
#
# A program owns a K/V block of KV head bkv (the grid's batch x KV-head index) and visits, for each query head of
# its group, bh = bkv * group + g (g < group), the same query blocks: (bh // group == bkv since Hq = group Hkv, so
# b Hq + kvh group + g over group is b Hkv + kvh). Its dK and dV sum over the whole group in registers; dQ goes to
# each query head's rows. The visits are one flat loop, t = g n_m + i (head after head), so that every partition's
# ring and buffer phases count t as they counted i.
# ----------------------------------------------------------------------------------------------------------------

# ----------------------------------------------------------------------------------------------------------------
# One (key block, query block) pair for one consumer warpgroup. Buffers (shared memory):
#   q_buf, do_buf [64, D]   this query block's Q and dO (a ring stage)
#   k_buf, v_buf  [64, D]   this warpgroup's keys and values (loaded once)
#   ds_buf        [64, 64]  dS (queries x keys), written here from dS^T in registers, read by dQ's product
# ----------------------------------------------------------------------------------------------------------------


@gluon.jit
def kv_operand(buf, IN_REGS: gl.constexpr):
    """Step 10: a consumer's K or V slice ``buf`` [64 keys, D] (shared memory) as the A operand of :func:`scores`:
    with ``IN_REGS`` loaded once into registers in the wgmma A layout of S^T's accumulator (D/4 32-bit registers
    per thread), else the shared-memory view itself. A register A operand leaves only B (Q or dO, [D, 64]) for the
    wgmma to read from shared memory: half the bytes of that product."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, 64, 16])  # fmt: skip
    if IN_REGS:
        op = buf.load(gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2))
    else:
        op = buf
    return op


@gluon.jit
def stats_buffers(STAGES: gl.constexpr):
    """Step 11's ring slots: ``(lse_smem, delta_smem)`` [STAGES, 64] fp32 each (LSE log2 e and D of the slot's
    query block; 512 bytes per slot)."""
    layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    return (gl.allocate_shared_memory(gl.float32, [STAGES, 64], layout),
            gl.allocate_shared_memory(gl.float32, [STAGES, 64], layout))  # fmt: skip


@gluon.jit
def stats_row(bh, start_m, n_q, gw=None, GQA_WIN: gl.constexpr = 0):
    """Query row ``start_m`` of head ``bh`` in lse / delta: ``bh Nq + start_m`` ([B*H, Nq]); packed
    (``GQA_WIN`` bit 8, :func:`seq_bounds`): ``bh Tq + start_m`` ([Hq, Tq], ``start_m`` a packed row)."""
    if GQA_WIN >= 8:
        row0 = bh.to(gl.int64) * gw[5] + start_m
    else:
        row0 = bh.to(gl.int64) * n_q + start_m
    return row0


@gluon.jit
def stats_load(lse_ptr, delta_ptr, bh, start_m, n_q, gw=None, GQA_WIN: gl.constexpr = 0):
    """Step 11, the producer warp: LSE and D of query block ``[start_m, +64)`` (``lse_ptr``, ``delta_ptr``
    [B*H, Nq] fp32), two per lane, 0 past Nq. Returned still in flight: the warp waits for them only where
    :func:`stats_store` uses them, a ring slot later, so their latency passes under its wait for the slot."""
    layout: gl.constexpr = gl.BlockedLayout([2], [32], [1], [0])
    rel = gl.arange(0, 64, layout=layout)
    ok = rel < n_q - start_m
    row0 = stats_row(bh, start_m, n_q, gw, GQA_WIN)
    return gl.load(lse_ptr + row0 + rel, mask=ok, other=0.0), gl.load(delta_ptr + row0 + rel, mask=ok, other=0.0)


@gluon.jit
def stats_slot(bufs, s):
    """Step 11: ring slot ``s`` of ``bufs`` = (lse_smem, delta_smem) [STAGES, 64]: the pair of [64] views."""
    return bufs[0].index(s), bufs[1].index(s)


@gluon.jit
def stats_store(bufs, s, lse, delta):
    """Step 11, the producer warp: ``LSE log2 e`` and ``D`` (:func:`stats_load`) into ring slot ``s`` of ``bufs``
    = (lse_smem, delta_smem) [STAGES, 64] fp32, then a barrier of the warp: the slot's ``ready`` arrival that
    follows (one lane) then releases every lane's stores to the consumers, whose wait on it acquires them."""
    lse_buf, delta_buf = stats_slot(bufs, s)
    lse_buf.store(lse * 1.4426950408889634)
    delta_buf.store(delta)
    compat.barrier()


@gluon.jit
def scores(q_buf, do_buf, k_buf, v_buf):
    """Issue S^T = K Q^T and dP^T = V dO^T [64 keys, 64 queries] (fp32, in flight, in this order); ``k_buf`` and
    ``v_buf`` [64, D] in shared memory or, step 10, in registers (:func:`kv_operand`)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, 64, 16])  # fmt: skip
    zero_s = gl.zeros([64, 64], gl.float32, layout=s_layout)
    st = warpgroup_mma(k_buf, q_buf.permute((1, 0)), zero_s, use_acc=False, is_async=True)  # S^T = K Q^T
    dpt = warpgroup_mma(v_buf, do_buf.permute((1, 0)), zero_s, use_acc=False, is_async=True)  # dP^T = V dO^T
    return st, dpt


@gluon.jit
def pair_ds(q_buf, do_buf, k_buf, v_buf, ds_view, dk, dv, lse_ptr, delta_ptr, bh, key0, start_m, n_q, qk_scale,
             HEAD_DIM: gl.constexpr, IS_CAUSAL: gl.constexpr, stats_buf=None, STATS_SMEM: gl.constexpr = False,
             gw=None, GQA_WIN: gl.constexpr = 0):  # fmt: skip
    """:func:`scores` then :func:`pair_rest`."""
    st, dpt = scores(q_buf, do_buf, k_buf, v_buf)
    return pair_rest(st, dpt, q_buf, do_buf, ds_view, dk, dv, lse_ptr, delta_ptr, bh, key0, start_m, n_q, qk_scale,
                      HEAD_DIM, IS_CAUSAL, stats_buf, STATS_SMEM, gw, GQA_WIN)  # fmt: skip


@gluon.jit
def window_mask(st, key0, start_m, gw, GQA_WIN: gl.constexpr):
    """S^T [64 keys, 64 queries] with -inf where the window hides a key from a query, on a block that an edge of
    the window crosses (``j - i = (key0 - start_m) + r - c`` runs over ``key0 - start_m +- 63``); the blocks inside
    it are returned unmasked (one scalar test)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, 64, 16])  # fmt: skip
    HAS_LEFT: gl.constexpr = (GQA_WIN // 2) % 2 == 1
    HAS_RIGHT: gl.constexpr = (GQA_WIN // 4) % 2 == 1
    dj = key0 - start_m
    if HAS_LEFT and HAS_RIGHT:
        edge = (dj - 63 < gw[1]) | (dj + 63 > gw[2])
    elif HAS_LEFT:
        edge = dj - 63 < gw[1]
    else:
        edge = dj + 63 > gw[2]
    if edge:
        r = gl.arange(0, 64, layout=gl.SliceLayout(1, s_layout))
        c = gl.arange(0, 64, layout=gl.SliceLayout(0, s_layout))
        diff = (dj + r)[:, None] - c[None, :]  # j - i
        if HAS_LEFT and HAS_RIGHT:
            ok = (diff >= gw[1]) & (diff <= gw[2])
        elif HAS_LEFT:
            ok = diff >= gw[1]
        else:
            ok = diff <= gw[2]
        st = gl.where(ok, st, float("-inf"))
    return st


@gluon.jit
def pair_rest(st, dpt, q_buf, do_buf, ds_view, dk, dv, lse_ptr, delta_ptr, bh, key0, start_m, n_q, qk_scale,
               HEAD_DIM: gl.constexpr, IS_CAUSAL: gl.constexpr, stats_buf=None, STATS_SMEM: gl.constexpr = False,
               gw=None, GQA_WIN: gl.constexpr = 0):  # fmt: skip
    """Query block ``start_m`` against keys ``[key0, key0 + 64)``, its S^T and dP^T in flight (the only wgmma
    groups in flight, issued in that order): dV += P^T dO (done on return), dS into ``ds_view``
    [64 queries, 64 keys] (shared memory, fenced for the tensor cores) and dK += dS^T Q *issued* (the caller waits
    for it). dK and dV [64, D] are fp32 and unscaled. Queries past Nq are zero rows (TMA fills them) with LSE = D = 0:
    their P is finite and their dO and Q are 0, so they add nothing; keys past Nk are zero rows: they add nothing to
    dQ. LSE and D: read from global memory here, or (``STATS_SMEM``, step 11) from ``stats_buf`` = (LSE log2 e, D)
    [64] each, the ring slot's, where the producer put them (:func:`stats_store`). ``bh``: the query head's row
    (batch x query heads); ``gw``, ``GQA_WIN``: a window's mask on its edge blocks (:func:`window_mask`)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, 64, 16])  # fmt: skip
    d_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])  # fmt: skip
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=d_layout, k_width=2)
    dtype: gl.constexpr = q_buf.dtype
    # LSE and D of the block's queries: read at a scalar row offset plus each column's offset within the block
    # (``rel``), so that the 16 addresses of a thread are one base register and immediate offsets; with the
    # absolute query index ``cols`` in the address, each was a 64-bit sum of its own (at d=128 about 300 of a
    # 900-instruction loop body, and the registers they took made ptxas spill loop state inside the loop).
    # Causal: the mask needs ``cols`` anyway and ``cols < n_q`` compiled to fewer spills there than ``rel < n_q -
    # start_m`` (which is fewer is an artefact of the register allocator).
    # Step 11: from the ring slot, where the producer's loads arrived while the consumers worked on earlier blocks
    # (a global load's latency would be waited out here, between S^T's issue and its use).
    rel = gl.arange(0, 64, layout=gl.SliceLayout(0, s_layout))  # [64] column index within the block
    if IS_CAUSAL and not STATS_SMEM:
        cols = start_m + rel  # query index of each column
    if not STATS_SMEM:
        if IS_CAUSAL:
            col_ok = cols < n_q
        else:
            col_ok = rel < n_q - start_m
        row0 = stats_row(bh, start_m, n_q, gw, GQA_WIN)  # the block's first query in lse / delta
        lse2 = gl.load(lse_ptr + row0 + rel, mask=col_ok, other=0.0) * 1.4426950408889634
        delta = gl.load(delta_ptr + row0 + rel, mask=col_ok, other=0.0)
    st = warpgroup_mma_wait(1, deps=(st,))  # S^T done, dP^T may still run
    st = st * qk_scale
    if IS_CAUSAL:  # key <= query only; without a branch (a branch here made ptxas spill dK and dV at d=128)
        if STATS_SMEM:  # key0 + r <= start_m + c, as (key0 - start_m) + r <= c (no query index kept)
            keys = (key0 - start_m) + gl.arange(0, 64, layout=gl.SliceLayout(1, s_layout))
            st = gl.where(keys[:, None] <= rel[None, :], st, float("-inf"))
        else:
            keys = key0 + gl.arange(0, 64, layout=gl.SliceLayout(1, s_layout))
            st = gl.where(keys[:, None] <= cols[None, :], st, float("-inf"))
    if (GQA_WIN // 2) % 4 != 0:
        st = window_mask(st, key0, start_m, gw, GQA_WIN)
    if GQA_WIN >= 8:
        st = varlen_mask(st, key0, start_m, n_q, gw[6])
    if STATS_SMEM:  # read where used (a shared-memory load's latency is short): fewer registers live at the waits
        lse2 = stats_buf[0].load(gl.SliceLayout(0, s_layout))
    pt = gl.exp2(st - lse2[None, :])
    # dS^T before dV's product is issued: P^T's 16-bit copy, dV's register A operand while it runs, is no
    # longer live beside fp32 P^T, dP^T and D (the loop's register peak at d=128); dV runs under dS's store.
    dpt = warpgroup_mma_wait(0, deps=(dpt,))
    if STATS_SMEM:
        delta = stats_buf[1].load(gl.SliceLayout(0, s_layout))
    dst = (pt * (dpt - delta[None, :])).to(dtype)  # dS^T = P^T (dP^T - D)
    dv = warpgroup_mma(gl.convert_layout(pt.to(dtype), a_layout), do_buf, dv, is_async=True)  # dV += P^T dO
    ds_view.permute((1, 0)).store(dst)
    fence_async_shared()
    dk = warpgroup_mma(gl.convert_layout(dst, a_layout), q_buf, dk, is_async=True)  # dK += dS^T Q, in flight
    dv = warpgroup_mma_wait(1, deps=(dv,))  # dV done (issued first), dK may still run
    return dk, dv


@gluon.jit
def dq_product(ds_buf, k_buf, col0, COLS: gl.constexpr):
    """Issue dS K for dQ's columns ``[col0, col0 + COLS)``: ds_buf [64 queries, keys], k_buf [keys, D]."""
    h_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, COLS, 16])  # fmt: skip
    zero_h = gl.zeros([64, COLS], gl.float32, layout=h_layout)
    return warpgroup_mma(ds_buf, k_buf.slice(col0, COLS, dim=1), zero_h, use_acc=False, is_async=True)


@gluon.jit
def dq_add(dq, dq_ptr, bh, start_m, n_q, col0, COLS: gl.constexpr, HEAD_DIM: gl.constexpr):
    """Add ``dq`` [64, COLS] (fp32, a wgmma accumulator) into rows ``[start_m, +64)``, columns ``[col0, +COLS)`` of
    dQ's buffer (rows past Nq skipped)."""
    h_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, COLS, 16])  # fmt: skip
    rows = start_m + gl.arange(0, 64, layout=gl.SliceLayout(1, h_layout))
    dcols = col0 + gl.arange(0, COLS, layout=gl.SliceLayout(0, h_layout))
    head = dq_ptr + bh.to(gl.int64) * n_q * HEAD_DIM  # this head's rows of the buffer; int32 offsets within
    gl.atomic_add(head + (rows[:, None] * HEAD_DIM + dcols[None, :]), dq, mask=(rows < n_q)[:, None], sem="relaxed")


@gluon.jit
def pair(q_buf, do_buf, k_buf, v_buf, ds_buf, dk, dv, lse_ptr, delta_ptr, dq_ptr, bh, key0, start_m, n_q, qk_scale,
          HEAD_DIM: gl.constexpr, IS_CAUSAL: gl.constexpr, gw=None, GQA_WIN: gl.constexpr = 0):  # fmt: skip
    """Steps 1-2: one (query block, 64 keys) pair, this warpgroup's own dS K added into dQ in column halves of D/2
    (half the accumulator registers): the first half's product and additions run under dK's product."""
    dk, dv = pair_ds(q_buf, do_buf, k_buf, v_buf, ds_buf, dk, dv, lse_ptr, delta_ptr, bh, key0, start_m, n_q,
                      qk_scale, HEAD_DIM, IS_CAUSAL, None, False, gw, GQA_WIN)  # fmt: skip
    HALF: gl.constexpr = HEAD_DIM // 2
    dq = dq_product(ds_buf, k_buf, 0, HALF)
    dq, dk = warpgroup_mma_wait(0, deps=(dq, dk))  # dK's product (issued first) ran beside this one
    dq_add(dq, dq_ptr, bh, start_m, n_q, 0, HALF, HEAD_DIM)
    dq = dq_product(ds_buf, k_buf, HALF, HALF)
    dq = warpgroup_mma_wait(0, deps=(dq,))
    dq_add(dq, dq_ptr, bh, start_m, n_q, HALF, HALF, HEAD_DIM)
    return dk, dv


@gluon.jit
def store_dkdv(dk, dv, dk_ptr, dv_ptr, bh, key0, n_k, scale, HEAD_DIM: gl.constexpr, gw=None,
               GQA_WIN: gl.constexpr = 0):  # fmt: skip
    """dK * scale and dV [64, D] of keys ``[key0, key0 + 64)`` into the outputs (rows past Nk skipped); packed
    (``GQA_WIN`` bit 8): dk, dv [Tk, Hkv, D], ``key0`` a packed row, ``n_k`` the sequence's end."""
    d_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])  # fmt: skip
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, d_layout))  # [64] key index - key0
    dcols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, d_layout))
    if GQA_WIN >= 8:  # rows Hkv * D apart
        offs = rows[:, None] * (gw[7] * HEAD_DIM) + dcols[None, :]
        first = (key0.to(gl.int64) * gw[7] + bh) * HEAD_DIM
    else:
        offs = rows[:, None] * HEAD_DIM + dcols[None, :]  # within the block (int32: immediate address offsets)
        first = (bh.to(gl.int64) * n_k + key0) * HEAD_DIM  # the block's first element
    mask = (rows < n_k - key0)[:, None]
    gl.store(dk_ptr + first + offs, (dk * scale).to(dk_ptr.dtype.element_ty), mask=mask)
    gl.store(dv_ptr + first + offs, dv.to(dv_ptr.dtype.element_ty), mask=mask)


@gluon.jit
def first_query(start_n, IS_CAUSAL: gl.constexpr):
    """The first query block that sees keys from ``start_n`` on (causal: the block holding query ``start_n``)."""
    if IS_CAUSAL:
        return (start_n // 64) * 64
    else:
        return 0


@gluon.jit
def query_range(start_n, keys, n_q, n_k, gw, IS_CAUSAL: gl.constexpr, GQA_WIN: gl.constexpr):
    """``(lo, n_m)``: the first query row and the query blocks of 64 that a program owning keys ``[start_n, start_n
    + keys)`` visits (0 or less: none; blocks outside are never loaded). Causal (top-left): from the block holding
    query ``start_n``; a window's right side (j - i <= win_hi): from the block holding query ``start_n - win_hi``;
    its left side (j - i >= win_lo): up to query ``min(start_n + keys, Nk) - 1 - win_lo``.
    :func:`gpulab.attention.measure.v3_backward_model.query_blocks` mirrors this."""
    lo = first_query(start_n, IS_CAUSAL)
    hi = n_q
    if GQA_WIN >= 8:  # packed: the sequence's rows [q_off, q_end), blocks of 64 from its first
        lo = gw[3]
    if (GQA_WIN // 4) % 2 == 1:
        if GQA_WIN >= 8:
            lo = gw[3] + (gl.maximum(start_n - gw[2] - gw[3], 0) // 64) * 64
        else:
            lo = (gl.maximum(start_n - gw[2], 0) // 64) * 64
    if (GQA_WIN // 2) % 2 == 1:
        hi = gl.minimum(n_q, gl.minimum(start_n + keys, n_k) - gw[1])
    if GQA_WIN >= 8:
        if start_n >= n_k:  # a key block past its sequence's end: no visit
            hi = lo
    return lo, gl.cdiv(hi - lo, 64)


@gluon.jit
def visit_count(n_m, gw, GQA_WIN: gl.constexpr):
    """A program's visits: its ``n_m`` query blocks, for each query head of its group when grouped."""
    if GQA_WIN % 2 == 1:
        return gl.maximum(n_m, 0) * gw[0]
    else:
        return n_m


@gluon.jit
def visit(t, lo, n_m, bkv, gw, GQA_WIN: gl.constexpr):
    """The program's ``t``-th visit -> ``(bh, start_m)``: the query head's row (batch x query heads) and the block's
    first query. Grouped: head ``g = t // n_m`` of KV head ``bkv``'s group, block ``t % n_m``; else ``(bkv, lo + 64
    t)``."""
    bh = bkv
    i = t
    if GQA_WIN % 2 == 1:
        g = t // gl.maximum(n_m, 1)  # (no visit where n_m <= 0)
        i = t - g * n_m
        bh = bkv * gw[0] + g
    return bh, lo + i * 64


@gluon.jit
def next_visit_rows(t, count, lo, n_m, bkv, n_q, gw, GQA_WIN: gl.constexpr):
    """Step 11's look-ahead: ``(bh, start_m)`` of visit ``t``, with ``start_m = n_q`` (nothing to load) past the last
    visit, where a grouped program's next head may lie past the tensor."""
    bh, start_m = visit(t, lo, n_m, bkv, gw, GQA_WIN)
    if GQA_WIN % 2 == 1:
        if t >= count:
            start_m = n_q
    return bh, start_m


@gluon.jit
def persistent_count(n_k, n_bh, IS_CAUSAL: gl.constexpr):
    """Step 7: how many tiles this program takes (:func:`persistent_tile`'s ``k`` runs from 0 to it)."""
    n_kb = gl.cdiv(n_k, 128)
    if IS_CAUSAL:  # units of two tiles: u = pid, pid + programs, ... below n_bh * ceil(n_kb / 2)
        return 2 * gl.cdiv(n_bh * ((n_kb + 1) // 2) - gl.program_id(0), gl.num_programs(0))
    else:
        return gl.cdiv(n_bh * n_kb - gl.program_id(0), gl.num_programs(0))


@gluon.jit
def persistent_tile(k, n_q, n_k, n_bh, IS_CAUSAL: gl.constexpr, gw=None, GQA_WIN: gl.constexpr = 0):
    """Step 7's ``k``-th tile of this program -> ``(bh, start_n, lo, n_m)``: the (KV) head, the first of its 128
    keys, the first query row it visits and its query blocks (0 or less: none; :func:`query_range`).

    Not causal: tile ``t = pid + k * programs`` is head ``t // key_blocks``'s key block ``t % key_blocks`` (a head's
    key blocks are neighbours: programs running at once share its Q and dO in L2). Causal: key block j visits the
    query blocks from its own on, so block 0 has the most work, and static round-robin would give a program mostly
    long or mostly short tiles; so the program takes units ``u = pid + (k // 2) * programs`` of two tiles, head
    ``u // half``'s key blocks ``i`` then ``2 half - 1 - i`` (``i = u % half``, ``half = ceil(key_blocks / 2)``):
    about the same work per unit whatever i. With an odd number of key blocks the unit i = 0 holds a block past the
    last (no query block). :func:`gpulab.attention.measure.v3_backward_model.persistent_tiles` mirrors this."""
    n_kb = gl.cdiv(n_k, 128)
    if IS_CAUSAL:
        half = (n_kb + 1) // 2
        u = gl.program_id(0) + (k // 2) * gl.num_programs(0)
        i = u % half
        kb = i + (k % 2) * (2 * half - 1 - 2 * i)
        bh = u // half
    else:
        tile = gl.program_id(0) + k * gl.num_programs(0)
        kb = tile % n_kb
        bh = tile // n_kb
    start_n = kb * 128
    lo, n_m = query_range(start_n, 128, n_q, n_k, gw, IS_CAUSAL, GQA_WIN)
    n_m = n_m * (start_n < n_k).to(gl.int32)
    return bh, start_n, lo, n_m


# ----------------------------------------------------------------------------------------------------------------
# Packed batches of variable lengths (``GQA_WIN`` bit 8): grid (key blocks of the longest sequence, Hkv, sequences).
# Q, dO [Tq, Hq, D] and K, V [Tk, Hkv, D] are seen by their descriptors as [H, T, D] (strides D, H D, 1), so a
# block's coordinates are (head, packed row, 0); lse, delta are [Hq, Tq], dQ's buffer [Hq, Tq, D] fp32. A program
# reads its sequence's offsets (:func:`seq_bounds`) and works in packed rows: n_q, n_k become the sequence's ends,
# the window's bounds of j - i shift by k_end - q_end (bottom-right per sequence). A TMA load near a sequence's end
# brings rows of the next sequence: :func:`varlen_mask` hides them (edge blocks only), and every store is masked at
# the sequence's end.
# ----------------------------------------------------------------------------------------------------------------


@gluon.jit
def seq_bounds(cu_q_ptr, cu_k_ptr, n_q, n_k, n_bh, gw):
    """Sequence ``program_id(2)``'s ``(q_end, k_end, gw)``: gw = (group, win_lo, win_hi, q_off, k_off, Tq, k_end,
    Hkv) from the launch's (group, -left, right), ``n_q`` = Tq, ``n_k`` = Tk, ``n_bh`` = Hkv."""
    s = gl.program_id(2)
    q_off = gl.load(cu_q_ptr + s)
    q_end = gl.load(cu_q_ptr + s + 1)
    k_off = gl.load(cu_k_ptr + s)
    k_end = gl.load(cu_k_ptr + s + 1)
    shift = k_end - q_end  # packed j - i = local j - i + (k_off - q_off); bottom-right: + len_k - len_q
    return q_end, k_end, (gw[0], gw[1] + shift, gw[2] + shift, q_off, k_off, n_q, k_end, n_bh)


@gluon.jit
def key_start(gw, GQA_WIN: gl.constexpr):
    """The first of this program's 128 keys: ``program_id(0) * 128``, packed from the sequence's first key."""
    start_n = gl.program_id(0) * 128
    if GQA_WIN >= 8:
        start_n = start_n + gw[4]
    return start_n


@gluon.jit
def varlen_mask(st, key0, start_m, q_end, k_end):
    """S^T [64 keys, 64 queries] with -inf at keys past ``k_end`` and queries past ``q_end`` (another sequence's
    rows, or TMA's zero rows past the tensor), on a block that crosses either end; P^T and dS^T are 0 there."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, 64, 16])  # fmt: skip
    if (start_m + 64 > q_end) | (key0 + 64 > k_end):
        r = gl.arange(0, 64, layout=gl.SliceLayout(1, s_layout))
        c = gl.arange(0, 64, layout=gl.SliceLayout(0, s_layout))
        ok = (r < k_end - key0)[:, None] & (c < q_end - start_m)[None, :]
        st = gl.where(ok, st, float("-inf"))
    return st
