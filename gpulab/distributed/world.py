"""Who this process is in a distributed run, and the process group it talks through.

``torchrun --nproc-per-node N`` starts N copies of the program and tells each its place through the environment:
``RANK`` (0..N-1 over all nodes), ``LOCAL_RANK`` (the GPU index on this node), ``WORLD_SIZE`` (N), and
``MASTER_ADDR``/``MASTER_PORT`` (where rank 0 listens). :func:`init_world` reads them, picks the device (GPU
``LOCAL_RANK`` when there is CUDA, else the CPU) and the backend (NCCL between GPUs, gloo on CPU), and opens the
process group. Without torchrun's variables it is a world of one, with no process group at all: the same script runs
on a laptop.
"""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist

from gpulab import runtime

__all__ = ["World", "init_world", "shutdown", "available_backends", "local_batch_size"]


@dataclasses.dataclass(frozen=True)
class World:
    """This process's place: ``rank`` of ``world_size`` processes, ``local_rank`` on its node, its ``device`` and the
    process group's ``backend`` (None in a world of one without a process group)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None

    def __post_init__(self):
        world_size = runtime.positive_int("world_size", self.world_size)
        rank = runtime.nonnegative_int("rank", self.rank)
        if rank >= world_size:
            raise ValueError(
                f"rank={rank} must lie in [0, world_size={world_size}); ranks count 0..{world_size - 1} "
                "(init_world() reads them from torchrun)."
            )
        local_rank = runtime.nonnegative_int("local_rank", self.local_rank)
        device = runtime.as_device(self.device)
        if self.backend is not None:
            runtime.one_of("backend", self.backend, ("nccl", "gloo"))
        for name, value in (("world_size", world_size), ("rank", rank), ("local_rank", local_rank), ("device", device)):
            object.__setattr__(self, name, value)  # frozen: normalised once, here

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that prints, draws progress bars and writes records."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def available_backends() -> list[str]:
    """The process-group backends this PyTorch build has: 'nccl' (CUDA builds) and 'gloo' (everywhere)."""
    return [b for b in ("nccl", "gloo") if dist.is_available() and dist.is_backend_available(b)]


def _env_int(name: str, default: int | None = None) -> int | None:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} must be an integer (torchrun sets it).") from None


def init_world(backend: str | None = None, device: str | None = None) -> World:
    """Read torchrun's environment and open the process group; a world of one without torchrun.

    ``backend``: 'nccl' or 'gloo' (default: NCCL when CUDA is used, else gloo); ``device``: 'cuda' or 'cpu' (default:
    CUDA when available). Errors name what is wrong: a world size or rank out of range, more processes on a node than
    GPUs, a backend this build lacks, NCCL without CUDA.
    """
    if device is not None:
        runtime.one_of("device", device, ("cuda", "cpu"))
    if backend is not None:  # checked even for a world of one, so a typo shows before the run is scaled out
        runtime.one_of("backend", backend, ("nccl", "gloo"))
    use_cuda = torch.cuda.is_available() if device is None else device == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA device; use device='cpu' (gloo) on this machine.")
    world_size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", rank)
    if world_size < 1:
        raise ValueError(f"WORLD_SIZE={world_size} must be >= 1 (torchrun --nproc-per-node N sets it to N).")
    if not 0 <= rank < world_size:
        raise ValueError(f"RANK={rank} must lie in [0, WORLD_SIZE={world_size}).")
    if use_cuda:
        gpus = torch.cuda.device_count()
        if not 0 <= local_rank < gpus:
            raise ValueError(
                f"LOCAL_RANK={local_rank} but this node has {gpus} GPU(s): start at most {gpus} processes per node "
                f"(torchrun --nproc-per-node {gpus}), or use device='cpu' with gloo."
            )
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    if world_size == 1 and "MASTER_ADDR" not in os.environ:
        return World(0, 1, 0, dev, None)
    backend = backend or ("nccl" if use_cuda else "gloo")
    runtime.one_of("backend", backend, ("nccl", "gloo"))
    if backend not in available_backends():
        raise ValueError(
            f"backend={backend!r} is not available in this PyTorch build (available: {available_backends()}); "
            "NCCL needs a CUDA build of torch on Linux, gloo runs everywhere."
        )
    if backend == "nccl" and not use_cuda:
        raise ValueError("backend='nccl' moves CUDA tensors only; on CPU use backend='gloo'.")
    if not dist.is_initialized():
        kw = {"device_id": dev} if use_cuda else {}
        dist.init_process_group(backend, rank=rank, world_size=world_size, **kw)
    return World(rank, world_size, local_rank, dev, backend)


def shutdown(world: World) -> None:
    """Close the process group (if this world opened one)."""
    if not isinstance(world, World):
        raise runtime.ArgumentTypeError(
            f"world must be the gpulab.distributed.World that init_world() returned, got {type(world).__name__}."
        )
    if world.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def local_batch_size(global_batch: int, world_size: int) -> int:
    """Each rank's share of a global batch: ``global_batch / world_size`` strings; an error if it does not split.

    Data parallelism keeps the global batch (and so the loss curve) fixed when GPUs are added, and every rank must
    get the same number of strings, or DDP's averaged gradient would weight them unequally.
    """
    global_batch = runtime.positive_int("global_batch", global_batch)
    world_size = runtime.positive_int("world_size", world_size)
    if global_batch % world_size:
        raise ValueError(
            f"global_batch={global_batch} does not split over world_size={world_size} processes; use a multiple of "
            f"{world_size} (e.g. {global_batch - global_batch % world_size or world_size})."
        )
    return global_batch // world_size
