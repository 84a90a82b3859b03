"""The packed path's one-scatter unpack and one-gather repack against PyTorch's pad/pack, on random sequences:
values, lengths, the caller's order, and gradients through both."""

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pack_sequence, pad_packed_sequence

from gpulab.rnn import packed


def _random_packed(lengths, features, sorted_, seed):
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randn(n, features, generator=g, dtype=torch.float64) for n in lengths]
    return pack_sequence(seqs, enforce_sorted=sorted_), seqs


@pytest.mark.parametrize(
    "lengths, sorted_",
    [([1], True), ([5, 3, 3, 1], True), ([2, 7, 1, 7, 4], False), ([3, 3, 3], False), ([1, 17, 9, 2, 16, 5, 1], False)],
)
def test_unpack_and_repack_match_pytorchs_pad_and_pack(lengths, sorted_):
    x, seqs = _random_packed(lengths, 3, sorted_, seed=len(lengths))
    padded, got_lengths = packed.unpack(x, 3, torch.float64)
    want, want_lengths = pad_packed_sequence(x, batch_first=True)
    assert torch.equal(padded, want) and torch.equal(got_lengths, want_lengths)
    for b, s in enumerate(seqs):  # the caller's order, zeros past each length
        assert torch.equal(padded[b, : len(s)], s) and not padded[b, len(s) :].any()
    out = torch.randn(*padded.shape[:2], 5, dtype=torch.float64)
    again = packed.repack(out, x)
    ref = pack_padded_sequence(out, want_lengths, batch_first=True, enforce_sorted=False)
    assert torch.equal(again.data, ref.data) and torch.equal(again.batch_sizes, x.batch_sizes)
    assert again.sorted_indices is x.sorted_indices and again.unsorted_indices is x.unsorted_indices
    flat = packed.flat_index(x)  # the index handed over (as the module does) gives the same both ways
    assert torch.equal(packed.unpack(x, 3, torch.float64, flat)[0], padded)
    assert torch.equal(packed.repack(out, x, flat).data, again.data)


def test_gradients_flow_through_unpack_and_repack():
    x, _ = _random_packed([4, 1, 6, 2], 3, False, seed=0)
    data = x.data.clone().requires_grad_()
    x = x._replace(data=data)
    padded, _ = packed.unpack(x, 3, torch.float64)
    w = torch.randn(3, 2, dtype=torch.float64)
    y = packed.repack(padded @ w, x).data
    g = torch.randn_like(y)
    (got,) = torch.autograd.grad(y, data, g)
    assert torch.allclose(got, g @ w.T, rtol=0, atol=1e-12)  # repack . unpack is the identity on packed rows


def test_repack_refuses_a_mismatched_output():
    x, _ = _random_packed([3, 2], 2, True, seed=1)
    with pytest.raises(ValueError, match=r"out must be \[B, T, F\] = \[2, 3, F\]"):
        packed.repack(torch.zeros(2, 4, 1), x)
