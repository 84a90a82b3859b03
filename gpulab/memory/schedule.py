"""The working-set sweep's schedule, on the host: which chunk each program reads at each step, how many steps to run,
how many bytes that reads, and the float64 reference of the sums.

The working set of ``n`` elements is cut into ``C = ceil(n / BLOCK)`` chunks; ``P`` programs run ``iters`` steps
each, and at step ``i`` program ``p`` reads

    chunk(p, i) = (p + i*P) mod C

So at every step the grid reads P consecutive chunks, and the grid as a whole marches through the working set again
and again. Choosing ``P`` coprime to ``C`` makes every program visit every chunk, so each SM's own reuse distance is
the whole working set too.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from gpulab import check, runtime

__all__ = ["sweep_plan", "chunk_schedule", "sweep_reference", "sweep_data", "working_set_sizes", "working_sets"]


def sweep_plan(n: int, bytes_to_read: float, block: int, programs: int, itemsize: int = 4) -> dict:
    """Grid and step count for reading about ``bytes_to_read`` from a working set of ``n`` elements.

    Returns ``programs`` (the smallest count >= the requested one that is coprime to the chunk count), ``iters``
    (steps per program, at least one full pass over the working set) and the exact ``bytes`` read.
    """
    n = runtime.positive_int("n", n)
    bytes_to_read = runtime.finite_float("bytes_to_read", bytes_to_read, minimum=0.0)
    block, programs = runtime.positive_int("block", block), runtime.positive_int("programs", programs)
    itemsize = runtime.positive_int("itemsize", itemsize)
    n_chunks = math.ceil(n / block)
    p = programs
    while math.gcd(p, n_chunks) != 1:
        p += 1
    chunk_bytes = block * itemsize
    iters = max(math.ceil(n_chunks / p), math.ceil(bytes_to_read / (p * chunk_bytes)))
    # Exact bytes: every visit reads a full chunk except visits to the ragged last chunk.
    visits_last = _visits(n_chunks - 1, n_chunks, p, iters)
    tail = n - (n_chunks - 1) * block
    total = (p * iters - visits_last) * block * itemsize + visits_last * tail * itemsize
    return {"programs": p, "iters": iters, "n_chunks": n_chunks, "bytes": total}


def chunk_schedule(n_chunks: int, programs: int, iters: int) -> np.ndarray:
    """The [programs, iters] matrix of chunk indices the kernel reads."""
    n_chunks, programs = runtime.positive_int("n_chunks", n_chunks), runtime.positive_int("programs", programs)
    iters = runtime.nonnegative_int("iters", iters)
    p = np.arange(programs, dtype=np.int64)[:, None]
    i = np.arange(iters, dtype=np.int64)[None, :]
    return (p + i * programs) % n_chunks


def _visits(chunk: int, n_chunks: int, programs: int, iters: int) -> int:
    return int((chunk_schedule(n_chunks, programs, iters) == chunk).sum())


def sweep_reference(x: torch.Tensor, n: int, programs: int, iters: int, block: int) -> torch.Tensor:
    """float64 partial sums for the same access pattern as :func:`gpulab.memory.sweep_kernel`."""
    runtime.require_tensor("x", x, device_check=False)
    n = runtime.integer("n", n)
    if not 1 <= n <= x.numel():
        raise ValueError(f"n must be between 1 and x.numel()={x.numel()}, got {n}.")
    block = runtime.positive_int("block", block)
    n_chunks = math.ceil(n / block)
    padded = torch.zeros(n_chunks * block, dtype=torch.float64, device=x.device)
    padded[:n] = x.reshape(-1)[:n].detach()  # float64 on x's device: a 4 GB working set need not visit the host
    chunk_sums = padded.view(n_chunks, block).sum(1).cpu()
    del padded
    sched = torch.from_numpy(chunk_schedule(n_chunks, programs, iters))
    return chunk_sums[sched].sum(1)


def sweep_data(n: int, device=None, seed=None) -> torch.Tensor:
    """Fresh random fp32 data for a sweep: uniform in [0.5, 1.5).

    Positive and never zero, so the per-program sums have no cancellation: their fp32 rounding error stays small
    relative to the sums themselves, and a check against the float64 reference is meaningful at every size. (With
    mean-zero data a sum of thousands of values can land near zero by chance, and its relative error explode.)
    """
    n = runtime.positive_int("n", n)
    if seed is not None:
        seed = runtime.nonnegative_int("seed", seed)
    return check.random_tensor(n, device=device, seed=seed, distribution="uniform", scale=0.5) + 1.0


def working_set_sizes(cpu_max: int = 1 << 20, gpu_max: int = 4 << 30, smallest: int = 16 << 10) -> list[int]:
    """Working-set sizes in bytes: powers of two from ``smallest`` (16 KB) to 4 GB on a GPU (1 MB on CPU)."""
    cpu_max, gpu_max = runtime.positive_int("cpu_max", cpu_max), runtime.positive_int("gpu_max", gpu_max)
    smallest = runtime.positive_int("smallest", smallest)
    top = runtime.pick(cpu=cpu_max, gpu=gpu_max)
    if smallest > top:
        which = runtime.pick(cpu="cpu_max", gpu="gpu_max")
        raise ValueError(f"smallest={smallest} is larger than {which}={top}: the sweep would have no sizes.")
    return [1 << k for k in range(smallest.bit_length() - 1, top.bit_length())]


def working_sets(sizes, name: str = "sizes") -> list[int]:
    """``sizes`` as a non-empty list of working-set sizes in bytes: positive multiples of 4 (whole fp32 elements),
    or an error naming ``name`` and the entry at fault."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise runtime.ArgumentTypeError(f"{name} must be a list of sizes in bytes, got {sizes!r}.")
    sizes = [runtime.positive_int(f"{name}[{i}]", w) for i, w in enumerate(sizes)]
    if not sizes:
        raise ValueError(f"{name} is empty; pass sizes in bytes (e.g. [16384, 65536]) or None for the defaults.")
    for i, w in enumerate(sizes):
        if w % 4:
            raise ValueError(
                f"{name}[{i}]={w} is not a multiple of 4 bytes (whole fp32 elements); use {w - w % 4 or 4}."
            )
    return sizes
