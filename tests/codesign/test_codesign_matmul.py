"""Lesson 2's fixed-tile Triton matmul (gpulab.codesign.matmul) in the interpreter, against its float64 reference:
odd sizes, strided views, nothing written past the edge, outputs from check.new_output. Bad input:
test_codesign_bad_input.py."""

import pytest
import torch

from gpulab import check, codesign, runtime


@pytest.mark.parametrize(("m", "n", "k"), [(1, 1, 1), (17, 17, 17), (33, 20, 19), (5, 40, 3), (64, 32, 48)])
@pytest.mark.parametrize("blocks", [(16, 16, 16), (32, 16, 32)])
def test_matmul_fixed_tile_matches_float64(m, n, k, blocks):
    a, b = check.random_tensor(m, k), check.random_tensor(k, n)
    out = check.poisoned(m, n)
    got = codesign.matmul_fixed_tile(a, b, out, block_m=blocks[0], block_n=blocks[1], block_k=blocks[2])
    assert got is out
    check.assert_close(out, codesign.matmul_reference(a, b), name="C", context=f"{m}x{n}x{k}, blocks {blocks}")


def test_matmul_fixed_tile_fp16_transposed_views_and_nothing_past_the_edge():
    a = check.random_tensor(21, 30, dtype=torch.float16)
    b = check.random_tensor(19, 30, dtype=torch.float16).t()  # a transposed view: strides (1, 30)
    guard = check.poisoned(24, 40, dtype=torch.float16)
    out = guard[:21, :19]  # row stride 40: the kernel must honour it and write nothing outside
    codesign.matmul_fixed_tile(a, b, out, block_m=16, block_n=16, block_k=16)
    check.assert_close(out, codesign.matmul_reference(a, b), dtype=torch.float16)
    outside = guard.clone()
    outside[:21, :19] = float("nan")
    assert torch.isnan(outside).all(), "the kernel wrote outside the output view"


def test_matmul_fixed_tile_small_blocks_are_raised_to_16_and_allocates():
    a, b = check.random_tensor(9, 7), check.random_tensor(7, 5)
    out = codesign.matmul_fixed_tile(a, b, block_m=1, block_n=2, block_k=4)
    assert out.shape == (9, 5) and out.dtype == torch.float32
    check.assert_close(out, codesign.matmul_reference(a, b))


def test_matmul_fixed_tile_empty():
    out = codesign.matmul_fixed_tile(torch.empty(0, 4), torch.empty(4, 3))
    assert out.shape == (0, 3)


def test_matmul_fixed_tile_nan_never_passes():
    a, b = check.random_tensor(8, 8), check.random_tensor(8, 8)
    a[3, 2] = float("nan")
    out = codesign.matmul_fixed_tile(a, b)
    with pytest.raises(AssertionError, match="NaN"):
        check.assert_close(out, codesign.matmul_reference(check.random_tensor(8, 8), b))


def test_matmul_fixed_tile_allocates_through_the_poison_policy(monkeypatch):
    """The output it allocates is check.new_output's: NaN-filled when poisoning is on, so an unwritten element shows."""
    a, b = check.random_tensor(3, 4), check.random_tensor(4, 2)
    seen = []
    real = check.new_output

    def spy(*shape, **kw):
        seen.append((shape, kw["dtype"]))
        return real(*shape, **kw)

    monkeypatch.setattr(codesign.matmul, "new_output", spy)
    with runtime.poisoning(True):
        out = codesign.matmul_fixed_tile(a, b)
    assert seen == [((3, 2), torch.float32)]
    check.assert_close(out, codesign.matmul_reference(a, b))
