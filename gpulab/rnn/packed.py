"""Variable-length batches for :class:`gpulab.rnn.LSTM`: a ``PackedSequence`` run as a padded batch, no kernel change.

- unpack: ``pad_packed_sequence`` gives x [B, T, I] in the caller's batch order and each sequence's length;
- the forward direction runs the padded batch as is: a sequence's state past its length is never read;
- the reverse direction reads each sequence reversed *within its length* (an index gather, its own inverse), so it
  starts at the sequence's own last element; positions past the length stay where they are and come last;
- h_n, c_n are the states at each sequence's last step (t = length - 1, in each direction's own time);
- repack: the output gathered back into the input's packed order (same ``batch_sizes`` and sort indices).
"""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

__all__ = ["unpack", "repack", "reverse_index", "time_gather", "last_steps"]


def unpack(x: PackedSequence, input_size: int, dtype: torch.dtype):
    """``(padded [B, T, I], lengths [B] int64 on the CPU)`` of a PackedSequence, checked: its feature size must be
    ``input_size``."""
    if x.data.dim() != 2 or x.data.shape[1] != input_size:
        raise ValueError(
            f"x is a PackedSequence of data shape {tuple(x.data.shape)}, but the module has input_size={input_size}: "
            f"its data must be [total steps, {input_size}]; pack sequences of {input_size} features each "
            "(torch.nn.utils.rnn.pack_sequence / pack_padded_sequence)."
        )
    if not x.data.is_floating_point():
        raise ValueError(f"x's data has dtype {x.data.dtype}; an LSTM takes floating-point input: x.data.to({dtype}).")
    return pad_packed_sequence(x, batch_first=True)


def repack(out: torch.Tensor, lengths: torch.Tensor, like: PackedSequence) -> PackedSequence:
    """``out`` [B, T, F] (caller's batch order) as a PackedSequence with ``like``'s batch sizes and sort indices
    (``lengths`` [B] on the CPU, as :func:`unpack` gives them: no copy from the device)."""
    order = like.sorted_indices
    if order is not None:
        out, lengths = out.index_select(0, order), lengths.index_select(0, order.cpu())
    data = pack_padded_sequence(out, lengths, batch_first=True, enforce_sorted=True).data
    return PackedSequence(data, like.batch_sizes, like.sorted_indices, like.unsorted_indices)


def reverse_index(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """[B, T] int64: position t of the reversed sequence b reads ``lengths[b] - 1 - t`` (t < length), else t."""
    t = torch.arange(T, device=lengths.device)
    n = lengths[:, None]
    return torch.where(t < n, n - 1 - t, t)


def time_gather(x: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    """x [B, T, ...] reordered along time: ``x[b, index[b, t]]`` (``index=None``: all of T reversed)."""
    if index is None:
        return x.flip(1)
    idx = index.view(*index.shape, *([1] * (x.dim() - 2)))
    return torch.take_along_dim(x, idx, dim=1)


def last_steps(states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """states [S, B, T, ...] -> [S, B, ...]: each sequence's state at t = length - 1."""
    B = states.shape[1]
    return states[:, torch.arange(B, device=states.device), lengths - 1]
