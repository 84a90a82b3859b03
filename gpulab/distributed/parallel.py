"""The model wrapped for data parallelism: DDP or FSDP2.

- ``"ddp"`` (:class:`torch.nn.parallel.DistributedDataParallel`): every rank holds the whole model; during the
  backward, gradients are all-reduced (averaged) in buckets of about 25 MB as soon as a bucket's gradients are ready,
  so communication overlaps the rest of the backward. Memory per GPU: the whole model, its gradients and AdamW's two
  moments (16 bytes per fp32 parameter).
- ``"fsdp2"`` (:func:`torch.distributed.fsdp.fully_shard`): each rank keeps 1/N of every parameter, gradient and
  optimizer state; before a block runs its parameters are all-gathered, after its backward the gradients are
  reduce-scattered. Memory per GPU falls to about 16/N bytes per parameter plus one block's full parameters; the
  price is an all-gather per block in the forward and another in the backward.
- ``"none"``: the model as it is (a world of one).

gpulab's kernels need nothing special under either: their autograd functions return gradients with the parameters'
shapes and strides (contiguous), which is what DDP's buckets and FSDP2's reduce-scatter expect.
"""

from __future__ import annotations

import torch
from torch import nn

from gpulab import runtime
from gpulab.distributed.world import World

__all__ = ["STRATEGIES", "wrap"]

STRATEGIES = ("none", "ddp", "fsdp2")


def wrap(model: nn.Module, strategy: str, world: World) -> nn.Module:
    """``model`` (already on ``world.device``) prepared for ``strategy``: 'none', 'ddp' or 'fsdp2'."""
    if not isinstance(model, nn.Module):
        raise runtime.ArgumentTypeError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
    runtime.one_of("strategy", strategy, STRATEGIES)
    if not isinstance(world, World):
        raise runtime.ArgumentTypeError(
            f"world must be the gpulab.distributed.World that init_world() returned, got {type(world).__name__}."
        )
    if strategy == "none":
        if world.world_size > 1:
            raise ValueError(
                f"strategy='none' with world_size={world.world_size}: each rank would train its own copy; "
                "use strategy='ddp' or 'fsdp2'."
            )
        return model
    if not world.distributed:
        raise ValueError(
            f"strategy={strategy!r} needs a process group: start the program with torchrun "
            "(torchrun --nproc-per-node N -m gpulab.distributed.train ...), or use strategy='none'."
        )
    if strategy == "ddp":
        ids = [world.device.index] if world.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(world.device.type, (world.world_size,))
    blocks = getattr(model, "blocks", None)
    for block in blocks if isinstance(blocks, nn.ModuleList) else ():
        fully_shard(block, mesh=mesh)  # one all-gather per block: the unit of overlap and of peak memory
    fully_shard(model, mesh=mesh)
    return model


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DDP wrapper (FSDP2 shards the module in place: it is its own unwrapped self)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def full_gradients(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient as a full, ordinary tensor (FSDP2's sharded DTensors gathered): for tests."""
    out = {}
    for name, p in unwrap(model).named_parameters():
        g = p.grad
        if g is None:
            continue
        if hasattr(g, "full_tensor"):
            g = g.full_tensor()
        out[name] = g.detach().clone()
    return out
