"""Version 3's forward with grouped-query heads and sliding windows, on the CPU: the float64 model of the kernel
(same tiles, block loop, masks, K/V head) against the float64 reference, and the model's tile bounds against the
kernel's own ``@triton.jit`` tile function run in the Triton interpreter."""

import pytest
import torch

from gpulab import check
from gpulab.attention import reference
from gpulab.attention.measure import v3_schedule_model as sm
from gpulab.attention.v3 import tiles

# (B, Hq, Hkv, Nq, Nk, D, causal, window, consumers, step, block_n)
CASES = [
    ("one-token-00", (1, 2, 1, 1, 1, 64, False, (0, 0), 2, 3, 128)),
    ("17-window50-g2", (1, 4, 2, 17, 17, 64, False, (5, 0), 2, 3, 64)),
    ("100-window37-g4", (1, 4, 1, 100, 100, 64, False, (3, 7), 2, 1, 64)),
    ("100x17-window-14", (1, 2, 2, 100, 17, 64, False, (-1, 4), 2, 2, 64)),
    ("17x300-window50-g2", (2, 4, 2, 17, 300, 64, False, (5, 0), 2, 3, 64)),
    ("700x100-window00", (1, 2, 2, 700, 100, 64, False, (0, 0), 2, 3, 64)),  # whole tiles see no key
    ("333x517-window37-3c", (1, 2, 1, 333, 517, 64, False, (3, 7), 3, 2, 64)),
    ("517x333-window-10-g2", (1, 4, 2, 517, 333, 128, False, (-1, 0), 2, 3, 128)),
    ("300-window200-d128", (1, 2, 2, 300, 300, 128, False, (200, -1), 2, 3, 128)),
    ("gqa-causal-200x300-g4", (1, 4, 1, 200, 300, 64, True, (-1, -1), 2, 3, 128)),
    ("gqa-full-129x64-g2", (2, 4, 2, 129, 64, 64, False, (-1, -1), 3, 3, 64)),
]


@pytest.mark.parametrize("case", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_model_matches_the_float64_reference(case):
    b, hq, hkv, n_q, n_k, d, causal, window, consumers, step, block_n = case
    gen = torch.Generator().manual_seed(n_q * 31 + n_k + hq)
    q = torch.randn(b, hq, n_q, d, dtype=torch.float64, generator=gen)
    k, v = (torch.randn(b, hkv, n_k, d, dtype=torch.float64, generator=gen) for _ in "kv")
    o, lse = sm.model_forward(q, k, v, causal, step=step, consumers=consumers, block_n=block_n, window_size=window)
    gqa = hq != hkv
    ref_o = reference.attention_reference(q, k, v, causal, enable_gqa=gqa, window_size=window)
    ref_lse = reference.logsumexp_reference(q, k, causal, enable_gqa=gqa, window_size=window)
    assert torch.isfinite(o).all() and torch.isfinite(lse).all(), "a row was left unwritten (poisoned NaN)"
    assert check.relative_error(o, ref_o) < 1e-12
    assert check.relative_error(lse, ref_lse) < 1e-12
    seen = reference.visible_mask(n_q, n_k, causal, window).any(1)
    assert (o[:, :, ~seen] == 0).all() and (lse[:, :, ~seen] == 0).all()  # rows that see no key: O = 0, LSE = 0


def test_model_catches_a_wrong_kv_head():
    """The check can fail: query head h reading KV head h % Hkv (not h // group) is far off."""
    q = torch.randn(1, 4, 40, 64, dtype=torch.float64)
    k, v = (torch.randn(1, 2, 40, 64, dtype=torch.float64) for _ in "kv")
    o, _ = sm.model_forward(q, k, v, window_size=(5, 0), block_n=64)
    wrong = reference.attention_reference(q, k[:, [0, 1, 0, 1]], v[:, [0, 1, 0, 1]], window_size=(5, 0))
    right = reference.attention_reference(q, k, v, enable_gqa=True, window_size=(5, 0))
    assert check.relative_error(o, right) < 1e-12 < 1e-2 < check.relative_error(o, wrong)


SIZES = [(1, 1), (17, 17), (100, 100), (17, 300), (700, 100), (333, 517), (1000, 1000)]
WINDOWS = [(-1, -1), (0, 0), (5, 0), (3, 7), (-1, 4), (-1, 0), (200, -1)]


@pytest.mark.parametrize("rows, block_n", [(128, 128), (192, 64), (128, 64)])
def test_tile_bounds_are_the_kernels_tile_function(rows, block_n):
    """:func:`sm.programs` (the model's bounds) equals :func:`tiles.tile` (the kernel's, run in the interpreter) on
    every tile; with a window every tile's loaded key blocks are exactly those holding a key one of its rows sees
    (none skipped that is needed, none loaded that is not: one block when the tile sees nothing); the blocks in
    ``[first_full, full)`` are seen whole by every row."""
    for n_q, n_k in SIZES:
        for causal, window in [(True, (-1, -1))] + [(False, w) for w in WINDOWS]:
            table = [prog[0] for prog in tiles.tile_table(n_q, n_k, 3, None, rows, block_n, causal, False, window)]
            n_m = -(-n_q // rows)
            mask = reference.visible_mask(n_q, n_k, causal, window)
            for prog in sm.programs(n_q, n_k, causal, rows // 64, block_n, window):
                got = table[prog["pid_m"] if not causal else n_m - 1 - prog["pid_m"]]
                assert {f: got[f] for f in ("start_m", "lo", "n_blocks", "first_full", "full")} == {
                    f: prog[f] for f in ("start_m", "lo", "n_blocks", "first_full", "full")
                }, (n_q, n_k, window, prog, got)
                tile_mask = mask[prog["start_m"] : prog["start_m"] + rows]
                needed = [j for j in range(0, n_k, block_n) if tile_mask[:, j : j + block_n].any()]
                loaded = [prog["lo"] + i * block_n for i in range(prog["n_blocks"])]
                if causal:  # SDPA's causal bound is the tile's last row, past Nq too: a block more, masked
                    assert set(needed) <= set(loaded), (n_q, n_k, prog)
                else:
                    assert loaded == (needed or [prog["lo"]]), (n_q, n_k, window, prog)
                for j in range(prog["first_full"], prog["full"], block_n):
                    assert tile_mask[:, j : j + block_n].all() and j + block_n <= n_k, (n_q, n_k, window, j)


@pytest.mark.parametrize("group", [1, 2, 4])
def test_tiles_of_one_group_are_neighbours(group):
    """Tile order is head-major over q's rows ``bh = b Hq + h``, so the query heads of one KV head (``bh // group``)
    run one after another and share its K/V in L2: in launch order (the tile index, also the persistent programs'
    order without pairs) the KV row never goes back; with pairs, the tiles running together (each program's k-th)
    are of consecutive heads in program order."""
    n_bh = 2 * 4 * group
    for programs, causal, pairs in ((None, False, False), (None, True, False), (7, False, False), (7, True, True)):
        table = tiles.tile_table(300, 300, n_bh, programs, 128, 128, causal, pairs)
        if pairs:
            for step in range(min(len(prog) for prog in table)):
                kv_rows = [prog[step]["bh"] // group for prog in table]
                assert kv_rows == sorted(kv_rows), (step, kv_rows)
            continue
        order = sorted((t["tile"], t["bh"]) for prog in table for t in prog)
        kv_rows = [bh // group for _, bh in order]
        assert kv_rows == sorted(kv_rows) and set(kv_rows) == set(range(n_bh // group))


@pytest.mark.parametrize("n_q, n_bh, n_programs", [(1024, 16, 13), (700, 9, 7), (300, 5, 4)])
def test_persistent_pairs_mirror_is_the_kernels_tile_function(n_q, n_bh, n_programs):
    mirror = sm.persistent_tiles(n_q, n_bh, n_programs, 2, pairs=True)
    table = tiles.tile_table(n_q, n_q, n_bh, n_programs, 128, 128, True, True)
    assert [[(t["bh"], t["start_m"] // 128, t["n_blocks"]) for t in prog] for prog in table] == mirror


def test_barrier_protocol_holds_on_a_window_problems_tiles():
    """The tiles of a persistent program of a window problem (one block for a tile that sees nothing)."""
    table = tiles.tile_table(700, 100, 3, 4, 128, 128, False, False, (0, 0))
    for prog in table:
        for seed in range(4):
            sm.simulate([t["n_blocks"] for t in prog], 2, 2, 3, seed, 2)
