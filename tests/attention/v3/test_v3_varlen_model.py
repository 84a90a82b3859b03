"""Version 3's packed (varlen) forward on the CPU: the float64 model of the kernel (tiles in launch order, Q and K/V
rows read on into the next sequence as the TMA copies read them, masks per sequence, masked stores) against the
float64 varlen reference, and the model's tiles against the kernel's own ``@triton.jit`` tile function
(:func:`gpulab.attention.v3.tiles.varlen_tile`) run in the Triton interpreter."""

import pytest
import torch

from gpulab import check
from gpulab.attention import reference
from gpulab.attention.measure import v3_schedule_model as sm
from gpulab.attention.v3 import tiles, varlen_forward


def _cu(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


# (query lengths, key lengths, Hq, Hkv, D, window, consumers, step, block_n)
CASES = [
    ("one-token", ([1], [1], 2, 2, 64, (-1, -1), 2, 3, 128)),
    ("mixed-empty-inside", ([1, 17, 0, 100], [1, 17, 0, 100], 4, 2, 64, (-1, -1), 2, 3, 64)),
    ("causal-mixed-g4", ([17, 100, 1, 33], [17, 100, 1, 33], 4, 1, 64, (-1, 0), 2, 3, 64)),
    ("nq-ne-nk-causal", ([17, 100, 5], [40, 60, 5], 2, 2, 64, (-1, 0), 2, 2, 64)),
    ("nq-ne-nk-full-g2", ([100, 17, 3], [17, 300, 1], 4, 2, 64, (-1, -1), 2, 1, 64)),
    ("no-keys-for-a-sequence", ([5, 30, 7], [5, 0, 9], 2, 1, 64, (-1, -1), 2, 3, 64)),
    ("window-37-3c", ([333, 17, 1], [300, 17, 1], 2, 1, 64, (3, 7), 3, 2, 64)),
    ("window-50-d128", ([200, 0, 129], [200, 4, 129], 2, 2, 128, (5, 0), 2, 3, 128)),
    ("window-14-rows-see-nothing", ([100, 40], [17, 40], 2, 2, 64, (-1, 4), 2, 3, 64)),
    ("window-200-left", ([300, 64], [300, 64], 4, 4, 128, (200, -1), 2, 3, 128)),
]


@pytest.mark.parametrize("case", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_varlen_model_matches_the_float64_reference(case):
    lq, lk, hq, hkv, d, window, consumers, step, block_n = case
    gen = torch.Generator().manual_seed(sum(lq) * 7 + sum(lk) + hq)
    cu_q, cu_k = _cu(lq), _cu(lk)
    q = torch.randn(sum(lq), hq, d, dtype=torch.float64, generator=gen)
    k, v = (torch.randn(sum(lk), hkv, d, dtype=torch.float64, generator=gen) for _ in "kv")
    o, lse = sm.model_varlen_forward(q, k, v, cu_q, cu_k, max(lq), step=step, consumers=consumers, block_n=block_n,
                                     window_size=window)  # fmt: skip
    ref_o, ref_lse = reference.varlen_attention_reference(q, k, v, cu_q, cu_k, window_size=window,
                                                          enable_gqa=hq != hkv)  # fmt: skip
    assert torch.isfinite(o).all() and torch.isfinite(lse).all(), "a row was left unwritten (poisoned NaN)"
    assert check.relative_error(o, ref_o) < 1e-12
    assert check.relative_error(lse, ref_lse) < 1e-12


def test_varlen_model_catches_a_missing_key_mask():
    """The check can fail: without the mask at the sequence's key length the tile's last block reads the next
    sequence's keys (here the first sequence, 17 keys, block 64, sees sequence 2's)."""
    cu = _cu([17, 40])
    q = torch.randn(57, 2, 64, dtype=torch.float64)
    k, v = torch.randn(57, 2, 64, dtype=torch.float64), torch.randn(57, 2, 64, dtype=torch.float64)
    o, _ = sm.model_varlen_forward(q, k, v, cu, cu, 40, block_n=64)
    ref, _ = reference.varlen_attention_reference(q, k, v, cu, cu)
    wrong = reference.attention_reference(q[:17].transpose(0, 1)[None], k[:64].transpose(0, 1)[None],
                                          v[:64].transpose(0, 1)[None])[0].transpose(0, 1)  # fmt: skip
    assert check.relative_error(o, ref) < 1e-12 < 1e-2 < check.relative_error(o[:17], wrong)


LENGTHS = [([1], [1]), ([1, 17, 0, 100], [1, 17, 0, 100]), ([17, 100, 5], [40, 60, 0]), ([300, 1, 129], [17, 300, 129])]
WINDOWS = [(-1, -1), (-1, 0), (0, 0), (5, 0), (3, 7), (-1, 4), (200, -1)]


@pytest.mark.parametrize("rows, block_n", [(128, 128), (192, 64), (128, 64)])
def test_varlen_tiles_are_the_kernels_tile_function(rows, block_n):
    """:func:`sm.varlen_tiles` (the model's) equals :func:`tiles.varlen_tile` (the kernel's, in the interpreter) on
    every tile that has rows; every sequence's every row lies in exactly one such tile per head; the loaded key
    blocks cover every key a tile's rows see and stay inside the sequence's keys but for the edge block."""
    for lq, lk in LENGTHS:
        cu_q, cu_k = _cu(lq), _cu(lk)
        for window in WINDOWS:
            got = tiles.varlen_tile_table(cu_q, cu_k, max(lq), 3, rows, block_n, window)
            want = sm.varlen_tiles(cu_q, cu_k, max(lq), 3, rows, block_n, window)
            assert len(got) == len(want) == -(-max(lq) // rows) * 3 * len(lq)
            covered = torch.zeros(sum(lq), 3, dtype=torch.int64)
            for g, w in zip(got, want):
                if w["start_m"] >= w["len_q"]:
                    assert g["start_m"] >= g["len_q"], (lq, lk, window, g, w)
                    continue
                assert g == w, (lq, lk, window, g, w)
                covered[w["q0"] + w["start_m"] : w["q0"] + min(w["start_m"] + rows, w["len_q"]), w["h"]] += 1
                mask = reference.visible_mask(w["len_q"], w["len_k"], False, window) if w["len_k"] else None
                if mask is not None:
                    tile_mask = mask[w["start_m"] : w["start_m"] + rows]
                    needed = {j for j in range(0, w["len_k"], block_n) if tile_mask[:, j : j + block_n].any()}
                    loaded = {w["lo"] + i * block_n for i in range(w["n_blocks"])}
                    assert needed <= loaded and (not needed or needed == loaded), (lq, lk, window, w)
            assert (covered == 1).all(), (lq, lk, window)
    # the longest sequences' tiles come first: the first tiles with rows all belong to the longest sequence
    first = tiles.varlen_tile_table(_cu([300, 1, 129]), _cu([300, 1, 129]), 300, 2, 128, 128)[:6]
    assert [t["len_q"] for t in first if t["start_m"] < t["len_q"]] == [300, 300]


@pytest.mark.parametrize("programs", [1, 2, 5, 7])
def test_varlen_persistent_order_covers_every_tile_once(programs):
    """The persistent grid (:func:`tiles.varlen_tile_table` with ``programs``, the kernel's loop in the interpreter)
    runs, program by program, the model's tiles (:func:`sm.varlen_persistent_tiles`): every tile with rows exactly
    once, none without, each program's in increasing index (longest work first), and the barrier protocol on each
    program's tiles with two Q buffers neither deadlocks nor races."""
    for lq, lk in LENGTHS:
        cu_q, cu_k = _cu(lq), _cu(lk)
        for window in [(-1, -1), (-1, 0), (3, 7)]:
            got = tiles.varlen_tile_table(cu_q, cu_k, max(lq), 3, 128, 64, window, programs=programs)
            want = sm.varlen_persistent_tiles(cu_q, cu_k, max(lq), 3, programs, 128, 64, window)
            assert got == want, (lq, lk, window)
            live = [t for t in sm.varlen_tiles(cu_q, cu_k, max(lq), 3, 128, 64, window) if t["start_m"] < t["len_q"]]
            ran = sorted(t["tile"] for prog in got for t in prog)
            assert ran == [t["tile"] for t in live], (lq, lk, window)
            for pid, prog in enumerate(got):
                assert all(t["tile"] % programs == pid for t in prog)
                assert [t["tile"] for t in prog] == sorted(t["tile"] for t in prog)
                if prog:
                    sm.simulate([t["n_blocks"] for t in prog], stages=2, q_buffers=2, seed=pid)
    # the programs' first tiles are the longest sequence's (300 rows: 3 tiles x 2 heads at 128 rows)
    first = tiles.varlen_tile_table(_cu([300, 1, 129]), _cu([300, 1, 129]), 300, 2, 128, 128, programs=4)
    assert [prog[0]["len_q"] for prog in first] == [300, 300, 300, 300]


@pytest.mark.parametrize("programs", [1, 3])
def test_varlen_model_in_persistent_order_matches_the_float64_reference(programs):
    """The model walking the persistent grid's order writes every row (outputs poisoned with NaN) and matches."""
    lq, lk = [1, 17, 0, 100, 300], [1, 40, 0, 100, 17]
    gen = torch.Generator().manual_seed(programs)
    cu_q, cu_k = _cu(lq), _cu(lk)
    q = torch.randn(sum(lq), 4, 64, dtype=torch.float64, generator=gen)
    k, v = (torch.randn(sum(lk), 2, 64, dtype=torch.float64, generator=gen) for _ in "kv")
    for window in [(-1, -1), (-1, 0)]:
        o, lse = sm.model_varlen_forward(q, k, v, cu_q, cu_k, max(lq), block_n=64, window_size=window,
                                         programs=programs)  # fmt: skip
        ref_o, ref_lse = reference.varlen_attention_reference(q, k, v, cu_q, cu_k, window_size=window,
                                                              enable_gqa=True)  # fmt: skip
        assert torch.isfinite(o).all() and torch.isfinite(lse).all(), "a row was left unwritten (poisoned NaN)"
        assert check.relative_error(o, ref_o) < 1e-12
        assert check.relative_error(lse, ref_lse) < 1e-12


def test_varlen_v3_default_is_persistent():
    """``varlen_attn``'s packed forward takes the persistent grid, causal or not."""
    for window in [(-1, -1), (-1, 0)]:
        for d in (64, 128):
            cfg = varlen_forward.varlen_config(d, window, 4096)
            assert cfg.persistent and cfg.q_buffers == 2 and not cfg.pairs, (d, window, cfg)
            off = varlen_forward.varlen_config(d, window, 4096, persistent=False)
            assert not off.persistent and off.q_buffers == 1, (d, window, off)
