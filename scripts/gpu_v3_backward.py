"""GPU script for version 3's backward (issue 39): correctness at full size against float64, the repeated-run race
test, and forward+backward timings beside cuDNN, FlashAttention-2 and gpulab's shipped backward; the CS336 problem.

    python scripts/gpu_v3_backward.py OUT_DIR [--parts check,race,time,cs336] [--quick] [--configs 'step 3,step 6']
        [--plan-configs 'step 6']

(``--help`` lists the rest: dtypes of the timing grid, race runs, providers to skip, the configs checked).

Writes ``v3-bwd-<part>.jsonl`` under OUT_DIR, each line one record with the device, torch/Triton versions and date.
Timings: ``ms`` from ``triton.testing.do_bench`` (device clock, median), ``wall_ms`` eager wall time per call (calls
back to back, one synchronize at the end).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
import traceback

import torch
import torch.nn.functional as F
import triton
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpulab import check
from gpulab.attention import plan as P
from gpulab.attention.benchmark import grid
from gpulab.attention.function import flash_attention
from gpulab.attention.v3 import backward as v3b

ENV = dict(device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", torch=torch.__version__,
           triton=triton.__version__,
           date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))  # fmt: skip


OPTS = {"no_plan": False, "dtypes": ["bf16", "fp16"], "runs": 50, "rounds": 2, "skip": [], "check_configs": [],
        "plan_configs": [], "d128_only": [], "head_dims": [64, 128], "ab_module": ""}  # fmt: skip


class PlanSwitch:
    """Within ``with PlanSwitch(name):`` for a :data:`PLAN_PREFIX` provider, the plan takes version 3's backward
    at the named config (nothing for other providers)."""

    def __init__(self, name):
        self.on = name.startswith(PLAN_PREFIX)
        self.cfg = config(name[len(PLAN_PREFIX) :]) if self.on else None
        self.two_kernels = name == "gpulab shipped"  # the two-kernel backward the records compare with

    def __enter__(self):
        if self.two_kernels:
            self.saved_min = P.V3_BACKWARD_MIN_SEQ
            P.V3_BACKWARD_MIN_SEQ = {}
            P.clear_plan_cache()
        if self.on:
            self.saved = P.V3_BACKWARD_HEAD_DIMS, v3b.backward_config
            P.V3_BACKWARD_HEAD_DIMS = (64, 128)
            if isinstance(self.cfg, DefaultWith8):  # backward_config's choice with dq_cast
                import dataclasses  # noqa: PLC0415

                orig, fields = self.saved[1], self.cfg.fields
                v3b.backward_config = lambda d, causal=False, step=None, seq=None: dataclasses.replace(
                    orig(d, causal, step, seq), **fields)  # fmt: skip
            elif self.cfg is not None:  # "default": backward_config as it is
                v3b.backward_config = lambda d, causal=False, step=None, seq=None: self.cfg
            P.clear_plan_cache()

    def __exit__(self, *exc):
        if self.two_kernels:
            P.V3_BACKWARD_MIN_SEQ = self.saved_min
            P.clear_plan_cache()
        if self.on:
            P.V3_BACKWARD_HEAD_DIMS, v3b.backward_config = self.saved
            P.clear_plan_cache()


def emit(f, **rec):
    rec = {**rec, **ENV}
    f.write(json.dumps(rec) + "\n")
    f.flush()
    print(json.dumps({k: v for k, v in rec.items() if k not in ENV}), flush=True)


class V3Attention(torch.autograd.Function):
    """The plan's forward (version 3 at d128, version 2 at d64) with a version-3 backward ``backward(do, q, k, v, o,
    lse, causal)``: the package's at a config (:func:`v3_attn`), or a copy of ``gpulab.attention.v3.backward`` (and
    its pair, persistent, dq and launch modules) as it was before a change, timed beside the changed kernel in the
    same process (``--ab-module``; bwd run k)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, backward):
        o, lse = P.attention_forward(q, k, v, is_causal=causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.backward_fn = causal, backward
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        return (*ctx.backward_fn(do, q, k, v, o, lse, ctx.causal), None, None)


def package_backward(cfg):
    """The package's version-3 backward at ``cfg`` (resolved per input, :func:`resolved`)."""

    def run(do, q, k, v, o, lse, causal):
        return v3b.attention_backward(do, q, k, v, o, lse, causal, cfg=resolved(cfg, q, causal))

    return run


def v3_attn(cfg):
    return lambda q, k, v, c: V3Attention.apply(q, k, v, c, package_backward(cfg))


def sdpa(backend):
    def run(q, k, v, c):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=c)

    return run


def shipped(q, k, v, c):
    """``flash_attention``: as "gpulab shipped" with the two-kernel backward (the plan's version-3 gate off), as
    "gpulab plan" with the plan as it is (version 3's backward from ``plan.V3_BACKWARD_MIN_SEQ`` on)."""
    return flash_attention(q, k, v, is_causal=c)


def reference64(q, k, v, do, causal):
    """dQ, dK, dV of SDPA's math in float64."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal)
    return torch.autograd.grad(o, (q64, k64, v64), do.double())


def inputs(dtype, b, h, nq, nk, d, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, h, nq, d, device="cuda", dtype=dtype, generator=g)
    k, v = (torch.randn(b, h, nk, d, device="cuda", dtype=dtype, generator=g) for _ in "kv")
    do = torch.randn(b, h, nq, d, device="cuda", dtype=dtype, generator=g)
    return q, k, v, do


def grads_v3(q, k, v, do, causal, cfg, poison=True):
    o, lse = P.attention_forward(q, k, v, is_causal=causal)
    cfg = resolved(cfg, q, causal)
    if poison:  # freed NaN memory: outputs the kernel leaves unwritten show as NaN
        torch.full((3 * (q.numel() + k.numel()) + 4096,), float("nan"), device="cuda")
    return v3b.attention_backward(do, q, k, v, o, lse, causal, cfg=cfg)


CONFIGS = {"step 1": dict(step=1), "step 2": dict(step=2), "step 3": dict(step=3), "step 4": dict(step=4)}
"""The configurations checked, raced and timed (``--configs`` picks some): name -> V3BackwardConfig fields."""
CONFIGS["step 4, 3 stages"] = dict(step=4, stages=3)
CONFIGS.update({"step 5": dict(step=5), "step 6": dict(step=6), "step 5, 3 stages": dict(step=5, stages=3)})
CONFIGS.update({"step 7": dict(step=7), "step 7, 3 stages": dict(step=7, stages=3)})
STEP8 = dict(dq_cast=True, writer_regs=32)  # step 8's writer: 32 registers (24 spill at head dim 64)
CONFIGS.update({"step 5+8": dict(step=5, **STEP8), "step 7+8": dict(step=7, **STEP8)})
CONFIGS["default"] = None  # backward_config's choice (MEASURED), as attention_backward and the plan take it
STEP9 = dict(fused_prep=True)  # step 9: D's launch zeroes dQ's buffer
CONFIGS.update({"step 5+9": dict(step=5, **STEP9), "step 7+9": dict(step=7, **STEP9)})
CONFIGS["default+8"] = "+8"  # backward_config's choice for the problem, with step 8 (dq_cast) on
CONFIGS["default+9"] = "+9"  # ... with step 9 (fused_prep) on
STEP10 = {"+k": dict(kv_regs="k"), "+v": dict(kv_regs="v"), "+kv": dict(kv_regs="kv")}  # step 10: K/V in registers
for tag, fields in STEP10.items():
    CONFIGS[f"step 5{tag}"] = dict(step=5, **fields)
    CONFIGS[f"default{tag}"] = tag  # ... with step 10 (kv_regs) at that setting
CONFIGS["step 7+kv"] = dict(step=7, kv_regs="kv")
STEP11 = dict(stats_smem=True)  # step 11: the producer brings LSE and D into the ring slot
CONFIGS.update({"step 5+11": dict(step=5, **STEP11), "step 7+11": dict(step=7, **STEP11),
                "step 5+k+11": dict(step=5, kv_regs="k", **STEP11), "default+11": "+11"})  # fmt: skip
SUFFIX_FIELDS = {"+8": STEP8, "+9": STEP9, **STEP10, "+11": STEP11}


def config(name):
    if CONFIGS[name] is None:
        return None
    if isinstance(CONFIGS[name], str):
        return DefaultWith8(CONFIGS[name])
    return v3b.V3BackwardConfig(**CONFIGS[name])


class DefaultWith8:
    """The config of "default+8" ("default+9", "default+kv", ...): backward_config's choice for (head dim, causal,
    query length), with step 8's (step 9's, step 10's) fields (:data:`SUFFIX_FIELDS`)."""

    def __init__(self, suffix="+8"):
        self.fields = SUFFIX_FIELDS[suffix]

    def of(self, q, causal):
        import dataclasses  # noqa: PLC0415

        cfg = v3b.backward_config(q.shape[3], causal, seq=q.shape[2])
        return dataclasses.replace(cfg, **self.fields)


def resolved(cfg, q, causal):
    """A V3BackwardConfig (or None: the default) for this input."""
    return cfg.of(q, causal) if isinstance(cfg, DefaultWith8) else cfg


def impl_name(name, q, causal):
    """Records name the defaults by the step they resolve to (as run f's "gpulab v3 bwd step 5"), step 8 as "+8",
    a default with K/V in registers (step 10) with its setting ("step 5+kv"; bwd run j, before this, named the d=64
    defaults "step 5" and "step 7" although they ran with kv_regs="kv"), step 11 as "+11" (bwd run p's records were
    renamed after the run: the script named its defaults, step 11 on, "step 5", "step 5+kv" and "step 7+kv")."""
    if not name.startswith("gpulab v3 bwd default"):
        return name
    cfg = v3b.backward_config(q.shape[3], causal, seq=q.shape[2])
    rest = name[len("gpulab v3 bwd default") :]
    kv = f"+{cfg.kv_regs}" if cfg.kv_regs != "none" and f"+{cfg.kv_regs}" != rest else ""
    kv += "+11" if cfg.stats_smem and not rest.startswith("+11") else ""  # step 11 (bwd run p named it without)
    return f"gpulab v3 bwd step {cfg.step}{kv}" + rest


SELECTED = list(CONFIGS)
PLAN_PREFIX = "gpulab plan, v3 bwd "
"""A provider named PLAN_PREFIX + a config name is ``flash_attention`` itself (the autograd function and custom op)
with the plan's switch on at both head dims and ``backward_config`` answering that config: the path users call."""


def part_check(f, quick):
    shapes = [
        (2, 3, 1000, 1000),
        (1, 2, 300, 517),
        (1, 1, 129, 64),
        (1, 2, 517, 300),
        (4, 8, 1024, 1024),
        (1, 2, 17, 17),
        (2, 2, 1000, 17),
    ]
    # (300, 517) causal: key blocks past the last query see no query (empty loops, dK = dV = 0 stored)
    if quick:
        shapes = shapes[:3]
    bad = 0
    for name in OPTS["check_configs"] or SELECTED:
        for d in (64, 128):
            for causal in (False, True):
                for dtype in (torch.bfloat16, torch.float16):
                    cfg = config(name)
                    step = name
                    for b, h, nq, nk in shapes:
                        q, k, v, do = inputs(dtype, b, h, nq, nk, d)
                        try:
                            got = grads_v3(q, k, v, do, causal, cfg)
                            again = grads_v3(q, k, v, do, causal, cfg)  # a second call: the cached launch
                            ref = reference64(q, k, v, do, causal)
                            errs = {n: max(float(check.relative_error(g, r)), float(check.relative_error(g2, r)))
                                    for n, g, g2, r in zip(("dq", "dk", "dv"), got, again, ref)}  # fmt: skip
                            tol = check.tolerance(dtype)
                            ok = all(math.isfinite(e) and e <= tol for e in errs.values())
                            emit(f, kind="check", step=step, d=d, causal=causal, dtype=str(dtype), shape=[b, h, nq, nk],
                                 ok=ok, tol=tol, **{f"rel_err_{n}": e for n, e in errs.items()})  # fmt: skip
                            bad += not ok
                        except Exception as e:  # noqa: BLE001
                            bad += 1
                            emit(f, kind="check", step=step, d=d, causal=causal, dtype=str(dtype),
                                 shape=[b, h, nq, nk], ok=False, error=repr(e)[-800:])  # fmt: skip
                            traceback.print_exc()
    if OPTS["no_plan"]:
        return bad
    plan_cfg = OPTS["plan_configs"][0] if OPTS["plan_configs"] else None
    with PlanSwitch(PLAN_PREFIX + plan_cfg if plan_cfg else ""):
        return bad + plan_check(f, plan_cfg)


def plan_check(f, plan_cfg):
    """Through the plan with the switch on (the autograd function and the custom op under torch.compile)."""
    bad = 0
    old = P.V3_BACKWARD_HEAD_DIMS
    P.V3_BACKWARD_HEAD_DIMS = (64, 128)
    P.clear_plan_cache()
    try:
        for d in (64, 128):
            for causal in (False, True):
                q, k, v, do = inputs(torch.bfloat16, 2, 4, 1000, 1000, d, seed=3)
                ref = reference64(q, k, v, do, causal)
                qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
                got = torch.autograd.grad(flash_attention(qg, kg, vg, is_causal=causal), (qg, kg, vg), do)
                pl = P.forward_plan(qg, kg, vg, is_causal=causal)
                comp = torch.compile(lambda a, b_, c, causal=causal: flash_attention(a, b_, c, is_causal=causal),
                                     fullgraph=True)  # fmt: skip
                got_c = torch.autograd.grad(comp(qg, kg, vg), (qg, kg, vg), do)
                with torch.backends.cudnn.flags(enabled=True):
                    torch.use_deterministic_algorithms(True)
                    try:
                        got_det = torch.autograd.grad(flash_attention(qg, kg, vg, is_causal=causal), (qg, kg, vg), do)
                        again = torch.autograd.grad(flash_attention(qg, kg, vg, is_causal=causal), (qg, kg, vg), do)
                        kind_det = all(torch.equal(a, b_) for a, b_ in zip(got_det, again))
                    finally:
                        torch.use_deterministic_algorithms(False)
                errs = {}
                for tag, gs in (("eager", got), ("compiled", got_c), ("deterministic", got_det)):
                    for n, g, r in zip(("dq", "dk", "dv"), gs, ref):
                        errs[f"{tag}_{n}"] = float(check.relative_error(g, r))
                ok = all(math.isfinite(e) and e <= check.tolerance(torch.bfloat16) for e in errs.values())
                bad += not ok
                emit(f, kind="plan", d=d, causal=causal, ok=ok, backward_kind=P.backward_kind(pl), config=plan_cfg,
                     deterministic_bitwise=kind_det, **errs)  # fmt: skip
    except Exception as e:  # noqa: BLE001
        bad += 1
        emit(f, kind="plan", ok=False, error=repr(e)[-800:])
        traceback.print_exc()
    finally:
        P.V3_BACKWARD_HEAD_DIMS = old
        P.clear_plan_cache()
    return bad


def part_race(f, quick):
    runs = OPTS["runs"]
    for step in OPTS["check_configs"] or SELECTED:
        for d in (64, 128):
            for causal in (False, True):
                q, k, v, do = inputs(torch.bfloat16, 4, 1024 // d // 2, 2000, 2000, d, seed=7)
                cfg = resolved(config(step), q, causal)
                o, lse = P.attention_forward(q, k, v, is_causal=causal)
                dq0, dk0, dv0 = v3b.attention_backward(do, q, k, v, o, lse, causal, cfg=cfg)
                dkdv_differ, dq_max = 0, 0.0
                for _ in range(runs):
                    dq, dk, dv = v3b.attention_backward(do, q, k, v, o, lse, causal, cfg=cfg)
                    dkdv_differ += int(not (torch.equal(dk, dk0) and torch.equal(dv, dv0)))
                    dq_max = max(dq_max, float(check.relative_error(dq, dq0)))
                raw = [p.raw is not None for p in v3b.PLANS._data.values()]  # later calls took the cached launch
                emit(f, kind="race", step=step, d=d, causal=causal, runs=runs, raw_launch=all(raw) and bool(raw),
                     dkdv_differing=dkdv_differ,
                     dq_max_rel_diff=dq_max, ok=dkdv_differ == 0)  # fmt: skip


def time_one(fn, q, k, v, do, causal):
    def step():
        out = fn(q, k, v, causal)
        torch.autograd.grad(out, (q, k, v), do)

    ms = triton.testing.do_bench(step, warmup=25, rep=100)
    step()
    torch.cuda.synchronize()
    reps = 10
    t0 = time.perf_counter()
    for _ in range(reps):
        step()
    torch.cuda.synchronize()
    return ms, (time.perf_counter() - t0) * 1e3 / reps


def providers():
    out = {f"gpulab v3 bwd {s}": v3_attn(config(s)) for s in SELECTED}
    out.update({PLAN_PREFIX + s: shipped for s in OPTS["plan_configs"]})
    if OPTS["ab_module"]:
        import importlib  # noqa: PLC0415

        mod = importlib.import_module(OPTS["ab_module"])
        out[f"gpulab v3 bwd default (A/B: {OPTS['ab_module']})"] = lambda q, k, v, c: V3Attention.apply(
            q, k, v, c, mod.attention_backward
        )
    out.update({"gpulab shipped": shipped, "gpulab plan": shipped, "SDPA cuDNN": sdpa(SDPBackend.CUDNN_ATTENTION),
                "SDPA FlashAttention-2": sdpa(SDPBackend.FLASH_ATTENTION)})  # fmt: skip
    return {n: fn for n, fn in out.items() if n not in OPTS["skip"]}


def part_time(f, quick):
    problems = grid(dtypes=[{"bf16": torch.bfloat16, "fp16": torch.float16}[x] for x in OPTS["dtypes"]],
                    head_dims=OPTS["head_dims"])  # fmt: skip
    problems.sort(key=lambda p: OPTS["head_dims"].index(p["head_dim"]))  # the first head dim's problems first
    impls = providers()
    for p in problems:
        q, k, v, do = inputs(p["dtype"], p["batch"], p["heads"], p["seq"], p["seq"], p["head_dim"], seed=11)
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        flops = 3.5 * 4 * p["batch"] * p["heads"] * p["seq"] ** 2 * p["head_dim"] * (0.5 if p["causal"] else 1.0)
        for rnd in range(OPTS["rounds"]):  # alternating rounds (two unless --rounds); the report keeps the fastest
            for name, fn in impls.items():
                if p["head_dim"] != 128 and name.removeprefix("gpulab v3 bwd ") in OPTS["d128_only"]:
                    continue
                try:
                    with PlanSwitch(name):
                        ms, wall = time_one(fn, q, k, v, do, p["causal"])
                    emit(f, kind="fwd+bwd", impl=impl_name(name, q, p["causal"]), round=rnd, dtype=str(p["dtype"]),
                         batch=p["batch"],
                         heads=p["heads"], seq=p["seq"], head_dim=p["head_dim"], causal=p["causal"], ms=ms,
                         wall_ms=wall, tflops=flops / ms / 1e9)  # fmt: skip
                except Exception as e:  # noqa: BLE001
                    emit(f, kind="fwd+bwd", impl=name, round=rnd, seq=p["seq"], head_dim=p["head_dim"],
                         causal=p["causal"], error=repr(e)[-500:])  # fmt: skip


def part_cs336(f, quick):
    q, k, v, do = inputs(torch.bfloat16, 1, 16, 16384, 16384, 64, seed=5)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    for rnd in (0, 1):
        for name, fn in providers().items():
            with PlanSwitch(name):
                ms, wall = time_one(fn, q, k, v, do, True)
            emit(f, kind="cs336", impl=name, round=rnd, ms=ms, wall_ms=wall, do_bench_ms=ms)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--parts", default="check,race,time,cs336")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--no-plan", action="store_true", help="skip the plan/compile part of the check")
    ap.add_argument("--dtypes", default="bf16,fp16", help="the timing grid's dtypes")
    ap.add_argument("--runs", type=int, default=50, help="race runs")
    ap.add_argument("--rounds", type=int, default=2, help="alternating timing rounds per problem (the fastest kept)")
    ap.add_argument("--check-configs", default="", help="configs the check and race parts cover (default: --configs)")
    ap.add_argument("--skip", default="", help="providers left out of the timings (comma-separated names)")
    ap.add_argument("--plan-configs", default="", help="configs also timed through flash_attention with the switch on")
    ap.add_argument("--d128-only", default="", help="configs timed at head dim 128 only (comma-separated)")
    ap.add_argument("--head-dims", default="64,128", help="the timing grid's head dims, timed in this order")
    ap.add_argument("--ab-module", default="", help="a module with attention_backward (a copy of the backward "
                    "before a change) timed at the default config beside the others")  # fmt: skip
    a = ap.parse_args()
    SELECTED[:] = a.configs.split(",")
    OPTS.update(
        no_plan=a.no_plan,
        dtypes=a.dtypes.split(","),
        runs=a.runs,
        rounds=a.rounds,
        skip=a.skip.split(","),
        check_configs=[c for c in a.check_configs.split(",") if c],
        plan_configs=[c for c in a.plan_configs.split(",") if c],
        d128_only=[c for c in a.d128_only.split(",") if c],
        head_dims=[int(d) for d in a.head_dims.split(",")],
        ab_module=a.ab_module,
    )
    os.makedirs(a.out, exist_ok=True)
    bad = 0
    for part in a.parts.split(","):
        t0 = time.time()
        with open(os.path.join(a.out, f"v3-bwd-{part}.jsonl"), "a") as f:
            r = {"check": part_check, "race": part_race, "time": part_time, "cs336": part_cs336}[part](f, a.quick)
            bad += r or 0
        print(f"## part {part}: {time.time() - t0:.0f} s", flush=True)
    print("## summary: bad checks:", bad)
    sys.exit(0)


if __name__ == "__main__":
    main()
