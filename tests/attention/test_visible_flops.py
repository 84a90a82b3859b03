"""FLOP counts of masked attention count exactly the visible score entries (the mask's True entries)."""

import pytest

from gpulab import bench
from gpulab.attention import visible_mask

_MASKS = [(False, (-1, -1)), (True, (-1, -1)), (False, (-1, 0)), (False, (3, 0)), (False, (5, 2)), (False, (-1, 4)),
          (False, (0, 0))]  # fmt: skip


@pytest.mark.parametrize("nq, nk", [(1, 1), (17, 33), (33, 17), (64, 64), (0, 5), (5, 0)])
@pytest.mark.parametrize("causal, window", _MASKS)
def test_visible_pairs_equal_the_mask(nq, nk, causal, window):
    assert bench.visible_pairs(nq, nk, causal, window) == int(visible_mask(nq, nk, causal, window).sum())


def test_flops_of_a_packed_batch_and_of_a_causal_square():
    lens = [5, 0, 1, 33]
    pairs = sum(int(visible_mask(n, n, False, (3, 0)).sum()) for n in lens)
    assert bench.visible_attention_flops(lens, lens, 64, heads=8, window_size=(3, 0)) == 4.0 * 64 * 8 * pairs
    n = 1000  # causal: N (N + 1) / 2 entries, a little over the half that attention_flops's convention takes
    exact = bench.visible_attention_flops(n, n, 128, heads=2, batch=3, is_causal=True, backward=True)
    assert exact == 3.5 * 4 * 128 * 2 * 3 * n * (n + 1) // 2
    assert exact > bench.attention_flops(3, 2, n, n, 128, causal=True, backward=True)
