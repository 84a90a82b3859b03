"""Checks that data parallelism computes what one process computes: run it under torchrun and compare.

    torchrun --nproc-per-node 2 -m gpulab.distributed.verify --out /tmp/verify --device cpu

Every rank runs, on tiny models and the CPU (gloo) or GPUs (NCCL):

1. ``ddp_grads``: one DDP backward of the LSTM on each rank's slice of a step's batch; the averaged gradients;
2. ``fsdp2_grads``: the same for the Transformer under FSDP2 (gathered from the shards);
3. ``fsdp2_roundtrip``: a model and optimizer trained two steps under FSDP2, saved with torch.distributed.checkpoint,
   loaded into fresh ones: the largest difference of any parameter or optimizer moment;
4. ``resume``: the losses of 4 steps in one run, and of 2 steps + checkpoint + a resumed run to step 4.

Rank 0 writes them to ``OUT/results.pt``; :func:`single_process_gradients` computes what one process with the whole
batch gets, for the comparison (``tests/distributed/`` does it).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import torch

from gpulab import runtime
from gpulab.distributed.checkpoint import load_checkpoint
from gpulab.distributed.data import global_batch, local_batch
from gpulab.distributed.parallel import full_gradients, unwrap, wrap
from gpulab.distributed.train import TrainConfig, build_model, step_loss, train
from gpulab.distributed.world import World, init_world, shutdown

__all__ = ["CONFIGS", "single_process_gradients", "run_checks", "main"]

CONFIGS = {
    "lstm": TrainConfig(
        model="lstm", d_model=16, num_layers=2, num_heads=2, global_batch=4, length=6, rnn_backend="vanilla"
    ),
    "transformer": TrainConfig(
        model="transformer", d_model=16, num_layers=2, num_heads=2, global_batch=4, length=6, attention="naive"
    ),
}


def single_process_gradients(config: TrainConfig, step: int = 0) -> dict[str, torch.Tensor]:
    """Gradients of the loss of step ``step``'s whole global batch in one process: what DDP and FSDP2 must match."""
    if not isinstance(config, TrainConfig):
        raise runtime.ArgumentTypeError(
            f"config must be a gpulab.distributed.TrainConfig (e.g. CONFIGS['lstm']), got {config!r:.60}."
        )
    config.validate()
    step = runtime.nonnegative_int("step", step)
    model = build_model(config, "cpu")
    x, y = global_batch(config.task, step, config.global_batch, config.length, config.seed)
    step_loss(model, x, y).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _distributed_gradients(config: TrainConfig, world: World, step: int = 0) -> dict[str, torch.Tensor]:
    model = wrap(build_model(config, world.device), config.strategy, world)
    x, y = local_batch(
        config.task, step, config.global_batch, config.length, world.rank, world.world_size, config.seed, world.device
    )
    step_loss(model, x, y).backward()
    return {k: v.cpu() for k, v in full_gradients(model).items()}


def _full_state(model, optimizer) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in unwrap(model).named_parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[f"param/{name}"] = full.detach().cpu().clone()
        for key, v in optimizer.state.get(p, {}).items():
            if torch.is_tensor(v) and v.dim() > 0:
                v = v.full_tensor() if hasattr(v, "full_tensor") else v
                out[f"{key}/{name}"] = v.detach().cpu().clone()
    return out


def _roundtrip(config: TrainConfig, world: World, folder: str) -> float:
    trained = train(dataclasses.replace(config, steps=2, checkpoint_dir=folder, checkpoint_every=2), world)
    assert trained.steps == 2
    model = wrap(build_model(config, world.device), config.strategy, world)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    done = load_checkpoint(folder, model, opt)
    # what was saved: the state after two steps; train two steps again from scratch here and compare
    fresh = wrap(build_model(config, world.device), config.strategy, world)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    for step in range(2):
        x, y = local_batch(
            config.task, step, config.global_batch, config.length, world.rank, world.world_size, config.seed,
            world.device,
        )  # fmt: skip
        loss = step_loss(fresh, x, y)
        fresh_opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(fresh.parameters(), config.clip)
        fresh_opt.step()
    a, b = _full_state(model, opt), _full_state(fresh, fresh_opt)
    if done != 2 or a.keys() != b.keys():
        return float("inf")
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def run_checks(out: str, device: str | None = None) -> dict | None:
    """Run the four checks in this process's world; rank 0 returns (and saves) the results, others None."""
    if not isinstance(out, (str, os.PathLike)):
        raise runtime.ArgumentTypeError(f"out must be a folder path (str or Path), got {type(out).__name__}.")
    world = init_world(device=device)
    try:
        results = {"world_size": world.world_size}
        ddp = dataclasses.replace(CONFIGS["lstm"], strategy="ddp")
        fsdp = dataclasses.replace(CONFIGS["transformer"], strategy="fsdp2")
        results["ddp_grads"] = _distributed_gradients(ddp, world)
        results["fsdp2_grads"] = _distributed_gradients(fsdp, world)
        results["fsdp2_roundtrip"] = _roundtrip(fsdp, world, os.path.join(out, "roundtrip"))
        folder = os.path.join(out, "resume")
        straight = train(dataclasses.replace(ddp, steps=4), world).losses
        first = train(dataclasses.replace(ddp, steps=2, checkpoint_dir=folder, checkpoint_every=2), world).losses
        rest = train(dataclasses.replace(ddp, steps=4, checkpoint_dir=folder, resume=True), world)
        results["resume"] = {"straight": straight, "first": first, "rest": rest.losses, "rest_start": rest.start_step}
        if world.is_main:
            torch.save(results, os.path.join(out, "results.pt"))
            return results
        return None
    finally:
        shutdown(world)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gpulab.distributed.verify", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="a folder for the checkpoints and results.pt")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None)
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    results = run_checks(args.out, args.device)
    if results is not None:
        print(f"verify: world_size {results['world_size']}, results in {os.path.join(args.out, 'results.pt')}")
    return 0


if __name__ == "__main__":
    code = main()
    # Every rank has passed the closing barrier and destroyed its process group; what is left is the interpreter's
    # teardown, where a C++ worker thread of the CPU backend still joinable at exit sometimes aborts the process
    # ("terminate called without an active exception", about one run in ten on 2 cores) after the results are written.
    # Leave without that teardown: flush what was printed and exit with main's code.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
