"""Lesson 9: the capstone trained on several GPUs with PyTorch's own distributed engine.

One process per GPU, started by ``torchrun``; every process builds the same model, draws its own slice of each global
batch, and the processes agree on the gradients through a collective:

- :mod:`.world`: who am I (rank, world size, device) from torchrun's environment, the process group (NCCL on GPUs,
  gloo on CPU), and the clear errors for a bad world size, a batch that does not split, a missing backend;
- :mod:`.data`: the global batch of a step as a function of (seed, step), and each rank's slice of it, so one process
  with the whole batch and N processes with a slice each see exactly the same strings;
- :mod:`.parallel`: the model wrapped for DDP (gradients all-reduced in buckets during the backward) or FSDP2
  (``fully_shard``: parameters, gradients and optimizer state sharded, gathered layer by layer);
- :mod:`.checkpoint`: model and optimizer saved and restored with ``torch.distributed.checkpoint`` (each rank writes
  its shard), so a resumed run continues the same loss curve;
- :mod:`.train`: the loop and the ``torchrun`` entry: ``torchrun --nproc-per-node 2 -m gpulab.distributed.train``.
"""

from gpulab.distributed.checkpoint import load_checkpoint, save_checkpoint
from gpulab.distributed.data import global_batch, local_batch
from gpulab.distributed.parallel import STRATEGIES, wrap
from gpulab.distributed.train import TrainConfig, build_model, main, train
from gpulab.distributed.world import World, available_backends, init_world, local_batch_size, shutdown

__all__ = [
    "World",
    "init_world",
    "shutdown",
    "available_backends",
    "local_batch_size",
    "global_batch",
    "local_batch",
    "STRATEGIES",
    "wrap",
    "save_checkpoint",
    "load_checkpoint",
    "TrainConfig",
    "build_model",
    "train",
    "main",
]
