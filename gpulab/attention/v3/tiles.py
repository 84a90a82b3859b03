"""Lesson 4, version 3: which query rows and which key blocks each tile of the forward covers.

:func:`tile` maps a tile index to its head, its first query row and its key loop's bounds. It is a ``@triton.jit``
function, so one source serves both sides: the Gluon kernel (:mod:`gpulab.attention.v3.forward`) calls it, and on a
machine without a GPU the Triton interpreter runs it (:func:`tile_table`), which is how the CPU tests hold the float64
model of the kernel (:mod:`gpulab.attention.measure.v3_schedule_model`) to the kernel's own index math. The window
bounds are version 1's (:func:`gpulab.attention.windows.kv_ranges`), called as they are.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import runtime
from gpulab.attention.reference import check_window
from gpulab.attention.windows import kv_ranges

__all__ = ["tile", "tile_table", "FIELDS", "varlen_tile", "varlen_tile_table", "VARLEN_FIELDS"]

FIELDS = ("bh", "start_m", "lo", "n_blocks", "first_full", "full")
""":func:`tile`'s results, in order (:func:`tile_table`'s keys)."""


@triton.jit
def tile(tile, n_q, n_k, n_bh, left, right, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
         PAIRS: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):  # fmt: skip
    """Tile index -> (bh, start_m, lo, n_blocks, first_full, full): the head (``b * Hq + h``), the first query row,
    the first key it loads, the key blocks from there (causal: up to its last row), and the unmasked keys
    ``[first_full, full)``: every block before ``first_full`` or at or past ``full`` needs a mask. Without a window
    ``lo = first_full = 0``. A head's tiles are neighbours (programs running at once share its K and V in L2; with
    grouped-query heads the query heads of one KV head are neighbours too, so a group's tiles read one K/V from L2);
    causal, each head's longest tile first. (Every head's longest tiles first, version 2's persistent order, ran
    d=128 causal N=1024 about 20% slower: tiles of different heads running at once read more K/V than L2 holds.)

    ``PAIRS`` (persistent, causal): ``tile`` is ``pid + k * programs``, the program's k-th tile; the program takes
    units ``u = pid, pid + programs, ...``, unit u being head ``u // ceil(n_m / 2)``'s tiles ``n_m' - 1 - i`` then
    ``i`` (``i = u % ceil(n_m / 2)``, ``n_m'`` = n_m rounded up to even): n_m' + 1 key blocks per unit whatever i,
    so static round-robin stays even. With n_m odd the unit i = 0 holds the tile past the last (all rows past Nq:
    one key block, nothing stored). :func:`gpulab.attention.measure.v3_schedule_model.persistent_tiles` mirrors this.

    A window (``HAS_LEFT`` / ``HAS_RIGHT``, never with ``IS_CAUSAL``): version 1's bounds with the diagonal
    bottom-right (``off = Nk - Nq``): blocks outside ``[lo, hi)`` are never loaded, only the edge blocks are
    masked. A tile that sees no key at all (rows above the window's reach when Nq > Nk, or past Nq) still takes one
    block, all of it masked: the ring's protocol needs one per tile."""
    n_m = tl.cdiv(n_q, ROWS)
    if PAIRS:
        half_m = (n_m + 1) // 2
        k = (tile - tl.program_id(0)) // tl.num_programs(0)
        u = tl.program_id(0) + (k // 2) * tl.num_programs(0)
        i = u % half_m
        first = 1 - k % 2
        pid_m = i + first * (2 * half_m - 1 - 2 * i)
        bh = u // half_m
    else:
        pid_m = tile % n_m
        if IS_CAUSAL:
            pid_m = n_m - 1 - pid_m
        bh = tile // n_m
    start_m = pid_m * ROWS
    if HAS_LEFT or HAS_RIGHT:
        lo, first_full, full, hi = kv_ranges(start_m, n_q, n_k, n_k - n_q, left, right, ROWS, BLOCK_N, HAS_LEFT,
                                             HAS_RIGHT)  # fmt: skip
        return bh, start_m, lo, tl.maximum(tl.cdiv(hi - lo, BLOCK_N), 1), first_full, full
    hi = n_k
    full = (n_k // BLOCK_N) * BLOCK_N
    if IS_CAUSAL:
        hi = tl.minimum(n_k, start_m + ROWS)
        full = tl.minimum(full, ((start_m + 1) // BLOCK_N) * BLOCK_N)
    if PAIRS:  # the tile past the last (n_m odd): one key block
        real = (start_m < n_q).to(tl.int32)
        hi = real * hi + (1 - real)
    return bh, start_m, 0, tl.cdiv(hi, BLOCK_N), 0, full


VARLEN_FIELDS = ("h", "start_m", "lo", "n_blocks", "first_full", "full", "q0", "k0", "len_q", "len_k")
""":func:`varlen_tile`'s results, in order (:func:`varlen_tile_table`'s keys)."""


@triton.jit
def varlen_tile(tile, cu_q, cu_k, n_m, n_h, n_s, left, right, ROWS: tl.constexpr, BLOCK_N: tl.constexpr,
                HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr):  # fmt: skip
    """A packed batch's tile -> (h, start_m, lo, n_blocks, first_full, full, q0, k0, len_q, len_k): the head, the
    first query row *within* the sequence, :func:`tile`'s key loop in the sequence's own coordinates, the sequence's
    first query and key row in the packed tensors (``cu_q[s]``, ``cu_k[s]``, read here, on the device) and its
    lengths. There are ``n_m`` (query tiles of the longest sequence) x ``n_h`` heads x ``n_s`` sequences tiles, ordered
    query tile first, last tile index first: ``pid_m = n_m - 1 - tile // (n_h S)``, so the tiles that only the long
    sequences have run first (they bound the launch's time); then sequence, then head (a group's query heads are
    neighbours, as in :func:`tile`). A tile with ``start_m >= len_q`` has no rows: the kernel skips it (three loads
    and a comparison), whether a program takes one tile or, persistent, tiles pid, pid + programs, ...: for a
    non-causal problem a tile costs its sequence's key length, so this order is longest work first. A window is
    aligned at each sequence's bottom-right corner (``off = len_k - len_q``, version 1's varlen rule). At least one
    key block, all of it masked where the sequence has no key (the ring's protocol needs one per tile)."""
    per_m = n_h * n_s
    pid_m = n_m - 1 - tile // per_m
    seq = (tile % per_m) // n_h
    h = tile % n_h
    q0 = tl.load(cu_q + seq)
    k0 = tl.load(cu_k + seq)
    len_q = tl.load(cu_q + seq + 1) - q0
    len_k = tl.load(cu_k + seq + 1) - k0
    start_m = pid_m * ROWS
    if HAS_LEFT or HAS_RIGHT:
        lo, first_full, full, hi = kv_ranges(start_m, len_q, len_k, len_k - len_q, left, right, ROWS, BLOCK_N,
                                             HAS_LEFT, HAS_RIGHT)  # fmt: skip
    else:
        lo = 0
        first_full = 0
        full = (len_k // BLOCK_N) * BLOCK_N
        hi = len_k
    return h, start_m, lo, tl.maximum(tl.cdiv(hi - lo, BLOCK_N), 1), first_full, full, q0, k0, len_q, len_k


@triton.jit
def _varlen_table_kernel(out_ptr, cu_q, cu_k, n_m, n_h, n_s, left, right, most, ROWS: tl.constexpr,
                         BLOCK_N: tl.constexpr, HAS_LEFT: tl.constexpr, HAS_RIGHT: tl.constexpr,
                         LIVE: tl.constexpr):  # fmt: skip
    """Each program walks tiles ``pid, pid + programs, ...`` (the forward kernel's loop) and writes each tile's index
    and :func:`varlen_tile` to ``out[pid, k]``; ``LIVE``: only the tiles with rows (the ones the kernel runs)."""
    pid = tl.program_id(0)
    k = 0
    for t in range(pid, n_m * n_h * n_s, tl.num_programs(0)):
        fields = varlen_tile(t, cu_q, cu_k, n_m, n_h, n_s, left, right, ROWS, BLOCK_N, HAS_LEFT, HAS_RIGHT)
        if (not LIVE) or (fields[1] < fields[8]):
            row = out_ptr + (pid * most + k) * 11
            tl.store(row, t)
            for i in tl.static_range(10):
                tl.store(row + 1 + i, fields[i])
            k += 1


def varlen_tile_table(cu_seq_q, cu_seq_k, max_q: int, heads: int, rows: int = 128, block_n: int = 128,
                      window_size=(-1, -1), programs: int | None = None) -> list:  # fmt: skip
    """:func:`varlen_tile` of every tile of a packed launch, as dicts of ``tile`` and :data:`VARLEN_FIELDS`.
    ``programs`` None: one program per tile (``ceil(max_q / rows) * heads * S`` of them), a flat list in launch
    order, tiles past their sequence's end included (the kernel skips them). ``programs`` an int: the persistent
    grid, ``out[pid]`` listing in order the tiles program ``pid`` runs (``pid, pid + programs, ...``, those with
    rows only). ``cu_seq_q`` / ``cu_seq_k``: int32 offsets [S + 1]. Runs the ``@triton.jit`` source the kernel
    compiles (in the interpreter where there is no GPU)."""
    for name, value in (("max_q", max_q), ("heads", heads), ("rows", rows), ("block_n", block_n)):
        runtime.positive_int(name, value)
    left, right = check_window(window_size)
    for name, cu in (("cu_seq_q", cu_seq_q), ("cu_seq_k", cu_seq_k)):
        if not isinstance(cu, torch.Tensor) or cu.dtype != torch.int32 or cu.dim() != 1 or cu.shape[0] < 2:
            raise ValueError(f"{name} must be an int32 tensor [S + 1] of offsets, got {cu!r}.")
    if cu_seq_k.shape != cu_seq_q.shape:
        raise ValueError(f"cu_seq_q {tuple(cu_seq_q.shape)} and cu_seq_k {tuple(cu_seq_k.shape)} must match.")
    n_m, n_s = -(-max_q // rows), cu_seq_q.shape[0] - 1
    n_tiles = n_m * heads * n_s
    grid = n_tiles if programs is None else runtime.positive_int("programs", programs)
    most = -(-n_tiles // grid)
    out = torch.full((grid, most, 11), -1, dtype=torch.int32, device=runtime.device)
    cu_q, cu_k = (cu.to(runtime.device) for cu in (cu_seq_q, cu_seq_k))
    _varlen_table_kernel[(grid,)](out, cu_q, cu_k, n_m, heads, n_s, left, right, most, ROWS=rows, BLOCK_N=block_n,
                                  HAS_LEFT=left >= 0, HAS_RIGHT=right >= 0, LIVE=programs is not None)  # fmt: skip
    table = [[dict(tile=row[0], **dict(zip(VARLEN_FIELDS, row[1:]))) for row in prog if row[0] >= 0]
             for prog in out.cpu().tolist()]  # fmt: skip
    return [t for prog in table for t in prog] if programs is None else table


@triton.jit
def _table_kernel(out_ptr, n_q, n_k, n_bh, left, right, n_units, most, ROWS: tl.constexpr, BLOCK_N: tl.constexpr,
                  IS_CAUSAL: tl.constexpr, PAIRS: tl.constexpr, HAS_LEFT: tl.constexpr,
                  HAS_RIGHT: tl.constexpr):  # fmt: skip
    """Each program writes :func:`tile` of its tiles ``pid, pid + programs, ...`` (the forward kernel's loop; below
    ``n_units``, the kernel's tile count) to ``out[pid, k]``, ``most`` rows per program."""
    pid = tl.program_id(0)
    if PAIRS:
        n_tiles = pid + 2 * tl.cdiv(n_units - pid, tl.num_programs(0)) * tl.num_programs(0)
    else:
        n_tiles = n_units
    k = 0
    for t in range(pid, n_tiles, tl.num_programs(0)):
        bh, start_m, lo, n_blocks, first_full, full = tile(t, n_q, n_k, n_bh, left, right, ROWS, BLOCK_N, IS_CAUSAL,
                                                           PAIRS, HAS_LEFT, HAS_RIGHT)  # fmt: skip
        row = out_ptr + (pid * most + k) * 7
        tl.store(row, t)
        tl.store(row + 1, bh)
        tl.store(row + 2, start_m)
        tl.store(row + 3, lo)
        tl.store(row + 4, n_blocks)
        tl.store(row + 5, first_full)
        tl.store(row + 6, full)
        k += 1


def tile_table(n_q: int, n_k: int, n_bh: int, programs: int | None = None, rows: int = 128, block_n: int = 128,
               is_causal: bool = False, pairs: bool = False, window_size=(-1, -1)) -> list[list[dict]]:  # fmt: skip
    """:func:`tile` as the forward kernel's programs call it: ``out[pid]`` lists, in order, each tile's ``tile``
    index and :data:`FIELDS`. ``programs`` None: one program per tile (the non-persistent grid); else that many
    persistent programs; ``pairs`` as the kernel's ``PAIRS`` (causal-like problems on a persistent grid). Runs the
    same ``@triton.jit`` source the kernel compiles (in the interpreter where there is no GPU)."""
    for name, value in (("n_q", n_q), ("n_k", n_k), ("n_bh", n_bh), ("rows", rows), ("block_n", block_n)):
        runtime.positive_int(name, value)
    left, right = check_window(window_size, runtime.strict_bool("is_causal", is_causal))
    if runtime.strict_bool("pairs", pairs) and programs is None:
        raise ValueError("pairs=True orders a persistent grid's tiles; pass programs (e.g. 132, the SM count).")
    n_m = -(-n_q // rows)
    n_units = (n_m + 1) // 2 * n_bh if pairs else n_m * n_bh
    grid = n_units if programs is None else runtime.positive_int("programs", programs)
    most = 2 * -(-n_units // grid) + 2
    out = torch.full((grid, most, 7), -1, dtype=torch.int32, device=runtime.device)
    _table_kernel[(grid,)](out, n_q, n_k, n_bh, left, right, n_units, most, ROWS=rows, BLOCK_N=block_n,
                           IS_CAUSAL=is_causal, PAIRS=pairs, HAS_LEFT=left >= 0, HAS_RIGHT=right >= 0)  # fmt: skip
    table = []
    for prog in out.cpu().tolist():
        table.append([dict(zip(("tile", *FIELDS), row)) for row in prog if row[0] >= 0])
    return table
