"""Version 3's backward with grouped-query heads and sliding windows, on the CPU: the kernel's decomposition (the
group's query heads in each key-block program, the window's query-block range and edge-block masks) replayed by
the model in float64 against float64 autograd (:func:`gpulab.attention.reference.attention_reference`)."""

import pytest
import torch

from gpulab import check
from gpulab.attention import reference
from gpulab.attention.measure import v3_backward_model as bm

WINDOWS = [(-1, -1), (0, 0), (5, 0), (3, 7), (-1, 4), (70, 0), (0, 130)]
SIZES = [(1, 1), (17, 17), (100, 100), (17, 100), (100, 17), (200, 333), (333, 129)]


def _inputs(group, n_q, n_k, d, causal, window, seed=0):
    gen = torch.Generator().manual_seed(seed + 1000 * group + 7 * n_q + n_k)
    q, do = (torch.randn(1, group, n_q, d, dtype=torch.float64, generator=gen) for _ in "qd")
    k, v = (torch.randn(1, 1, n_k, d, dtype=torch.float64, generator=gen) for _ in "kv")
    o, dq, dk, dv = reference.attention_reference(q, k, v, causal, do=do, enable_gqa=True, window_size=window)
    lse = reference.logsumexp_reference(q, k, causal, enable_gqa=True, window_size=window)
    return q[0], k[0, 0], v[0, 0], o[0], do[0], lse[0], (dq[0], dk[0, 0], dv[0, 0])


def _close(got, ref):
    for name, g, r in zip(("dq", "dk", "dv"), got, ref):
        assert torch.isfinite(g).all(), name
        if r.abs().max() == 0:  # one visible key per query (a window of 0, N = 1): dQ = dK = 0 exactly
            assert g.abs().max() < 1e-12, name
        else:
            assert check.relative_error(g, r) < 1e-12, name


@pytest.mark.parametrize("window", WINDOWS, ids=str)
@pytest.mark.parametrize("n_q, n_k", SIZES, ids=str)
@pytest.mark.parametrize("group", [1, 2, 4])
def test_model_with_group_and_window_is_the_gradient(group, n_q, n_k, window):
    q, k, v, o, do, lse, ref = _inputs(group, n_q, n_k, 64, False, window)
    _close(bm.model_backward(q, k, v, o, do, lse, False, step=3, acc_dtype=torch.float64, window=window)[:3], ref)


@pytest.mark.parametrize("step", [1, 2, 4, 6])
@pytest.mark.parametrize("window", [(-1, -1), (3, 7), (5, 0)], ids=str)
def test_every_step_takes_group_and_window(step, window):
    q, k, v, o, do, lse, ref = _inputs(2, 200, 333, 64, False, window)
    _close(bm.model_backward(q, k, v, o, do, lse, False, step=step, acc_dtype=torch.float64, window=window)[:3], ref)


@pytest.mark.parametrize("n_q, n_k", [(1, 1), (17, 17), (100, 17), (200, 333)], ids=str)
@pytest.mark.parametrize("group", [2, 4])
def test_causal_with_group(group, n_q, n_k):
    q, k, v, o, do, lse, ref = _inputs(group, n_q, n_k, 128, True, (-1, -1))
    _close(bm.model_backward(q, k, v, o, do, lse, True, step=5, acc_dtype=torch.float64)[:3], ref)


def test_query_blocks_visit_only_the_window():
    """A window of 5 keys to the left at N = 1000: each 128-key program visits 3 query blocks (2 or 3 in the kernel's
    blocks of 64), not the 16 of the full problem; the visits of all heads add up to group x that."""
    for start_n in range(0, 1000, 128):
        lo, n_m = bm.query_blocks(start_n, 128, 1000, 1000, False, (5, 0))
        assert lo == (start_n // 64) * 64 and n_m <= 3
        rows = range(lo, lo + 64 * n_m)
        assert all(r in rows for r in range(start_n, min(start_n + 128, 1000)))  # every query that sees the keys
    assert bm.query_blocks(0, 128, 100, 17, False, (0, 0)) == (64, 1)  # bottom-right: queries 83.. see keys 0..16
    assert bm.query_blocks(0, 128, 17, 100, False, (-1, -1)) == (0, 1)
    assert bm.query_blocks(0, 128, 100, 300, False, (0, 0))[1] <= 0  # keys 0..127 are seen by none (200..299 are)
    assert bm.query_blocks(128, 128, 100, 300, False, (0, 0)) == (0, 1)  # keys 200..255: queries 0..55


def test_model_catches_a_missing_edge_mask_and_a_short_range():
    """The checks can fail: a window whose edge blocks are not masked, or a range one block short, is wrong."""
    q, k, v, o, do, lse, ref = _inputs(2, 300, 300, 64, False, (3, 7))
    orig = bm.window_bounds
    bm.window_bounds = lambda n_q, n_k, window: (None, None)  # the range and the masks of a full problem
    try:
        bad = bm.model_backward(q, k, v, o, do, lse, False, step=3, acc_dtype=torch.float64, window=(3, 7))[1]
    finally:
        bm.window_bounds = orig
    assert check.relative_error(bad, ref[1]) > 1e-2
    orig_blocks = bm.query_blocks

    def short(*a, **kw):
        lo, n_m = orig_blocks(*a, **kw)
        return lo, n_m - 1

    bm.query_blocks = short
    try:
        bad = bm.model_backward(q, k, v, o, do, lse, False, step=3, acc_dtype=torch.float64, window=(3, 7))[1]
    finally:
        bm.query_blocks = orig_blocks
    assert check.relative_error(bad, ref[1]) > 1e-2


def test_group_model_with_the_kernels_roundings_is_within_tolerance():
    q, k, v, o, do, lse, ref = _inputs(4, 257, 300, 64, False, (40, 3))
    q, k, v, do = (t.to(torch.bfloat16).double() for t in (q, k, v, do))
    o, *ref = reference.attention_reference(q[None], k[None, None], v[None, None], False, do=do[None],
                                            enable_gqa=True, window_size=(40, 3))  # fmt: skip
    got = bm.model_backward(q, k, v, o[0], do, lse, False, step=5, round_to=torch.bfloat16, window=(40, 3))[:3]
    for g, r in zip(got, (ref[0][0], ref[1][0, 0], ref[2][0, 0])):
        assert 0 < check.relative_error(g, r) < check.tolerance(torch.bfloat16)


@pytest.mark.parametrize("window", [(-1, -1), (5, 0), (3, 7)], ids=str)
def test_persistent_tiles_take_the_window(window):
    """Step 7's tiles visit the query blocks of steps 2-6's programs under the window too."""
    want = {(bh, p["start_n"]): (p["lo"], p["n_m"]) for bh in range(3)
            for p in bm.key_programs(300, 517, False, 5, window)}  # fmt: skip
    tiles = [t for prog in bm.persistent_tiles(300, 517, 3, False, 4, window) for t in prog]
    seen = {(t["bh"], t["start_n"]): (t["lo"], t["n_m"]) for t in tiles}
    assert seen == want
