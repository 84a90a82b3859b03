"""Lesson 4, steps 1-3: the PyTorch references (naive, tiled, float64) and softmax three ways, in PyTorch and in
Triton (gpulab.attention.reference, gpulab.attention.softmax)."""

import pytest
import torch

from gpulab import attention as A
from gpulab import check, runtime


def test_references_agree_with_sdpa_and_each_other(attention_inputs):
    for nq, nk, causal in ((17, 17, False), (17, 33, True), (33, 17, True), (1, 5, True)):
        q, k, v, _ = (t.double() for t in attention_inputs(2, 2, nq, nk, 24))
        sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        check.assert_close(A.naive_attention(q, k, v, is_causal=causal), sdpa, rtol=1e-12, name="naive")
        check.assert_close(A.attention_reference(q, k, v, is_causal=causal), sdpa, rtol=1e-12, name="reference")
        o, lse = A.tiled_attention(q, k, v, is_causal=causal, block_q=8, block_k=16)
        check.assert_close(o, sdpa, rtol=1e-12, name="tiled")
        check.assert_close(lse, A.logsumexp_reference(q, k, is_causal=causal), rtol=1e-12, name="tiled LSE")
    assert A.causal_mask(2, 3).tolist() == [[True, False, False], [True, True, False]]  # top-left aligned
    assert A.default_scale(16) == 0.25 and A.default_scale(16, 0.5) == 0.5


def test_softmax_three_ways_match_torch():
    x = check.random_tensor(3, 4, 37, dtype=torch.float64, scale=3.0)
    ref = torch.softmax(x, -1)
    for name, f in (("naive", A.softmax_naive), ("safe", A.softmax_safe), ("online", A.softmax_online)):
        check.assert_close(f(x), ref, rtol=1e-12, name=name)
    check.assert_close(A.softmax_online(x, block=8), ref, rtol=1e-12, name="online, blocks of 8")
    big = x * 100  # logits of several hundred: exp overflows even in float64 past ~709.8
    big[0, 0, 0] = 800.0  # at least one that does, whatever the draw (a draw with no logit past 709.8 is ~2% likely)
    assert not torch.isfinite(A.softmax_naive(big)).all()
    check.assert_close(A.softmax_safe(big), torch.softmax(big, -1), rtol=1e-12, name="safe, large")
    check.assert_close(A.softmax_online(big), torch.softmax(big, -1), rtol=1e-12, name="online, large")


def test_softmax_of_empty_rows_is_empty_every_way():
    x = torch.zeros(3, 0, device=runtime.device)
    for name, f in (("naive", A.softmax_naive), ("safe", A.softmax_safe), ("online", A.softmax_online),
                    ("kernel", A.online_softmax)):  # fmt: skip
        y = f(x)
        assert y.shape == (3, 0) and y.dtype == x.dtype, name


@pytest.mark.parametrize(
    "shape, dtype", [((3, 1000), torch.float32), ((2, 3, 7), torch.float32), ((5, 300), torch.float16)]
)
def test_online_softmax_kernel(shape, dtype):
    x = check.random_tensor(shape, dtype=dtype, scale=20.0)  # logits up to ~100: past exp's fp32 range
    y = A.online_softmax(x, block=64)
    assert y.dtype == dtype and y.shape == x.shape
    check.assert_close(y, torch.softmax(x.double(), -1), dtype=dtype, name="online softmax kernel")


@pytest.mark.gpu
def test_gpu_online_softmax_long_rows():
    x = check.random_tensor(64, 100_000, scale=10.0)
    check.assert_close(A.online_softmax(x), torch.softmax(x.double(), -1), name="online softmax, long rows")
