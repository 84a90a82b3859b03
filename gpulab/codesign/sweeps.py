"""Lesson 2, the measurements: each shape effect swept on the GPU, with the model's prediction attached to every result.

What you will learn here:
- to measure alignment (:func:`sweep_k`: K around 4096), the head dimension of attention scores
  (:func:`sweep_head_dim`) and wave quantization (:func:`sweep_waves`: cuBLAS beside the fixed-tile Triton kernel);
- to check every GEMM against a float64 product before any is timed, with its output poisoned first (each sweep is
  a :class:`gpulab.bench.Benchmark`: its x values are the cases, torch and Triton its providers);
- to judge the model by whether it orders the measured times (:func:`pair_agreement`), not by absolute error.

On CPU the sweeps run at tiny sizes (torch's CPU matmul and the Triton interpreter): the timings say nothing about the
GPU, but every line of the code runs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

import torch

from gpulab import bench, dtypes, hardware, runtime
from gpulab.check import assert_close, poisoned
from gpulab.codesign.gemm_model import dtype_key, gemm_time
from gpulab.codesign.matmul import TRITON_CPU_CONFIG, TRITON_GPU_CONFIG, matmul_fixed_tile, matmul_fixed_tile_kernel

__all__ = ["sweep_k", "sweep_head_dim", "sweep_waves", "pair_agreement", "format_agreement"]

# ----------------------------------------------------------------------------------------------------------------
# Arguments: None means the mode's default; anything given is validated, never silently replaced.


def _size(name: str, value, cpu: int, gpu: int) -> int:
    """A size argument: the mode's default when None, else a positive integer (0, -1, 2.5 and True are refused)."""
    return runtime.pick(cpu=cpu, gpu=gpu) if value is None else runtime.positive_int(name, value)


def _sizes(name: str, values, default) -> list[int]:
    """A list of sizes: ``default`` when None, else a non-empty iterable of positive integers."""
    if values is None:
        return list(default)
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise runtime.ArgumentTypeError(
            f"{name} must be a list of positive integers or None (the default sizes), got {values!r}; "
            f"e.g. {name}=[64, 128]."
        )
    values = [runtime.positive_int(f"{name}[{i}]", v) for i, v in enumerate(values)]
    if not values:
        raise ValueError(f"{name} is empty; give at least one size, or None for the default sizes.")
    return values


def _dtype(dtype) -> torch.dtype:
    """The sweep's dtype: the lesson's default when None, else float32, float16 or bfloat16 (the model's dtypes)."""
    if dtype is None:
        return hardware.default_dtype()
    dtype = dtypes.as_dtype(dtype, "dtype")
    dtype_key(dtype)
    return dtype


def progress_wrapper(progress):
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a tqdm-like callable or None, got {type(progress).__name__}.")
    return progress or (lambda xs: xs)


# ----------------------------------------------------------------------------------------------------------------
# Inputs, references and the check


def _randn(*shape, dtype, seed):
    """Random normal data made on gpulab's device (fast for GPU-sized operands); never zeros."""
    g = torch.Generator(device=runtime.device).manual_seed(seed)
    return torch.randn(shape, generator=g, device=runtime.device, dtype=torch.float32).to(dtype)


def _rows_reference(a, b, rows=256):
    """(row indices, their float64 product): ``rows`` evenly spread rows of ``a @ b`` (the first and last included),
    computed on the same device.

    A full float64 reference of an 8192 x 8192 output would take longer than the whole sweep; spread rows still catch
    wrong tiles, ragged edges and strides (every column tile is in every row).
    """
    m = a.shape[-2]
    idx = torch.linspace(0, m - 1, min(rows, m), device=a.device).round().long().unique()
    return idx, a[idx, :].to(torch.float64) @ b.to(torch.float64)


def _check_rows(out, expected):
    """The check of every sweep: each ``(where, float64 rows)`` of the reference against ``out[where]``, at the
    tolerance of the output's dtype (outputs are poisoned first, so an unwritten element fails as NaN)."""
    for where, ref in expected:
        assert_close(out[where], ref, name="GEMM output")


def _not_checked(*inputs):
    """The reference of a sweep run with ``check=False``: nothing to compare against."""
    return None


def _own_output(run, i):
    """A provider of ``run(a, b, out)`` on the inputs ``(a, b, out_0, out_1, ...)`` writing into ``out_i``: each
    provider has its own output, so one cannot fill in what another left unwritten before the check."""
    return lambda a, b, *outs: run(a, b, outs[i])


def _impl(name: str) -> str:
    """Honest implementation labels: cuBLAS only on a GPU; the Triton kernel runs in the interpreter on CPU."""
    if name == "torch":
        return "torch.matmul (cuBLAS)" if runtime.on_gpu() else "torch.matmul (CPU)"
    return f"fixed-tile Triton {name}" + ("" if runtime.on_gpu() else " (interpreter)")


# ----------------------------------------------------------------------------------------------------------------
# Check every case, then time: one bench.Benchmark per sweep


def _measure(*, name, sweep, x_name, xs, dims, inputs, reference, shape, providers, dtype, spec, progress, check,
             kernels=None):  # fmt: skip
    """Sweep ``xs`` as one :class:`gpulab.bench.Benchmark` (every provider of every x checked against the float64
    rows of :func:`_rows_reference` before anything is timed) and return its records.

    ``dims(x)`` is the GEMM ``(m, n, k, batch)`` of one x, ``shape(x)`` its record's shape; ``inputs(x)`` makes the
    operands and a poisoned output per provider, ``reference(*inputs)`` the float64 rows to compare with;
    ``providers`` maps an implementation's label to ``(fn, tile)``: its function of the inputs and the tile the model
    assumes for it (None: cuBLAS's choice).
    Each record carries what lesson 2's readers use: ``case`` ``"<name>, <impl>"`` (one line per implementation),
    ``params``: ``sweep``, ``x``, ``x_name``, ``impl``, the model's prediction for the implementation's tile
    (``predicted_ms``, ``predicted_tflops``, ... of :func:`gemm_time`), and, on a GPU, the Triton kernel's shared
    memory and warps beside its registers.
    """

    def predict(x, tile=None):
        m, n, k, batch = dims(x)
        return gemm_time(m, n, k, dtype=dtype, gpu=spec, batch=batch, tile=tile)

    b = bench.Benchmark(
        lesson="02",
        name=name,
        cases=[{"x": x} for x in xs],
        inputs=inputs,
        providers={impl: fn for impl, (fn, _) in providers.items()},
        reference=reference if check else _not_checked,
        check=_check_rows if check else lambda out, expected: {"check": "not checked"},
        flops=lambda x: predict(x).flops,
        bytes=lambda x: predict(x).bytes,
        dtype=dtype,
        shape=shape,
        params={"sweep": sweep, "x_name": x_name},
        provider_params={impl: {"impl": impl} for impl in providers},
        kernels=kernels or {},
        warmup_ms=runtime.pick(cpu=0.0, gpu=25.0),
        rep_ms=runtime.pick(cpu=5.0, gpu=100.0),
    )
    results = bench.run(b, progress)
    for r in results:
        r.case = f"{name}, {r.provider}"
        r.params.update(predict(r.params["x"], providers[r.provider][1]).params())
        if r.provider in b.kernels and r.status == "ok":
            res = bench.kernel_resources(b.kernels[r.provider])
            r.params.update({k: v for k, v in res.items() if k not in ("registers", "spills")})
    return results


# ----------------------------------------------------------------------------------------------------------------
# The sweeps


def sweep_k(ks=None, m=None, n=None, dtype=None, gpu=None, progress=None, check=True):
    """torch.matmul of ``[m, K] @ [K, n]`` for K around 4096 (GPU; around 64 on CPU): the alignment effect.

    Sizes left as None take the mode's defaults; sizes given must be positive integers. ``check`` (a bool): compare
    each output with a float64 product before anything is timed (False: ``params['check'] == 'not checked'``).
    """
    dtype = _dtype(dtype)
    m, n = _size("m", m, cpu=64, gpu=8192), _size("n", n, cpu=64, gpu=8192)
    offsets = runtime.pick(cpu=(-16, -8, -1, 0, 1, 8, 16), gpu=(-64, -32, -8, -4, -2, -1, 0, 1, 2, 4, 8, 32, 64))
    ks = _sizes("ks", ks, [runtime.pick(cpu=64, gpu=4096) + d for d in offsets])
    spec, progress, check = hardware.spec(gpu), progress_wrapper(progress), runtime.strict_bool("check", check)

    def inputs(x):
        i = ks.index(x)
        return _randn(m, x, dtype=dtype, seed=i), _randn(x, n, dtype=dtype, seed=1000 + i), poisoned(m, n, dtype=dtype)

    return _measure(
        name="K sweep",
        sweep="K",
        x_name="K (inner size)",
        xs=ks,
        dims=lambda x: (m, n, x, 1),
        inputs=inputs,
        reference=lambda a, b, c: [_rows_reference(a, b)],
        shape=lambda x: [m, n, x],
        providers={_impl("torch"): (lambda a, b, c: torch.mm(a, b, out=c), None)},
        dtype=dtype,
        spec=spec,
        progress=progress,
        check=check,
    )


def sweep_head_dim(head_dims=None, batch_heads=None, seq=None, dtype=None, gpu=None, progress=None, check=True):
    """Batched attention scores ``Q @ K^T`` for head dimensions 60..128: ``batch_heads`` GEMMs of ``seq x seq x d``.

    Sizes left as None take the mode's defaults; sizes given must be positive integers. The first, middle and last
    head are checked against float64.
    """
    dtype = _dtype(dtype)
    bh = _size("batch_heads", batch_heads, cpu=2, gpu=256)
    s = _size("seq", seq, cpu=32, gpu=2048)
    head_dims = _sizes("head_dims", head_dims, (60, 64, 72, 80, 96, 100, 128))
    spec, progress, check = hardware.spec(gpu), progress_wrapper(progress), runtime.strict_bool("check", check)

    def inputs(x):
        i = head_dims.index(x)
        q, k = _randn(bh, s, x, dtype=dtype, seed=i), _randn(bh, s, x, dtype=dtype, seed=1000 + i)
        return q, k, poisoned(bh, s, s, dtype=dtype)

    def reference(q, k, scores):  # spread rows of the first, middle and last head
        expected = []
        for j in sorted({0, bh // 2, bh - 1}):
            rows, ref = _rows_reference(q[j], k[j].t())
            expected.append(((j, rows), ref))
        return expected

    return _measure(
        name="head dim sweep",
        sweep="head dim",
        x_name="head dimension d (K of Q K^T)",
        xs=head_dims,
        dims=lambda x: (s, s, x, bh),
        inputs=inputs,
        reference=reference,
        shape=lambda x: [bh, s, s, x],
        providers={_impl("torch"): (lambda q, k, out: torch.bmm(q, k.transpose(1, 2), out=out), None)},
        dtype=dtype,
        spec=spec,
        progress=progress,
        check=check,
    )


def sweep_waves(ns=None, m=None, k=None, dtype=None, gpu=None, progress=None, check=True, impls=("torch", "triton")):
    """``[m, k] @ [k, N]`` for N across wave boundaries, with torch.matmul and the fixed-tile Triton kernel as two
    providers of each N (each writing its own output).

    Sizes left as None take the mode's defaults; sizes given must be positive integers. ``impls``: a tuple naming
    'torch' and/or 'triton'.
    """
    dtype = _dtype(dtype)
    m, k = _size("m", m, cpu=32, gpu=1536), _size("k", k, cpu=32, gpu=4096)
    ns = _sizes("ns", ns, runtime.pick(cpu=range(16, 129, 16), gpu=range(1024, 8448 + 1, 128)))
    if isinstance(impls, str) or not isinstance(impls, Iterable):
        raise runtime.ArgumentTypeError(f"impls must be a tuple of names, got {impls!r}; e.g. impls=('triton',).")
    impls = tuple(runtime.one_of(f"impls[{i}]", impl, ("torch", "triton")) for i, impl in enumerate(impls))
    if not impls:
        raise ValueError("impls is empty; name 'torch' and/or 'triton'.")
    if "triton" in impls:
        hardware.require_dtype("dtype", dtype)  # the Triton kernel's dtypes here (no bf16 in the interpreter)
    spec, progress, check = hardware.spec(gpu), progress_wrapper(progress), runtime.strict_bool("check", check)
    cfg = runtime.pick(cpu=TRITON_CPU_CONFIG, gpu=TRITON_GPU_CONFIG)
    tile = (cfg["block_m"], cfg["block_n"])
    triton_impl = _impl(f"{tile[0]}x{tile[1]}")
    runs = {  # implementation: (label, run(a, b, out), the tile the model assumes: None is cuBLAS's choice)
        "torch": (_impl("torch"), lambda a, b, c: torch.mm(a, b, out=c), None),
        "triton": (triton_impl, lambda a, b, c: matmul_fixed_tile(a, b, c, **cfg), tile),
    }
    a = _randn(m, k, dtype=dtype, seed=7)

    def inputs(x):
        return a, _randn(k, x, dtype=dtype, seed=2000 + ns.index(x)), *(poisoned(m, x, dtype=dtype) for _ in impls)

    return _measure(
        name="wave sweep",
        sweep="N (waves)",
        x_name="N (output columns)",
        xs=ns,
        dims=lambda x: (m, x, k, 1),
        inputs=inputs,
        reference=lambda a, b, *outs: [_rows_reference(a, b)],
        shape=lambda x: [m, x, k],
        providers={runs[impl][0]: (_own_output(runs[impl][1], i), runs[impl][2]) for i, impl in enumerate(impls)},
        dtype=dtype,
        spec=spec,
        progress=progress,
        check=check,
        kernels={triton_impl: matmul_fixed_tile_kernel},
    )


def as_results(results) -> list:
    """``results`` as a list of :class:`gpulab.bench.Result`; a TypeError naming the first item that is not one."""
    return bench.result_list("results", results, allow_empty=True)


def pair_agreement(results, threshold: float = 0.10) -> dict:
    """Does the model order the measured times? Within each sweep (and implementation), take every pair of results
    whose measured times differ by more than ``threshold`` (slower / faster > 1.1) and check that the model's
    predicted times order them the same way. A pair the model predicts as a tie counts as not ordered.

    Returns ``{"fraction", "agree", "pairs", "ties", "threshold", "by_sweep": {label: {...}}, "misses": [...]}``;
    ``fraction`` is NaN when no pair differs by more than the threshold.
    """
    threshold = runtime.finite_float("threshold", threshold, minimum=0)
    results = as_results(results)
    groups: dict = {}
    for r in results:
        if "predicted_ms" in r.params and "sweep" in r.params:
            groups.setdefault(f"{r.params['sweep']} | {r.params.get('impl', r.case)}", []).append(r)
    total = agree = ties = 0
    by_sweep, misses = {}, []
    for label, rs in groups.items():
        rs = sorted(rs, key=lambda r: r.params.get("x", 0))
        g_pairs = g_agree = 0
        for r1, r2 in itertools.combinations(rs, 2):
            m1, m2 = r1.ms, r2.ms
            if not (math.isfinite(m1) and math.isfinite(m2)) or min(m1, m2) <= 0:
                continue
            if max(m1, m2) / min(m1, m2) <= 1 + threshold:
                continue
            p1, p2 = r1.params["predicted_ms"], r2.params["predicted_ms"]
            g_pairs += 1
            pred_sign = 0 if abs(p1 - p2) <= 1e-9 * max(p1, p2) else (1 if p2 > p1 else -1)
            if pred_sign == (1 if m2 > m1 else -1):
                g_agree += 1
            else:
                ties += pred_sign == 0
                misses.append(
                    {
                        "sweep": label,
                        "x": (r1.params.get("x"), r2.params.get("x")),
                        "measured_ms": (m1, m2),
                        "predicted_ms": (p1, p2),
                    }
                )
        by_sweep[label] = {
            "agree": g_agree,
            "pairs": g_pairs,
            "fraction": g_agree / g_pairs if g_pairs else math.nan,
        }
        total += g_pairs
        agree += g_agree
    return {
        "fraction": agree / total if total else math.nan,
        "agree": agree,
        "pairs": total,
        "ties": ties,
        "threshold": threshold,
        "by_sweep": by_sweep,
        "misses": misses,
    }


def format_agreement(agreement: dict, target: float = 0.9) -> str:
    """The pair agreement (the dict :func:`pair_agreement` returns) as text: overall, per sweep, and against
    ``target`` (a fraction in [0, 1])."""
    target = runtime.finite_float("target", target, minimum=0, maximum=1)
    keys = ("fraction", "agree", "pairs", "ties", "threshold", "by_sweep")
    if not isinstance(agreement, dict) or any(key not in agreement for key in keys):
        raise TypeError(
            f"agreement must be the dict pair_agreement(results) returns (keys {', '.join(keys)}), "
            f"got {type(agreement).__name__}."
        )
    f = agreement["fraction"]
    verdict = "no pairs to compare" if math.isnan(f) else ("meets" if f >= target else "MISSES")
    lines = [
        f"model orders {agreement['agree']} of {agreement['pairs']} pairs correctly "
        f"({f:.0%}; pairs whose measured times differ by > {agreement['threshold']:.0%}); "
        f"{verdict} the {target:.0%} target"
        + (f"; {agreement['ties']} pairs predicted as ties" if agreement["ties"] else "")
    ]
    for label, g in agreement["by_sweep"].items():
        frac = "-" if math.isnan(g["fraction"]) else f"{g['fraction']:.0%}"
        lines.append(f"  {label:48s} {g['agree']:4d} / {g['pairs']:4d}  {frac}")
    return "\n".join(lines)
