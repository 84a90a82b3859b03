"""Run a function on N ranks inside this process's machine, for notebooks and graders: ``run_on_ranks(fn, 2)``.

``torchrun`` is how training starts; a notebook cell cannot be a torchrun program, but it can fork: the children
inherit the cell's functions (a learner's too), open a gloo process group on a free local port, call ``fn(rank,
world_size)`` and send back what it returns. CPU only (gloo), and Linux/macOS only (fork).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import socket
import traceback

import torch
import torch.distributed as dist

from gpulab import runtime

__all__ = ["run_on_ranks"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(fn, rank, world_size, port, queue):
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        torch.set_num_threads(1)
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        try:
            # plain pickle: tensors travel as bytes, not as shared-memory handles that vanish with the child
            queue.put((rank, "ok", pickle.dumps(fn(rank, world_size))))
        finally:
            dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - the parent reports it with the child's traceback
        queue.put((rank, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def run_on_ranks(fn, world_size: int = 2, timeout: float = 120.0) -> list:
    """``[fn(0, N), ..., fn(N - 1, N)]``, each called in its own forked process inside a gloo process group of N.

    An exception on any rank is raised here (an AssertionError stays one, so graders keep their messages)."""
    if not callable(fn):
        raise runtime.ArgumentTypeError(f"fn must be a function fn(rank, world_size), got {type(fn).__name__}.")
    world_size = runtime.integer("world_size", world_size, minimum=1, maximum=8)
    timeout = runtime.finite_float("timeout", timeout, positive=True)
    if "fork" not in mp.get_all_start_methods():
        raise RuntimeError("run_on_ranks needs the 'fork' start method (Linux, macOS); use torchrun instead.")
    ctx = mp.get_context("fork")
    queue, port = ctx.Queue(), _free_port()
    procs = [ctx.Process(target=_child, args=(fn, r, world_size, port, queue)) for r in range(world_size)]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    try:
        for _ in range(world_size):
            rank, status, value = queue.get(timeout=timeout)
            if status == "error":
                kind = AssertionError if value.startswith("AssertionError") else RuntimeError
                raise kind(f"rank {rank}: {value.split(chr(10))[0]}") from None
            results[rank] = pickle.loads(value)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
    return [results[r] for r in range(world_size)]
