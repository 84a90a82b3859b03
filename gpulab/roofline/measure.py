"""Measuring every ceiling of this machine, each kernel checked against a float64 reference before it is timed, and
the lesson's benchmark (``python -m gpulab bench 01``).

- **HBM**: lesson 0's masked copy kernel (:func:`gpulab.memory.copy`) on 1 GiB of fp32, bytes read + written, timed
  in the same run as PyTorch's ``dst.copy_(src)`` (the peer; the ratio is reported, target >= 0.97).
- **L2**: the working-set sweep of lesson 0 with loads marked ``cache_modifier=".cg"`` (cache in L2 only, bypass
  L1), for working sets from 512 KB to 16 MB; the ceiling is the best of them.
- **L1 / on-chip**: lesson 0's sweep, unchanged, for working sets of 16 to 128 KB, which each SM's L1 holds. Triton
  gives no direct control of shared-memory loads (it decides itself what goes through shared memory), so this is
  an *L1* read bandwidth, the fair "on-chip" figure we can measure from Triton, not a shared-memory benchmark.
- **tensor cores**: ``torch.matmul`` (cuBLAS) on random bf16, fp16, and fp32 with TF32 allowed, at 8192^3 and
  16384^3, two input sets rotated; the ceiling is the best shape. A separate 8192^3 bf16 run in the same session is
  the peer (target >= 0.97). Since the ceiling itself comes from cuBLAS, that ratio checks that the figure is
  stable, not that another implementation is as fast.
- **FP32 FMA** (no tensor cores): :func:`gpulab.roofline.fma_kernel`, where every lane runs four independent chains
  of ``a = a * b + c`` in registers, with no memory traffic in the loop, 2 FLOPs per FMA; the best of a few launch
  configurations. ``torch.matmul`` in IEEE fp32 is timed beside it for comparison.
"""

from __future__ import annotations

import contextlib
import math

import torch
import triton

from gpulab import bench, check, hardware, runtime
from gpulab.memory.kernels import block_size, copy, copy_kernel, sweep_kernel, working_set_sweep
from gpulab.memory.measure import check_progress
from gpulab.memory.schedule import sweep_data, sweep_plan, sweep_reference, working_sets
from gpulab.roofline.intensity import COMPUTE_ROOFS, MEMORY_LEVELS, gemm
from gpulab.roofline.kernels import (
    FMA_CHAINS,
    FMA_UNROLL,
    fma_chain,
    fma_closed_form,
    fma_kernel,
    fma_reference,
    l2_sweep,
    l2_sweep_kernel,
)
from gpulab.roofline.plotting import plot
from gpulab.roofline.roofs import Ceilings, rate_of, spec_value

__all__ = [
    "measure_hbm",
    "measure_cache",
    "measure_matmul",
    "measure_fma",
    "measure_ceilings",
    "benchmark",
]

# ----------------------------------------------------------------------------------------------------------------
# The microbenchmarks


def _measure(fn, case: str, steady: bool = False, **kw) -> bench.Result:
    """:func:`gpulab.bench.measure` for lesson 01. The interpreter is slow and its times mean nothing, so on CPU one
    short round exercises the code path; on a GPU, 25 ms of warm-up and about 100 ms of timed calls.

    ``steady``: 500 ms of warm-up and 300 ms of timing, for the tensor-core products. At ~700 TFLOP/s an H100 runs
    at its power limit and its clock settles only after a few hundred ms; with a short warm-up two measurements of
    the same product differed by 3% in one run, as much as the 0.97 target allows."""
    warm, rep = (500, 300) if steady else (25, 100)
    timing = {"warmup_ms": runtime.pick(cpu=0, gpu=warm), "rep_ms": runtime.pick(cpu=1, gpu=rep)}
    return bench.measure(fn, lesson="01", case=case, **timing, **kw)


def measure_hbm(n: int | None = None) -> list[bench.Result]:
    """The HBM ceiling: lesson 0's copy kernel on ``n`` fp32 elements (1 GiB on a GPU), and torch's copy_ as peer."""
    n = runtime.positive_int("n", n if n is not None else runtime.pick(cpu=(1 << 14) + 3, gpu=1 << 28))
    src = torch.randn(n, device=runtime.device)
    dst = check.new_output(n, dtype=torch.float32, device=runtime.device)
    check.assert_close(copy(src, dst), src, rtol=0.0, name="copy kernel")  # a copy is exact
    peer = check.new_output(n, dtype=torch.float32, device=runtime.device)
    if not torch.equal(peer.copy_(src), src):  # exact, on the device: a second 1 GiB float64 check adds nothing
        raise AssertionError("torch copy_ did not reproduce src exactly.")
    out = []
    for case, fn, kernel, tag in (
        ("HBM: copy kernel (gpulab)", lambda: copy(src, dst), copy_kernel, {"ceiling": "HBM"}),
        ("HBM: torch copy_ (peer)", lambda: peer.copy_(src), None, {"peer_of": "HBM"}),
    ):
        kw = dict(bytes=2 * n * 4, flops=0, dtype=torch.float32, shape=[n], kernel=kernel, level="HBM", roof="fp32")
        out.append(_measure(fn, case, **kw, **tag))
    return out


def measure_cache(level: str, sizes=None, bytes_to_read=None, programs=None, block: int = 4096) -> list[bench.Result]:
    """Read bandwidth of a working set held by ``level``: 'L2' (:func:`gpulab.roofline.l2_sweep`, L1 bypassed) or
    'L1' (lesson 0's :func:`gpulab.memory.working_set_sweep`). One record per working-set size (``sizes`` in bytes,
    multiples of 4); the ceiling is the best. None for ``sizes``, ``bytes_to_read`` or ``programs``: the defaults."""
    if level not in ("L1", "L2"):
        raise ValueError(f"level={level!r}: measure_cache measures 'L1' or 'L2' (HBM: measure_hbm).")
    if sizes is None:
        gpu_sizes = [1 << k for k in (range(19, 25) if level == "L2" else range(14, 18))]
        sizes = runtime.pick(cpu=[16 << 10, 64 << 10] if level == "L2" else [16 << 10], gpu=gpu_sizes)
    sizes = working_sets(sizes)
    if programs is None:
        programs = runtime.pick(cpu=3, gpu=4 * hardware.spec().sm_count)
    programs = runtime.positive_int("programs", programs)
    if bytes_to_read is None:
        bytes_to_read = runtime.pick(cpu=128 << 10, gpu=4 << 30)
    bytes_to_read = runtime.finite_float("bytes_to_read", bytes_to_read, minimum=0.0)
    block = block_size("block", block)
    sweep = l2_sweep if level == "L2" else working_set_sweep
    kernel = l2_sweep_kernel if level == "L2" else sweep_kernel
    x = sweep_data(max(sizes) // 4)
    out = []
    for w in sizes:
        n = w // 4
        plan = sweep_plan(n, max(bytes_to_read, 2 * w), block, programs)
        run = lambda n=n, plan=plan: sweep(x, n, plan["programs"], plan["iters"], block)
        ref = sweep_reference(x, n, plan["programs"], plan["iters"], block)
        check.assert_close(run(), ref, rtol=1e-4, name=f"{level} sweep sums", context=f"working set {w} bytes")
        case = f"{level}: sweep kernel{' (.cg loads)' if level == 'L2' else ''}"
        kw = dict(bytes=plan["bytes"], flops=plan["bytes"] / 4, dtype=torch.float32, shape=[n], kernel=kernel)
        kw.update(ceiling=level, level=level, roof="fp32", working_set_bytes=w, block=block)
        out.append(_measure(run, case, **kw, programs=plan["programs"], iters=plan["iters"]))
    return out


@contextlib.contextmanager
def _tf32(allowed: bool):
    """Set whether fp32 matmuls may use TF32 tensor cores, and restore the caller's setting afterwards."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


_MATMUL_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}


def measure_matmul(roof: str, shapes=None, sets: int = 2, peer: bool = False, seed: int = 0) -> list[bench.Result]:
    """``torch.matmul`` for a compute roof ('bf16', 'fp16', 'tf32': candidates for its ceiling; 'fp32': IEEE fp32,
    a comparison for the FMA ceiling). Random inputs (never zeros), ``sets`` of them rotated, each shape checked
    against a float64 product of its first rows before it is timed. ``peer=True`` tags the records as the peer of
    the ceiling instead of candidates."""
    if not isinstance(roof, str) or roof not in _MATMUL_DTYPES:
        raise ValueError(f"roof={roof!r}: measure_matmul measures one of {', '.join(_MATMUL_DTYPES)}.")
    dtype = _MATMUL_DTYPES[roof]
    if shapes is None:
        shapes = runtime.pick(cpu=[(96, 80, 112)], gpu=[(8192, 8192, 8192), (16384, 16384, 16384)])
    shapes = _triples("shapes", shapes, ("m", "n", "k"))
    sets, peer, seed = (
        runtime.positive_int("sets", sets),
        runtime.strict_bool("peer", peer),
        runtime.integer("seed", seed),
    )
    tag = {"peer_of": roof} if (peer or roof == "fp32") else {"ceiling": roof}
    gen = torch.Generator(device=runtime.device).manual_seed(seed)
    out = []
    with _tf32(roof == "tf32"):
        for m, n, k in shapes:
            args = [
                (
                    torch.randn(m, k, generator=gen, device=runtime.device, dtype=dtype),
                    torch.randn(k, n, generator=gen, device=runtime.device, dtype=dtype),
                    check.new_output(m, n, dtype=dtype, device=runtime.device),
                )
                for _ in range(sets)
            ]
            a, b, c = args[0]
            torch.matmul(a, b, out=c)
            rows = min(m, 64)  # a float64 reference of the whole product would cost more than the benchmark
            ref = a[:rows].double() @ b.double()
            check.assert_close(c[:rows], ref, dtype="tf32" if roof == "tf32" else dtype, name=f"torch.matmul {roof}")
            if not torch.isfinite(c).all():  # the rows not compared above must be finite too
                raise AssertionError(f"torch.matmul {roof} {m}x{n}x{k}: the product has NaN or inf elements.")
            case = f"torch.matmul {roof} {m}x{n}x{k}" + (" (peer)" if "peer_of" in tag else "")
            cost = gemm(m, n, k, "tf32" if roof == "tf32" else dtype)
            kw = dict(flops=cost.flops, bytes=cost.bytes, dtype=cost.dtype, shape=[m, n, k], rotate=args)
            matmul = lambda a, b, c: torch.matmul(a, b, out=c)  # noqa: E731
            out.append(_measure(matmul, case, steady=True, **kw, level="HBM", roof=roof, **tag))
            del args, a, b, c, ref
    return out


def measure_fma(configs=None) -> list[bench.Result]:
    """The FP32 FMA ceiling: :func:`fma_kernel` in a few launch configurations ``(block, num_warps, programs per
    SM)``, each checked against float64 (step by step on a short chain, in closed form after the timed runs).
    ``programs per SM`` None: a few programs with a ragged last block (the CPU default)."""
    spec = hardware.spec()
    if configs is None:
        configs = runtime.pick(cpu=[(64, 4, None)], gpu=[(1024, 4, 4), (1024, 4, 8), (2048, 8, 4), (512, 4, 8)])
    configs = _fma_configs(configs)
    out = []
    for block, num_warps, per_sm in configs:
        # On a GPU: one wave of per_sm programs on every SM. On CPU: a few programs with a ragged last block.
        n = spec.sm_count * per_sm * block if per_sm else 2 * block + 3
        x = torch.rand(FMA_CHAINS, n, device=runtime.device) * 4 - 2  # in [-2, 2): far from the fixed point 1.0
        check.assert_close(
            fma_chain(x, 1, block=block, num_warps=num_warps),
            fma_reference(x, FMA_UNROLL),
            name="fma_kernel",
            context=f"block {block}, {FMA_UNROLL} steps",
        )
        # About 10 ms per launch at the spec rate on a GPU; two trips on CPU.
        flops_per_iter = 2 * FMA_CHAINS * FMA_UNROLL * n
        iters = runtime.pick(cpu=2, gpu=max(1, math.ceil(spec.fp32_tflops * 1e12 * 0.010 / flops_per_iter)))
        result = {}

        def fn(x=x, iters=iters, block=block, num_warps=num_warps, result=result):
            result["out"] = fma_chain(x, iters, block=block, num_warps=num_warps)  # kept for the check below

        case = f"FP32 FMA kernel, block {block}, {num_warps} warps"
        kw = dict(flops=float(flops_per_iter * iters), bytes=float((FMA_CHAINS + 1) * n * 4), dtype=torch.float32)
        kw.update(shape=[FMA_CHAINS, n], kernel=fma_kernel, ceiling="fp32", roof="fp32", level="HBM")
        r = _measure(fn, case, **kw, iters=iters, unroll=FMA_UNROLL, chains=FMA_CHAINS, programs=triton.cdiv(n, block))
        steps = iters * FMA_UNROLL
        check.assert_close(
            result["out"], fma_closed_form(x, steps), name="fma_kernel (timed)", context=f"{steps} steps"
        )
        out.append(r)
    return out


def measure_ceilings(progress=None) -> Ceilings:
    """Measure every ceiling of this machine (on CPU: tiny interpreter runs, labelled as such).

    Returns a :class:`Ceilings` whose ``records`` hold every measurement, in the :class:`gpulab.bench.Result`
    format; the best record of each ceiling carries ``vs_spec`` (and ``vs_peer`` where there is a peer).
    """
    steps = [
        ("HBM", lambda: measure_hbm()),
        ("L2", lambda: measure_cache("L2")),
        ("L1", lambda: measure_cache("L1")),
        ("bf16", lambda: measure_matmul("bf16")),
        (
            "bf16 peer",
            lambda: measure_matmul(
                "bf16", shapes=runtime.pick(cpu=[(96, 80, 112)], gpu=[(8192,) * 3]), peer=True, seed=1
            ),
        ),
        ("fp16", lambda: measure_matmul("fp16")),
        ("tf32", lambda: measure_matmul("tf32")),
        ("fp32 matmul", lambda: measure_matmul("fp32", shapes=runtime.pick(cpu=[(96, 80, 112)], gpu=[(8192,) * 3]))),
        ("FP32 FMA", lambda: measure_fma()),
    ]
    progress = check_progress(progress)
    records = []
    for _, step in progress(steps) if progress else steps:
        records += step()
        if runtime.on_gpu():
            torch.cuda.empty_cache()
    result = Ceilings.from_results(records)
    _annotate(result)
    return result


def _annotate(c: Ceilings) -> None:
    """Write ``vs_spec`` and ``vs_peer`` into the params of each ceiling's best record (GPU runs only)."""
    if c.mode != "cuda":
        return
    spec = c.spec()
    keys = MEMORY_LEVELS + COMPUTE_ROOFS
    peers = {r.params["peer_of"]: r for r in c.records if r.params.get("peer_of")}
    for key in keys:
        cands = [r for r in c.records if r.params.get("ceiling") == key]
        if not cands:
            continue
        best = max(cands, key=lambda r: rate_of(r, key))
        best.params["best"] = True
        sv = spec_value(spec, key)
        if sv:
            best.params["vs_spec"] = rate_of(best, key) / sv
        if key in peers:
            best.params["vs_peer"] = rate_of(best, key) / rate_of(peers[key], key)


# ----------------------------------------------------------------------------------------------------------------
# python -m gpulab bench 01


def benchmark(progress=None):
    """`python -m gpulab bench 01`: every ceiling, the peers, the targets; returns (results, roofline figure)."""
    import matplotlib  # here, not at the top: only the benchmark draws off-screen

    matplotlib.use("Agg")
    c = measure_ceilings(progress=check_progress(progress))
    print(c.summary())  # the ceilings against the spec, and the targets
    ax = plot(c.records, c)
    return list(c.records), ax.figure


def _triples(name: str, items, parts: tuple[str, str, str]) -> list[tuple[int, int, int]]:
    """``items`` as a non-empty list of triples of positive integers, or an error naming the entry at fault."""
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        raise runtime.ArgumentTypeError(f"{name} must be a list of ({', '.join(parts)}) triples, got {items!r}.")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, (tuple, list)) or len(item) != 3:
            raise ValueError(f"{name}[{i}]={item!r} is not a triple ({', '.join(parts)}).")
        out.append(tuple(runtime.positive_int(f"{name}[{i}].{p}", v) for p, v in zip(parts, item)))
    if not out:
        raise ValueError(f"{name} is empty; pass at least one ({', '.join(parts)}) triple, or None for the defaults.")
    return out


def _fma_configs(configs) -> list[tuple[int, int, int | None]]:
    """``configs`` of :func:`measure_fma` checked: (block: a power of two, num_warps: 1 to 32, programs per SM or
    None)."""
    if isinstance(configs, (str, bytes)) or not hasattr(configs, "__iter__"):
        raise runtime.ArgumentTypeError(
            f"configs must be a list of (block, num_warps, per_sm) triples, got {configs!r}."
        )
    out = []
    for i, item in enumerate(configs):
        if not isinstance(item, (tuple, list)) or len(item) != 3:
            raise ValueError(f"configs[{i}]={item!r} is not a triple (block, num_warps, per_sm).")
        block, num_warps, per_sm = item
        block = block_size(f"configs[{i}].block", block)
        num_warps = runtime.one_of(f"configs[{i}].num_warps", num_warps, (1, 2, 4, 8, 16, 32))
        per_sm = None if per_sm is None else runtime.positive_int(f"configs[{i}].per_sm", per_sm)
        out.append((block, num_warps, per_sm))
    if not out:
        raise ValueError("configs is empty; pass at least one (block, num_warps, per_sm) triple, or None.")
    return out
