"""The data of a distributed step: the global batch as a function of (seed, step), and each rank's slice of it.

Drawing the whole global batch from a generator seeded with (seed, step) and letting rank r keep rows
``[r * b, (r + 1) * b)`` costs every rank the generation of the whole batch (cheap for these tasks) and buys three
guarantees the tests check: one process with the global batch sees the same strings as N processes together (so
DDP's gradient equals the single-process gradient of the concatenated batch); every rank sees different strings;
and a run resumed at step k draws exactly the batches the uninterrupted run would have drawn.
"""

from __future__ import annotations

import torch

from gpulab import runtime
from gpulab.distributed.world import local_batch_size
from gpulab.tasks import get_task

__all__ = ["global_batch", "local_batch"]

_STEP_STRIDE = 1_000_003  # a prime: seeds of (seed, step) pairs do not collide for any realistic run


def global_batch(task, step: int, batch_size: int, length: int, seed: int = 0, device=None):
    """The (x, y) of ``step``: ``batch_size`` fresh strings of ``length`` tokens, a function of (seed, step) only."""
    task = get_task(task)
    step = runtime.nonnegative_int("step", step)
    seed = runtime.nonnegative_int("seed", seed)
    batch_size = runtime.positive_int("batch_size", batch_size)
    length = runtime.positive_int("length", length)
    gen = torch.Generator().manual_seed(seed * _STEP_STRIDE + step)
    return task.sample(batch_size, length, generator=gen, device=device)


def local_batch(task, step: int, batch_size: int, length: int, rank: int, world_size: int, seed: int = 0, device=None):
    """Rank ``rank``'s rows of :func:`global_batch`: ``batch_size / world_size`` strings (an error if it does not
    split)."""
    b = local_batch_size(batch_size, world_size)
    rank = runtime.integer("rank", rank, minimum=0, maximum=world_size - 1)
    x, y = global_batch(task, step, batch_size, length, seed)
    rows = slice(rank * b, (rank + 1) * b)
    return x[rows].to(device or "cpu"), y[rows].to(device or "cpu")
