"""Version 3's backward replayed on the CPU in PyTorch: the kernel's block order and accumulation points.

What you will learn: Gluon has no interpreter, so what the backward kernel (:mod:`gpulab.attention.v3.backward`)
computes is checked against a model that follows it block for block:

- programs own ``64 * consumers`` keys (step 1: one consumer warpgroup, 64 keys; steps 2-6: two, 128 keys); consumer
  c the 64 from ``start_n + 64 c``;
- each program visits query blocks of 64 from ``lo`` (causal: the block holding query ``start_n``; else 0) to the
  end, the causal mask applied only where a block crosses the diagonal, queries past Nq and keys past Nk as zero
  rows (what TMA loads there), LSE and D of missing queries 0;
- ``P^T`` and ``dS^T`` are rounded to the inputs' dtype (the tensor cores' operands), every product accumulates in
  fp32, dK and dV in registers across the loop, dQ in an fp32 buffer: step 1-2 each consumer adds its own 64 keys'
  ``dS K`` (:func:`model_backward` counts ``additions`` per dQ element: ``ceil(Nk / 64)``), steps 3-6 one addition
  per 128 keys (steps 3-5: both consumers' dS through shared memory, one product over 128 keys; step 6: each
  consumer's product over its 64 keys, the writer adding the two in fp32 before the one atomic addition);
- step 2 skips a causal block that lies entirely above a consumer's keys (P = 0 there): the model skips it too;
- step 7 computes step 5's pairs in step 5's order; only which program takes which key block changes
  (:func:`persistent_tiles`, the kernel's :func:`gpulab.attention.v3.backward_pair.persistent_tile`);
- step 8 (steps 5 and 7 with ``dq_cast``) adds the same way; the program whose addition into a query block is the
  last (:func:`dq_arrivals` of them) writes ``scale * buffer`` and zeros the block and its counter back
  (:func:`replay_dq_cast` replays that protocol over any interleaving of the programs);
- step 10 (``kv_regs``) changes only where S^T's and dP^T's A operand (K, V) is read from, registers instead of
  shared memory: the same products in the same order, so the same model;
- grouped-query heads (``q`` [G, Nq, d]: the G query heads of one KV head): a program loops over the group's heads,
  each over the same query blocks (``G * n_m`` visits, head after head), dK and dV summed over all of them in the
  program's accumulators, dQ added at each head's rows;
- a sliding window ``(left, right)`` (bottom-right aligned: query i sees key j iff ``Nk - Nq - left <= j - i <=
  Nk - Nq + right`` on each bounded side): a program visits only the query blocks from the first that sees its first
  key to the last that sees its last (:func:`query_blocks`), masking only the blocks that an edge of the window
  crosses.

With ``round_to=None`` and float64 inputs the model must equal the float64 reference to rounding: a wrong bound,
mask, skipped block or scale shows as a large error. With the kernel's roundings it shows the error the kernel can
be expected to have.
"""

from __future__ import annotations

import math

import torch

from gpulab import runtime
from gpulab.attention.reference import check_window

__all__ = ["key_programs", "query_blocks", "window_bounds", "persistent_tiles", "model_backward",
           "reference_backward", "dq_arrivals", "replay_dq_cast", "varlen_query_blocks",
           "model_varlen_backward"]  # fmt: skip


def window_bounds(n_q: int, n_k: int, window=(-1, -1)) -> tuple[int | None, int | None]:
    """``(lo, hi)`` of ``j - i`` that a window lets query i see key j at (None: that side unbounded): the kernel's
    runtime ``win_lo = Nk - Nq - left`` and ``win_hi = Nk - Nq + right``."""
    left, right = check_window(window)
    off = n_k - n_q
    return (off - left if left >= 0 else None), (off + right if right >= 0 else None)


def query_blocks(start_n: int, keys: int, n_q: int, n_k: int, causal: bool, window=(-1, -1)) -> tuple[int, int]:
    """``(lo, n_m)``: the first query row and the number of query blocks of 64 a program owning keys
    ``[start_n, start_n + keys)`` visits (n_m 0 or less: none), as the kernel's
    :func:`gpulab.attention.v3.backward_pair.query_range` computes them. Causal (top-left): from the block holding
    query ``start_n``; a window's right side: from the block holding the first query that sees key ``start_n``; its
    left side: up to the last query that sees the program's last key."""
    win_lo, win_hi = window_bounds(n_q, n_k, window)
    lo, hi = 0, n_q
    if causal:
        lo = (start_n // 64) * 64
    if win_hi is not None:
        lo = (max(start_n - win_hi, 0) // 64) * 64
    if win_lo is not None:
        hi = min(n_q, min(start_n + keys, n_k) - win_lo)
    return lo, -(-(hi - lo) // 64)


def key_programs(n_q: int, n_k: int, causal: bool, step: int = 3, window=(-1, -1)) -> list[dict]:
    """The kernel's programs of one head: ``start_n`` (first key), ``keys`` (64 * consumers), ``lo`` (first query
    block) and ``n_m`` (query blocks visited; 0 or less where no query sees these keys)."""
    runtime.positive_int("n_q", n_q)
    runtime.positive_int("n_k", n_k)
    runtime.strict_bool("causal", causal)
    runtime.one_of("step", step, (1, 2, 3, 4, 5, 6, 7))
    check_window(window, causal)
    keys = 64 if step == 1 else 128
    out = []
    for start_n in range(0, n_k, keys):
        lo, n_m = query_blocks(start_n, keys, n_q, n_k, causal, window)
        out.append({"start_n": start_n, "keys": keys, "lo": lo, "n_m": n_m})
    return out


def persistent_tiles(n_q: int, n_k: int, n_bh: int, causal: bool, programs: int,
                     window=(-1, -1)) -> list[list[dict]]:  # fmt: skip
    """Step 7's schedule: for each of ``programs`` programs, its tiles in order, each ``{'bh', 'start_n', 'lo',
    'n_m'}`` (n_m <= 0: no query block, as the block past the last key block of an odd count, causal). Not causal:
    tile t is head ``t // key_blocks``'s block ``t % key_blocks``; causal: units of two tiles (block i, then
    ``2 half - 1 - i``) so that every program gets about the same number of query blocks. ``n_bh``: batch x KV
    heads (``bh`` a KV head); ``window``: the query blocks of :func:`query_blocks`."""
    for name, x in (("n_q", n_q), ("n_k", n_k), ("n_bh", n_bh), ("programs", programs)):
        runtime.positive_int(name, x)
    runtime.strict_bool("causal", causal)
    n_kb = -(-n_k // 128)
    half = (n_kb + 1) // 2
    out = []
    for pid in range(programs):
        tiles = []
        count = 2 * -(-(n_bh * half - pid) // programs) if causal else -(-(n_bh * n_kb - pid) // programs)
        for k in range(count):
            if causal:
                u = pid + (k // 2) * programs
                i = u % half
                kb, bh = i + (k % 2) * (2 * half - 1 - 2 * i), u // half
            else:
                tile = pid + k * programs
                kb, bh = tile % n_kb, tile // n_kb
            start_n = kb * 128
            lo, n_m = query_blocks(start_n, 128, n_q, n_k, causal, window)
            n_m = n_m if start_n < n_k else 0
            tiles.append({"bh": bh, "start_n": start_n, "lo": lo, "n_m": n_m})
        out.append(tiles)
    return out


def _rows(x, start, n):
    """Rows [start, start + n) of x [N, d], zero rows past the end (TMA's fill)."""
    out = x.new_zeros((n, x.shape[1]))
    if start < x.shape[0]:
        part = x[start : start + n]
        out[: part.shape[0]] = part
    return out


def _vec(x, start, n):
    out = x.new_zeros(n)
    if start < x.shape[0]:
        part = x[start : start + n]
        out[: part.shape[0]] = part
    return out


def model_backward(q, k, v, o, do, lse, causal: bool = False, scale: float | None = None, step: int = 3,
                   round_to: torch.dtype | None = None, acc_dtype: torch.dtype = torch.float32,
                   window=(-1, -1)):  # fmt: skip
    """``(dq, dk, dv, additions)`` of one KV head in the kernel's order: q, o, do [Nq, d] (one query head) or
    [G, Nq, d] (the G query heads that read this KV head), k, v [Nk, d], lse [Nq] or [G, Nq] (natural log).
    ``round_to``: the dtype P^T and dS^T are rounded to before their products (the inputs' dtype in the kernel;
    None: no rounding); ``acc_dtype`` the accumulators' (float32 in the kernel); ``window``: ``(left, right)``,
    bottom-right aligned ((-1, -1): none; not with ``causal``). ``additions`` (like lse): how many times each dQ row
    was added to."""
    runtime.strict_bool("causal", causal)
    check_window(window, causal)
    for name, t in (("k", k), ("v", v)):
        runtime.require_tensor(name, t)
        if t.dim() != 2:
            raise ValueError(f"{name} must be [N, d] (one head), got shape {tuple(t.shape)}.")
    for name, t in (("q", q), ("o", o), ("do", do)):
        runtime.require_tensor(name, t)
        if t.dim() not in (2, 3) or t.shape != q.shape:
            raise ValueError(f"{name} must be [N, d] (one head) or [G, N, d] (a group of query heads), shaped like "
                             f"q {tuple(q.shape)}, got shape {tuple(t.shape)}.")  # fmt: skip
    single = q.dim() == 2
    if single:
        q, o, do, lse = q[None], o[None], do[None], lse[None]
    runtime.require_tensor("lse", lse, shape=q.shape[:2])
    group, n_q, d = q.shape
    n_k = k.shape[0]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    qk_scale = scale * 1.4426950408889634
    win_lo, win_hi = window_bounds(n_q, n_k, window)
    f = acc_dtype
    rnd = (lambda x: x.to(round_to).to(f)) if round_to is not None else (lambda x: x.to(f))  # noqa: E731
    q, k, v, o, do = (t.to(f) for t in (q, k, v, o, do))
    delta = (do * o).sum(-1)  # the preprocess, fp32 [G, Nq]
    lse2 = lse.to(f) * 1.4426950408889634
    dq_buf = torch.zeros(group, n_q, d, dtype=f)
    additions = torch.zeros(group, n_q, dtype=torch.int64)
    dk_out, dv_out = torch.zeros(n_k, d, dtype=f), torch.zeros(n_k, d, dtype=f)
    for prog in key_programs(n_q, n_k, causal, step, window):
        consumers = prog["keys"] // 64
        acc = [(torch.zeros(64, d, dtype=f), torch.zeros(64, d, dtype=f)) for _ in range(consumers)]
        for t in range(group * max(prog["n_m"], 0)):  # the kernel's visits: head g = t // n_m, block t % n_m
            g, i = divmod(t, prog["n_m"])
            start_m = prog["lo"] + 64 * i
            qb, dob = _rows(q[g], start_m, 64), _rows(do[g], start_m, 64)
            cols = start_m + torch.arange(64)
            l2, dl = _vec(lse2[g], start_m, 64), _vec(delta[g], start_m, 64)
            ds_all = []
            for c in range(consumers):
                key0 = prog["start_n"] + 64 * c
                kb, vb = _rows(k, key0, 64), _rows(v, key0, 64)
                if step == 2 and causal and start_m + 63 < key0:  # step 2 releases such a block unread
                    ds_all.append(None)
                    continue
                st = (kb @ qb.T) * qk_scale  # S^T [64 keys, 64 queries]
                if causal and start_m < key0 + 63:
                    st = torch.where((key0 + torch.arange(64))[:, None] <= cols[None, :], st, -math.inf)
                rel = key0 - start_m  # j - i = rel + r - c over the block: [rel - 63, rel + 63]
                edge = (win_hi is not None and rel + 63 > win_hi) or (win_lo is not None and rel - 63 < win_lo)
                if edge:  # only the blocks an edge of the window crosses are masked
                    diff = rel + torch.arange(64)[:, None] - torch.arange(64)[None, :]
                    ok = torch.ones(64, 64, dtype=torch.bool)
                    if win_hi is not None:
                        ok &= diff <= win_hi
                    if win_lo is not None:
                        ok &= diff >= win_lo
                    st = torch.where(ok, st, -math.inf)
                pt = torch.exp2(st - l2[None, :])
                dk, dv = acc[c]
                dv += rnd(pt) @ dob
                dst = rnd(pt * ((vb @ dob.T) - dl[None, :]))
                dk += dst @ qb
                ds_all.append((dst, kb))
            rows = slice(start_m, min(start_m + 64, n_q))
            n_rows = rows.stop - rows.start
            if step <= 2:  # each consumer adds its own dS K
                for part in ds_all:
                    if part is not None:
                        dst, kb = part
                        dq_buf[g, rows] += (dst.T @ kb)[:n_rows]
                        additions[g, rows] += 1
            elif step == 6:  # each consumer's dS K over its 64 keys, summed (c0 + c1), one addition
                part = [(dst.T @ kb)[:n_rows] for dst, kb in ds_all]
                dq_buf[g, rows] += part[0] + part[1]
                additions[g, rows] += 1
            else:  # one addition of dS K over the program's 128 keys
                dst = torch.cat([p[0] for p in ds_all], 0)
                kb = torch.cat([p[1] for p in ds_all], 0)
                dq_buf[g, rows] += (dst.T @ kb)[:n_rows]
                additions[g, rows] += 1
        for c, (dk, dv) in enumerate(acc):
            key0 = prog["start_n"] + 64 * c
            n = max(0, min(64, n_k - key0))
            dk_out[key0 : key0 + n] = dk[:n] * scale
            dv_out[key0 : key0 + n] = dv[:n]
    dq = dq_buf * scale
    return (dq[0], dk_out, dv_out, additions[0]) if single else (dq, dk_out, dv_out, additions)


def reference_backward(q, k, v, do, causal: bool = False, scale: float | None = None):
    """(o, lse, dq, dk, dv) of one head by autograd in float64 (top-left causal mask, as SDPA): q, do [Nq, d],
    k, v [Nk, d]."""
    for name, t in (("q", q), ("k", k), ("v", v), ("do", do)):
        runtime.require_tensor(name, t)
        if t.dim() != 2:
            raise ValueError(f"{name} must be [N, d] (one head), got shape {tuple(t.shape)}.")
    q, k, v, do = (t.detach().double() for t in (q, k, v, do))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else scale
    s = (q @ k.T) * scale
    if causal:
        s = s.masked_fill(~torch.ones(q.shape[0], k.shape[0], dtype=torch.bool).tril(), -math.inf)
    lse = torch.logsumexp(s, 1)
    o = torch.exp(s - lse[:, None]) @ v
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    return o.detach(), lse.detach(), dq, dk, dv


def dq_arrivals(n_q: int, n_k: int, causal: bool) -> list[int]:
    """Step 8: how many programs add into each query block of 64, as the kernel counts them
    (:func:`gpulab.attention.v3.backward_dq.dq_block_done`'s ``expected``): ``ceil(Nk / 128)`` key tiles, causal
    ``min(ceil(Nk / 128), qb // 2 + 1)`` (tile kb starts at query ``128 kb``)."""
    runtime.positive_int("n_q", n_q)
    runtime.positive_int("n_k", n_k)
    runtime.strict_bool("causal", causal)
    n_kb = -(-n_k // 128)
    return [min(n_kb, qb // 2 + 1) if causal else n_kb for qb in range(-(-n_q // 64))]


def replay_dq_cast(n_q: int, n_k: int, causal: bool, scale: float, generator: torch.Generator,
                   buffer: torch.Tensor | None = None, counters: torch.Tensor | None = None):  # fmt: skip
    """Step 8's arrival protocol on one head, the programs' additions interleaved at random (each program's own
    query blocks in its order, as its writer issues them): program t adds ``t + 1`` into every row of each query
    block it visits (:func:`key_programs`, step 5), then counts its arrival; the arrival that brings a block's count
    to :func:`dq_arrivals` writes ``scale * buffer`` to the output and zeros the block and its counter. Returns
    ``(out [Nq] float64, buffer, counters, casts [blocks])``: out NaN where no program cast; ``buffer`` and
    ``counters`` (zeros if None) are updated in place, as the kernel leaves them for the next call."""
    progs = [p for p in key_programs(n_q, n_k, causal, step=5) if p["n_m"] > 0]
    n_qb = -(-n_q // 64)
    buffer = torch.zeros(n_q, dtype=torch.float64) if buffer is None else buffer
    counters = torch.zeros(n_qb, dtype=torch.int64) if counters is None else counters
    expected = dq_arrivals(n_q, n_k, causal)
    out = torch.full((n_q,), math.nan, dtype=torch.float64)
    casts = torch.zeros(n_qb, dtype=torch.int64)
    nxt = [0] * len(progs)  # each program's next query block
    while True:
        live = [t for t, p in enumerate(progs) if nxt[t] < p["n_m"]]
        if not live:
            return out, buffer, counters, casts
        t = live[int(torch.randint(len(live), (1,), generator=generator))]
        qb = progs[t]["lo"] // 64 + nxt[t]
        nxt[t] += 1
        rows = slice(64 * qb, min(64 * qb + 64, n_q))
        buffer[rows] += t + 1
        old = int(counters[qb])
        counters[qb] += 1
        if old == expected[qb] - 1:
            out[rows] = scale * buffer[rows]
            buffer[rows] = 0
            counters[qb] = 0
            casts[qb] += 1


def varlen_query_blocks(start_n: int, keys: int, q_off: int, q_end: int, k_end: int,
                        window=(-1, -1)) -> tuple[int, int]:  # fmt: skip
    """The packed kernel's :func:`query_blocks` (``GQA_WIN`` bit 8): ``(lo, n_m)`` for a program owning packed key
    rows ``[start_n, start_n + keys)`` of a sequence whose queries are rows ``[q_off, q_end)`` and keys end at
    ``k_end``; blocks of 64 from ``q_off`` (never a row of the sequence before), the window's bounds of packed
    ``j - i`` shifted by ``k_end - q_end`` (bottom-right per sequence), none past the sequence's keys; as
    :func:`gpulab.attention.v3.backward_pair.query_range` with :func:`~gpulab.attention.v3.backward_pair.seq_bounds`'s
    ``gw``."""
    left, right = check_window(window)
    shift = k_end - q_end
    lo, hi = q_off, q_end
    if right >= 0:
        lo = q_off + (max(start_n - (shift + right) - q_off, 0) // 64) * 64
    if left >= 0:
        hi = min(q_end, min(start_n + keys, k_end) - (shift - left))
    if start_n >= k_end:
        hi = lo
    return lo, -(-(hi - lo) // 64)


def model_varlen_backward(q, k, v, o, do, lse, cu_q, cu_k, max_k: int, scale: float | None = None,
                          window=(-1, -1), round_to: torch.dtype | None = None,
                          acc_dtype: torch.dtype = torch.float32):  # fmt: skip
    """``(dq, dk, dv)`` of a packed batch in the packed kernel's order (step 5's arithmetic, :func:`model_backward`):
    q, o, do [Tq, Hq, D], k, v [Tk, Hkv, D], lse [Hq, Tq] (natural log), cu_q, cu_k int32 [S + 1], ``max_k`` the
    grid's longest key sequence. Programs (key block of 128, KV head, sequence); a block's rows are read from the
    packed tensors as TMA reads them (rows of the next sequence included, zeros past the tensor) and masked where a
    block crosses its sequence's end; stores stop at each end. Rows of no sequence: dq 0, dk and dv NaN (unwritten)."""
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do)):
        runtime.require_tensor(name, t)
        if t.dim() != 3 or t.shape[2] != q.shape[2]:
            raise ValueError(f"{name} must be packed [T, H, D] with q's D, got shape {tuple(t.shape)}.")
    runtime.require_tensor("lse", lse, shape=(q.shape[1], q.shape[0]))
    max_k = runtime.positive_int("max_k", max_k)
    t_q, h, d = q.shape
    t_k, h_kv = k.shape[:2]
    group = h // h_kv
    left, right = check_window(window)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qk_scale = scale * 1.4426950408889634
    f = acc_dtype
    rnd = (lambda x: x.to(round_to).to(f)) if round_to is not None else (lambda x: x.to(f))  # noqa: E731
    q, k, v, o, do = (t.to(f) for t in (q, k, v, o, do))
    delta = (do * o).sum(-1).T  # the packed preprocess, [Hq, Tq]
    lse2 = lse.to(f) * 1.4426950408889634
    dq_buf = torch.zeros(h, t_q, d, dtype=f)
    dk_out = torch.full((t_k, h_kv, d), math.nan, dtype=f)
    dv_out = torch.full((t_k, h_kv, d), math.nan, dtype=f)
    offs_q, offs_k = cu_q.tolist(), cu_k.tolist()
    r64 = torch.arange(64)
    for s in range(len(offs_q) - 1):
        q_off, q_end, k_off, k_end = offs_q[s], offs_q[s + 1], offs_k[s], offs_k[s + 1]
        shift = k_end - q_end
        win_lo = shift - left if left >= 0 else None
        win_hi = shift + right if right >= 0 else None
        for kvh in range(h_kv):
            for pid in range(-(-max_k // 128)):
                start_n = k_off + 128 * pid
                lo, n_m = varlen_query_blocks(start_n, 128, q_off, q_end, k_end, window)
                acc = [(torch.zeros(64, d, dtype=f), torch.zeros(64, d, dtype=f)) for _ in range(2)]
                for t in range(group * max(n_m, 0)):
                    g, i = divmod(t, n_m)
                    hq, start_m = kvh * group + g, lo + 64 * i
                    qb, dob = _rows(q[:, hq], start_m, 64), _rows(do[:, hq], start_m, 64)
                    col_ok = (start_m + r64) < q_end
                    l2 = torch.where(col_ok, _vec(lse2[hq], start_m, 64), 0.0)
                    dl = torch.where(col_ok, _vec(delta[hq], start_m, 64), 0.0)
                    parts = []
                    for c in range(2):
                        key0 = start_n + 64 * c
                        kb, vb = _rows(k[:, kvh], key0, 64), _rows(v[:, kvh], key0, 64)
                        st = (kb @ qb.T) * qk_scale
                        rel = key0 - start_m
                        if (win_hi is not None and rel + 63 > win_hi) or (win_lo is not None and rel - 63 < win_lo):
                            diff = rel + r64[:, None] - r64[None, :]
                            ok = torch.ones(64, 64, dtype=torch.bool)
                            if win_hi is not None:
                                ok &= diff <= win_hi
                            if win_lo is not None:
                                ok &= diff >= win_lo
                            st = torch.where(ok, st, -math.inf)
                        if start_m + 64 > q_end or key0 + 64 > k_end:  # the packed edge mask
                            ok = ((key0 + r64) < k_end)[:, None] & col_ok[None, :]
                            st = torch.where(ok, st, -math.inf)
                        pt = torch.exp2(st - l2[None, :])
                        dk, dv = acc[c]
                        dv += rnd(pt) @ dob
                        dst = rnd(pt * ((vb @ dob.T) - dl[None, :]))
                        dk += dst @ qb
                        parts.append((dst, kb))
                    n_rows = min(64, q_end - start_m)
                    dst = torch.cat([p[0] for p in parts], 0)
                    kb = torch.cat([p[1] for p in parts], 0)
                    dq_buf[hq, start_m : start_m + n_rows] += (dst.T @ kb)[:n_rows]
                for c, (dk, dv) in enumerate(acc):
                    key0 = start_n + 64 * c
                    n = max(0, min(64, k_end - key0))
                    dk_out[key0 : key0 + n, kvh] = dk[:n] * scale
                    dv_out[key0 : key0 + n, kvh] = dv[:n]
    return (dq_buf * scale).transpose(0, 1), dk_out, dv_out
