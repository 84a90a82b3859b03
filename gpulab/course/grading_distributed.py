"""Graders for exercise 7 (distributed training): gradients averaged by hand, and the bytes of a ring all-reduce.

Each runs the learner's function on fresh cases and compares with what PyTorch's own engine (DDP) or the formula
gives, naming the likely mistake. On success it prints one deterministic line (nbval compares it)."""

from __future__ import annotations

import dataclasses

import torch

from gpulab.course.grading import fresh_rng, grader, require_callable
from gpulab.distributed.data import global_batch, local_batch
from gpulab.distributed.ranks import run_on_ranks
from gpulab.distributed.train import TrainConfig, build_model, step_loss

CONFIG = TrainConfig(
    model="lstm", d_model=8, num_layers=1, num_heads=2, global_batch=4, length=5, rnn_backend="vanilla"
)


def _local_grads(config, step, rank, world_size, average=None):
    """Rank ``rank``'s gradients after a backward on its slice of step ``step``'s batch (then ``average`` applied)."""
    model = build_model(config, "cpu")
    x, y = local_batch(config.task, step, config.global_batch, config.length, rank, world_size, config.seed)
    step_loss(model, x, y).backward()
    if average is not None:
        average(model, world_size)
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


@grader("averaging gradients by hand")
def grade_average_gradients(average_gradients, world_size=2):
    """``average_gradients(model, world_size)``: after each rank's backward on its slice, every parameter's ``.grad``
    becomes the mean over ranks; compared with the single-process gradient of the whole batch."""
    require_callable("average_gradients", average_gradients)
    rng, _ = fresh_rng()
    config = dataclasses.replace(CONFIG, seed=rng.randrange(1000))
    step = rng.randrange(100)
    per_rank = run_on_ranks(lambda rank, n: _local_grads(config, step, rank, n, average_gradients), world_size)
    model = build_model(config, "cpu")
    x, y = global_batch(config.task, step, config.global_batch, config.length, config.seed)
    step_loss(model, x, y).backward()
    want = {n: p.grad for n, p in model.named_parameters()}
    local = _local_grads(config, step, 0, world_size)
    for name in want:
        got = per_rank[0][name]
        if not torch.allclose(per_rank[0][name], per_rank[-1][name], rtol=1e-5, atol=1e-7):
            raise AssertionError(
                f"{name}: rank 0 and rank {world_size - 1} hold different gradients after averaging; every rank must "
                "end with the same values (dist.all_reduce on p.grad itself, in place, on every rank)."
            )
        if torch.allclose(got, want[name], rtol=1e-4, atol=1e-6):
            continue
        if torch.allclose(got, world_size * want[name], rtol=1e-4, atol=1e-6):
            raise AssertionError(
                f"{name}: your gradient is exactly {world_size} times the right one: all_reduce sums; divide by the "
                "world size to get the mean (each rank's loss is already a mean over its own slice)."
            )
        if torch.allclose(got, local[name], rtol=1e-5, atol=1e-7):
            raise AssertionError(
                f"{name}: the gradient is still rank 0's own: nothing was exchanged. Call "
                "dist.all_reduce(p.grad, op=dist.ReduceOp.SUM) on the gradient tensor itself (it works in place; "
                "all_reduce of a copy such as p.grad.clone() changes only the copy)."
            )
        err = float((got - want[name]).norm() / want[name].norm())
        raise AssertionError(f"{name}: relative difference {err:.2e} from the gradient of the whole batch.")
    return f"{world_size} ranks, equal to one process with the whole batch"


@grader("bytes of a ring all-reduce")
def grade_ring_bytes(ring_bytes_per_gpu):
    """``ring_bytes_per_gpu(nbytes, world_size)``: bytes each GPU sends in a ring all-reduce of ``nbytes``."""
    require_callable("ring_bytes_per_gpu", ring_bytes_per_gpu)
    rng, _ = fresh_rng()
    cases = [(1 << 20, 1), (1 << 20, 2), (4096, 8)]
    cases += [(rng.randrange(1, 1 << 30), rng.randint(2, 64)) for _ in range(3)]
    for nbytes, n in cases:
        got = ring_bytes_per_gpu(nbytes, n)
        want = 2 * (n - 1) / n * nbytes
        if abs(got - want) <= 1e-6 * max(1.0, want):
            continue
        if n > 1 and abs(got - (n - 1) / n * nbytes) <= 1e-6 * want:
            hint = " That is one phase; a ring all-reduce is a reduce-scatter followed by an all-gather."
        elif abs(got - 2 * nbytes) <= 1e-6 * max(1.0, want) or abs(got - nbytes) <= 1e-6 * max(1.0, want):
            hint = " Each phase sends (N-1) chunks of nbytes/N, not the whole buffer."
        else:
            hint = ""
        raise AssertionError(f"ring_bytes_per_gpu({nbytes}, {n}) = {got}, expected {want:.1f}.{hint}")
    return "2 (N - 1) / N bytes per byte reduced"
