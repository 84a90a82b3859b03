"""gpulab.bench.flops: the attention FLOP convention, by example and by property."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulab import bench


def test_attention_flops():
    base = 4 * 2 * 3 * 128 * 256 * 64
    assert bench.attention_flops(2, 3, 128, 256, 64) == base
    assert bench.attention_flops(2, 3, 128, 256, 64, causal=True) == base / 2
    assert bench.attention_flops(2, 3, 128, 256, 64, backward=True) == base * 3.5
    assert bench.attention_flops(2, 3, 128, 256, 64, causal=True, backward=True) == base / 2 * 3.5
    assert bench.attention_flops(1, 1, 1, 1, 1) == 4
    assert bench.attention_flops(0, 3, 128, 256, 64) == 0


sizes = st.tuples(*[st.integers(0, 4096)] * 5)


@given(sizes, st.booleans(), st.booleans())
def test_attention_flops_are_non_negative_and_causal_halves(s, causal, backward):
    full = bench.attention_flops(*s, backward=backward)
    assert full >= 0
    assert bench.attention_flops(*s, causal=True, backward=backward) == pytest.approx(full / 2)
    assert bench.attention_flops(*s, causal=causal, backward=True) == pytest.approx(
        3.5 * bench.attention_flops(*s, causal=causal)
    )


@given(sizes, st.integers(0, 4), st.integers(1, 64))
def test_attention_flops_grow_with_every_size(s, which, extra):
    bigger = list(s)
    bigger[which] += extra
    assert bench.attention_flops(*bigger) >= bench.attention_flops(*s)
    if all(bigger):
        assert bench.attention_flops(*bigger) > bench.attention_flops(*s)
