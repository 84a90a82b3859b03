"""The distributed training loop and its ``torchrun`` entry.

    torchrun --nproc-per-node 2 -m gpulab.distributed.train --model lstm --strategy ddp --steps 200
    torchrun --nproc-per-node 2 -m gpulab.distributed.train --model transformer --strategy fsdp2 --steps 200
    python -m gpulab.distributed.train --model lstm --steps 20 --device cpu        # a world of one, on a laptop

Every rank builds the same seeded model (DDP also broadcasts rank 0's weights), draws its slice of each global batch
(:mod:`gpulab.distributed.data`), and steps AdamW on the averaged gradient; the logged loss is the mean over all ranks,
so it is the loss of the global batch, comparable between world sizes. Rank 0 alone prints and draws the progress bar.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from gpulab import dtypes, runtime
from gpulab.distributed.checkpoint import load_checkpoint, save_checkpoint
from gpulab.distributed.data import local_batch
from gpulab.distributed.parallel import STRATEGIES, wrap
from gpulab.distributed.world import World, init_world, local_batch_size, shutdown
from gpulab.tasks import get_task, make_model

__all__ = ["TrainConfig", "TrainResult", "build_model", "train", "main"]

MODELS = {"lstm": "LSTM", "transformer": "Transformer"}


@dataclasses.dataclass
class TrainConfig:
    """What to train and how. ``global_batch`` strings of ``length`` tokens per step, split over the ranks."""

    model: str = "lstm"
    task: str = "parity"
    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    steps: int = 100
    global_batch: int = 32
    length: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.01
    clip: float = 1.0
    seed: int = 0
    strategy: str = "ddp"
    dtype: str = "float32"
    rnn_backend: str | None = None
    attention: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume: bool = False
    compile: bool = False
    compile_backend: str = "inductor"

    def validate(self, world_size: int = 1) -> TrainConfig:
        runtime.one_of("model", self.model, tuple(MODELS))
        get_task(self.task)
        for name in ("d_model", "num_layers", "num_heads", "steps", "global_batch", "length"):
            runtime.positive_int(name, getattr(self, name))
        runtime.nonnegative_int("seed", self.seed)
        runtime.nonnegative_int("checkpoint_every", self.checkpoint_every)
        runtime.finite_float("lr", self.lr, positive=True)
        runtime.finite_float("weight_decay", self.weight_decay, minimum=0.0)
        runtime.finite_float("clip", self.clip, minimum=0.0)
        runtime.one_of("strategy", self.strategy, STRATEGIES)
        dtypes.as_dtype(self.dtype)
        runtime.strict_bool("resume", self.resume)
        runtime.strict_bool("compile", self.compile)
        runtime.one_of("compile_backend", self.compile_backend, ("inductor", "aot_eager", "eager"))
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}.")
        if (self.checkpoint_every or self.resume) and not self.checkpoint_dir:
            raise ValueError("checkpoint_every and resume need checkpoint_dir (a folder for the checkpoint).")
        local_batch_size(self.global_batch, world_size)
        return self


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` did: the global-batch loss of every step run, the first step run, seconds, and the tokens
    all ranks processed."""

    losses: list
    start_step: int
    steps: int
    seconds: float
    tokens: int
    world_size: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


def build_model(config: TrainConfig, device) -> torch.nn.Module:
    """The seeded lesson 8 model of ``config`` on ``device`` (the same weights on every rank)."""
    if not isinstance(config, TrainConfig):
        raise runtime.ArgumentTypeError(
            f"config must be a gpulab.distributed.TrainConfig, got {type(config).__name__}; "
            "e.g. TrainConfig(model='lstm')."
        )
    return make_model(
        MODELS[config.model],
        config.task,
        seed=config.seed,
        device=device,
        dtype=dtypes.as_dtype(config.dtype),
        backend=config.rnn_backend,
        attention=config.attention,
        d_model=config.d_model,
        num_heads=config.num_heads,
        num_layers=config.num_layers,
    )


def step_loss(model, x, y) -> torch.Tensor:
    logits = model(x)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


def _mean_over_ranks(value: torch.Tensor, world: World) -> float:
    value = value.detach()
    if world.distributed:
        value = value.clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        value /= world.world_size
    return float(value)


def train(config: TrainConfig, world: World | None = None, progress=None) -> TrainResult:
    """Train ``config`` in ``world`` (default: :func:`init_world`'s). ``progress`` wraps the step loop on rank 0."""
    world = world or init_world()
    config.validate(world.world_size)
    model = wrap(build_model(config, world.device), config.strategy, world)
    step_fn = torch.compile(step_loss, backend=config.compile_backend) if config.compile else step_loss
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    start = 0
    if config.resume and config.checkpoint_dir and os.path.isdir(config.checkpoint_dir):
        start = load_checkpoint(config.checkpoint_dir, model, opt)
    task = get_task(config.task)
    steps = range(start, config.steps)
    loop = progress(steps) if (progress is not None and world.is_main) else steps
    losses = []
    model.train()
    t0 = time.perf_counter()
    for step in loop:
        x, y = local_batch(
            task, step, config.global_batch, config.length, world.rank, world.world_size, config.seed, world.device
        )
        loss = step_fn(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if config.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip)
        opt.step()
        losses.append(_mean_over_ranks(loss, world))
        if hasattr(loop, "set_postfix") and len(losses) % 10 == 0:
            loop.set_postfix(loss=f"{losses[-1]:.3f}")
        done = step + 1
        if config.checkpoint_every and done % config.checkpoint_every == 0:
            save_checkpoint(config.checkpoint_dir, model, opt, done)
    if world.device.type == "cuda":
        torch.cuda.synchronize(world.device)
    seconds = time.perf_counter() - t0
    tokens = len(losses) * config.global_batch * config.length
    return TrainResult(losses, start, len(losses), seconds, tokens, world.world_size)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpulab.distributed.train", description=__doc__.split("\n\n")[0])
    d = TrainConfig()
    for field in dataclasses.fields(TrainConfig):
        name = "--" + field.name.replace("_", "-")
        default = getattr(d, field.name)
        if isinstance(default, bool):
            p.add_argument(name, action="store_true", default=default)
        else:
            kind = type(default) if default is not None else str
            p.add_argument(name, type=kind, default=default)
    p.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    p.add_argument("--backend", choices=("nccl", "gloo"), default=None, help="default: nccl on cuda, gloo on cpu")
    return p


def main(argv=None) -> int:
    args = vars(_parser().parse_args(argv))
    device, backend = args.pop("device"), args.pop("backend")
    world = init_world(backend=backend, device=device)
    config = TrainConfig(**args)
    if not world.distributed:  # a world of one without torchrun: nothing to wrap
        config.strategy = "none"
    try:
        progress = None
        if world.is_main:
            from tqdm.auto import tqdm

            def progress(it):
                return tqdm(it, desc=f"{config.model} x{world.world_size} {config.strategy}")

        result = train(config, world, progress=progress)
        if world.is_main:
            print(
                f"{config.model} on {world.world_size} process(es), {config.strategy}: {result.steps} steps, "
                f"final loss {result.losses[-1] if result.losses else float('nan'):.4f}, "
                f"{result.tokens_per_s:,.0f} tokens/s"
            )
    finally:
        shutdown(world)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
