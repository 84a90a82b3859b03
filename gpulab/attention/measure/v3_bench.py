"""Lesson 4's named benchmark parts for version 3 (Gluon, FlashAttention-3's forward; Hopper only). Records go to
``benchmarks/05_attention_hopper/v3/<gpu>-<date>-<part>.jsonl``, where :func:`gpulab.attention.measure.report.stored_v3`
reads the bench part's.

- ``python -m gpulab bench 05 v3`` (:func:`bench_v3`): lesson 4's 24 forward problems
  (:func:`gpulab.attention.measure.benchmark.grid`), ``impl`` the tuned default
  (:data:`~gpulab.attention.measure.report.V3_TUNED`, the committed :data:`gpulab.attention.v3.forward.MEASURED`), the
  same launched through Triton's ``kernel[grid]`` every call (:data:`~gpulab.attention.measure.report.V3_TRITON_LAUNCH`,
  the host-overhead baseline), steps 1-3, version 2, SDPA cuDNN and SDPA FlashAttention-2 (``kind='throughput'``). Every
  provider is timed twice, the rounds alternating (``params['round']`` 0 and 1): one config timed twice in one
  round-robin differed by up to 10% on the H100, more than some differences compared; the report keeps each provider's
  faster round.
- ``python -m gpulab bench 05 v3-headline`` (:func:`headline_v3`): the headline problem (bf16, d=128, N = 16k,
  non-causal) in :data:`HEADLINE_ROUNDS` alternating rounds of version 3, cuDNN, FA-2 and version 2
  (``kind='headline'``); the report states each one's median round.
- ``python -m gpulab bench 05 v3-check`` (:func:`check_v3`): every configuration of :func:`variants` (steps, the
  measured tiles persistent or not, three consumer warpgroups) at both dtypes, head dims 64 and 128, causal and not, on
  odd shapes, O and LSE against SDPA's fp32 math, each output allocated over NaN-poisoned memory (``kind='check'``).
- ``python -m gpulab bench 05 v3-race`` (:func:`race_v3`): each configuration run 200 times on one input, every run
  compared bit for bit with the first (``kind='race'``, ``params['differing']``: a race shows as runs that differ).
- ``python -m gpulab bench 05 v3-tune`` (:func:`tune_v3`): the (step, stages, ...) candidates of :data:`TUNE`, each
  checked, raced and timed on the N = 1k, 4k and 16k bf16 problems (``kind='tune'``); per (head dim, causal) the
  fastest correct, race-free one by geometric mean (``kind='choice'``), which :data:`MEASURED` then commits.

Every part runs its providers through :func:`gpulab.bench.run` (checked before anything is timed, both clocks). Version
3 needs an sm_90 GPU: elsewhere (CPU, other GPUs) its providers are recorded ``unavailable: version 3 (Gluon) needs an
sm_90 GPU ...``; on CPU the bench part still checks version 2 on a tiny problem in the interpreter.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpulab import bench, check, runtime
from gpulab.attention.measure.benchmark import check_output, grid, math_reference, one_direction, problem_inputs, sdpa
from gpulab.attention.measure.report import V3_TRITON_LAUNCH, V3_TUNED
from gpulab.attention.plan import attention_forward
from gpulab.attention.v3 import forward as v3
from gpulab.attention.v3.configs import HEAD_DIMS

__all__ = [
    "bench_v3",
    "headline_v3",
    "HEADLINE",
    "HEADLINE_ROUNDS",
    "HEADLINE_IMPLS",
    "check_v3",
    "race_v3",
    "tune_v3",
    "variants",
    "STEP_CASES",
    "TUNE",
    "RUNS",
    "LSE_TOLERANCE",
]

STEP_CASES = {1: "gpulab v3 step 1 (partitions)", 2: "gpulab v3 step 2 (+ ping-pong)",
              3: "gpulab v3 step 3 (+ overlap)"}  # fmt: skip
"""The bench part's ``impl`` of each step (the names :mod:`gpulab.attention.measure.report` reads)."""
RUNS = 200
"""Runs per configuration in the race part."""
LSE_TOLERANCE = 1e-3
_C3 = dict(consumers=3, consumer_regs=160, producer_regs=32)  # FlashAttention-3's d=64 shape: 3 consumer warpgroups
_P = dict(persistent=True)
_Q2 = dict(persistent=True, q_buffers=2)
_EARLIER = {
    128: [dict(step=3, stages=3), dict(step=3, stages=2, **_Q2), dict(step=3, stages=2, **_Q2, pairs=True)],
    64: [dict(step=3, stages=3), dict(step=3, stages=3, **_Q2), dict(step=2, stages=3, **_C3, **_P),
         dict(step=1, stages=3, **_Q2, pairs=True), dict(step=3, stages=3, **_Q2, pairs=True)],
}  # fmt: skip
_D256 = dict(block_n=64, stages=2)  # the one shape that fits at d=256 (tests/attention/v3/test_v3_compile.py)
TUNE = {**{d: [*fields, *(dict(f, q_regs=True) for f in fields if f["step"] > 1 and "consumers" not in f)]
           for d, fields in _EARLIER.items()},
        256: [dict(step=3, **_D256), dict(step=3, **_D256, **_P), dict(step=3, **_D256, **_P, pairs=True),
              dict(step=2, **_D256, **_P, pairs=True), dict(step=1, **_D256, **_P, pairs=True)]}  # fmt: skip
""":class:`~gpulab.attention.v3.forward.V3Config` fields the tune part tries, per head dim: the earlier defaults and
their challengers (causal tiles in (longest, shortest) pairs, which non-causal launches ignore), and each step-2/3
two-consumer entry again with ``q_regs=True`` (Q from registers in the score products; the three-consumer kernel has
no registers for it). Candidates that lost everywhere were dropped (notes/attention-hopper.md, 'Forward configs').
d=256: the steps at 64 keys and two stages, one tile per program or persistent (no ``q_regs``: it spills there)."""


def _needs_hopper(dtype, batch, heads, head_dim, causal) -> str | None:
    """Why version 3 cannot run a problem of this kind here (None: it can)."""
    d = head_dim if head_dim in HEAD_DIMS else 64  # the CPU problems are smaller; the device decides there
    q = torch.empty(1, 1, 1, d, dtype=dtype if dtype in (torch.float16, torch.bfloat16) else torch.float16,
                    device=runtime.device)  # fmt: skip
    ok, why = v3.supported(q, q, q, bool(causal))
    return None if ok else f"version 3 (Gluon) needs an sm_90 GPU: {why}"


def _v3(cfg):
    """Version 3 at ``cfg`` (a V3Config, or None for the measured default): ``(q, k, v, causal) -> o``."""

    def run(q, k, v, causal):
        return v3.attention_forward(q, k, v, causal, cfg=cfg)[0]

    return run


def _v3_triton_launch(q, k, v, causal):
    """The tuned kernel through Triton's own launch every call (the host-overhead baseline)."""
    return v3.attention_forward(q, k, v, causal, raw_launch=False)[0]


def _v3_step(step):
    def run(q, k, v, causal):
        return v3.attention_forward(q, k, v, causal, cfg=v3.v3_config(q.shape[3], causal, step))[0]

    return run


def _v2(q, k, v, causal):
    return attention_forward(q, k, v, is_causal=causal, version=2)[0]


def _label(dtype, batch, heads, seq, head_dim, causal, direction):
    return f"d{head_dim} N{seq}{' causal' if causal else ''} {direction}"


def _flops(batch, heads, seq, head_dim, causal, **_):
    return bench.attention_flops(batch, heads, seq, seq, head_dim, causal=causal)


def _check_inputs(**x):
    return problem_inputs(**x, check=True)


# ------------------------------------------------------------------------------------------------------- bench
def _bench_providers() -> dict:
    impls = {V3_TUNED: _v3(None), V3_TRITON_LAUNCH: _v3_triton_launch,
             **{STEP_CASES[s]: _v3_step(s) for s in (1, 2, 3)}, "gpulab v2": _v2,
             "SDPA cuDNN": sdpa(SDPBackend.CUDNN_ATTENTION),
             "SDPA FlashAttention-2": sdpa(SDPBackend.FLASH_ATTENTION)}  # fmt: skip
    return {n: one_direction(fn) for n, fn in impls.items()}


def _bench_skip(provider, dtype, batch, heads, seq, head_dim, causal, direction):
    impl = provider.rpartition(" #")[0]
    if impl.startswith("gpulab v3"):
        return _needs_hopper(dtype, batch, heads, head_dim, causal)
    if impl.startswith("SDPA") and not runtime.on_gpu():
        return f"{impl} needs a GPU"
    return None


def _problems(problems, cpu, gpu) -> list:
    if problems is None:
        problems = runtime.pick(cpu=cpu, gpu=gpu)
    if not isinstance(problems, (list, tuple)) or not problems or not all(isinstance(p, dict) for p in problems):
        raise TypeError(f"problems must be a non-empty list of dicts like grid()'s, got {problems!r}.")
    return list(problems)


def _in_rounds(name, problems, impls, rounds, kind, progress) -> list[bench.Result]:
    """``impls`` ({impl: fn}) timed on every problem in ``rounds`` alternating rounds: round 0 of every provider,
    then round 1 of every provider, ... (the harness times a case's providers in order, so one entry per
    implementation and round alternates them as the measurement needs). ``params['impl']`` names the
    implementation, ``params['round']`` its round, ``params['kind']`` is ``kind``."""
    providers = {f"{n} #{rnd}": fn for rnd in range(rounds) for n, fn in impls.items()}
    b = bench.Benchmark(
        lesson="05", name=name, cases=[{**p, "direction": "forward"} for p in problems], inputs=problem_inputs,
        check_inputs=_check_inputs, providers=providers, reference=math_reference, check=check_output,
        on_mismatch="record", skip=_bench_skip, flops=_flops, label=_label,
        provider_params={p: {"impl": p.rpartition(" #")[0], "kind": kind, "round": int(p.rpartition(" #")[2])}
                         for p in providers},
    )  # fmt: skip
    results = bench.run(b, progress)
    for r in results:
        r.case = r.provider = r.params["impl"]
    return results


_TINY = [dict(dtype=torch.float16, batch=1, heads=2, seq=33, head_dim=16, causal=c) for c in (False, True)]


def bench_v3(progress=None, problems=None) -> list[bench.Result]:
    """``python -m gpulab bench 05 v3``: ``problems`` (dicts like :func:`~gpulab.attention.measure.benchmark.grid`'s;
    default all 24 on a GPU, one tiny float16 problem, causal and not, on CPU), forward, every provider in two
    alternating rounds. The records' ``case`` and ``params['impl']`` name the implementation, ``params['round']`` its
    round."""
    problems = _problems(problems, cpu=_TINY, gpu=grid())
    return _in_rounds("v3", problems, _bench_providers(), 2, "throughput", progress)


HEADLINE = dict(dtype=torch.bfloat16, batch=1, heads=8, seq=16384, head_dim=128, causal=False)
"""The headline problem: bf16, head dim 128, N = 16k, non-causal (the grid's, 8 heads of 128)."""
HEADLINE_ROUNDS = 9
"""Alternating rounds of the headline part: the report states each implementation's median round, so one slow or
fast round (the H100's clock moves with its power and temperature over a run) decides nothing."""
HEADLINE_IMPLS = (V3_TUNED, "SDPA cuDNN", "SDPA FlashAttention-2", "gpulab v2")


def headline_v3(progress=None, problems=None, rounds: int = HEADLINE_ROUNDS) -> list[bench.Result]:
    """``python -m gpulab bench 05 v3-headline``: :data:`HEADLINE` (on CPU the tiny problems) timed in ``rounds``
    alternating rounds of version 3 (tuned), cuDNN, FlashAttention-2 and version 2 (``kind='headline'``), each
    output checked before timing. :func:`gpulab.attention.measure.v3_report.v3_headline` reads each one's median
    round."""
    rounds = runtime.integer("rounds", rounds, minimum=1)
    problems = _problems(problems, cpu=_TINY[:1], gpu=[HEADLINE])
    impls = {n: fn for n, fn in _bench_providers().items() if n in HEADLINE_IMPLS}
    return _in_rounds("v3", problems, impls, rounds, "headline", progress)


# ------------------------------------------------------------------------------------------------ check and race
def variants(d: int, causal: bool) -> list:
    """The configurations the check and race parts cover at head dim ``d``: steps 1-3 at the measured tiles, the
    short-sequence choice, the measured config with persistence flipped, (d < 256) step 3 persistent with two Q
    buffers, (d=64) three consumer warpgroups persistent, and (d < 256) the measured config with ``q_regs`` flipped
    where it has two consumers and a pipelined step; duplicates dropped."""
    base = v3.v3_config(d, causal)
    out = [v3.v3_config(d, causal, s) for s in (1, 2, 3)]
    out.append(v3.v3_config(d, causal, seq=1))  # the short-sequence choice (the same as base where none is listed)
    flipped = not base.persistent
    out.append(dataclasses.replace(base, persistent=flipped, pairs=base.pairs and flipped))  # pairs need persistence
    if d < 256:  # d=256: a second Q buffer is over the shared memory, and Q in registers spills
        out.append(v3.V3Config(step=3, stages=2 if d == 128 else 3, persistent=True, q_buffers=2))
    if d == 64:
        out.append(v3.V3Config(step=2, stages=3, **_C3, persistent=True))
    if base.step > 1 and base.consumers == 2 and d < 256:  # Q from registers (the challenger, or the choice)
        out.append(dataclasses.replace(base, q_regs=not base.q_regs))
    return list(dict.fromkeys(out))


def _name(cfg) -> str:
    fields = dataclasses.asdict(cfg)
    default = dataclasses.asdict(v3.V3Config())
    return "v3 " + ", ".join(f"{k}={v}" for k, v in fields.items() if k == "step" or v != default[k])


def _odd_inputs(dtype, batch, heads, n_q, n_k, head_dim, causal, seed=1):
    gen = torch.Generator(device=runtime.device).manual_seed(seed)
    q = torch.randn(batch, heads, n_q, head_dim, device=runtime.device, dtype=dtype, generator=gen)
    k, v = (torch.randn(batch, heads, n_k, head_dim, device=runtime.device, dtype=dtype, generator=gen) for _ in "kv")
    return q, k, v, causal


def _reference(q, k, v, causal):
    """SDPA's math backend in fp32, and the natural-log LSE of the scaled (causally masked) scores."""
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    return o, torch.logsumexp(s, -1)


def _poisoned(cfg):
    """Version 3 at ``cfg`` returning (o, lse), its outputs allocated where NaN was just freed (unwritten rows show)."""

    def run(q, k, v, causal):
        nbytes = q.numel() * q.element_size() + q.shape[0] * q.shape[1] * q.shape[2] * 4
        torch.full((nbytes // 4 + 1024,), float("nan"), device=q.device)  # freed at once: the allocator reuses it
        return v3.attention_forward(q, k, v, causal, cfg=cfg)

    return run


def _check_o_lse(out, ref) -> dict:
    (o, lse), (ro, rl) = out, ref
    eo, el = float(check.relative_error(o, ro)), float(check.relative_error(lse, rl))
    fields = {"rel_err_o": eo, "rel_err_lse": el}
    if not (math.isfinite(eo) and math.isfinite(el) and eo <= check.tolerance(o.dtype) and el <= LSE_TOLERANCE):
        raise AssertionError(f"rel_err(O) {eo:.3g}, rel_err(LSE) {el:.3g}")
    return fields


def _per_config(name, cases, providers, reference, check_fn, d, causal, kind) -> bench.Benchmark:
    return bench.Benchmark(
        lesson="05", name=name, cases=cases, inputs=_odd_inputs, providers={_name(c): fn for c, fn in providers},
        reference=reference, check=check_fn, on_mismatch="record",
        skip=lambda p, dtype, head_dim, causal, **_: _needs_hopper(dtype, 1, 1, head_dim, causal),
        provider_params={_name(c): {"kind": kind, "d": d, "causal": causal, "cfg": dataclasses.asdict(c)}
                         for c, _ in providers},
    )  # fmt: skip


SHAPES = ((4, 8, 1000, 1000), (2, 2, 300, 517), (1, 1, 129, 64), (1, 2, 64, 1500))
"""(B, H, Nq, Nk) of the check part; the first has more tiles than SMs, so persistent programs take several each."""


def check_v3(progress=None, shapes=SHAPES) -> list[bench.Result]:
    """``python -m gpulab bench 05 v3-check``: every configuration of :func:`variants`, float16 and bfloat16, head
    dims 64 and 128, causal and not, on ``shapes``; ``params['check']`` 'ok' or the mismatch, ``rel_err_o`` and
    ``rel_err_lse``. Not timed (status 'checked, not timed'; 'unavailable: ...' without an sm_90 GPU)."""
    if (
        not isinstance(shapes, (list, tuple))
        or not shapes
        or not all(isinstance(s, (list, tuple)) and len(s) == 4 for s in shapes)
    ):
        raise TypeError(f"shapes must be a non-empty list of (B, H, Nq, Nk), got {shapes!r}.")
    for s in shapes:
        for n in s:
            runtime.integer("shapes", n, minimum=1)
    marks = []
    for d in (64, 128):
        for causal in (False, True):
            cases = [dict(dtype=dt, batch=b, heads=h, n_q=nq, n_k=nk, head_dim=d, causal=causal)
                     for dt in (torch.bfloat16, torch.float16) for b, h, nq, nk in shapes]  # fmt: skip
            providers = [(c, _poisoned(c)) for c in variants(d, causal)]
            marks.append(_per_config("v3 check", cases, providers, _reference, _check_o_lse, d, causal, "check"))
    return bench.run(marks, progress, timed=False)


def _raced(cfg, runs):
    """Version 3 at ``cfg`` run ``runs`` times: how many runs differ (O or LSE, bit for bit) from the first."""

    def run(q, k, v, causal):
        o0, l0 = v3.attention_forward(q, k, v, causal, cfg=cfg)
        differ = 0
        for _ in range(runs):
            o, lse = v3.attention_forward(q, k, v, causal, cfg=cfg)
            differ += int(not (torch.equal(o, o0) and torch.equal(lse, l0)))
        return differ

    return run


def _no_race(runs):
    def check_fn(differing, _expected) -> dict:
        if differing:
            raise AssertionError(f"{differing}/{runs} runs differ from the first")
        return {"runs": runs, "differing": differing}

    return check_fn


def race_v3(progress=None, runs: int = RUNS, configs=None) -> list[bench.Result]:
    """``python -m gpulab bench 05 v3-race``: each configuration (``configs``: ``{(d, causal): [V3Config, ...]}``,
    default :func:`variants`) ``runs`` times on one bf16 input of B 4, H max(4, 512/d), N 2000 (256+ tiles, so
    persistent programs take several): ``params['differing']`` 0, or ``params['check']`` names how many runs
    differed."""
    runs = runtime.integer("runs", runs, minimum=1)
    configs = configs or {(d, c): variants(d, c) for d in (64, 128) for c in (False, True)}
    if not isinstance(configs, dict) or not all(
        isinstance(key, tuple) and len(key) == 2 and isinstance(cfgs, list) and cfgs
        and all(isinstance(c, v3.V3Config) for c in cfgs)
        for key, cfgs in configs.items()
    ):  # fmt: skip
        raise TypeError(f"configs must be a dict (head dim, causal) -> list of V3Config, got {configs!r}.")
    for d, causal in configs:
        runtime.one_of("configs' head dim", d, HEAD_DIMS)
        runtime.strict_bool("configs' causal", causal)
    marks = []
    for (d, causal), cfgs in configs.items():
        case = dict(dtype=torch.bfloat16, batch=4, heads=max(4, 1024 // d // 2), n_q=2000, n_k=2000, head_dim=d,
                    causal=causal)  # fmt: skip
        providers = [(c, _raced(c, runs)) for c in cfgs]
        marks.append(_per_config("v3 race", [case], providers, lambda *a: 0, _no_race(runs), d, causal, "race"))
    return bench.run(marks, progress, timed=False)


# ---------------------------------------------------------------------------------------------------------- tune
def tune_v3(
    progress=None, candidates=None, seqs=(1024, 4096, 16384), runs: int = RUNS, tokens: int = 16384, short_n=None
) -> list[bench.Result]:
    """``python -m gpulab bench 05 v3-tune``: per (head dim, causal), each of ``candidates`` (default :data:`TUNE`)
    raced (:func:`race_v3`, ``params['race_differing']``), checked against SDPA's fp32 math and timed on the bf16
    problems of ``seqs`` (``tokens`` per batch, ``kind='tune'``); then ``kind='choice'``: the fastest candidate that
    matched and never differed, by geometric mean of TFLOP/s over ``seqs`` (``params['group']`` 'all'), over the
    short ones (N <= ``short_n(d, causal)``, default ``v3.short_n``: 'short') and the long ones ('long');
    ``params['chosen']``: its V3Config fields, which :data:`MEASURED` (long) and :data:`MEASURED_SHORT` (short) then
    commit."""
    candidates = candidates or TUNE
    short_n = v3.short_n if short_n is None else short_n
    if not callable(short_n):
        raise TypeError(f"short_n must be a function (head dim, causal) -> the longest short N, got {short_n!r}.")
    if not isinstance(candidates, dict) or not all(isinstance(f, list) for f in candidates.values()):
        raise TypeError(f"candidates must be a dict head dim -> list of V3Config fields like TUNE, got {candidates!r}.")
    tokens = runtime.integer("tokens", tokens, minimum=1)
    results = []
    for d, fields_list in candidates.items():
        for causal in (False, True):
            cfgs = {_name(v3.V3Config(**f)): (f, v3.V3Config(**f)) for f in fields_list}
            raced = race_v3(progress, runs, {(d, causal): [c for _, c in cfgs.values()]})
            differing = {r.provider: r.params.get("differing") if r.params.get("check") == "ok" else None
                         for r in raced}  # fmt: skip
            cases = [dict(dtype=torch.bfloat16, batch=max(1, tokens // n), heads=1024 // d, seq=n, head_dim=d,
                          causal=causal, direction="forward") for n in seqs]  # fmt: skip
            b = bench.Benchmark(
                lesson="05", name="v3 tune", cases=cases, inputs=problem_inputs, check_inputs=_check_inputs,
                providers={n: one_direction(_v3(c)) for n, (_, c) in cfgs.items()}, reference=math_reference,
                check=check_output, on_mismatch="record", flops=_flops, label=_label,
                skip=lambda p, dtype, batch, heads, seq, head_dim, causal, direction: _needs_hopper(
                    dtype, batch, heads, head_dim, causal),
                provider_params={n: {"kind": "tune", **f, "race_differing": differing.get(n)}
                                 for n, (f, _) in cfgs.items()},
            )  # fmt: skip
            timed = bench.run(b, progress)
            results += timed + _choice(timed, cfgs, d, causal, seqs, short_n(d, causal))
    return results


def _choice(records, cfgs, d, causal, seqs, limit: int) -> list[bench.Result]:
    """Per group of sequence lengths (``all``; ``short``: N <= ``limit``, ``long``: the rest), the
    candidate with the highest geometric mean of TFLOP/s among those that matched and never differed on every length
    of the group."""
    rates: dict = {}
    for r in records:
        if r.status == "ok" and r.params.get("check") == "ok" and r.params.get("race_differing") == 0 and r.tflops:
            rates.setdefault(r.provider, {})[r.shape[2]] = r.tflops
    groups = {"all": list(seqs), "short": [n for n in seqs if n <= limit],
              "long": [n for n in seqs if n > limit]}  # fmt: skip
    out = []
    for group, ns in groups.items():
        score = {n: math.exp(sum(math.log(t[s]) for s in ns) / len(ns)) for n, t in rates.items()
                 if ns and all(s in t for s in ns)}  # fmt: skip
        if score:
            best = max(score, key=score.get)
            out.append(bench.record(lesson="05", case="v3 choice", kind="choice", head_dim=d, causal=causal,
                                    group=group, seqs=ns, chosen=cfgs[best][0], scores=score))  # fmt: skip
    return out
