"""Lesson 4's named benchmark parts on Hopper: version 2 of the forward tuned and timed beside version 1 and SDPA's
backends, the CS336 leaderboard problem, and the one-pass backward's tiles.

- ``python -m gpulab bench 05 hopper`` (:func:`hopper`), records under ``benchmarks/05_attention_hopper/hopper/``:

  1. ``kind='sweep'``: version 2's candidate configs (:data:`CANDIDATES`) at head dims 64 and 128, causal and not,
     N 4k and 16k (16k tokens), forward; a config that fails to compile, run or match is recorded as such
     (``params['check']``). ``kind='choice'``: the fastest per (head dim, causal) by geometric mean over the lengths,
     which the grid then runs (the committed choice is :data:`gpulab.attention.configs.PREFERRED_V2`).
  2. ``kind='throughput'``: lesson 4's 24 problems (:func:`gpulab.attention.measure.benchmark.grid`), forward and
     forward+backward, ``impl`` ``gpulab v1``, ``gpulab v2``, ``SDPA default``, ``SDPA FlashAttention-2`` and, with
     the backward, :data:`~gpulab.attention.measure.report.SHIPPED` (version 2's forward, version 1's backward kernels).
  3. ``kind='tiny'``: B 1, H 1, N 128 and 1024, d 64, causal forward: the host floor on the wall clock.

- ``python -m gpulab bench 05 cs336`` (:func:`cs336`), under ``hopper/cs336/``: the CS336 (2025) assignment-2
  leaderboard problem (B 1, N 16k, 16 heads of 64, bf16, causal, forward+backward), also timed with
  ``triton.testing.do_bench`` as the leaderboard does (``params['do_bench_ms']``).
- ``python -m gpulab bench 05 fused`` (:func:`fused`), under ``hopper/fused/``: the one-pass backward (version 1's
  one-pass experiment, :func:`gpulab.attention.experiments.v1_backward_fused.fused_backward`) at each candidate tile
  against the two-kernel backward, backward only
  (``kind='fused sweep'``, ``'two kernels'``, ``'fused choice'``).

Every provider is checked against its reference (SDPA's math backend in fp32; for the one-pass backward, the two
kernels) before anything is timed, by :func:`gpulab.bench.run`, on both clocks. :mod:`gpulab.attention.measure.report`
reads the records. On CPU each part runs a tiny version in the interpreter (float16: the interpreter computes bf16
wrongly).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import os

import torch
from torch.nn.attention import SDPBackend

from gpulab import bench, check, runtime
from gpulab.attention import plan as attention_plan
from gpulab.attention import sm90
from gpulab.attention.configs import PREFERRED_V2, AttentionConfig, HopperConfig, hopper_config
from gpulab.attention.experiments.v1_backward_fused import fused_backward
from gpulab.attention.function import FlashAttentionFunction
from gpulab.attention.measure.benchmark import check_output, grid, math_reference, one_direction, problem_inputs, sdpa
from gpulab.attention.plan import (
    attention_forward,
    backward_kind,
    backward_plan,
    forward_plan,
    run_backward,
    run_forward,
    two_kernel_backward,
)

__all__ = ["hopper", "cs336", "fused", "CANDIDATES", "FUSED_CANDIDATES", "IMPLS", "V1_BACKWARD"]

CANDIDATES = [  # (block_m, block_n, num_warps, num_stages, warp_specialize, persistent)
    HopperConfig(64, 64, 4, 3, False, False),
    HopperConfig(64, 64, 4, 2, False, False),
    HopperConfig(64, 128, 4, 2, False, False),
    HopperConfig(64, 128, 4, 3, False, False),
    HopperConfig(128, 64, 4, 2, False, False),
    HopperConfig(128, 64, 4, 3, False, False),
    HopperConfig(128, 128, 4, 2, False, False),
    HopperConfig(128, 64, 8, 3, False, False),
    HopperConfig(128, 64, 4, 2, True, False),  # warp-specialized: recorded to show Triton 3.6's race on sm_90
]
"""Version 2's configs the ``hopper`` part sweeps on a GPU."""
FUSED_CANDIDATES = {  # (block_m, block_n, warps, stages) per padded head dim
    64: [(64, 128, 8, 2), (64, 128, 8, 3), (32, 128, 4, 2), (64, 64, 4, 2), (64, 64, 4, 3), (128, 128, 8, 2),
         (32, 64, 4, 2), (128, 64, 8, 2), (64, 128, 4, 2)],
    128: [(64, 128, 8, 2), (64, 128, 8, 1), (32, 128, 8, 2), (64, 64, 4, 2), (64, 64, 8, 2), (32, 64, 4, 2),
          (128, 64, 8, 2), (32, 128, 4, 2)],
}  # fmt: skip
"""The one-pass backward's tiles the ``fused`` part sweeps on a GPU."""
SWEEP_TOLERANCE = 2e-2  # the sweep's check (bf16 outputs against fp32 math)
FUSED_TOLERANCE = 1e-2  # the one-pass backward's gradients against the two kernels'


def _dtype():
    return runtime.pick(cpu=torch.float16, gpu=torch.bfloat16)


def _flops(batch, heads, seq, head_dim, causal, direction, **_):
    return bench.attention_flops(batch, heads, seq, seq, head_dim, causal=causal, backward=direction != "forward")


def _label(dtype, batch, heads, seq, head_dim, causal, direction):
    return f"d{head_dim} N{seq}{' causal' if causal else ''} {direction}"


def _problem(d, n, causal, direction, tokens, heads=None):
    return dict(dtype=_dtype(), batch=max(1, tokens // n), heads=heads or 1024 // d, seq=n, head_dim=d,
                causal=causal, direction=direction)  # fmt: skip


# ----------------------------------------------------------------------------------------------------- providers
def _v2_config(cfg):
    def run(q, k, v, causal):
        return run_forward(forward_plan(q, k, v, causal, None, False, cfg, 2), q, k, v)[0]

    return run


def _gpulab_v1_backward(version):
    """Version ``version``'s forward with version 1's two backward kernels: a copy of the cached plan holding them as
    its backward, so that the backward kernels each plan keeps (``plan.backward``) do not mix."""
    own = {}

    def run(q, k, v, causal):
        plan = forward_plan(q, k, v, causal, None, False, None, version)
        if not (torch.is_grad_enabled() and q.requires_grad):
            return run_forward(plan, q, k, v)[0]
        mine = own.get(id(plan))
        if mine is None:
            mine = own[id(plan)] = copy.copy(plan)
            mine.backward = two_kernel_backward(mine)
        return FlashAttentionFunction.apply(q, k, v, causal, None, False, False, mine)

    run.plans = own
    return run


def _gpulab(version):
    def run(q, k, v, causal):
        plan = forward_plan(q, k, v, causal, None, False, None, version)
        if torch.is_grad_enabled() and q.requires_grad:
            return FlashAttentionFunction.apply(q, k, v, causal, None, False, False, plan)
        return run_forward(plan, q, k, v)[0]

    return run


V1_BACKWARD = "gpulab v2 fwd + v1 bwd"
"""Forward+backward only: version 2's forward with version 1's two backward kernels."""


IMPLS = ("gpulab v1", "gpulab v2", "SDPA default", "SDPA FlashAttention-2")


def _implementations() -> dict:
    """``impl`` -> provider: ``gpulab v1`` and :data:`V1_BACKWARD` take version 1's two backward kernels (not the
    plan's choice, which may be version 3's); ``gpulab v2`` the library's choice."""
    return {"gpulab v1": _gpulab_v1_backward(1), "gpulab v2": _gpulab(2), "SDPA default": sdpa(None),
            "SDPA FlashAttention-2": sdpa(SDPBackend.FLASH_ATTENTION), V1_BACKWARD: _gpulab_v1_backward(2)}  # fmt: skip


def _skip(provider, dtype, batch, heads, seq, head_dim, causal, direction):
    if provider == "SDPA FlashAttention-2" and not runtime.on_gpu():
        return "SDPA's FlashAttention backend needs a GPU"
    return None


def _backward_name(impls, r) -> str | None:
    """Which backward ``r``'s implementation ran on its problem: its plan's launches (built by the timed calls)."""
    p = r.params
    q = torch.empty(p["batch"], p["heads"], p["seq"], p["head_dim"], dtype=getattr(torch, r.dtype),
                    device=runtime.device)  # fmt: skip
    plan = forward_plan(q, q, q, p["causal"], None, False, None, 1 if p["impl"] == "gpulab v1" else 2)
    if p["impl"] in ("gpulab v1", V1_BACKWARD):
        plan = impls[p["impl"]].plans.get(id(plan), plan)
    return backward_kind(plan)


def _check_inputs(**x):
    return problem_inputs(**x, check=True)


def _comparison(name, problems, kind, impls) -> bench.Benchmark:
    """``impls`` on ``problems`` (dicts like :func:`_problem`'s), checked against SDPA's math backend in fp32."""
    return bench.Benchmark(
        lesson="05", name=name, cases=problems, inputs=problem_inputs, check_inputs=_check_inputs,
        providers={n: one_direction(fn) for n, fn in impls.items()},
        provider_params={n: {"kind": kind, "impl": n} for n in impls}, reference=math_reference, check=check_output,
        on_mismatch="record", skip=_skip, flops=_flops, label=_label,
    )  # fmt: skip


def _annotate(results, impls) -> list[bench.Result]:
    for r in results:
        if r.params.get("impl", "").startswith("gpulab v2"):
            r.params["config"] = dataclasses.asdict(hopper_config(r.params["head_dim"], r.params["causal"]))
        if r.status == "ok" and r.params["direction"] != "forward" and r.params["impl"].startswith("gpulab"):
            r.params["backward"] = _backward_name(impls, r)
    return results


# ---------------------------------------------------------------------------------------------------------- sweep
def _sweep_check(out, ref) -> dict:
    err = float(check.relative_error(out, ref))
    if not err <= SWEEP_TOLERANCE:
        raise AssertionError(f"relative error {err:.3g}")
    return {"rel_err": err}


def sweep(progress=None, shapes=None, seqs=None, candidates=None) -> list[bench.Result]:
    """Version 2's ``candidates`` per (head dim, heads) in ``shapes``, causal and not, at each of ``seqs`` (16k tokens
    on a GPU): ``kind='sweep'`` records, then one ``kind='choice'`` per (head dim, causal)."""
    shapes = shapes or runtime.pick(cpu=((16, 2),), gpu=((128, 8), (64, 16)))
    seqs = seqs or runtime.pick(cpu=(32, 64), gpu=(4096, 16384))
    candidates = candidates or runtime.pick(
        cpu=[HopperConfig(16, 16, 4, 2), HopperConfig(32, 16, 4, 2), HopperConfig(32, 16, 4, 2, True, False)],
        gpu=CANDIDATES,
    )
    if not isinstance(candidates, (list, tuple)) or not all(isinstance(c, HopperConfig) for c in candidates):
        raise TypeError(f"candidates must be a list of HopperConfig, got {candidates!r}.")
    tokens = runtime.pick(cpu=64, gpu=16384)
    cases = [_problem(d, n, c, "forward", tokens, h) for d, h in shapes for c in (False, True) for n in seqs]
    names = {str(dataclasses.astuple(cfg)): cfg for cfg in candidates}
    b = bench.Benchmark(
        lesson="05", name="v2 sweep", cases=cases, inputs=problem_inputs, check_inputs=_check_inputs,
        providers={n: one_direction(_v2_config(cfg)) for n, cfg in names.items()}, reference=math_reference,
        provider_params={n: {"kind": "sweep", "config": dataclasses.asdict(cfg)} for n, cfg in names.items()},
        check=_sweep_check, on_mismatch="record", flops=_flops, label=_label,
    )  # fmt: skip
    with _allow_warp_specialize():
        results = bench.run(b, progress)
    for r in results:
        if r.status != "ok":
            r.params["check"] = r.status
    return results + _choices(results, len(seqs))


@contextlib.contextmanager
def _allow_warp_specialize():
    """The sweep measures warp specialization, which the library refuses on sm_90 unless this is set."""
    saved = os.environ.get("GPULAB_ALLOW_WARP_SPECIALIZE")
    os.environ["GPULAB_ALLOW_WARP_SPECIALIZE"] = "1"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["GPULAB_ALLOW_WARP_SPECIALIZE"]
        else:
            os.environ["GPULAB_ALLOW_WARP_SPECIALIZE"] = saved


def _choices(sweep_records, n_seqs) -> list[bench.Result]:
    """Per (head dim, causal): the config fastest by geometric mean over the lengths of its time over the best one's
    (configs that ran and matched at every length only)."""
    times: dict = {}
    for r in sweep_records:
        p = r.params
        if r.status == "ok" and str(p.get("check", "")).startswith("ok") and r.ms == r.ms:
            key = (p["head_dim"], p["causal"])
            times.setdefault(key, {}).setdefault(tuple(p["config"].items()), {})[p["seq"]] = r.ms
    out = []
    for (d, causal), by_cfg in times.items():
        full = {c: t for c, t in by_cfg.items() if len(t) == n_seqs}
        if not full:
            continue
        seqs = sorted(next(iter(full.values())))
        best_each = {n: min(t[n] for t in full.values()) for n in seqs}
        score = {c: math.exp(sum(math.log(t[n] / best_each[n]) for n in seqs) / len(seqs)) for c, t in full.items()}
        best = min(score, key=score.get)
        out.append(bench.record(lesson="05", case="v2 choice", kind="choice", head_dim=d, causal=causal,
                                chosen=dict(best), scores={str(dict(c)): s for c, s in score.items()}))  # fmt: skip
    return out


# ------------------------------------------------------------------------------------------------------- the parts
def hopper(progress=None, problems=None, run_sweep: bool = True, candidates=None):
    """``python -m gpulab bench 05 hopper``: the sweep (unless ``run_sweep`` is False: the committed
    :data:`~gpulab.attention.configs.PREFERRED_V2`), the grid with the chosen configs, and the tiny problems.
    ``problems``: dicts like :func:`gpulab.attention.measure.benchmark.grid`'s (default: all 24 on a GPU, two tiny on
    CPU); ``candidates``: the sweep's configs (default :data:`CANDIDATES`; e.g. ``HopperConfig(..., overlap=True)`` ones
    to compare the hand-written one-block-ahead scores with the plain loop)."""
    run_sweep = runtime.strict_bool("run_sweep", run_sweep)
    if problems is not None and not isinstance(problems, (list, tuple)):
        raise TypeError(f"problems must be a list of dicts like grid()'s, got {type(problems).__name__}.")
    sm90.ensure_allocator()
    results = sweep(progress, candidates=candidates) if run_sweep else []
    saved = dict(PREFERRED_V2)
    for r in results:
        if r.params.get("kind") == "choice":
            key = (runtime.dot_block(r.params["head_dim"]), r.params["causal"])
            PREFERRED_V2[key] = HopperConfig(**r.params["chosen"])
    attention_plan.clear_plan_cache()
    try:
        if problems is None:
            problems = runtime.pick(
                cpu=[dict(dtype=torch.float16, batch=1, heads=2, seq=33, head_dim=16, causal=c) for c in (False, True)],
                gpu=grid(),
            )  # fmt: skip
        impls = _implementations()  # V1_BACKWARD with the backward only: its forward is gpulab v2's
        forward = _comparison(
            "hopper",
            [{**p, "direction": "forward"} for p in problems],
            "throughput",
            {n: fn for n, fn in impls.items() if n in IMPLS},
        )
        both = _comparison("hopper", [{**p, "direction": "forward+backward"} for p in problems], "throughput", impls)
        results += _annotate(bench.run([forward, both], progress), impls)
        results += tiny(progress)
    finally:
        PREFERRED_V2.clear()
        PREFERRED_V2.update(saved)
        attention_plan.clear_plan_cache()
    return results


def tiny(progress=None) -> list[bench.Result]:
    """B 1, H 1, d 64 (16 on CPU), causal forward at N 128 and 1024 (16 and 32 on CPU): ``kind='tiny'``."""
    d = runtime.pick(cpu=16, gpu=64)
    cases = [dict(dtype=_dtype(), batch=1, heads=1, seq=n, head_dim=d, causal=True, direction="forward")
             for n in runtime.pick(cpu=(16, 32), gpu=(128, 1024))]  # fmt: skip
    impls = {n: fn for n, fn in _implementations().items() if n in IMPLS}
    return bench.run(_comparison("tiny", cases, "tiny", impls), progress)


def cs336(progress=None):
    """``python -m gpulab bench 05 cs336``: the CS336 leaderboard problem (tiny on CPU), every forward+backward
    implementation; ``params['do_bench_ms']``: ``triton.testing.do_bench``'s time (on CPU: the device clock's)."""
    sm90.ensure_allocator()
    case = runtime.pick(
        cpu=dict(dtype=torch.float16, batch=1, heads=2, seq=48, head_dim=16, causal=True, direction="forward+backward"),
        gpu=dict(dtype=torch.bfloat16, batch=1, heads=16, seq=16384, head_dim=64, causal=True,
                 direction="forward+backward"),
    )  # fmt: skip
    impls = _implementations()
    b = _comparison("cs336", [case], "cs336", impls)
    results = _annotate(bench.run(b, progress), impls)
    args = b.args(case)
    for r in results:
        if r.status != "ok":
            continue
        r.params["do_bench_ms"] = r.ms
        if runtime.on_gpu():
            import triton.testing

            fn = b.providers[r.provider]
            r.params["do_bench_ms"] = triton.testing.do_bench(lambda fn=fn: fn(*args), warmup=25, rep=100)
    return results


# ------------------------------------------------------------------------------------------ the one-pass backward
def _fused_inputs(dtype, batch, heads, seq, head_dim, causal):
    q, k, v, do = (check.random_tensor(batch, heads, seq, head_dim, dtype=dtype, seed=i) for i in range(4))
    o, lse = attention_forward(q, k, v, is_causal=causal)
    return q, k, v, causal, do, o, lse


_LAUNCHES: dict = {}


def _fused_provider(tiles):
    """The backward with the two kernels (``tiles`` None) or the one-pass kernel at ``tiles`` (block_m, block_n,
    warps, stages), on the plan of the inputs' signature (its launches built once per plan)."""

    def run(q, k, v, causal, do, o, lse):
        plan = backward_plan(do, q, k, v, o, lse, causal, None, False, None)
        key = (id(plan), tiles)
        if key not in _LAUNCHES:
            if tiles is None:
                _LAUNCHES[key] = two_kernel_backward(plan)
            else:
                bm, bn, w, st = tiles
                cfg = AttentionConfig(block_m=bm, block_n=bn, block_d=q.shape[-1], num_warps=w, num_stages=st)
                _LAUNCHES[key] = fused_backward(plan, cfg)
        return run_backward(plan, do, q, k, v, o, lse, launches=_LAUNCHES[key])

    return run


def _fused_check(out, ref) -> dict:
    err = max(float(check.relative_error(a, b)) for a, b in zip(out, ref))
    if not err < FUSED_TOLERANCE:
        raise AssertionError(f"relative error {err:.3g} against the two kernels")
    return {"rel_err": err}


TWO_KERNELS = "two kernels"


def fused(progress=None, shapes=None, seqs=None, candidates=None):
    """``python -m gpulab bench 05 fused``: the one-pass backward's ``candidates`` (per head dim) against the two
    kernels, backward only, per (head dim, heads) of ``shapes``, N in ``seqs`` (16k tokens on a GPU), causal and
    not; then per head dim the tiles fastest by geometric mean of their time over the two kernels'."""
    shapes = shapes or runtime.pick(cpu=((16, 2),), gpu=((64, 16), (128, 8)))
    seqs = seqs or runtime.pick(cpu=(32,), gpu=(4096, 16384))
    candidates = candidates or runtime.pick(cpu={16: [(16, 16, 4, 1), (32, 16, 4, 1)]}, gpu=FUSED_CANDIDATES)
    tokens = runtime.pick(cpu=32, gpu=16384)
    results = []
    for d, h in shapes:
        cases = [dict(dtype=_dtype(), batch=max(1, tokens // n), heads=h, seq=n, head_dim=d, causal=c)
                 for n in seqs for c in (False, True)]  # fmt: skip
        providers = {TWO_KERNELS: _fused_provider(None), **{str(t): _fused_provider(t) for t in candidates[d]}}
        params = {str(t): {"kind": "fused sweep", "tiles": list(t)} for t in candidates[d]}
        b = bench.Benchmark(
            lesson="05", name="fused sweep", cases=cases, inputs=_fused_inputs, providers=providers,
            reference=TWO_KERNELS, check=_fused_check, on_mismatch="record",
            label=lambda dtype, batch, heads, seq, head_dim, causal: _label(dtype, batch, heads, seq, head_dim, causal,
                                                                            "backward"),
            provider_params={TWO_KERNELS: {"kind": "two kernels"}, **params},
            flops=lambda batch, heads, seq, head_dim, causal, **_: bench.attention_flops(
                batch, heads, seq, seq, head_dim, causal=causal, backward=True
            ) - bench.attention_flops(batch, heads, seq, seq, head_dim, causal=causal),
        )  # fmt: skip
        recs = bench.run(b, progress)
        results += recs + _fused_choice(recs, d, len(cases))
    _LAUNCHES.clear()
    return results


def _fused_choice(records, d, n_cases) -> list[bench.Result]:
    """Each swept record's ``config`` and ``vs_two_kernels``; the head dim's ``kind='fused choice'`` record."""
    two = {r.case: r for r in records if r.params["kind"] == "two kernels"}
    ratios: dict = {}
    for r in records:
        p = r.params
        if p["kind"] != "fused sweep":
            continue
        bm, bn, w, st = p["tiles"]
        p["config"] = dict(block_m=bm, block_n=bn, block_d=d, num_warps=w, num_stages=st)
        if r.status != "ok":
            p["check"] = r.status
        base = two.get(r.case)
        if r.status == "ok" and p.get("check") == "ok" and base is not None and base.ms and r.ms:
            p["vs_two_kernels"] = base.ms / r.ms
            ratios.setdefault(tuple(p["tiles"]), []).append(r.ms / base.ms)
    score = {t: math.exp(sum(map(math.log, x)) / len(x)) for t, x in ratios.items() if len(x) == n_cases}
    if not score:
        return []
    best = min(score, key=score.get)
    return [bench.record(lesson="05", case="fused choice", kind="fused choice", head_dim=d, chosen=list(best),
                         speedup=1 / score[best])]  # fmt: skip
