"""Variable-length batches for :class:`gpulab.rnn.LSTM`: a ``PackedSequence`` run as a padded batch, no kernel change.

- unpack: x [B, T, I] in the caller's batch order and each sequence's length, by one scatter of the packed rows
  (``pad_packed_sequence`` and ``pack_padded_sequence`` copy one time step at a time: a few hundred small kernels
  each way at T = 256, more than the recurrence itself takes);
- the forward direction runs the padded batch as is: a sequence's state past its length is never read;
- the reverse direction reads each sequence reversed *within its length* (an index gather, its own inverse), so it
  starts at the sequence's own last element; positions past the length stay where they are and come last;
- h_n, c_n are the states at each sequence's last step (t = length - 1, in each direction's own time);
- repack: the output gathered back into the input's packed order (same ``batch_sizes`` and sort indices), one
  gather. Both index the padded batch by :func:`flat_index`, computed from the CPU's ``batch_sizes`` without reading
  anything back from the GPU.
"""

from __future__ import annotations

import torch
from torch.nn.utils.rnn import PackedSequence

__all__ = ["flat_index", "unpack", "repack", "reverse_index", "time_gather", "last_steps"]


_FLAT: dict = {}  # (batch sizes, device) -> [(sorted_indices, its version, flat_index's answer), ...]
_LAST: list = []  # [(lengths, (rows, lengths - 1))]: last_steps' index of the lengths flat_index kept


def flat_index(x: PackedSequence) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """``(index, lengths, B, T)`` of a PackedSequence: row i of ``x.data`` is row ``index[i]`` = b * T + t of the
    padded batch-first [B * T] (b in the caller's order), ``lengths`` [B] int64, both on ``x.data``'s device.

    Packed rows are time-major: step t holds the first ``batch_sizes[t]`` sequences of the sorted order, so row i
    belongs to the step t whose rows contain it, at sorted position j = i - (rows of the steps before t), and to the
    caller's sequence b = ``sorted_indices[j]``.

    Kept per batch sizes (their values, read on the CPU where they lie) and sort order (the same ``sorted_indices``
    tensor, unchanged: its values are on the GPU, and reading them would wait for it), so a batch packed once and
    run again builds and copies nothing; the index tensors are never written."""
    sizes = x.batch_sizes
    if sizes.dim() != 1 or sizes.numel() == 0 or sizes.is_floating_point():
        raise ValueError(f"x.batch_sizes must be a 1-d integer tensor of the steps' batch sizes, got {sizes!r}; build "
                         "x with torch.nn.utils.rnn.pack_sequence or pack_padded_sequence.")  # fmt: skip
    order = x.sorted_indices
    key = (tuple(sizes.tolist()) if sizes.device.type == "cpu" else None, x.data.device)
    if key[0] is not None and not torch.compiler.is_compiling():
        for kept, version, flat in _FLAT.get(key, ()):
            if kept is order and (order is None or order._version == version):
                return flat
    flat = _flat_index(sizes, order, x.data.device)
    if key[0] is not None and not torch.compiler.is_compiling():
        if len(_FLAT) >= 16:
            _FLAT.clear()
        entries = _FLAT.setdefault(key, [])
        entries.insert(0, (order, None if order is None else order._version, flat))
        del entries[4:]
    return flat


def _flat_index(sizes, order, device):
    sizes = sizes.cpu().long()
    T, B = sizes.numel(), int(sizes[0])
    step = torch.repeat_interleave(torch.arange(T), sizes)
    sorted_pos = torch.arange(step.numel()) - torch.repeat_interleave(torch.cumsum(sizes, 0) - sizes, sizes)
    lengths_sorted = (sizes[None, :] > torch.arange(B)[:, None]).sum(1)
    step, sorted_pos = step.to(device, non_blocking=True), sorted_pos.to(device, non_blocking=True)
    lengths_sorted = lengths_sorted.to(device, non_blocking=True)
    if order is None:
        return sorted_pos * T + step, lengths_sorted, B, T
    order = order.to(device)
    lengths = torch.empty_like(lengths_sorted).index_copy_(0, order, lengths_sorted)
    return order.index_select(0, sorted_pos) * T + step, lengths, B, T


def unpack(x: PackedSequence, input_size: int, dtype: torch.dtype, flat=None):
    """``(padded [B, T, I], lengths [B] int64)`` of a PackedSequence (zeros past each length, both on its data's
    device), checked: its feature size must be ``input_size``. Differentiable in ``x.data`` (one scatter).
    ``flat``: ``flat_index(x)`` when the caller has it already (it hands the same to :func:`repack`)."""
    if x.data.dim() != 2 or x.data.shape[1] != input_size:
        raise ValueError(
            f"x is a PackedSequence of data shape {tuple(x.data.shape)}, but the module has input_size={input_size}: "
            f"its data must be [total steps, {input_size}]; pack sequences of {input_size} features each "
            "(torch.nn.utils.rnn.pack_sequence / pack_padded_sequence)."
        )
    if not x.data.is_floating_point():
        raise ValueError(f"x's data has dtype {x.data.dtype}; an LSTM takes floating-point input: x.data.to({dtype}).")
    index, lengths, B, T = flat_index(x) if flat is None else flat
    padded = x.data.new_zeros(B * T, input_size).index_copy(0, index, x.data)
    return padded.view(B, T, input_size), lengths


def repack(out: torch.Tensor, like: PackedSequence, flat=None) -> PackedSequence:
    """``out`` [B, T, F] (caller's batch order) as a PackedSequence with ``like``'s batch sizes and sort indices:
    one gather (differentiable). ``flat``: ``flat_index(like)``, if the caller computed it for :func:`unpack`."""
    index, _, B, T = flat_index(like) if flat is None else flat
    if out.dim() != 3 or out.shape[:2] != (B, T):
        raise ValueError(f"out must be [B, T, F] = [{B}, {T}, F] for this PackedSequence, got {tuple(out.shape)}.")
    data = out.reshape(B * T, out.shape[2]).index_select(0, index)
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
    for kept, rows in _LAST:  # the lengths of a batch flat_index kept: its index too
        if kept is lengths:
            return states[:, rows[0], rows[1]]
    rows = torch.arange(states.shape[1], device=states.device), lengths - 1
    if not torch.compiler.is_compiling() and any(flat[1] is lengths for e in _FLAT.values() for _, _, flat in e):
        _LAST.insert(0, (lengths, rows))
        del _LAST[8:]
    return states[:, rows[0], rows[1]]
