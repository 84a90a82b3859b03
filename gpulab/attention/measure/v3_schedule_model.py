"""Version 3's schedule replayed on the CPU: its arithmetic in PyTorch, and its barriers as a simulation.

What you will learn: Gluon has no interpreter, so the two things that make version 3 what it is are checked here
against models that mirror the kernel line for line (:mod:`gpulab.attention.v3.forward`):

- :func:`model_forward`: the kernel's arithmetic in the kernel's order: programs of ``64 * consumers`` query rows,
  key blocks of ``block_n`` from ``lo`` up to ``hi`` (causal: the program's last row; a window: its reach), the mask
  only outside ``[first_full, full)``, the K/V rows of query head ``bh`` at ``bh // group`` (grouped-query heads),
  and the step-3 pipeline's rescaling points (``acc`` is rescaled by block j-1's ``alpha`` just before block j-1's
  ``P V`` is added, while block j's scores are already computed). In float64 it must match the float64 reference to
  rounding; a wrong bound, mask, head or rescale shows as a large error. Its bounds (:func:`tile_bounds`) are
  a plain-Python mirror of the kernel's :func:`gpulab.attention.v3.tiles.tile`, which the tests run in the Triton
  interpreter (:func:`gpulab.attention.v3.tiles.tile_table`) and compare.
- :func:`simulate`: the producer and the consumers as coroutines over simulated mbarriers (phase parity, arrival
  counts, TMA byte counts that land at random later times), run under a random interleaving. It checks what the
  hardware would punish: no deadlock (someone can always move), no TMA copy landing in a stage that a consumer's
  wgmma is still reading, every read sees the block it expects, and the consumers' turns alternate
  0, 1, (2,) 0, 1, ... (the ping-pong order).
"""

from __future__ import annotations

import math
import random

import torch

from gpulab import runtime
from gpulab.attention.reference import check_window

__all__ = ["tile_bounds", "programs", "persistent_tiles", "model_forward", "varlen_tiles", "varlen_persistent_tiles",
           "varlen_balance", "model_varlen_forward", "MBarrier", "simulate", "DeadlockError", "RaceError"]  # fmt: skip


def tile_bounds(start_m: int, n_q: int, n_k: int, rows: int = 128, block_n: int = 128, causal: bool = False,
                window_size=(-1, -1)) -> dict:  # fmt: skip
    """The key loop of the tile whose first query row is ``start_m`` (``rows`` rows), as the kernel's
    :func:`gpulab.attention.v3.tiles.tile` computes it: ``lo`` (first key loaded), ``n_blocks``, and the unmasked
    keys ``[first_full, full)``. A window takes version 1's bounds
    (:func:`gpulab.attention.windows.kv_ranges`, diagonal at ``off = Nk - Nq``), and at least one block."""
    for name, v in (("n_q", n_q), ("n_k", n_k), ("rows", rows), ("block_n", block_n)):
        runtime.positive_int(name, v)
    left, right = check_window(window_size, runtime.strict_bool("causal", causal))
    if (left, right) != (-1, -1):
        off = n_k - n_q
        lo, a, b, hi = 0, 0, (n_k // block_n) * block_n, n_k
        if left >= 0:
            lo = max(start_m + off - left, 0) // block_n * block_n
            a = -(-max(start_m + rows - 1 + off - left, 0) // block_n) * block_n
        if right >= 0:
            hi = min(n_k, max(start_m + rows + off + right, 0))
            b = min(b, max(start_m + off + right + 1, 0) // block_n * block_n)
        hi = hi if start_m < n_q else 0
        lo = min(lo, hi)
        a = min(max(a, lo), hi)
        b = min(max(b, a), hi)
        return {"lo": lo, "n_blocks": max(-(-(hi - lo) // block_n), 1), "first_full": a, "full": b}
    hi, full = n_k, (n_k // block_n) * block_n
    if causal:
        hi = min(n_k, start_m + rows)
        full = min(full, ((start_m + 1) // block_n) * block_n)
    return {"lo": 0, "n_blocks": -(-hi // block_n), "first_full": 0, "full": full}


def programs(n_q: int, n_k: int, causal: bool, consumers: int = 2, block_n: int = 128,
             window_size=(-1, -1)) -> list[dict]:  # fmt: skip
    """The kernel's programs in launch order: ``pid_m``, ``start_m`` (first row) and :func:`tile_bounds` (``lo``,
    ``n_blocks`` key blocks loaded, the unmasked keys ``[first_full, full)``). Causal launches run the last
    (longest) programs first."""
    for name, v in (("n_q", n_q), ("n_k", n_k), ("block_n", block_n)):
        runtime.positive_int(name, v)
    runtime.one_of("consumers", consumers, (2, 3))
    rows = 64 * consumers
    n_m = -(-n_q // rows)
    out = []
    for pid in range(n_m):
        pid_m = n_m - 1 - pid if causal else pid
        start_m = pid_m * rows
        out.append({"pid_m": pid_m, "start_m": start_m,
                    **tile_bounds(start_m, n_q, n_k, rows, block_n, causal, window_size)})  # fmt: skip
    return out


def persistent_tiles(
    n_q: int, n_bh: int, n_programs: int, consumers: int = 2, pairs: bool = False, block_n: int = 128
) -> list[list[tuple[int, int, int]]]:
    """The tiles each persistent program of a causal launch runs, in order, as the kernel's ``_tile`` maps its loop
    index: ``out[pid]`` lists ``(bh, pid_m, n_blocks)`` (key blocks for Nk = Nq). ``pairs`` False: tiles ``pid,
    pid + n_programs, ...`` of the head-major order (each head's longest tile first); True: units of two tiles of
    one head, (longest, shortest), ``n_m' + 1`` blocks each; with n_m odd, unit 0 of each head holds the tile past
    the last (``pid_m == n_m``, one block, nothing stored). The sum of ``n_blocks`` per program is its work."""
    for name, v in (("n_q", n_q), ("n_bh", n_bh), ("n_programs", n_programs), ("block_n", block_n)):
        runtime.positive_int(name, v)
    runtime.one_of("consumers", consumers, (2, 3))
    runtime.strict_bool("pairs", pairs)
    rows = 64 * consumers
    n_m = -(-n_q // rows)
    if pairs:
        half_m = (n_m + 1) // 2
        n_tiles = lambda pid: pid + 2 * -(-(n_bh * half_m - pid) // n_programs) * n_programs  # noqa: E731
    else:
        n_tiles = lambda pid: n_m * n_bh  # noqa: E731
    out = []
    for pid in range(n_programs):
        mine = []
        for tile in range(pid, n_tiles(pid), n_programs):
            if pairs:
                k = (tile - pid) // n_programs
                u = pid + (k // 2) * n_programs
                i = u % half_m
                first = 1 - k % 2
                pid_m = i + first * (2 * half_m - 1 - 2 * i)
                bh = u // half_m
            else:
                pid_m, bh = n_m - 1 - tile % n_m, tile // n_m
            start_m = pid_m * rows
            hi = min(n_q, start_m + rows) if start_m < n_q else 1
            mine.append((bh, pid_m, -(-hi // block_n)))
        out.append(mine)
    return out


def _softmax_block(s, m, l, start_n, first_full, full, first, last, qk_scale, window):
    """The kernel's ``_softmax_block``: (P, alpha, m', l') of raw scores ``s`` [64, block_n]; the row max of the raw
    scores, scaled (``qk_scale > 0``), and ``P = 2^(qk_scale s - m')``. ``window``: blocks before ``first_full`` are
    masked too, by ``first <= key <= last``, and a row with no key yet (m' = -inf) takes its exponents against 0."""
    cols = start_n + torch.arange(s.shape[1])
    if start_n >= full or (window and start_n < first_full):
        seen = (cols[None, :] <= last[:, None]) & (cols[None, :] >= first[:, None])
        s = torch.where(seen, s, torch.tensor(-math.inf, dtype=s.dtype))
    m_new = torch.maximum(m, s.max(1).values * qk_scale)
    m_use = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new) if window else m_new
    p = torch.exp2(s * qk_scale - m_use[:, None])
    alpha = torch.exp2(m - m_use)
    return p, alpha, m_new, l * alpha + p.sum(1)


def model_forward(q, k, v, causal: bool = False, scale: float | None = None, step: int = 3, consumers: int = 2,
                  block_n: int = 128, p_dtype=None, window_size=(-1, -1)):  # fmt: skip
    """Version 3's forward in PyTorch on the CPU, in the kernel's order: (o, lse) of q [B, Hq, Nq, D], k, v
    [B, Hkv, Nk, D] (Hkv dividing Hq: grouped-query heads, query head h reading KV head ``h // (Hq // Hkv)``),
    computed in q's dtype (use float64 to compare with a float64 reference). ``step`` 1 runs the plain loop, 2 and 3
    the pipelined one (the same arithmetic in another order); ``p_dtype``: round P to this dtype before ``P V`` as
    the kernel does (None: keep q's dtype); ``window_size``: ``(left, right)``, bottom-right aligned (not with
    ``causal``)."""
    runtime.one_of("step", step, (1, 2, 3))
    runtime.one_of("consumers", consumers, (2, 3))
    runtime.positive_int("block_n", block_n)
    for name, t in (("q", q), ("k", k), ("v", v)):
        runtime.require_tensor(name, t, device_check=False)  # a CPU model, whatever gpulab's device
        if t.dim() != 4:
            raise ValueError(f"{name} must be [B, H, N, D], got shape {tuple(t.shape)}.")
    if (k.shape != v.shape or k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3] or k.shape[1] < 1
            or q.shape[1] % k.shape[1]):  # fmt: skip
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must be [B, Hkv, Nk, D] with q's B and D and "
                         f"Hkv dividing q's heads, q {tuple(q.shape)}.")  # fmt: skip
    left, right = check_window(window_size, runtime.strict_bool("causal", causal))
    window = (left, right) != (-1, -1)
    b, h, n_q, d = q.shape
    n_k, group = k.shape[2], h // k.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    if not (isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale > 0):
        raise ValueError(f"scale must be None or a positive number (the kernel scales the raw scores' row max), "
                         f"got {scale!r}.")  # fmt: skip
    qk_scale = scale * 1.4426950408889634
    dt = q.dtype
    o = torch.full_like(q, math.nan)  # poisoned: every row must be written
    lse = torch.full((b, h, n_q), math.nan, dtype=dt)
    pad = -(-n_q // (64 * consumers)) * 64 * consumers + 64 * consumers
    kpad = -(-n_k // block_n) * block_n
    for bh in range(b * h):
        qi = torch.zeros(pad, d, dtype=dt)
        qi[:n_q] = q.reshape(b * h, n_q, d)[bh]  # TMA zero-fills rows past Nq
        ki, vi = torch.zeros(kpad, d, dtype=dt), torch.zeros(kpad, d, dtype=dt)
        kv = bh // group  # the producer's K/V row: (b Hq + h) // group = b Hkv + h // group
        ki[:n_k], vi[:n_k] = k.reshape(-1, n_k, d)[kv], v.reshape(-1, n_k, d)[kv]
        for prog in programs(n_q, n_k, causal, consumers, block_n, (left, right)):
            for cid in range(consumers):
                row0 = prog["start_m"] + 64 * cid
                rows = row0 + torch.arange(64)
                last = torch.minimum(rows, torch.tensor(n_k - 1)) if causal else torch.full((64,), n_k - 1)
                first = torch.full((64,), -1)
                if left >= 0:
                    first = rows + (n_k - n_q - left)
                if right >= 0:
                    last = torch.minimum(rows + (n_k - n_q + right), torch.tensor(n_k - 1))
                qc = qi[row0 : row0 + 64]
                m = torch.full((64,), -math.inf, dtype=dt)
                l = torch.zeros(64, dtype=dt)  # noqa: E741 - the paper's name
                acc = torch.zeros(64, d, dtype=dt)

                n, lo, bounds = prog["n_blocks"], prog["lo"], (prog["first_full"], prog["full"], first, last)

                def pv(p, j, vi=vi, lo=lo):
                    p = p.to(p_dtype).to(dt) if p_dtype is not None else p
                    return p @ vi[lo + j * block_n : lo + (j + 1) * block_n]

                def scores(j, ki=ki, lo=lo, qc=qc):
                    return qc @ ki[lo + j * block_n : lo + (j + 1) * block_n].T

                if step == 1:
                    for j in range(n):
                        p, alpha, m, l = _softmax_block(scores(j), m, l, lo + j * block_n, *bounds, qk_scale, window)  # noqa: E741
                        acc = acc * alpha[:, None] + pv(p, j)
                else:  # prologue, the pipelined loop (rescale, scores of j, P V of j-1, softmax of j), epilogue
                    p, alpha, m, l = _softmax_block(scores(0), m, l, lo, *bounds, qk_scale, window)  # noqa: E741
                    for j in range(1, n):
                        acc = acc * alpha[:, None]
                        s = scores(j)
                        acc = acc + pv(p, j - 1)
                        p, alpha, m, l = _softmax_block(s, m, l, lo + j * block_n, *bounds, qk_scale, window)  # noqa: E741
                    acc = acc * alpha[:, None] + pv(p, n - 1)
                if window:  # a row that saw no key: O = 0 and LSE = 0
                    l = torch.where(l > 0, l, torch.ones_like(l))  # noqa: E741
                    m = torch.where(m == -math.inf, torch.zeros_like(m), m)
                keep = rows < n_q  # the TMA store clips rows past Nq; LSE is stored under the same mask
                bi, hi_ = divmod(bh, h)
                o[bi, hi_, rows[keep]] = (acc / l[:, None])[keep]
                lse[bi, hi_, rows[keep]] = ((m + torch.log2(l)) * math.log(2))[keep]
    return o, lse


def varlen_tiles(cu_seq_q, cu_seq_k, max_q: int, heads: int, rows: int = 128, block_n: int = 128,
                 window_size=(-1, -1)) -> list[dict]:  # fmt: skip
    """The packed launch's tiles in launch order, as the kernel's :func:`gpulab.attention.v3.tiles.varlen_tile` maps
    them (a plain-Python mirror; the tests compare it with :func:`~gpulab.attention.v3.tiles.varlen_tile_table`):
    ``tile``, ``h``, ``start_m`` (within the sequence), ``lo``, ``n_blocks``, ``first_full``, ``full`` (the
    sequence's own key coordinates: :func:`tile_bounds` of a problem of its lengths, at least one block),
    ``q0``/``k0`` (its first rows in the packed tensors) and ``len_q``/``len_k``. Query tile major, the last
    query tile first, then sequence, then head."""
    left, right = check_window(window_size)
    cq, ck = [int(x) for x in cu_seq_q], [int(x) for x in cu_seq_k]
    n_m, n_s = -(-max_q // rows), len(cq) - 1
    out = []
    for t in range(n_m * heads * n_s):
        pid_m, seq, h = n_m - 1 - t // (heads * n_s), (t % (heads * n_s)) // heads, t % heads
        len_q, len_k, start_m = cq[seq + 1] - cq[seq], ck[seq + 1] - ck[seq], pid_m * rows
        if start_m < len_q and len_k > 0:
            bounds = tile_bounds(start_m, len_q, len_k, rows, block_n, False, (left, right))
        else:  # no rows (skipped) or no keys: one block, every key masked
            bounds = {"lo": 0, "n_blocks": 1, "first_full": 0, "full": 0}
        out.append({"tile": t, "h": h, "start_m": start_m, **bounds, "q0": cq[seq], "k0": ck[seq], "len_q": len_q,
                    "len_k": len_k})  # fmt: skip
    return out


def varlen_persistent_tiles(cu_seq_q, cu_seq_k, max_q: int, heads: int, programs: int, rows: int = 128,
                            block_n: int = 128, window_size=(-1, -1)) -> list[list[dict]]:  # fmt: skip
    """The packed launch on a persistent grid of ``programs``: ``out[pid]`` lists, in order, the tiles program
    ``pid`` runs, :func:`varlen_tiles`' tiles ``pid, pid + programs, ...`` that have rows (the kernel skips the
    others in every partition, so they take no Q buffer, no key block and no turn)."""
    runtime.positive_int("programs", programs)
    every = varlen_tiles(cu_seq_q, cu_seq_k, max_q, heads, rows, block_n, window_size)
    return [[t for t in every[pid::programs] if t["start_m"] < t["len_q"]] for pid in range(programs)]


def varlen_balance(cu_seq_q, cu_seq_k, max_q: int, heads: int, programs: int, rows: int = 128, block_n: int = 128,
                   window_size=(-1, -1)) -> dict:  # fmt: skip
    """How evenly the packed launch's key blocks fall on ``programs`` persistent programs: the busiest program's
    blocks over the mean, for the kernel's static schedule (:func:`varlen_persistent_tiles`: tiles ``pid, pid +
    programs, ...``) and for a dynamic one that hands each next tile in launch order to the first program free (list
    scheduling, what an atomic tile counter would do). 1.0 is even; the launch lasts about as long as its busiest
    program, so the ratio bounds what a better schedule could save. Returns ``{"static", "dynamic", "tiles",
    "blocks"}`` (the tiles with rows and their key blocks in all); per-tile costs other than key blocks are not
    modelled."""
    per_program = varlen_persistent_tiles(cu_seq_q, cu_seq_k, max_q, heads, programs, rows, block_n, window_size)
    static = [sum(t["n_blocks"] for t in prog) for prog in per_program]
    blocks = sum(static)
    live = sorted((t for prog in per_program for t in prog), key=lambda t: t["tile"])  # launch order
    free = [0] * programs
    for t in live:  # the first program to finish takes the next tile
        free[free.index(min(free))] += t["n_blocks"]
    mean = blocks / programs if blocks else 1.0
    return {"static": max(static) / mean if blocks else 1.0, "dynamic": max(free) / mean if blocks else 1.0,
            "tiles": len(live), "blocks": blocks}  # fmt: skip


def model_varlen_forward(q, k, v, cu_seq_q, cu_seq_k, max_q: int, scale: float | None = None, step: int = 3,
                         consumers: int = 2, block_n: int = 128, window_size=(-1, -1),
                         programs: int | None = None):  # fmt: skip
    """Version 3's packed (varlen) forward in PyTorch on the CPU, tile by tile in the kernel's order: (o [Tq, Hq, D],
    lse [Hq, Tq]) of packed q [Tq, Hq, D], k, v [Tk, Hkv, D] with int32 offsets ``cu_seq_q`` / ``cu_seq_k``. A tile
    reads its rows from the packed tensors as the TMA copies do: Q rows and K/V blocks run on into the *next*
    sequence's rows (zeros only past the tensor's end), so the masks (key < the sequence's key length, the window
    per sequence) must keep them out; rows past the sequence's end are not stored. Every row loops with the guard of
    a row that sees no key (O = 0, LSE = 0: a sequence with no keys, or a window). ``programs``: the persistent
    grid's order instead (:func:`varlen_persistent_tiles`, program by program), None: one program per tile."""
    runtime.one_of("step", step, (1, 2, 3))
    runtime.one_of("consumers", consumers, (2, 3))
    left, right = check_window(window_size)
    t_q, h, d = q.shape
    group = h // k.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qk_scale, dt, rows_ = scale * 1.4426950408889634, q.dtype, 64 * consumers
    o = torch.full_like(q, math.nan)  # poisoned: every row of a sequence must be written, no other row
    lse = torch.full((h, t_q), math.nan, dtype=dt)
    qp = torch.cat([q, torch.zeros(rows_ + 64, h, d, dtype=dt)])  # TMA zero-fills rows past the tensor only
    kp, vp = (torch.cat([x, torch.zeros(block_n * 2, x.shape[1], d, dtype=dt)]) for x in (k, v))
    if programs is None:
        order = varlen_tiles(cu_seq_q, cu_seq_k, max_q, h, rows_, block_n, (left, right))
    else:
        order = [t for prog in varlen_persistent_tiles(cu_seq_q, cu_seq_k, max_q, h, programs, rows_, block_n,
                                                       (left, right)) for t in prog]  # fmt: skip
    for tl_ in order:
        if tl_["start_m"] >= tl_["len_q"]:
            continue  # a tile past its sequence's end: the program does nothing
        len_q, len_k, lo, n, hk = tl_["len_q"], tl_["len_k"], tl_["lo"], tl_["n_blocks"], tl_["h"] // group
        for cid in range(consumers):
            row0 = tl_["start_m"] + 64 * cid
            rows = row0 + torch.arange(64)
            first, last = torch.full((64,), -1), torch.full((64,), len_k - 1)
            if left >= 0:
                first = rows + (len_k - len_q - left)
            if right >= 0:
                last = torch.minimum(rows + (len_k - len_q + right), torch.tensor(len_k - 1))
            qc = qp[tl_["q0"] + row0 : tl_["q0"] + row0 + 64, tl_["h"]]
            m, l, acc = torch.full((64,), -math.inf, dtype=dt), torch.zeros(64, dtype=dt), torch.zeros(64, d, dtype=dt)  # noqa: E741
            bounds = (tl_["first_full"], tl_["full"], first, last)

            def block(x, j, k0=tl_["k0"], lo=lo, hk=hk):
                return x[k0 + lo + j * block_n : k0 + lo + (j + 1) * block_n, hk]

            if step == 1:
                for j in range(n):
                    s = qc @ block(kp, j).T
                    p, alpha, m, l = _softmax_block(s, m, l, lo + j * block_n, *bounds, qk_scale, True)  # noqa: E741
                    acc = acc * alpha[:, None] + p @ block(vp, j)
            else:
                p, alpha, m, l = _softmax_block(qc @ block(kp, 0).T, m, l, lo, *bounds, qk_scale, True)  # noqa: E741
                for j in range(1, n):
                    acc = acc * alpha[:, None]
                    s = qc @ block(kp, j).T
                    acc = acc + p @ block(vp, j - 1)
                    p, alpha, m, l = _softmax_block(s, m, l, lo + j * block_n, *bounds, qk_scale, True)  # noqa: E741
                acc = acc * alpha[:, None] + p @ block(vp, n - 1)
            l = torch.where(l > 0, l, torch.ones_like(l))  # noqa: E741
            m = torch.where(m == -math.inf, torch.zeros_like(m), m)
            keep = rows < len_q  # the last tile's masked store: no row of the next sequence is written
            o[tl_["q0"] + rows[keep], tl_["h"]] = (acc / l[:, None])[keep]
            lse[tl_["h"], tl_["q0"] + rows[keep]] = ((m + torch.log2(l)) * math.log(2))[keep]
    return o, lse


# ----------------------------------------------------------------------------------------------------------------
# The barrier protocol as a simulation.
# ----------------------------------------------------------------------------------------------------------------


class DeadlockError(RuntimeError):
    """Every agent waits on a barrier phase that no one can complete."""


class RaceError(AssertionError):
    """A TMA copy landed in a stage still being read, or a read saw the wrong block."""


class MBarrier:
    """An mbarrier: ``count`` arrivals (plus any expected TMA bytes) complete the current phase.
    ``wait(parity)`` passes when the phase of that parity has completed, i.e. the current phase's parity differs
    (a fresh barrier is in phase 0, so waiting on parity 1 passes at once)."""

    def __init__(self, count: int):
        count = runtime.positive_int("count", count)
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def passes(self, parity: int) -> bool:
        return (self.phase & 1) != parity

    def _maybe_flip(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def arrive(self):
        if self.pending <= 0:
            raise RaceError("arrive on a barrier with no pending arrivals")
        self.pending -= 1
        self._maybe_flip()

    def expect(self, nbytes: int):  # mbarrier.expect = arrive.expect_tx: one arrival plus the bytes to wait for
        self.tx += nbytes
        self.arrive()

    def land(self, nbytes: int):
        self.tx -= nbytes
        self._maybe_flip()


def _producer(bars, tiles, stages, consumers, q_buffers=1):
    it = 0
    for tile_i, n_blocks in enumerate(tiles):
        qb = (tile_i % q_buffers) * consumers
        for c in range(consumers):
            yield ("wait", bars["q_empty"][qb + c], ((tile_i // q_buffers) & 1) ^ 1)
            yield ("load", "q", qb + c, tile_i)
        for j in range(n_blocks):
            g = it + j
            s, ph = g % stages, (g // stages) & 1
            yield ("wait", bars["k_empty"][s], ph ^ 1)
            yield ("load", "k", s, g)
            yield ("wait", bars["v_empty"][s], ph ^ 1)
            yield ("load", "v", s, g)
        it += n_blocks


def _consumer(bars, cid, consumers, tiles, stages, step, q_buffers=1):
    it = tt = 0
    for tile_i, n_blocks in enumerate(tiles):
        qi = (tile_i % q_buffers) * consumers + cid
        yield ("wait", bars["q_ready"][qi], (tile_i // q_buffers) & 1)
        yield ("read", "q", qi, tile_i)
        if step == 1:
            for j in range(n_blocks):
                g = it + j
                st, ph = g % stages, (g // stages) & 1
                yield ("wait", bars["k_ready"][st], ph)
                yield ("read", "k", st, g)
                yield ("done", "k", st, g)
                yield ("arrive", bars["k_empty"][st])
                yield ("wait", bars["v_ready"][st], ph)
                yield ("read", "v", st, g)
                yield ("done", "v", st, g)
                yield ("arrive", bars["v_empty"][st])
        else:
            st = it % stages
            yield ("wait", bars["k_ready"][st], (it // stages) & 1)
            yield ("read", "k", st, it)
            yield ("done", "k", st, it)
            yield ("arrive", bars["k_empty"][st])
            for j in range(1, n_blocks):
                g = it + j
                st, sp = g % stages, (g - 1) % stages
                yield ("wait", bars["k_ready"][st], (g // stages) & 1)
                yield ("wait", bars["v_ready"][sp], ((g - 1) // stages) & 1)
                t = tt + j - 1
                yield ("wait", bars["turn"][cid], (t & 1) ^ (1 if cid == 0 else 0))
                yield ("turn", cid)
                yield ("read", "k", st, g)  # S_j issued (asynchronous)
                yield ("read", "v", sp, g - 1)  # P V of j-1 issued
                yield ("arrive", bars["turn"][(cid + 1) % consumers])
                yield ("done", "k", st, g)  # wait(1): the scores are done
                yield ("arrive", bars["k_empty"][st])
                yield ("done", "v", sp, g - 1)  # wait(0): P V done
                yield ("arrive", bars["v_empty"][sp])
            g = it + n_blocks - 1
            sl = g % stages
            yield ("wait", bars["v_ready"][sl], (g // stages) & 1)
            yield ("read", "v", sl, g)
            yield ("done", "v", sl, g)
            yield ("arrive", bars["v_empty"][sl])
            tt += n_blocks - 1
        yield ("done", "q", qi, tile_i)  # O written over Q and stored (TMA store waited for)
        yield ("arrive", bars["q_empty"][qi])
        it += n_blocks


def simulate(n_blocks, stages: int = 2, consumers: int = 2, step: int = 3, seed: int = 0, q_buffers: int = 1,
             max_events: int = 1_000_000) -> list[int]:  # fmt: skip
    """Run version 3's producer and consumers over simulated mbarriers under a random interleaving (``seed``), TMA
    copies landing at random later points. ``n_blocks``: key blocks of the program's one tile, or a list of them
    for a persistent program's tiles in order; ``q_buffers`` Q buffers per consumer (2: the next tile's Q loads
    while this tile computes). Returns the consumers' turn order; raises :class:`DeadlockError` or
    :class:`RaceError` (see the module docstring)."""
    tiles = [n_blocks] if isinstance(n_blocks, int) else list(n_blocks)
    if not tiles:
        raise ValueError("n_blocks must be a positive int or a non-empty list of them, got an empty list.")
    for n in tiles:
        runtime.positive_int("n_blocks", n)
    runtime.integer("stages", stages, minimum=1)
    runtime.one_of("consumers", consumers, (2, 3))
    runtime.one_of("step", step, (1, 2, 3))
    rng = random.Random(seed)
    bars = {
        "k_ready": [MBarrier(1) for _ in range(stages)],
        "v_ready": [MBarrier(1) for _ in range(stages)],
        "k_empty": [MBarrier(consumers) for _ in range(stages)],
        "v_empty": [MBarrier(consumers) for _ in range(stages)],
        "turn": [MBarrier(1) for _ in range(consumers)],
        "q_ready": [MBarrier(1) for _ in range(q_buffers * consumers)],
        "q_empty": [MBarrier(1) for _ in range(q_buffers * consumers)],
    }
    smem = {(kind, s): None for kind in "kv" for s in range(stages)}
    smem |= {("q", c): None for c in range(q_buffers * consumers)}
    readers: dict = {key: 0 for key in smem}
    runtime.one_of("q_buffers", q_buffers, (1, 2))
    agents = [_producer(bars, tiles, stages, consumers, q_buffers)] + [
        _consumer(bars, c, consumers, tiles, stages, step, q_buffers) for c in range(consumers)
    ]
    current = [next(a, None) for a in agents]
    in_flight: list = []  # TMA copies issued, not landed: (kind, stage, block)
    turns: list[int] = []
    for _ in range(max_events):
        runnable = [i for i, ev in enumerate(current) if ev is not None and (ev[0] != "wait" or ev[1].passes(ev[2]))]
        if not runnable and not in_flight:
            if all(ev is None for ev in current):
                return turns
            raise DeadlockError(f"all agents wait: {[ev[:1] + ev[2:] if ev else None for ev in current]}")
        if in_flight and (not runnable or rng.random() < 0.3):  # a copy lands
            kind, s, j = in_flight.pop(rng.randrange(len(in_flight)))
            if readers[(kind, s)]:
                raise RaceError(f"TMA copy of {kind} block {j} landed in stage {s} while a wgmma reads it")
            smem[(kind, s)] = j
            bars[f"{kind}_ready"][s].land(1)
            continue
        i = rng.choice(runnable)
        ev = current[i]
        if ev[0] == "load":
            _, kind, s, j = ev
            if readers[(kind, s)]:
                raise RaceError(f"producer refills {kind} stage {s} (block {j}) while a consumer still reads it")
            bars[f"{kind}_ready"][s].expect(1)
            in_flight.append((kind, s, j))
        elif ev[0] in ("read", "done"):
            _, kind, s, j = ev
            if smem[(kind, s)] != j:
                raise RaceError(f"consumer {i - 1} {ev[0]}s {kind} stage {s} expecting block {j}, "
                                f"finds {smem[(kind, s)]}")  # fmt: skip
            readers[(kind, s)] += 1 if ev[0] == "read" else -1
        elif ev[0] == "arrive":
            ev[1].arrive()
        elif ev[0] == "turn":
            turns.append(ev[1])
        current[i] = next(agents[i], None)
    raise RuntimeError(f"simulation did not finish in {max_events} events")
