"""Lesson 9's measurement: training throughput on 1 and N GPUs, communication against computation, loss curves.

Run once per world size (the records carry ``world_size``)::

    torchrun --nproc-per-node 1 -m gpulab.distributed.benchmark --out benchmarks/09_distributed/w1.jsonl
    torchrun --nproc-per-node 2 -m gpulab.distributed.benchmark --out benchmarks/09_distributed/w2.jsonl

For each model (lesson 8's LSTM on the fused kernels and Transformer on FlashAttention, width 768) and strategy (DDP,
FSDP2) at a fixed per-GPU batch: the training step's time (eager wall clock, steps back to back, one synchronize),
tokens per second over all GPUs, and from one profiled step the time of the collective kernels (NCCL), of the compute
kernels, and how much of the communication ran while compute kernels ran (the overlap DDP's buckets aim for). Then
the loss over the first steps at one fixed global batch, to compare 1 and N GPUs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time

import torch
import torch.distributed as dist

from gpulab import bench, runtime
from gpulab.distributed.data import local_batch
from gpulab.distributed.parallel import wrap
from gpulab.distributed.train import TrainConfig, build_model, step_loss, train
from gpulab.distributed.world import World, init_world, shutdown

__all__ = ["SIZES", "step_time", "kernel_split", "run", "main"]

SIZES = {
    "gpu": {"d_model": 768, "num_layers": 2, "length": 1024, "per_gpu_batch": 32, "lstm_heads": 12, "heads": 12,
            "steps": 40, "repeats": 3, "curve_steps": 200, "curve_batch": 64, "curve_length": 16, "curve_lr": 3e-4},
    "cpu": {"d_model": 16, "num_layers": 1, "length": 8, "per_gpu_batch": 2, "lstm_heads": 2, "heads": 2,
            "steps": 2, "repeats": 1, "curve_steps": 3, "curve_batch": 4, "curve_length": 8, "curve_lr": 1e-3},
}  # fmt: skip


def _config(model: str, strategy: str, size: dict, world: World, **kw) -> TrainConfig:
    return TrainConfig(
        model=model,
        task="parity",
        d_model=size["d_model"],
        num_layers=size["num_layers"],
        num_heads=size["lstm_heads"] if model == "lstm" else size["heads"],
        global_batch=size["per_gpu_batch"] * world.world_size,
        length=size["length"],
        strategy=strategy if world.distributed else "none",
        dtype="bfloat16" if world.device.type == "cuda" else "float32",
        rnn_backend=None if world.device.type == "cuda" else "vanilla",
        attention=None if world.device.type == "cuda" else "naive",
        lr=1e-3,
        **kw,
    )


def _step_fn(config: TrainConfig, world: World):
    model = wrap(build_model(config, world.device), config.strategy, world)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr)
    rank, n = world.rank, world.world_size
    x, y = local_batch(config.task, 0, config.global_batch, config.length, rank, n, 0, world.device)

    def step():
        loss = step_loss(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def _sync(world: World) -> None:
    if world.device.type == "cuda":
        torch.cuda.synchronize(world.device)


def _check_step_and_world(step, world) -> None:
    if not callable(step):
        raise runtime.ArgumentTypeError(
            f"step must be a function that runs one training step, got {type(step).__name__}."
        )
    if not isinstance(world, World):
        raise runtime.ArgumentTypeError(
            f"world must be a gpulab.distributed.World (from init_world()), got {type(world).__name__}."
        )


def step_time(step, world: World, steps: int, warmup: int = 3, repeats: int = 1) -> float:
    """Eager wall time per training step in ms: ``steps`` steps back to back, one synchronize at the end, the median
    of ``repeats`` such loops; the slowest rank's time (all ranks wait for it at the next collective anyway)."""
    _check_step_and_world(step, world)
    steps = runtime.positive_int("steps", steps)
    warmup = runtime.nonnegative_int("warmup", warmup)
    repeats = runtime.positive_int("repeats", repeats)
    for _ in range(warmup):
        step()
    _sync(world)
    loops = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(world)
        loops.append((time.perf_counter() - t0) * 1e3 / steps)
    ms = sorted(loops)[len(loops) // 2]
    if world.distributed:
        t = torch.tensor([ms], device=world.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        ms = float(t)
    return ms


def _union(intervals):
    total, end = 0.0, -float("inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def _merged(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _intersection(a, b):
    """Length of the intersection of two unions of intervals."""
    points = sorted([(s, 1, 0) for s, _ in a] + [(e, -1, 0) for _, e in a] + [(s, 1, 1) for s, _ in b] +
                    [(e, -1, 1) for _, e in b])  # fmt: skip
    depth, both, last, total = [0, 0], False, None, 0.0
    for t, d, which in points:
        if both and last is not None:
            total += t - last
        depth[which] += d
        both, last = depth[0] > 0 and depth[1] > 0, t
    return total


def kernel_split(step, world: World) -> dict:
    """Profile one step: ms of collective (NCCL) kernels, of compute kernels, and of their overlap (each as the
    union of its kernels' intervals on the GPU's clock)."""
    _check_step_and_world(step, world)
    if world.device.type != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile

    step()
    _sync(world)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        _sync(world)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" in e.get("name", "").lower()]
    compute = [(e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" not in e.get("name", "").lower()]
    t0 = min(s for s, _ in comm + compute) if kernels else 0.0
    span = (max(e for _, e in comm + compute) - t0) if kernels else 0.0
    return {
        "timeline": {  # merged busy intervals in ms from the first kernel, for the lesson's picture
            "comm": [[round((s - t0) / 1e3, 4), round((e - t0) / 1e3, 4)] for s, e in _merged(comm)],
            "compute": [[round((s - t0) / 1e3, 4), round((e - t0) / 1e3, 4)] for s, e in _merged(compute)],
        },
        "comm_ms": _union(comm) / 1e3,
        "compute_ms": _union(compute) / 1e3,
        "overlap_ms": _intersection(comm, compute) / 1e3,
        "profiled_span_ms": span / 1e3,
        "comm_kernels": len(comm),
    }


def run(size: dict, world: World, models=("lstm", "transformer"), strategies=("ddp", "fsdp2")) -> list[bench.Result]:
    """Throughput and kernel split of every (model, strategy), then the loss curves; records on every rank."""
    results = []
    for model in models:
        for strategy in strategies if world.distributed else ("none",):
            config = _config(model, strategy, size, world)
            step = _step_fn(config, world)
            ms = step_time(step, world, size["steps"], repeats=size["repeats"])
            split = kernel_split(step, world)
            tokens = config.global_batch * config.length
            r = bench.record(lesson="09", case=f"{model} {config.strategy}", ms=ms, dtype=config.dtype,
                             shape=[config.global_batch, config.length])  # fmt: skip
            r.params.update(
                model=model, strategy=config.strategy, world_size=world.world_size, wall_ms=ms,
                tokens_per_s=tokens / (ms * 1e-3), per_gpu_batch=size["per_gpu_batch"], d_model=config.d_model,
                num_layers=config.num_layers, num_heads=config.num_heads, **split,
            )  # fmt: skip
            results.append(r)
            del step
            if world.device.type == "cuda":
                torch.cuda.empty_cache()
        curve = _config(model, "ddp", size, world, steps=size["curve_steps"])
        curve = dataclasses.replace(
            curve, global_batch=size["curve_batch"], length=size["curve_length"], lr=size["curve_lr"]
        )
        log = train(curve, world)
        r = bench.record(lesson="09", case=f"{model} loss curve", ms=log.seconds * 1e3 / max(1, log.steps))
        r.params.update(model=model, world_size=world.world_size, strategy=curve.strategy, losses=log.losses,
                        global_batch=curve.global_batch, length=curve.length)  # fmt: skip
        results.append(r)
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="gpulab.distributed.benchmark", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON-lines file for the records (rank 0 writes it)")
    p.add_argument("--size", choices=sorted(SIZES), default=None)
    p.add_argument("--models", default="lstm,transformer")
    args = p.parse_args(argv)
    world = init_world()
    size = SIZES[args.size or ("gpu" if world.device.type == "cuda" else "cpu")]
    try:
        results = run(size, world, models=tuple(args.models.split(",")))
        if world.is_main:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as f:
                for r in results:
                    f.write(json.dumps(r.to_dict()) + "\n")
            for r in results:
                q = r.params
                if "tokens_per_s" in q:
                    print(f"{r.case:22s} world {q['world_size']}  {r.ms:8.2f} ms/step {q['tokens_per_s']:12,.0f} tok/s"
                          f" comm {q.get('comm_ms', 0):6.2f}  compute {q.get('compute_ms', 0):7.2f}  "
                          f"overlap {q.get('overlap_ms', 0):6.2f} ms")  # fmt: skip
                else:
                    print(f"{r.case:22s} world {q['world_size']}  losses {[round(v, 3) for v in q['losses'][:3]]} ... "
                          f"{[round(v, 3) for v in q['losses'][-3:]]}")  # fmt: skip
    finally:
        shutdown(world)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
