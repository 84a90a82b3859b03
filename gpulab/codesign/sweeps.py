"""Lesson 2, the measurements: each shape effect swept on the GPU, with the model's prediction attached to every result.

What you will learn here:
- to measure alignment (:func:`sweep_k`: K around 4096), the head dimension of attention scores
  (:func:`sweep_head_dim`) and wave quantization (:func:`sweep_waves`: cuBLAS beside the fixed-tile Triton kernel);
- to check every GEMM against a float64 product before timing it, with its output poisoned first;
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
from gpulab.check import assert_close, new_output, poison_
from gpulab.codesign.gemm_model import _dtype_key, gemm_time
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
        return dtypes.default_dtype()
    dtype = runtime.as_dtype(dtype, "dtype")
    _dtype_key(dtype)
    return dtype


def _progress(progress):
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a tqdm-like callable or None, got {type(progress).__name__}.")
    return progress or (lambda xs: xs)


# ----------------------------------------------------------------------------------------------------------------
# Check, then time


def _randn(*shape, dtype, seed):
    """Random normal data made on gpulab's device (fast for GPU-sized operands); never zeros."""
    g = torch.Generator(device=runtime.device).manual_seed(seed)
    return torch.randn(shape, generator=g, device=runtime.device, dtype=torch.float32).to(dtype)


def _check_rows(out, a, b, dtype, context, rows=256):
    """Compare ``rows`` evenly spread rows of ``out`` (all their columns, the first and last row included) with a
    float64 product computed on the same device.

    A full float64 reference of an 8192 x 8192 output would take longer than the whole sweep; spread rows still catch
    wrong tiles, ragged edges and strides (every column tile is in every row).
    """
    m = out.shape[-2]
    idx = torch.linspace(0, m - 1, min(rows, m), device=out.device).round().long().unique()
    ref = a[idx, :].to(torch.float64) @ b.to(torch.float64)
    assert_close(out[idx, :], ref, dtype=dtype, name="GEMM output", context=context)


def _impl(name: str) -> str:
    """Honest implementation labels: cuBLAS only on a GPU; the Triton kernel runs in the interpreter on CPU."""
    if name == "torch":
        return "torch.matmul (cuBLAS)" if runtime.on_gpu() else "torch.matmul (CPU)"
    return f"fixed-tile Triton {name}" + ("" if runtime.on_gpu() else " (interpreter)")


def _timing():
    return dict(warmup_ms=runtime.pick(cpu=0, gpu=25), rep_ms=runtime.pick(cpu=5, gpu=100))


# ----------------------------------------------------------------------------------------------------------------
# The sweeps


def sweep_k(ks=None, m=None, n=None, dtype=None, gpu=None, progress=None, check=True):
    """torch.matmul of ``[m, K] @ [K, n]`` for K around 4096 (GPU; around 64 on CPU): the alignment effect.

    Sizes left as None take the mode's defaults; sizes given must be positive integers. ``check`` (a bool): compare
    each output with a float64 product before timing it.
    """
    dtype = _dtype(dtype)
    m, n = _size("m", m, cpu=64, gpu=8192), _size("n", n, cpu=64, gpu=8192)
    offsets = runtime.pick(cpu=(-16, -8, -1, 0, 1, 8, 16), gpu=(-64, -32, -8, -4, -2, -1, 0, 1, 2, 4, 8, 32, 64))
    ks = _sizes("ks", ks, [runtime.pick(cpu=64, gpu=4096) + d for d in offsets])
    spec, progress, check = hardware.spec(gpu), _progress(progress), runtime.strict_bool("check", check)
    results = []
    for i, k in enumerate(progress(ks)):
        a, b = _randn(m, k, dtype=dtype, seed=i), _randn(k, n, dtype=dtype, seed=1000 + i)
        c = new_output(m, n, dtype=dtype)
        run = lambda a=a, b=b, c=c: torch.mm(a, b, out=c)
        if check:
            poison_(c)  # also in timed runs: an element the GEMM never writes shows up as NaN
            _check_rows(run(), a, b, dtype, f"K sweep, {m} x {n} x {k}")
        pred = gemm_time(m, n, k, dtype=dtype, gpu=spec, tile=None)
        results.append(
            bench.measure(
                run,
                lesson="02",
                case=f"K sweep, {_impl('torch')}",
                flops=pred.flops,
                bytes=pred.bytes,
                dtype=dtype,
                shape=[m, n, k],
                impl=_impl("torch"),
                sweep="K",
                x=k,
                x_name="K (inner size)",
                **_timing(),
                **pred.params(),
            )
        )
        del a, b, c
    return results


def sweep_head_dim(head_dims=None, batch_heads=None, seq=None, dtype=None, gpu=None, progress=None, check=True):
    """Batched attention scores ``Q @ K^T`` for head dimensions 60..128: ``batch_heads`` GEMMs of ``seq x seq x d``.

    Sizes left as None take the mode's defaults; sizes given must be positive integers.
    """
    dtype = _dtype(dtype)
    bh = _size("batch_heads", batch_heads, cpu=2, gpu=256)
    s = _size("seq", seq, cpu=32, gpu=2048)
    head_dims = _sizes("head_dims", head_dims, (60, 64, 72, 80, 96, 100, 128))
    spec, progress, check = hardware.spec(gpu), _progress(progress), runtime.strict_bool("check", check)
    results = []
    for i, d in enumerate(progress(head_dims)):
        q, k = _randn(bh, s, d, dtype=dtype, seed=i), _randn(bh, s, d, dtype=dtype, seed=1000 + i)
        scores = new_output(bh, s, s, dtype=dtype)
        run = lambda q=q, k=k, out=scores: torch.bmm(q, k.transpose(1, 2), out=out)
        if check:
            poison_(scores)
            run()
            for j in sorted({0, bh // 2, bh - 1}):
                _check_rows(scores[j], q[j], k[j].t(), dtype, f"Q K^T, head {j}, d = {d}")
        pred = gemm_time(s, s, d, dtype=dtype, gpu=spec, batch=bh, tile=None)
        results.append(
            bench.measure(
                run,
                lesson="02",
                case=f"head dim sweep, {_impl('torch')}",
                flops=pred.flops,
                bytes=pred.bytes,
                dtype=dtype,
                shape=[bh, s, s, d],
                impl=_impl("torch"),
                sweep="head dim",
                x=d,
                x_name="head dimension d (K of Q K^T)",
                **_timing(),
                **pred.params(),
            )
        )
        del q, k, scores
    return results


def sweep_waves(ns=None, m=None, k=None, dtype=None, gpu=None, progress=None, check=True, impls=("torch", "triton")):
    """``[m, k] @ [k, N]`` for N across wave boundaries, with torch.matmul and the fixed-tile Triton kernel.

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
        dtypes.require_dtype("dtype", dtype)  # the Triton kernel's dtypes here (no bf16 in the interpreter)
    spec, progress, check = hardware.spec(gpu), _progress(progress), runtime.strict_bool("check", check)
    cfg = runtime.pick(cpu=TRITON_CPU_CONFIG, gpu=TRITON_GPU_CONFIG)
    tile = (cfg["block_m"], cfg["block_n"])
    a = _randn(m, k, dtype=dtype, seed=7)
    results = []
    for i, n in enumerate(progress(ns)):
        b = _randn(k, n, dtype=dtype, seed=2000 + i)
        c = new_output(m, n, dtype=dtype)
        for impl in impls:
            if impl == "torch":
                run = lambda b=b, c=c: torch.mm(a, b, out=c)
                pred, impl_label, kernel = gemm_time(m, n, k, dtype=dtype, gpu=spec, tile=None), _impl("torch"), None
            else:
                run = lambda b=b, c=c: matmul_fixed_tile(a, b, c, **cfg)
                pred = gemm_time(m, n, k, dtype=dtype, gpu=spec, tile=tile)
                impl_label, kernel = _impl(f"{tile[0]}x{tile[1]}"), matmul_fixed_tile_kernel
            if check:
                poison_(c)  # also in timed runs: an unwritten tile shows up as NaN
                _check_rows(run(), a, b, dtype, f"{impl_label}, {m} x {n} x {k}")
            results.append(
                bench.measure(
                    run,
                    lesson="02",
                    case=f"wave sweep, {impl_label}",
                    impl=impl_label,
                    flops=pred.flops,
                    bytes=pred.bytes,
                    dtype=dtype,
                    shape=[m, n, k],
                    kernel=kernel,
                    sweep="N (waves)",
                    x=n,
                    x_name="N (output columns)",
                    **_timing(),
                    **pred.params(),
                )
            )
        del b, c
    return results


def _results(results) -> list:
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
    results = _results(results)
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
