"""Lesson 0: the memory hierarchy, measured with two small Triton kernels.

What you will learn:
- a Triton kernel is a function of one *program* (a thread block); the grid says how many run, masks handle the
  ragged edge;
- how fast data arrives depends on where it lives: a working set that fits in L1 or L2 is read many times faster
  than one that streams from HBM;
- bandwidth = bytes moved / time, counted the same way for every kernel in the course.

Two kernels:

``copy``: the simplest memory-bound kernel. Program ``p`` copies elements ``[p*BLOCK, (p+1)*BLOCK)``; the last block
is ragged, so loads and stores are masked. It reads N and writes N elements: ``2*N*itemsize`` bytes, no FLOPs.

``working_set_sweep``: reads a working set of W bytes over and over inside one launch. The working set is cut into
``C = ceil(n / BLOCK)`` chunks; ``P`` programs run ``iters`` steps each, and at step ``i`` program ``p`` reads

    chunk(p, i) = (p + i*P) mod C

and adds it to a running sum. So at every step the grid reads P consecutive chunks, and the grid as a whole marches
through the working set again and again. Choosing ``P`` coprime to ``C`` makes every program visit every chunk, so
each SM's own reuse distance is the whole working set too. Hence the picture: a working set that fits one SM's L1
is read from L1; one that fits L2 from L2; a larger one from HBM, and the bandwidth we compute (bytes read / time)
drops at each size where the next level takes over. Each program stores its sum, so no load can be optimised away,
and the sums are checked against a float64 reference of the same access pattern.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from gpulab import runtime  # noqa: F401 - sets interpreter mode before any kernel is defined

import triton  # isort: skip
import triton.language as tl  # isort: skip

__all__ = [
    "copy",
    "copy_reference",
    "copy_kernel",
    "working_set_sweep",
    "sweep_reference",
    "sweep_plan",
    "sweep_kernel",
    "chunk_schedule",
    "plot_hierarchy",
    "plot_ridge_points",
    "working_set_sizes",
    "sweep_data",
    "measure_sweep",
    "plot_sweep",
    "benchmark",
]


# ----------------------------------------------------------------------------------------------------------------
# copy: read N, write N


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    """dst[i] = src[i] for i < n. One program per block of BLOCK elements."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n  # the last block is ragged: its lanes past n must neither read nor write
    x = tl.load(src_ptr + offs, mask=mask)
    tl.store(dst_ptr + offs, x, mask=mask)


def copy_reference(src: torch.Tensor) -> torch.Tensor:
    return src.clone()


def copy(src: torch.Tensor, out: torch.Tensor | None = None, block: int | None = None) -> torch.Tensor:
    """Copy a contiguous tensor with :func:`copy_kernel`; returns ``out`` (allocated if not given)."""
    _require_tensor("src", src)
    if not src.is_contiguous():
        raise ValueError(f"src must be contiguous, got strides {src.stride()}; pass src.contiguous().")
    if out is None:
        out = torch.empty_like(src)
    else:
        _require_tensor("out", out)
    if out.shape != src.shape or out.dtype != src.dtype or out.device != src.device or not out.is_contiguous():
        raise ValueError(
            f"out must be a contiguous tensor like src ({tuple(src.shape)}, {src.dtype}, {src.device}); "
            f"got ({tuple(out.shape)}, {out.dtype}, {out.device})."
        )
    n = src.numel()
    if n == 0:
        return out
    block = block or runtime.pick(cpu=1024, gpu=4096)
    copy_kernel[(triton.cdiv(n, block),)](src, out, n, BLOCK=block, num_warps=4 if block <= 1024 else 8)
    return out


_require_tensor = runtime.require_tensor


# ----------------------------------------------------------------------------------------------------------------
# working-set sweep: read W bytes, many times, inside one launch


# The chunk count and step are runtime values on purpose: were Triton to specialise n_chunks == 1 (its default for
# integer arguments equal to 1), the load address would become loop-invariant and the compiler could hoist it,
# "measuring" more than L1 can deliver.
@triton.jit(do_not_specialize=["n_chunks", "n_programs"])
def sweep_kernel(x_ptr, partial_ptr, n, n_chunks, n_programs, iters, BLOCK: tl.constexpr):
    """partial[p] = sum over i < iters of sum(chunk((p + i*P) mod C)), where chunk c is x[c*BLOCK : (c+1)*BLOCK]."""
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)  # one partial sum per lane: the loads stay independent
    chunk = pid % n_chunks
    step = n_programs % n_chunks
    for _ in range(0, iters):
        offs = chunk * BLOCK + lanes
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
        chunk += step
        chunk = tl.where(chunk >= n_chunks, chunk - n_chunks, chunk)  # mod C without a division
    tl.store(partial_ptr + pid, tl.sum(acc, axis=0))


def sweep_plan(n: int, bytes_to_read: float, block: int, programs: int, itemsize: int = 4) -> dict:
    """Grid and step count for reading about ``bytes_to_read`` from a working set of ``n`` elements.

    Returns ``programs`` (the smallest count >= the requested one that is coprime to the chunk count), ``iters``
    (steps per program, at least one full pass over the working set) and the exact ``bytes`` read.
    """
    if n < 1:
        raise ValueError(f"n (working-set elements) must be >= 1, got {n}.")
    if programs < 1 or block < 1:
        raise ValueError(f"programs and block must be >= 1, got programs={programs}, block={block}.")
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
    p = np.arange(programs, dtype=np.int64)[:, None]
    i = np.arange(iters, dtype=np.int64)[None, :]
    return (p + i * programs) % n_chunks


def _visits(chunk: int, n_chunks: int, programs: int, iters: int) -> int:
    return int((chunk_schedule(n_chunks, programs, iters) == chunk).sum())


def sweep_reference(x: torch.Tensor, n: int, programs: int, iters: int, block: int) -> torch.Tensor:
    """float64 partial sums for the same access pattern as :func:`sweep_kernel`."""
    n_chunks = math.ceil(n / block)
    padded = torch.zeros(n_chunks * block, dtype=torch.float64, device=x.device)
    padded[:n] = x.reshape(-1)[:n].detach()  # float64 on x's device: a 4 GB working set need not visit the host
    chunk_sums = padded.view(n_chunks, block).sum(1).cpu()
    del padded
    sched = torch.from_numpy(chunk_schedule(n_chunks, programs, iters))
    return chunk_sums[sched].sum(1)


def check_sweep_args(x, n: int, programs: int, iters: int, block: int | None) -> tuple[int, int]:
    """Validate the arguments of a sweep launch; return ``(block, n_chunks)``. Shared by every sweep kernel."""
    _require_tensor("x", x)
    if x.dtype != torch.float32:
        raise ValueError(f"x must be float32, got {x.dtype}; pass x.float().")
    if not x.is_contiguous():
        raise ValueError(f"x must be contiguous, got strides {x.stride()}; pass x.contiguous().")
    if not 1 <= n <= x.numel():
        raise ValueError(f"n must be between 1 and x.numel()={x.numel()}, got {n}.")
    if programs < 1 or iters < 1:
        raise ValueError(f"programs and iters must be >= 1, got programs={programs}, iters={iters}; see sweep_plan().")
    block = block or 4096
    n_chunks = math.ceil(n / block)
    if math.gcd(programs, n_chunks) != 1:
        raise ValueError(
            f"programs={programs} shares a factor with the chunk count {n_chunks}, so some programs would never "
            "visit some chunks; get a valid count from sweep_plan()."
        )
    return block, n_chunks


def working_set_sweep(x: torch.Tensor, n: int, programs: int, iters: int, block: int | None = None):
    """Launch :func:`sweep_kernel` over the first ``n`` elements of ``x``; returns the per-program sums [programs].

    ``programs`` must be coprime to the chunk count (use :func:`sweep_plan`), so that every program visits every
    chunk. The sums are fp32, poisoned with NaN before the launch so an unwritten one shows.
    """
    block, n_chunks = check_sweep_args(x, n, programs, iters, block)
    from gpulab.check import poisoned

    partial = poisoned(programs, dtype=torch.float32, device=x.device)
    sweep_kernel[(programs,)](
        x, partial, n, n_chunks, programs, iters, BLOCK=block, num_warps=8 if block >= 2048 else 4
    )
    return partial


def sweep_data(n: int, device=None, seed=None) -> torch.Tensor:
    """Fresh random fp32 data for a sweep: uniform in [0.5, 1.5).

    Positive and never zero, so the per-program sums have no cancellation: their fp32 rounding error stays small
    relative to the sums themselves, and a check against the float64 reference is meaningful at every size. (With
    mean-zero data a sum of thousands of values can land near zero by chance, and its relative error explode.)
    """
    from gpulab import check

    return check.random_tensor(n, device=device, seed=seed, distribution="uniform", scale=0.5) + 1.0


def working_set_sizes(cpu_max: int = 1 << 20, gpu_max: int = 4 << 30, smallest: int = 16 << 10) -> list[int]:
    """Working-set sizes in bytes: powers of two from 16 KB to 4 GB on a GPU (1 MB on CPU)."""
    top = runtime.pick(cpu=cpu_max, gpu=gpu_max)
    return [1 << k for k in range(smallest.bit_length() - 1, top.bit_length())]


def measure_sweep(sizes=None, bytes_to_read=None, programs=None, block=None, progress=None, check=True):
    """Sweep working-set sizes, checking each launch against the float64 reference, and time it.

    Returns one :class:`gpulab.bench.Result` per size, with ``params['working_set_bytes']`` and the bytes read.
    """
    from gpulab import bench, hardware
    from gpulab.check import assert_close

    sizes = list(sizes or working_set_sizes())
    block = block or 4096
    if programs is None:
        programs = runtime.pick(cpu=3, gpu=4 * hardware.spec().sm_count)
    if bytes_to_read is None:
        bytes_to_read = runtime.pick(cpu=256 << 10, gpu=4 << 30)
    n_max = max(sizes) // 4
    x = sweep_data(n_max)
    results = []
    for w in progress(sizes) if progress else sizes:
        n = w // 4
        plan = sweep_plan(n, max(bytes_to_read, 2 * w), block, programs)
        run = lambda n=n, plan=plan: working_set_sweep(x, n, plan["programs"], plan["iters"], block)
        if check:
            ref = sweep_reference(x, n, plan["programs"], plan["iters"], block)
            assert_close(run(), ref, rtol=1e-4, name="sweep partial sums", context=f"working set {w} bytes")
        r = bench.measure(
            run,
            lesson="00",
            case="working-set sweep",
            bytes=plan["bytes"],
            flops=plan["bytes"] / 4,  # one add per element read
            dtype=torch.float32,
            shape=[n],
            kernel=sweep_kernel,
            warmup_ms=runtime.pick(cpu=0, gpu=20),
            rep_ms=runtime.pick(cpu=1, gpu=60),
            working_set_bytes=w,
            programs=plan["programs"],
            iters=plan["iters"],
            block=block,
            level=hardware.cache_level(w),
        )
        results.append(r)
    return results


def plot_sweep(results, ax=None, gpu=None, title=None):
    """Bandwidth vs working set on log-log axes, with the spec's HBM bandwidth and the L1 / L2 sizes marked."""
    import matplotlib.pyplot as plt

    from gpulab import hardware

    sweep = sorted((r for r in results if r.case == "working-set sweep"), key=lambda r: r.params["working_set_bytes"])
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    xs = [r.params["working_set_bytes"] for r in sweep]
    ys = [r.gbps for r in sweep]
    ax.plot(xs, ys, marker="o", ms=3, label=f"sweep kernel ({sweep[0].device})" if sweep else "sweep kernel")
    for r in results:
        if r.case != "working-set sweep" and r.gbps and "working_set_bytes" in r.params:
            ax.scatter([r.params["working_set_bytes"]], [r.gbps], marker="s", zorder=3, label=r.case)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if sweep and sweep[0].mode == "cuda":
        s = hardware.spec(gpu or sweep[0].device)
        ax.axhline(s.hbm_gbps, color="0.4", ls="--", lw=1, label=f"HBM spec {s.hbm_gbps:,.0f} GB/s")
        for size, name in ((s.l1_per_sm, "L1 per SM"), (s.l2_bytes, "L2")):
            ax.axvline(size, color="0.7", ls=":", lw=1)
            ax.text(size, min(ys), f" {name}", rotation=90, va="bottom", fontsize=8)
    ticks = [x for x in xs if (x.bit_length() - 1) % 2 == 0]
    ax.set_xticks(ticks, [_human_bytes(t) for t in ticks], rotation=45)
    ax.set_xlabel("working set W")
    ax.set_ylabel("bandwidth (GB/s, bytes read / time)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Bandwidth vs working set")
    return ax


def plot_hierarchy(gpu=None, ax=None):
    """Capacity of each level of the hierarchy on one GPU, summed over the chip (log scale)."""
    import matplotlib.pyplot as plt

    from gpulab import hardware

    s = hardware.spec(gpu)
    levels = [
        ("registers", s.registers_per_sm * 4 * s.sm_count, f"{s.registers_per_sm * 4 // 1024} KB per SM"),
        ("L1 / shared", s.l1_per_sm * s.sm_count, f"{s.l1_per_sm // 1024} KB per SM"),
        ("L2", s.l2_bytes, "shared by all SMs"),
        ("HBM", s.memory_gb * 2**30, f"{s.hbm_gbps:,.0f} GB/s to the chip"),
    ]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 2.8))
    names = [n for n, _, _ in levels][::-1]
    sizes = [b for _, b, _ in levels][::-1]
    notes = [t for _, _, t in levels][::-1]
    ax.barh(names, sizes, color=["C3", "C2", "C1", "C0"])
    ax.set_xscale("log")
    for y, (b, t) in enumerate(zip(sizes, notes)):
        ax.text(b * 1.3, y, f"{_human_bytes(b)}  ({t})", va="center", fontsize=8)
    ax.set_xlim(1e6, 1e13)
    ax.set_xlabel("capacity, whole chip (bytes)")
    ax.set_title(f"Memory hierarchy of the {s.name}")
    return ax


def plot_ridge_points(specs=None, dtype="float16", ax=None):
    """Ridge point (FLOPs per HBM byte needed to be compute-bound) of each GPU in the spec table."""
    import matplotlib.pyplot as plt

    from gpulab import hardware

    specs = list(specs or hardware.SPECS.values())
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3))
    names = [s.name.replace("NVIDIA ", "").replace("GeForce ", "") for s in specs]
    ridges = [hardware.ridge_point(s, dtype) for s in specs]
    ax.bar(names, ridges, color="C0")
    ax.axhline(1 / 12, color="C3", lw=1)
    ax.text(-0.4, 0.1, "fp32 vector add: 1 FLOP per 12 bytes", color="C3", fontsize=8, backgroundcolor="white")
    ax.set_ylim(0.03, None)
    ax.set_yscale("log")
    ax.set_ylabel(f"FLOP per byte ({dtype} peak / HBM)")
    ax.set_title("How many FLOPs a kernel must do per byte to stop being memory-bound")
    ax.tick_params(axis="x", rotation=45)
    for label in ax.get_xticklabels():
        label.set_ha("right")
    return ax


def _human_bytes(b: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if b < 1024:
            return f"{b:.3g} {unit}"
        b /= 1024
    return f"{b:g} PB"


def benchmark(progress=None):
    """`python -m gpulab bench 00`: the sweep from 16 KB to 4 GB, plus the copy kernel and torch's copy at 1 GB."""
    from gpulab import bench
    from gpulab.check import assert_close

    results = measure_sweep(progress=progress)
    n = runtime.pick(cpu=1 << 16, gpu=1 << 28)  # 1 GB of fp32 on the GPU
    src = torch.randn(n, device=runtime.device)
    dst = torch.empty_like(src)
    assert_close(copy(src, dst), src, name="copy")
    for case, fn, kernel in (
        ("copy kernel (gpulab)", lambda: copy(src, dst), copy_kernel),
        ("torch copy_ (peer)", lambda: dst.copy_(src), None),
    ):
        results.append(
            bench.measure(
                fn,
                lesson="00",
                case=case,
                bytes=2 * n * 4,
                flops=0,
                dtype=torch.float32,
                shape=[n],
                kernel=kernel,
                working_set_bytes=2 * n * 4,
            )
        )
    import matplotlib

    matplotlib.use("Agg")
    ax = plot_sweep(results)
    return results, ax.figure
