"""Measuring every ceiling of this machine on the course's benchmark harness, and the lesson's benchmark
(``python -m gpulab bench 01``).

Each microbenchmark is a :class:`gpulab.bench.Benchmark` (:func:`benchmarks`): its cases are the x values (a size,
a working set, a shape, a launch configuration), its providers the implementations (gpulab's Triton kernels, and
torch's where the lesson compares them), and :func:`gpulab.bench.run` checks every provider against its float64
reference before anything is timed, then times each on both clocks.

- **HBM**: lesson 0's masked copy kernel (:func:`gpulab.memory.copy`) on 1 GiB of fp32, bytes read + written, timed
  in the same case as PyTorch's ``dst.copy_(src)`` (the peer; the ratio is reported, target >= 0.97).
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

Records: ``case`` names the measurement as the stored runs, the summary and the targets do ('HBM: copy kernel
(gpulab)', 'torch.matmul bf16 8192x8192x8192 (peer)'); ``provider`` the implementation; ``params``: ``ceiling``
(the roof the record is a candidate for) or ``peer_of`` (the roof it is the peer of), ``level`` and ``roof`` (the
roofs it is held to), the case's x values (``n``; ``working_set_bytes``; ``m``, ``n``, ``k``; ``block``,
``num_warps``, ``per_sm``), the schedule (``programs``, ``iters``, ``block``, ``unroll``, ``chains``), ``check``
and the harness's wall-clock fields; the best record of each ceiling gets ``best``, ``vs_spec`` and ``vs_peer`` on a
GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math

import torch
import triton

from gpulab import bench, check, dtypes, hardware, runtime
from gpulab.memory.kernels import block_size, copy, copy_kernel, sweep_kernel, working_set_sweep
from gpulab.memory.measure import check_progress
from gpulab.memory.schedule import sweep_data, sweep_plan, sweep_reference, working_sets
from gpulab.roofline.intensity import COMPUTE_ROOFS, MEMORY_LEVELS, gemm
from gpulab.roofline.kernels import (
    FMA_CHAINS,
    FMA_UNROLL,
    fma_chain,
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
    "benchmarks",
    "benchmark",
]


@dataclasses.dataclass
class _Measurement(bench.Benchmark):
    """A :class:`gpulab.bench.Benchmark` whose records are named as lesson 1 names its measurements: the provider,
    then the case's ``label`` (', block 1024, 4 warps'), so the two providers of the HBM case keep their own names
    ('HBM: copy kernel (gpulab)', 'HBM: torch copy_ (peer)'), the names the ceilings' summary and targets print."""

    def case_name(self, x) -> str:
        return f"{self.name}{self.label(**x) if self.label is not None else ''}"

    def new_record(self, x, args, provider, status):
        r = super().new_record(x, args, provider, status)
        r.case = f"{provider}{self.label(**x) if self.label is not None else ''}"
        return r


def _timing(steady: bool = False) -> dict:
    """The harness's warm-up and timing budget for lesson 01. The interpreter is slow and its times mean nothing, so
    on CPU one short round exercises the code path; on a GPU, 25 ms of warm-up and about 100 ms of timed calls.

    ``steady``: 500 ms of warm-up and 300 ms of timing, for the tensor-core products. At ~700 TFLOP/s an H100 runs
    at its power limit and its clock settles only after a few hundred ms; with a short warm-up two measurements of
    the same product differed by 3% in one run, as much as the 0.97 target allows."""
    warm, rep = (500.0, 300.0) if steady else (25.0, 100.0)
    return {"warmup_ms": runtime.pick(cpu=0.0, gpu=warm), "rep_ms": runtime.pick(cpu=1.0, gpu=rep)}


def _exact(out, expected) -> None:
    """A copy's check: every element equal to the source (a copy is exact; its float64 reference is the source)."""
    check.assert_close(out, expected, rtol=0.0, name="copy")


# ----------------------------------------------------------------------------------------------------------------
# HBM: lesson 0's copy kernel and torch's copy_


def _hbm_benchmark(n: int | None = None) -> bench.Benchmark:
    """One case of ``n`` fp32 elements (1 GiB on a GPU): lesson 0's copy kernel, and torch's ``copy_`` as its peer.
    Each provider writes its own output, so the check compares each one's, not the last writer's."""
    n = runtime.positive_int("n", n if n is not None else runtime.pick(cpu=(1 << 14) + 3, gpu=1 << 28))

    def inputs(n):
        new = lambda: check.new_output(n, dtype=torch.float32, device=runtime.device)  # noqa: E731
        return torch.randn(n, device=runtime.device), new(), new()

    kernel, peer = "HBM: copy kernel (gpulab)", "HBM: torch copy_ (peer)"
    return _Measurement(
        lesson="01",
        name="HBM",
        cases=[{"n": n}],
        inputs=inputs,
        providers={kernel: lambda src, mine, _: copy(src, mine), peer: lambda src, _, theirs: theirs.copy_(src)},
        reference=lambda src, *_: src,
        check=_exact,
        bytes=lambda n: 2.0 * n * 4,
        flops=0.0,
        shape=lambda n: [n],
        params={"level": "HBM", "roof": "fp32"},
        provider_params={kernel: {"ceiling": "HBM"}, peer: {"peer_of": "HBM"}},
        kernels={kernel: copy_kernel},
        **_timing(),
    )


# ----------------------------------------------------------------------------------------------------------------
# L2 and L1: the working-set sweep


def _cache_benchmark(level: str, sizes=None, bytes_to_read=None, programs=None, block: int = 4096) -> bench.Benchmark:
    """One case per working set (``sizes`` in bytes) of the sweep held by ``level``: 'L2' (:func:`l2_sweep`, L1
    bypassed) or 'L1' (lesson 0's :func:`gpulab.memory.working_set_sweep`), checked against
    :func:`gpulab.memory.sweep_reference`."""
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
    name = f"{level}: sweep kernel{' (.cg loads)' if level == 'L2' else ''}"

    def plan(working_set_bytes):
        return sweep_plan(working_set_bytes // 4, max(bytes_to_read, 2 * working_set_bytes), block, programs)

    def inputs(working_set_bytes):
        p = plan(working_set_bytes)
        n = working_set_bytes // 4
        return sweep_data(n), n, p["programs"], p["iters"], block

    def sums_match(out, expected):
        check.assert_close(out, expected, rtol=1e-4, name=f"{level} sweep sums")

    return _Measurement(
        lesson="01",
        name=name,
        cases=[{"working_set_bytes": w} for w in sizes],
        inputs=inputs,
        providers={name: sweep},
        reference=sweep_reference,
        check=sums_match,
        bytes=lambda working_set_bytes: float(plan(working_set_bytes)["bytes"]),
        flops=lambda working_set_bytes: plan(working_set_bytes)["bytes"] / 4,
        shape=lambda working_set_bytes: [working_set_bytes // 4],
        params=lambda working_set_bytes: {
            "ceiling": level,
            "level": level,
            "roof": "fp32",
            "block": block,
            "programs": plan(working_set_bytes)["programs"],
            "iters": plan(working_set_bytes)["iters"],
        },
        kernels={name: l2_sweep_kernel if level == "L2" else sweep_kernel},
        **_timing(),
    )


# ----------------------------------------------------------------------------------------------------------------
# tensor cores: torch.matmul


@contextlib.contextmanager
def _tf32(allowed: bool):
    """Set whether fp32 matmuls may use TF32 tensor cores, and restore the caller's setting afterwards."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


_MATMUL_ROOFS = ("bf16", "fp16", "tf32", "fp32")  # tf32: fp32 storage, TF32 tensor cores


def _roof_dtype(roof: str) -> torch.dtype:
    return torch.float32 if roof == "tf32" else dtypes.as_dtype(roof)


_CHECKED_ROWS = 64  # a float64 reference of the whole product would cost more than the benchmark


def _rotating_matmul(roof: str):
    """A provider of ``torch.matmul(a, b, out=c)`` that takes the next of its (a, b, c) input sets on each call; for
    fp32 inputs, TF32 is allowed for the 'tf32' roof only, and the caller's setting restored after each call."""
    calls = itertools.count()
    fp32 = _roof_dtype(roof) == torch.float32

    def provider(*sets):
        a, b, c = sets[next(calls) % len(sets)]
        with _tf32(roof == "tf32") if fp32 else contextlib.nullcontext():
            return torch.matmul(a, b, out=c)

    return provider


def _matmul_benchmark(roof: str, shapes=None, sets: int = 2, peer: bool = False, seed: int = 0) -> bench.Benchmark:
    """One case per ``(m, n, k)`` of ``torch.matmul`` for a compute roof, on ``sets`` random input sets (never zeros)
    rotated while timed; the check runs the first set against a float64 product of its first rows."""
    if not isinstance(roof, str) or roof not in _MATMUL_ROOFS:
        raise ValueError(f"roof={roof!r}: measure_matmul measures one of {', '.join(_MATMUL_ROOFS)}.")
    dtype = _roof_dtype(roof)
    if shapes is None:
        shapes = runtime.pick(cpu=[(96, 80, 112)], gpu=[(8192, 8192, 8192), (16384, 16384, 16384)])
    shapes = _triples("shapes", shapes, ("m", "n", "k"))
    sets, peer, seed = (
        runtime.positive_int("sets", sets),
        runtime.strict_bool("peer", peer),
        runtime.integer("seed", seed),
    )
    tag = {"peer_of": roof} if (peer or roof == "fp32") else {"ceiling": roof}
    cost_dtype = "tf32" if roof == "tf32" else dtype

    def input_sets(m, n, k, count=sets):
        gen = torch.Generator(device=runtime.device).manual_seed(seed)
        new = lambda *shape: torch.randn(*shape, generator=gen, device=runtime.device, dtype=dtype)  # noqa: E731
        out = lambda: check.new_output(m, n, dtype=dtype, device=runtime.device)  # noqa: E731
        return tuple((new(m, k), new(k, n), out()) for _ in range(count))

    def first_rows(*checked):
        a, b, _ = checked[0]
        return a[:_CHECKED_ROWS].double() @ b.double()

    def product_matches(out, expected):
        check.assert_close(out[: len(expected)], expected, dtype=cost_dtype, name=f"torch.matmul {roof}")
        if not torch.isfinite(out).all():  # the rows not compared above must be finite too
            raise AssertionError(f"torch.matmul {roof} {tuple(out.shape)}: the product has NaN or inf elements.")

    name = f"torch.matmul {roof}"
    return _Measurement(
        lesson="01",
        name=name,
        cases=[{"m": m, "n": n, "k": k} for m, n, k in shapes],
        inputs=input_sets,
        check_inputs=lambda m, n, k: input_sets(m, n, k, count=1),
        providers={name: _rotating_matmul(roof)},
        reference=first_rows,
        check=product_matches,
        flops=lambda m, n, k: gemm(m, n, k, cost_dtype).flops,
        bytes=lambda m, n, k: gemm(m, n, k, cost_dtype).bytes,
        dtype=lambda m, n, k: gemm(m, n, k, cost_dtype).dtype,
        shape=lambda m, n, k: [m, n, k],
        label=lambda m, n, k: f" {m}x{n}x{k}" + (" (peer)" if "peer_of" in tag else ""),
        params={"level": "HBM", "roof": roof, **tag},
        **_timing(steady=True),
    )


# ----------------------------------------------------------------------------------------------------------------
# FP32 FMA: the register-only chains

_CHECKED_TRIPS = 2  # loop trips of the checked run: the loop runs more than once, the float64 reference stays cheap


def _fma_benchmark(configs=None) -> bench.Benchmark:
    """One case per launch configuration ``(block, num_warps, programs per SM)`` of :func:`fma_kernel`, checked
    step by step against :func:`fma_reference` in float64 over a short chain (the timed run differs only in its
    trip count). ``programs per SM`` None: a few programs with a ragged last block (the CPU default)."""
    spec = hardware.spec()
    if configs is None:
        configs = runtime.pick(cpu=[(64, 4, None)], gpu=[(1024, 4, 4), (1024, 4, 8), (2048, 8, 4), (512, 4, 8)])
    configs = _fma_configs(configs)

    def size(block, per_sm):
        """On a GPU: one wave of per_sm programs on every SM. On CPU: a few programs with a ragged last block."""
        return spec.sm_count * per_sm * block if per_sm else 2 * block + 3

    def trips(block, per_sm):
        """About 10 ms per launch at the spec rate on a GPU; two trips on CPU."""
        per_trip = 2 * FMA_CHAINS * FMA_UNROLL * size(block, per_sm)
        return runtime.pick(cpu=2, gpu=max(1, math.ceil(spec.fp32_tflops * 1e12 * 0.010 / per_trip)))

    def inputs(block, num_warps, per_sm, checked=False):
        x = torch.rand(FMA_CHAINS, size(block, per_sm), device=runtime.device) * 4 - 2  # far from the fixed point 1
        return x, _CHECKED_TRIPS if checked else trips(block, per_sm), block, num_warps

    def chain(x, iters, block, num_warps):
        return fma_chain(x, iters, block=block, num_warps=num_warps)

    def flops(block, num_warps, per_sm):
        return float(2 * FMA_CHAINS * FMA_UNROLL * size(block, per_sm) * trips(block, per_sm))

    def schedule(block, num_warps, per_sm):
        fields = {"ceiling": "fp32", "roof": "fp32", "level": "HBM", "iters": trips(block, per_sm)}
        return {
            **fields,
            "unroll": FMA_UNROLL,
            "chains": FMA_CHAINS,
            "programs": triton.cdiv(size(block, per_sm), block),
        }

    name = "FP32 FMA kernel"
    return _Measurement(
        lesson="01",
        name=name,
        cases=[{"block": b, "num_warps": w, "per_sm": s} for b, w, s in configs],
        inputs=inputs,
        check_inputs=lambda **x: inputs(**x, checked=True),
        providers={name: chain},
        reference=lambda x, iters, *_: fma_reference(x, iters * FMA_UNROLL),
        flops=flops,
        bytes=lambda block, num_warps, per_sm: float((FMA_CHAINS + 1) * size(block, per_sm) * 4),
        shape=lambda block, num_warps, per_sm: [FMA_CHAINS, size(block, per_sm)],
        label=lambda block, num_warps, per_sm: f", block {block}, {num_warps} warps",
        params=schedule,
        kernels={name: fma_kernel},
        **_timing(),
    )


# ----------------------------------------------------------------------------------------------------------------
# measuring: one microbenchmark, or every ceiling


def measure_hbm(n: int | None = None) -> list[bench.Result]:
    """The HBM ceiling: lesson 0's copy kernel on ``n`` fp32 elements (1 GiB on a GPU), and torch's copy_ as peer;
    both checked (exact) before either is timed."""
    return bench.run(_hbm_benchmark(n))


def measure_cache(level: str, sizes=None, bytes_to_read=None, programs=None, block: int = 4096) -> list[bench.Result]:
    """Read bandwidth of a working set held by ``level``: 'L2' (:func:`gpulab.roofline.l2_sweep`, L1 bypassed) or
    'L1' (lesson 0's :func:`gpulab.memory.working_set_sweep`). One record per working-set size (``sizes`` in bytes,
    multiples of 4); the ceiling is the best. None for ``sizes``, ``bytes_to_read`` or ``programs``: the defaults."""
    return bench.run(_cache_benchmark(level, sizes, bytes_to_read, programs, block))


def measure_matmul(roof: str, shapes=None, sets: int = 2, peer: bool = False, seed: int = 0) -> list[bench.Result]:
    """``torch.matmul`` for a compute roof ('bf16', 'fp16', 'tf32': candidates for its ceiling; 'fp32': IEEE fp32,
    a comparison for the FMA ceiling). Random inputs (never zeros), ``sets`` of them rotated, each shape checked
    against a float64 product of its first rows before it is timed. ``peer=True`` tags the records as the peer of
    the ceiling instead of candidates."""
    return bench.run(_matmul_benchmark(roof, shapes, sets, peer, seed))


def measure_fma(configs=None) -> list[bench.Result]:
    """The FP32 FMA ceiling: :func:`fma_kernel` in a few launch configurations ``(block, num_warps, programs per
    SM)``, each checked step by step against float64 before any is timed. ``programs per SM`` None: a few programs
    with a ragged last block (the CPU default)."""
    return bench.run(_fma_benchmark(configs))


def benchmarks() -> list[bench.Benchmark]:
    """Every ceiling's benchmark, as :func:`measure_ceilings` runs them (tiny ones on CPU): HBM with its peer, L2,
    L1, the tensor-core products (bf16, its peer at 8192^3, fp16, tf32), IEEE fp32 matmul, the FP32 FMA kernel."""
    one = runtime.pick(cpu=[(96, 80, 112)], gpu=[(8192,) * 3])
    return [
        _hbm_benchmark(),
        _cache_benchmark("L2"),
        _cache_benchmark("L1"),
        _matmul_benchmark("bf16"),
        _matmul_benchmark("bf16", shapes=one, peer=True, seed=1),
        _matmul_benchmark("fp16"),
        _matmul_benchmark("tf32"),
        _matmul_benchmark("fp32", shapes=one),
        _fma_benchmark(),
    ]


def measure_ceilings(progress=None) -> Ceilings:
    """Measure every ceiling of this machine (on CPU: tiny interpreter runs, labelled as such): every provider of
    :func:`benchmarks` is checked against its float64 reference before any is timed.

    Returns a :class:`Ceilings` whose ``records`` hold every measurement, in the :class:`gpulab.bench.Result`
    format; the best record of each ceiling carries ``vs_spec`` (and ``vs_peer`` where there is a peer).
    """
    result = Ceilings.from_results(bench.run(benchmarks(), progress=check_progress(progress)))
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
