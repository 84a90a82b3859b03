"""Lesson 4's short sequences: forward+backward at N = 1,024 against cuDNN, ``python -m gpulab bench 05 short``
(:func:`short`).

At N = 1,024 (batch 16, 16k tokens) a whole forward+backward takes a few hundred microseconds, so what surrounds the
arithmetic counts: the number of kernels per call, the waves of programs over the SMs, tiles sized for long
sequences, and the host's work per call. This part times, on both clocks and in one run, every backward that could
serve these problems, each behind the same forward and the same autograd Function as :func:`flash_attention`, so that
the only difference between two lines is the backward they launch:

- ``gpulab``: :func:`gpulab.attention.flash_attention` as it ships (the plan's gates and tiles);
- ``gpulab bwd v3``: version 3's backward (:mod:`gpulab.attention.v3.backward`) with its measured config for the
  length, where :data:`gpulab.attention.plan.V3_BACKWARD` may not take it; ``gpulab bwd v3 dq_cast``: the same with
  dQ scaled and cast inside the kernel (step 8: no zeroing launch and no cast launch around it); ``gpulab bwd v3
  step 7``: the same config on step 7 (step 5 on a persistent grid), so that the default per length
  (:data:`gpulab.attention.v3.backward_configs.MEASURED_SHORT`) is chosen between the two on both clocks;
- ``gpulab bwd v1 <dkdv tiles> / <dq tiles>``: version 1's two kernels with the tiles named (block_m, block_n,
  warps, stages), the default first (:data:`V1_TILES`);
- ``SDPA cuDNN`` and ``SDPA FlashAttention-2``: ``scaled_dot_product_attention`` restricted to that backend.

Each is checked against the float64 reference on one batch element and two heads before anything is timed
(``params['rel_err']``); a mismatch is recorded in ``params['check']``, never hidden. Timed records carry ``ms``
(CUDA events), ``params['do_bench_ms']`` (``triton.testing.do_bench``), ``wall_ms`` (eager calls back to back, one
synchronize), ``params['vs_cudnn']`` and ``params['wall_vs_cudnn']`` (cuDNN's time / this one's: above 1 is
faster), and for gpulab's lines ``params['kernels']`` (the CUDA kernels of one call, by name, from the profiler) and
``params['aten']`` (the aten operators one call dispatches, by name). On CPU a tiny problem runs version 1's lines
in the interpreter (float16).
"""

from __future__ import annotations

import collections
import dataclasses
import time

import torch
from torch.nn.attention import SDPBackend
from torch.utils._python_dispatch import TorchDispatchMode

from gpulab import bench, runtime
from gpulab.attention import plan as attention_plan
from gpulab.attention.configs import SHORT_SEQ, AttentionConfig
from gpulab.attention.function import FlashAttentionFunction, flash_attention
from gpulab.attention.measure.benchmark import check_output, problem_inputs, sdpa
from gpulab.attention.reference import attention_reference
from gpulab.attention.v1 import backward as v1_backward
from gpulab.dtypes import short as short_dtype

__all__ = ["CASES", "V1_TILES", "short", "table", "best"]

CASES = [
    dict(dtype=torch.bfloat16, batch=16, heads=8, seq=1024, head_dim=128, causal=True),
    dict(dtype=torch.float16, batch=16, heads=8, seq=1024, head_dim=128, causal=True),
    dict(dtype=torch.bfloat16, batch=16, heads=8, seq=1024, head_dim=128, causal=False),
    dict(dtype=torch.bfloat16, batch=16, heads=16, seq=1024, head_dim=64, causal=True),
    dict(dtype=torch.bfloat16, batch=4, heads=8, seq=4096, head_dim=128, causal=True),
]
"""The problems on a GPU: lesson 4's four N = 1,024 problems furthest below cuDNN (forward+backward), then one at N =
4,096 for comparison (:func:`gpulab.attention.measure.benchmark.grid`'s sizes: 16k tokens, model width 1,024)."""

Tile = tuple[int, int, int, int]  # block_m, block_n, warps, stages

V1_TILES: dict[int, list[tuple[Tile, Tile, bool]]] = {
    128: [
        ((64, 128, 8, 3), (128, 32, 4, 3), False),  # the default (gpulab.attention.configs): both spill
        ((64, 128, 8, 3), (128, 32, 4, 3), True),
        ((32, 128, 8, 2), (64, 32, 4, 3), False),  # dK/dV a few spilled bytes, dQ none and two programs per SM
        ((32, 128, 8, 2), (64, 32, 4, 3), True),
        ((16, 128, 8, 2), (64, 64, 4, 2), False),  # neither spills
        ((32, 64, 8, 2), (64, 64, 8, 2), False),  # neither spills; twice the dK/dV programs
    ],
    64: [
        ((32, 128, 4, 3), (128, 32, 4, 3), False),  # the default: dK/dV spills
        ((32, 128, 4, 3), (128, 32, 4, 3), True),
        ((32, 128, 8, 2), (128, 32, 4, 3), False),  # dK/dV without spills
        ((32, 128, 8, 2), (128, 32, 4, 3), True),
    ],
}
"""Version 1's backward lines per head dim: (dK/dV tile, dQ tile, heads-first grid), the default first. Tiles as
(block_m, block_n, warps, stages); the alternatives are those that ptxas (Triton 3.6, sm_90) compiles with the
fewest spilled registers, two programs per SM where shared memory allows (notes/attention.md, 'Short sequences').
The default tiles run on every case; the others only on bf16 at N <= :data:`gpulab.attention.configs.SHORT_SEQ`
(the tiles that :data:`gpulab.attention.configs.PREFERRED_SHORT` would take), heads-first lines only on causal
problems (:data:`gpulab.attention.v1.backward.HEADS_FIRST_CAUSAL`)."""

_CPU_CASES = [dict(dtype=torch.float16, batch=2, heads=2, seq=33, head_dim=16, causal=c) for c in (True, False)]
_CPU_TILES = [((16, 16, 4, 1), (16, 16, 4, 1), False), ((16, 32, 4, 1), (32, 16, 4, 1), True)]

CUDNN, FLASH = "SDPA cuDNN", "SDPA FlashAttention-2"


class _AtenCounter(TorchDispatchMode):
    """Counts, by name, the aten operators dispatched inside the block."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def _tile_name(kv, q, heads_first) -> str:
    order = " heads-first" if heads_first else ""
    return f"gpulab bwd v1 {'/'.join(map(str, kv))} dq {'/'.join(map(str, q))}{order}"


def _own_plan(base: attention_plan.Plan) -> attention_plan.Plan:
    """A copy of ``base`` (the forward's cached plan) with no backward chosen yet, for one candidate's backward."""
    own = object.__new__(attention_plan.Plan)
    for name in attention_plan.Plan.__slots__:
        setattr(own, name, getattr(base, name))
    own.backward = None
    return own


def _with_backward(make):
    """``attention(q, k, v, causal)``: flash_attention's forward and autograd Function, with the backward launches
    ``make(plan, q, k, v, causal)`` returns (built once per input signature)."""
    plans: dict = {}

    def attention(q, k, v, causal):
        base = attention_plan.forward_plan(q, k, v, is_causal=causal)
        own = plans.get(base)
        if own is None:
            own = plans[base] = _own_plan(base)
            own.backward = make(own, q, k, v, causal)
        return FlashAttentionFunction.apply(q, k, v, causal, None, False, False, own)

    return attention


def _v3(dq_cast: bool, step: int | None = None):
    def make(plan, q, k, v, causal):  # the plan's own choice of version 3's config, under a gate that takes it
        gate = attention_plan.BackwardGate((plan.d,))
        launches = attention_plan.backward_launches(plan, q, k, v, None, None, None, gate=gate)
        if launches.__class__ is not attention_plan.V3Backward:
            raise bench.Unavailable("version 3's backward does not take this problem here")
        if step is not None:  # the same config on another step of the ladder (its register budgets and stages kept)
            launches = attention_plan.V3Backward(dataclasses.replace(launches.cfg, step=step))
        if dq_cast:
            launches = attention_plan.V3Backward(dataclasses.replace(launches.cfg, dq_cast=True, writer_regs=32))
        return launches

    return make


def _v1(kv, dq, heads_first):
    def make(plan, q, k, v, causal):
        block_d = runtime.dot_block(plan.d)
        cfg_kv, cfg_q = (AttentionConfig(t[0], t[1], block_d, t[2], t[3]) for t in (kv, dq))
        return v1_backward.backward_launches(plan, cfg_kv, cfg_q, heads_first=heads_first)

    return make


def _providers(head_dim: int) -> dict:
    tiles = V1_TILES.get(head_dim, []) if runtime.on_gpu() else _CPU_TILES
    out = {
        "gpulab": lambda q, k, v, c: flash_attention(q, k, v, is_causal=c),
        "gpulab bwd v3": _with_backward(_v3(False)),
        "gpulab bwd v3 dq_cast": _with_backward(_v3(True)),
        "gpulab bwd v3 step 7": _with_backward(_v3(False, step=7)),
        **{_tile_name(*t): _with_backward(_v1(*t)) for t in tiles},
        CUDNN: sdpa(SDPBackend.CUDNN_ATTENTION),
        FLASH: sdpa(SDPBackend.FLASH_ATTENTION),
    }
    return {name: _one_direction(fn) for name, fn in out.items()}


def _one_direction(attention):
    def run(q, k, v, causal, do):
        if not q.requires_grad:
            with torch.no_grad():
                return attention(q, k, v, causal)
        out = attention(q, k, v, causal)
        return (out, *torch.autograd.grad(out, (q, k, v), do))

    return run


def _hopper() -> bool:
    return runtime.on_gpu() and torch.cuda.get_device_capability()[0] == 9


def _skip(provider, direction, **x):
    if direction == "forward" and provider not in ("gpulab", CUDNN, FLASH):
        return "a backward candidate: forward+backward only (its forward is gpulab's)"
    if provider.startswith("gpulab bwd v3") and not _hopper():
        return "version 3's backward needs a Hopper GPU"
    if provider in (CUDNN, FLASH) and not runtime.on_gpu():
        return f"{provider} needs a GPU"
    return None


def _reference(q, k, v, causal, do):
    """The float64 reference of one direction (on the check's slice: one batch element, two heads)."""
    if not q.requires_grad:
        return attention_reference(q, k, v, is_causal=causal)
    return attention_reference(q, k, v, is_causal=causal, do=do)


def _inputs(check=False, **x):
    return problem_inputs(**x, check=check)


def _label(dtype, batch, heads, seq, head_dim, causal, direction):
    return f"{short_dtype(dtype)} d{head_dim} N{seq}{' causal' if causal else ''} {direction}"


def _flops(dtype, batch, heads, seq, head_dim, causal, direction):
    return bench.visible_attention_flops(seq, seq, head_dim, heads, batch, is_causal=causal,
                                         backward=direction != "forward")  # fmt: skip


def _v1_skip(line: Tile, head_dim: int, dtype, seq: int, causal: bool, **_) -> str | None:
    kv, q, heads_first = line
    table = V1_TILES.get(head_dim, []) if runtime.on_gpu() else _CPU_TILES
    if line not in table:
        return f"tiles for another head dim than {head_dim}"
    if heads_first and not causal:
        return "the heads-first grid is for causal problems (their programs differ in work)"
    default = table[0][:2] == (kv, q)
    if runtime.on_gpu() and not default and (dtype != torch.bfloat16 or seq > SHORT_SEQ):
        return f"the short problems' tiles are chosen on bf16 at N <= {SHORT_SEQ}"
    return None


def _benchmark(cases, budget_s: float) -> bench.Benchmark:
    providers, lines = {}, {}
    for x in cases:  # one provider table for all cases: the tile lines of every head dim in the run
        providers.update(_providers(x["head_dim"]))
        for t in V1_TILES.get(x["head_dim"], []) if runtime.on_gpu() else _CPU_TILES:
            lines[_tile_name(*t)] = t
    start = time.perf_counter()

    def skip(provider, **x):
        if provider in lines and (why := _v1_skip(lines[provider], **x)) is not None:
            return why
        candidate = provider not in ("gpulab", CUDNN, FLASH)
        if candidate and time.perf_counter() - start > budget_s:  # compiles count: the part stays within minutes
            return f"over the part's budget of {budget_s:.0f} s for checking (and compiling) candidates"
        return _skip(provider, **x)

    return bench.Benchmark(
        lesson="05", name="short", cases=cases, inputs=_inputs, check_inputs=lambda **x: _inputs(check=True, **x),
        providers=providers, reference=_reference, check=check_output, on_mismatch="record", skip=skip,
        flops=_flops, label=_label, provider_params={n: {"kind": "short", "impl": n} for n in providers},
    )  # fmt: skip


def _kernels(call) -> dict:
    """The CUDA kernels one ``call()`` launches, by name (the profiler's device events; {} where it cannot run)."""
    try:
        call()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        cuda = torch.autograd.DeviceType.CUDA
        return dict(collections.Counter(e.name[:80] for e in prof.events() if e.device_type == cuda))
    except Exception as exc:  # noqa: BLE001 - the profiler is a diagnostic: its failure is recorded, not fatal
        return {"profiler failed": f"{type(exc).__name__}: {exc}"[:200]}


def _aten(call) -> dict:
    call()
    with _AtenCounter() as c:
        call()
    return dict(c.ops)


def _diagnose(r, fn, args, x) -> None:
    """do_bench's time of one GPU record, and for gpulab's lines what one call launches and dispatches."""
    import triton.testing  # noqa: PLC0415 - GPU only

    call = lambda: fn(*args)  # noqa: E731
    r.params["do_bench_ms"] = triton.testing.do_bench(call, warmup=25, rep=100)
    if r.provider.startswith("gpulab"):
        r.params["kernels"] = _kernels(call)
        r.params["aten"] = _aten(call)
        p = attention_plan.forward_plan(args[0], args[1], args[2], is_causal=x["causal"])
        r.params["forward_version"] = p.version
        if r.provider == "gpulab" and x["direction"] != "forward":
            r.params["backward"] = attention_plan.backward_kind(p)


def _annotate(results, b: bench.Benchmark) -> None:
    """do_bench's time (the device clock's on CPU), what gpulab's lines launch (:func:`_diagnose`) and the ratios to
    cuDNN on both clocks."""
    by_case = collections.defaultdict(dict)
    for r in results:
        by_case[r.case][r.provider] = r
    for x in b.cases:
        rows = by_case[b.case_name(x)]
        args = b.args(x) if runtime.on_gpu() else None
        for r in rows.values():
            if r.status == "ok":
                r.params["do_bench_ms"] = r.ms
                if args is not None:
                    _diagnose(r, b.providers[r.provider], args, x)
        cudnn = rows.get(CUDNN)
        for r in rows.values():
            ok = r.status == "ok" and cudnn is not None and cudnn.status == "ok"
            r.params["vs_cudnn"] = cudnn.ms / r.ms if ok else None
            r.params["wall_vs_cudnn"] = cudnn.wall_ms / r.wall_ms if ok and r.wall_ms else None


def table(results) -> str:
    """Per case and provider: device ms, do_bench ms, wall ms, the ratios to cuDNN on both clocks, the check."""
    rows = []
    for r in bench.result_list("results", results):
        p = r.params
        if r.status != "ok":
            if not r.status.startswith("unavailable"):
                rows.append([r.case, r.provider, None, None, None, None, None, r.status[:60]])
            continue
        rows.append([r.case, r.provider, r.ms, p.get("do_bench_ms"), r.wall_ms, p.get("vs_cudnn"),
                     p.get("wall_vs_cudnn"), str(p.get("check", ""))[:40]])  # fmt: skip
    heads = ["case", "provider", "ms", "do_bench ms", "wall ms", "x cuDNN", "wall x cuDNN", "check"]
    return bench.text_table(heads, rows, title="short sequences: cuDNN's time / this one's (above 1: faster)")


def best(results) -> str:
    """Per case: the shipped line's and the fastest gpulab line's ratio to cuDNN on the device clock, and the fastest
    on the wall clock, with its name (the lines to flip the gates and tiles by)."""
    by_case = collections.defaultdict(list)
    for r in bench.result_list("results", results):
        if r.status == "ok" and r.provider.startswith("gpulab") and r.params.get("vs_cudnn"):
            by_case[r.case].append(r)
    rows = []
    for case, rs in by_case.items():
        shipped = next((r for r in rs if r.provider == "gpulab"), None)
        dev = max(rs, key=lambda r: r.params["vs_cudnn"])
        wall = max(rs, key=lambda r: r.params["wall_vs_cudnn"] or 0.0)
        rows.append([case, shipped and shipped.params["vs_cudnn"], shipped and shipped.params["wall_vs_cudnn"],
                     dev.params["vs_cudnn"], dev.provider.removeprefix("gpulab "), wall.params["wall_vs_cudnn"],
                     wall.provider.removeprefix("gpulab ")])  # fmt: skip
    heads = ["case", "shipped x cuDNN", "wall", "best x cuDNN", "best (device)", "best wall", "best (wall)"]
    return bench.text_table(heads, rows, title="short sequences: the shipped line and the fastest, against cuDNN")


def short(progress=None, cases=None, budget_s: float = 150.0) -> list[bench.Result]:
    """``python -m gpulab bench 05 short``: every backward candidate of the module docstring on :data:`CASES` (on
    CPU a tiny problem, version 1's lines only), forward and forward+backward, checked, then timed; prints
    :func:`table`. ``cases``: dicts like :data:`CASES`' (None: those). ``budget_s``: seconds of checking (which
    compiles every kernel) after which the remaining candidates are skipped (gpulab's own line and the SDPA backends
    always run); the records say which."""
    budget_s = runtime.finite_float("budget_s", budget_s, positive=True)
    if cases is None:
        cases = CASES if runtime.on_gpu() else _CPU_CASES
    cases = [{**x, "direction": d} for x in cases for d in ("forward", "forward+backward")]
    b = _benchmark(cases, budget_s)
    results = bench.run(b, progress)
    _annotate(results, b)
    print(table(results))
    print(best(results))
    return results
