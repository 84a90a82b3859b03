"""Checkpoints with ``torch.distributed.checkpoint`` (DCP): each rank writes and reads its own shard.

``get_state_dict`` gives the model's and the optimizer's state in a form that does not depend on how the model is
wrapped (plain, DDP, FSDP2): a checkpoint written by 2 ranks under FSDP2 loads into 2 ranks again, and DCP can
reshard it for another world size. The step and the data seed are saved beside the weights; since the data of a
step is a function of (seed, step) (:mod:`gpulab.distributed.data`), a resumed run draws the same batches and
continues the same loss curve.
"""

from __future__ import annotations

import os

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from gpulab import runtime

__all__ = ["save_checkpoint", "load_checkpoint"]


def _check_path_model_optimizer(path, model, optimizer) -> None:
    if not isinstance(path, (str, os.PathLike)):
        raise runtime.ArgumentTypeError(f"path must be a folder path (str or Path), got {type(path).__name__}.")
    if not isinstance(model, torch.nn.Module):
        raise runtime.ArgumentTypeError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise runtime.ArgumentTypeError(
            f"optimizer must be a torch.optim.Optimizer (the one training model) or None, got "
            f"{type(optimizer).__name__}."
        )


def _optimizers(optimizer):
    return () if optimizer is None else optimizer  # DCP takes an optimizer or an iterable of them


def save_checkpoint(path, model, optimizer, step: int) -> None:
    """Write model, optimizer and ``step`` (the number of steps done) to the folder ``path`` (every rank calls it)."""
    step = runtime.nonnegative_int("step", step)
    _check_path_model_optimizer(path, model, optimizer)
    model_sd, optim_sd = get_state_dict(model, _optimizers(optimizer))
    dcp.save({"model": model_sd, "optim": optim_sd, "step": torch.tensor(step)}, checkpoint_id=os.fspath(path))


def load_checkpoint(path, model, optimizer) -> int:
    """Restore model and optimizer (or None: the model alone) from the folder ``path`` in place; returns the number
    of steps done."""
    _check_path_model_optimizer(path, model, optimizer)
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"path={path!r} is a file; a checkpoint is the folder save_checkpoint wrote (checkpoint_dir).")
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no checkpoint at {path!r}; train with checkpoint_dir={path!r} first.")
    model_sd, optim_sd = get_state_dict(model, _optimizers(optimizer))
    state = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(0)}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, _optimizers(optimizer), model_state_dict=state["model"], optim_state_dict=state["optim"])
    return int(state["step"])
