"""Lesson 7's named benchmark parts for the split-head kernel: ``python -m gpulab bench 07 split`` and
``bench 07 cross``, records under ``benchmarks/07_rnn_split/split/`` that :mod:`gpulab.rnn.fused.measure.split_report`
reads.

- :func:`split` (``<gpu>-<date>-split.jsonl``): the LSTM, one head, B = 16, T = 1024, bf16 (``kind='time'``):
  ``fused split (chosen)`` (``flashrnn(backend='fused')``, which takes the split kernel at these head dims; the
  chooser's tiling in ``split``, ``block_u``, ``warps``, ``est_ms``) and ``alternating``, forward and
  forward+backward (``pass_='fwd+bwd'``, case ``... fwd+bwd``), beside cuDNN's dense ``nn.LSTM`` in fp16 and bf16
  (``includes_input_product``: it also computes the input product); then (``kind='sweep'``) every fitting forward
  tiling at block_b 16, with ``no_barrier_ms`` and ``no_barrier_one_chain_ms``: the same launch without its barrier
  (wrong numbers, its time), the chunks' products kept apart or not: the barrier's share of a step.
- :func:`cross` (``<gpu>-<date>-cross.jsonl``, ``kind='cross'``): the forward over batch at two head dims, the split
  kernel beside the one-SM fused kernel (where it fits) and ``alternating``.

Every provider is checked against the float64 recurrence (cuDNN: its own module in float64) before anything is timed
(:func:`gpulab.bench.run`, both clocks: ``ms`` device, ``wall_ms`` eager wall). Each record is a
:class:`gpulab.bench.Result` whose ``params`` hold the fields the report reads (``kind``, ``case``, ``DH``, ...). On
CPU each part runs a tiny version in the interpreter (float32).
"""

from __future__ import annotations

import math

import torch

from gpulab import bench, check, dtypes, runtime
from gpulab.rnn.api import flashrnn
from gpulab.rnn.fused import plan, split_tiling, tiling
from gpulab.rnn.fused.measure.benchmark import (
    check_states,
    dense_reference,
    dense_run,
    problem_inputs,
    recurrence,
    states_reference,
)
from gpulab.rnn.fused.tiles import fast_activations

__all__ = [
    "split",
    "cross",
    "candidates",
    "partials",
    "time_benchmarks",
    "sweep_benchmark",
    "tiling_benchmark",
    "training_benchmarks",
]


def _dims(name, values) -> tuple[int, ...]:
    if not isinstance(values, (list, tuple)) or not values:
        raise TypeError(f"{name} must be a non-empty list of positive ints, got {values!r}.")
    return tuple(runtime.positive_int(name, v) for v in values)


def _sizes():
    """(B, T, dtype) of the timed problems: B 16, T 1024, bf16 on a GPU; tiny, float32 in the interpreter."""
    return runtime.pick(cpu=(4, 4, torch.float32), gpu=(16, 1024, torch.bfloat16))


def _inputs(B, T, DH, dtype, training=False):
    x = problem_inputs(B, T, 1, DH, dtype)
    return tuple(t.requires_grad_(training) for t in x)


def _flashrnn(backend):
    return recurrence(lambda *x: flashrnn(*x, function="lstm", backend=backend))


def time_benchmarks(head_dims, alternating_training=None) -> list[bench.Benchmark]:
    """``kind='time'``: the split kernel (chosen tiling) and ``alternating`` per head dim, forward and
    forward+backward (``alternating`` trains only at ``alternating_training``'s head dims, default all), and cuDNN's
    ``nn.LSTM`` (dense, DH inputs and units) in fp16 and bf16 (float32 on CPU)."""
    head_dims = _dims("head_dims", head_dims)
    if alternating_training is not None:
        alternating_training = _dims("alternating_training", alternating_training)
    B, T, dtype = _sizes()
    out = []
    for training, suffix in ((False, ""), (True, " fwd+bwd")):
        ours = "fused split fwd+bwd" if training else "fused split (chosen)"
        names = {ours: "fused", f"alternating{suffix}": "alternating"}
        extra = {"pass_": "fwd+bwd"} if training else {}

        def skip(provider, DH, training=training):
            if training and provider.startswith("alternating") and alternating_training is not None:
                return None if DH in alternating_training else "alternating trains at the probe's one head dim"
            return None

        out.append(bench.Benchmark(
            lesson="07", name=f"split time{suffix}", cases=[{"DH": d} for d in head_dims],
            inputs=lambda DH, training=training: _inputs(B, T, DH, dtype, training),
            providers={n: _flashrnn(backend) for n, backend in names.items()},
            provider_params={n: {"kind": "time", "case": n, **extra} for n in names},
            reference=lambda *x: states_reference(*x), check=check_states, on_mismatch="record", skip=skip,
            params=lambda DH: {"B": B, "T": T, "NH": 1}, shape=lambda DH: [B, T, 1, DH],
        ))  # fmt: skip
    cudnn_dtypes = runtime.pick(cpu=(torch.float32,), gpu=(torch.float16, torch.bfloat16))
    for training, suffix in ((False, ""), (True, " fwd+bwd")):

        def dense_inputs(DH, dtype, training=training):
            torch.manual_seed(0)
            m = torch.nn.LSTM(DH, DH).to(runtime.device, dtype)
            if runtime.on_gpu():
                m.flatten_parameters()
            return torch.randn(T, B, DH, device=runtime.device, dtype=dtype), m, training

        out.append(bench.Benchmark(
            lesson="07", name=f"split cuDNN{suffix}",
            cases=[{"DH": d, "dtype": dt} for d in head_dims for dt in cudnn_dtypes], inputs=dense_inputs,
            providers={"cuDNN nn.LSTM": dense_run}, reference=dense_reference, check=check_states,
            on_mismatch="record",
            params=lambda DH, dtype, suffix=suffix: {
                "kind": "time", "case": f"cuDNN nn.LSTM {dtypes.name(dtype)}{suffix}", "includes_input_product": True,
                "B": B, "T": T, **({"pass_": "fwd+bwd"} if suffix else {}),
            },
        ))  # fmt: skip
    return out


def _tiling_fields(B, DH, dtype, T):
    cfg = split_tiling.split_tiling(B, 1, DH, "lstm", dtype)
    return {"split": cfg.split, "block_u": cfg.block_u, "warps": cfg.num_warps, "est_ms": cfg.score * T * 1e-6}


def _split_forward(cfg):
    def run(*x):
        with torch.no_grad():
            return plan.split_forward_at(*x, cfg)[:2]

    return run


def _name(c) -> str:
    return f"block_u={c.block_u} warps={c.num_warps}"


def sweep_candidates(B, DH, dtype):
    """The fitting forward tilings of one head of ``DH`` at block_b 16, the probe's sweep."""
    return [c for c in split_tiling.split_candidates(B, 1, DH, "lstm", dtype) if c.fits and c.block_b == 16]


def sweep_benchmark(DH) -> bench.Benchmark:
    """``kind='sweep'``: every fitting forward tiling of one head of ``DH`` (block_b 16), checked and timed."""
    DH = runtime.positive_int("DH", DH)
    B, T, dtype = _sizes()
    cands = sweep_candidates(B, DH, dtype)
    cands = {_name(c): c for c in runtime.pick(cpu=cands[-2:], gpu=cands)}  # two in the interpreter: quick
    if not cands:
        raise ValueError(f"DH={DH}: no fitting split tiling at block_b 16 (B={B}); pick a head dim of 16 or more.")
    return bench.Benchmark(
        lesson="07", name="split sweep", cases=[{"DH": DH}], inputs=lambda DH: _inputs(B, T, DH, dtype),
        providers={n: _split_forward(c) for n, c in cands.items()},
        provider_params={n: {"kind": "sweep", "block_u": c.block_u, "split": c.split, "warps": c.num_warps,
                             "block_b": c.block_b, "est_ms": c.score * T * 1e-6} for n, c in cands.items()},
        reference=lambda *x: states_reference(*x), check=check_states, on_mismatch="record",
        params={"B": B, "T": T}, label=lambda DH: f"DH={DH}",
    )  # fmt: skip


def _no_barrier_ms(x, cfg, apart: bool) -> float:
    """The time of the split kernel's whole-sequence launch without its barrier (each program runs on with stale
    neighbours: wrong numbers, the launch's time without the wait); ``apart``: the chunks' products kept apart (an
    inline-assembly fence: the interpreter cannot run it, so there both variants are one chain)."""
    Wx, R, b, s0 = (t.detach().contiguous() for t in x)
    B, T, _, NH, DH = Wx.shape
    out = torch.empty(2, B, T, NH, DH, device=Wx.device, dtype=Wx.dtype)
    last = torch.empty(2, B, 1, NH, DH, device=Wx.device, dtype=Wx.dtype)
    grid = (cfg.split, NH, -(-B // cfg.block_b))
    programs = grid[0] * grid[1] * grid[2]
    consts = dict(FUNCTION=0, G_W=4, G_R=4, G_B=4, DH=DH, BLOCK_B=cfg.block_b, BLOCK_U=cfg.block_u,
                  BLOCK_K=cfg.block_k, CHUNKS=cfg.chunks, SAVE_GATES=False, FAST=fast_activations(Wx.dtype),
                  IS_FP32=Wx.dtype == torch.float32, PRECISION=runtime.dot_precision(Wx.dtype), BARRIER=False,
                  APART=apart and not runtime.INTERPRET, TAGGED=False, SPIN=1, TIMING=False, FLAGS=False,
                  HINTED=False, P_PAD=1, **cfg.launch())  # fmt: skip
    args = (Wx, R, b, s0, s0, out, last, out, out, out, out, out, B, T, NH, B * T * NH * DH, 0, T, programs)
    t = bench.time_callable(lambda: plan.KERNELS["split"][grid](*args, **consts), **_budget())
    return t.median_ms


def _budget():
    return runtime.pick(cpu=dict(warmup_ms=0.0, rep_ms=1.0), gpu=dict(warmup_ms=25.0, rep_ms=100.0))


def split(progress=None, head_dims=None, sweep_dims=None):
    """``python -m gpulab bench 07 split``: the times (:func:`time_benchmarks`) at ``head_dims`` (256 to 1024 on a
    GPU) and the tiling sweep with the barrier's share at ``sweep_dims`` (512, 768, 1024)."""
    head_dims = _dims("head_dims", head_dims or runtime.pick(cpu=(16,), gpu=(256, 384, 512, 768, 1024)))
    sweep_dims = _dims("sweep_dims", sweep_dims or runtime.pick(cpu=(24,), gpu=(512, 768, 1024)))
    B, T, dtype = _sizes()
    alt = runtime.pick(cpu=None, gpu=(768,))
    results = bench.run(time_benchmarks(head_dims, alt), progress)
    for r in results:
        if r.params["case"] in ("fused split (chosen)", "fused split fwd+bwd"):
            r.params.update(_tiling_fields(B, r.params["DH"], dtype, T))
    for d in sweep_dims:
        b = sweep_benchmark(d)
        recs = bench.run(b, progress)
        x = b.args(b.cases[0])
        cands = {_name(c): c for c in sweep_candidates(B, d, dtype)}
        for r in recs:
            if r.status == "ok":
                for key, apart in (("no_barrier_ms", True), ("no_barrier_one_chain_ms", False)):
                    r.params[key] = _no_barrier_ms(x, cands[r.provider], apart)
        results += recs
    return results + stress()


def stress(head_dims=(768, 1024), launches=200, replays=50) -> list[bench.Result]:
    """``kind='stress'``: the persistent kernel with the most programs that fit (B 16, T 256, bf16), launched
    ``launches`` times back to back and replayed ``replays`` times from a CUDA graph, every result compared with the
    first bit for bit (``mismatches``, ``graph_mismatches``). The grid barrier needs a GPU: in the interpreter, one
    record saying so."""
    if not runtime.on_gpu():
        r = bench.record(lesson="07", case="split stress", kind="stress")
        r.status = "unavailable: the persistent kernel's grid barrier needs a GPU"
        return [r]
    out = []
    for DH in head_dims:
        x = problem_inputs(16, 256, 1, DH, torch.bfloat16, seed=1)
        cands = [c for c in split_tiling.split_candidates(16, 1, DH, "lstm", torch.bfloat16) if c.fits]
        cfg = max(cands, key=lambda c: (c.programs, -c.score))
        run = lambda cfg=cfg, x=x: plan.split_forward_at(*x, cfg)[0]  # noqa: E731
        want = run()
        bad = sum(not torch.equal(run(), want) for _ in range(launches))
        graph = bench.capture(run)
        graph_bad = 0
        for _ in range(replays):
            graph()
            torch.cuda.synchronize()
            graph_bad += not torch.equal(graph.output, want)
        out.append(bench.record(lesson="07", case="split stress", kind="stress", DH=DH, programs=cfg.programs,
                                block_u=cfg.block_u, launches=launches, mismatches=bad, graph_replays=replays,
                                graph_mismatches=graph_bad))  # fmt: skip
    return out


def cross(progress=None, head_dims=None, batches=None):
    """``python -m gpulab bench 07 cross``: the forward at T = 1024 over ``batches`` (1, 4, 16, 64) at ``head_dims``
    (128, 768): the split kernel (the chooser's tiling), the one-SM fused kernel where it fits, ``alternating``."""
    head_dims = _dims("head_dims", head_dims or runtime.pick(cpu=(16,), gpu=(128, 768)))
    batches = _dims("batches", batches or runtime.pick(cpu=(1, 3), gpu=(1, 4, 16, 64)))
    _, T, dtype = _sizes()

    def split_run(*x):
        B, _, _, _, DH = x[0].shape
        return _split_forward(split_tiling.split_tiling(B, 1, DH, "lstm", dtype))(*x)

    def one_sm(*x):
        with torch.no_grad():
            return plan.single_sm_forward(*x, "lstm", False)[:2]

    def skip(provider, DH, B):
        if provider == "one-SM fused" and not tiling.fits(B, 1, DH, "lstm", dtype, direction="forward"):
            return "one head of this width does not fit one SM"
        return None

    def fields(DH, B):
        cfg = split_tiling.split_tiling(B, 1, DH, "lstm", dtype)
        return {"T": T, "split": cfg.split, "block_b": cfg.block_b}

    names = ("split", "one-SM fused", "alternating")
    b = bench.Benchmark(
        lesson="07", name="split cross", cases=[{"DH": d, "B": n} for d in head_dims for n in batches],
        inputs=lambda DH, B: _inputs(B, T, DH, dtype),
        providers={"split": split_run, "one-SM fused": one_sm, "alternating": _flashrnn("alternating")},
        provider_params={n: {"kind": "cross", "case": n} for n in names}, params=fields, skip=skip,
        reference=lambda *x: states_reference(*x), check=check_states, on_mismatch="record",
    )  # fmt: skip
    return bench.run(b, progress)


# ------------------------------------------------------------------------------- every tiling beside the chooser's
def _tile_name(c) -> str:
    return f"block_u={c.block_u} block_b={c.block_b} warps={c.num_warps} block_k={c.block_k}"


def _backward_inputs(B, NH, DH, T, dtype):
    """(d_out, gates, out, states, R): the forward of the chooser's tiling, and a random output gradient."""
    Wx, R, b, s0 = problem_inputs(B, T, NH, DH, dtype, seed=B + NH + DH)
    fwd = split_tiling.split_tiling(B, NH, DH, "lstm", dtype, direction="forward")
    out, _, gates = plan.split_forward_at(Wx, R, b, s0, fwd, save_gates=True)
    torch.manual_seed(0)
    return torch.randn_like(out), gates, out, s0, R


def _close_to_pick(field, second=None):
    """A check against the chooser's pick: the first output's relative error in ``field`` (and the second's in
    ``second``), at the dtype's tolerance."""

    def compare(out, want):
        outs, wants = (out, want) if isinstance(out, tuple) else ((out,), (want,))
        fields = {field: float(check.relative_error(outs[0].float(), wants[0].float()))}
        if second is not None:
            fields[second] = float(check.relative_error(outs[1].float(), wants[1].float()))
        tol = check.tolerance(outs[0].dtype)
        if not all(math.isfinite(e) and e <= tol for e in fields.values()):
            raise AssertionError(f"{fields} against the chooser's pick (tolerance {tol:.3g})")
        return fields

    return compare


def tiling_benchmark(B, NH, DH, direction, kernel=None) -> bench.Benchmark:
    """Every fitting split tiling of the LSTM (``B``, ``NH`` heads of ``DH``) in ``direction`` ('forward', or
    'backward': the reverse-time kernel alone), checked against the chooser's pick and timed: ``kind='candidate'``
    rows with ``chosen`` marking the pick (``kernel``: a name for the backward's rows, e.g. 'partials')."""
    B, NH, DH = (runtime.positive_int(k, v) for k, v in (("B", B), ("NH", NH), ("DH", DH)))
    direction = runtime.one_of("direction", direction, ("forward", "backward"))
    _, T, dtype = _sizes()
    pick = split_tiling.split_tiling(B, NH, DH, "lstm", dtype, direction=direction)
    cands = [c for c in split_tiling.split_candidates(B, NH, DH, "lstm", dtype, direction=direction) if c.fits]
    cands = {_tile_name(c): c for c in cands}
    if _tile_name(pick) not in cands:
        cands[_tile_name(pick)] = pick
    if direction == "forward":
        providers = {n: _split_forward(c) for n, c in cands.items()}
        inputs = lambda: problem_inputs(B, T, NH, DH, dtype, seed=B + NH + DH)  # noqa: E731
        compare = _close_to_pick("err_vs_pick")
    else:
        providers = {n: (lambda *x, c=c: plan.split_backward_at(*x, c)) for n, c in cands.items()}
        inputs = lambda: _backward_inputs(B, NH, DH, T, dtype)  # noqa: E731
        compare = _close_to_pick("err_dG", "err_ds0") if kernel else _close_to_pick("err_vs_pick")
    params = {
        n: {"kind": "candidate", "block_u": c.block_u, "block_b": c.block_b, "warps": c.num_warps, "split": c.split,
            "programs": c.programs, "est_ms": c.score * T * 1e-6, "chosen": c == pick,
            "regs_est": c.registers_per_thread, "smem_est": c.shared_bytes, **({"kernel": kernel} if kernel else {})}
        for n, c in cands.items()
    }  # fmt: skip
    return bench.Benchmark(
        lesson="07", name=f"split tilings {direction}", cases=[{}], inputs=inputs, providers=providers,
        provider_params=params, reference=_tile_name(pick), check=compare, on_mismatch="record",
        params={"B": B, "NH": NH, "DH": DH, "T": T, "direction": direction},
        label=lambda: f"B{B} {NH}x{DH}",
    )  # fmt: skip


def candidates(progress=None, shapes=None):
    """``python -m gpulab bench 07 candidates`` (``<gpu>-<date>-candidates.jsonl``): every fitting split tiling of
    lesson 8's LSTM layers (B 32, 4 heads of 192 and 1 head of 768), forward and backward kernel, beside the
    chooser's pick."""
    shapes = _shapes(shapes, runtime.pick(cpu=((4, 2, 16),), gpu=((32, 4, 192), (32, 1, 768))))
    return bench.run([tiling_benchmark(*s, d) for s in shapes for d in ("forward", "backward")], progress)


def partials(progress=None, shapes=None):
    """``python -m gpulab bench 07 partials`` (``<gpu>-<date>-partials.jsonl``): the split backward (it exchanges
    partial sums of dh: ``kernel='partials'``) at every fitting tiling beside the chooser's pick, and forward+backward
    of one head of 768 (``kind='fwd+bwd'``) through ``flashrnn`` beside cuDNN's dense ``nn.LSTM`` in fp16 and bf16."""
    gpu = ((16, 1, 768), (32, 1, 768), (32, 4, 192), (16, 1, 512), (16, 1, 1024), (16, 1, 256))
    shapes = _shapes(shapes, runtime.pick(cpu=((4, 1, 16),), gpu=gpu))
    results = bench.run([tiling_benchmark(*s, "backward", kernel="partials") for s in shapes], progress)
    return results + bench.run(training_benchmarks(*runtime.pick(cpu=(4, 1, 16), gpu=(16, 1, 768))), progress)


def training_benchmarks(B, NH, DH) -> list[bench.Benchmark]:
    """``kind='fwd+bwd'``: the recurrence's forward+backward (all four gradients) through ``flashrnn``'s fused
    backend, and cuDNN's dense ``nn.LSTM`` of the same width (its input product too), each checked (states against
    float64; cuDNN against its module in float64)."""
    B, NH, DH = (runtime.positive_int(k, v) for k, v in (("B", B), ("NH", NH), ("DH", DH)))
    _, T, dtype = _sizes()
    ours = bench.Benchmark(
        lesson="07", name="split fwd+bwd", cases=[{}], inputs=lambda: _inputs_nh(B, T, NH, DH, dtype),
        providers={"gpulab fused": _flashrnn("fused")}, provider_params={"gpulab fused": {"case": "gpulab fused"}},
        reference=states_reference, check=check_states, on_mismatch="record",
        params={"kind": "fwd+bwd", "B": B, "NH": NH, "DH": DH, "T": T}, label=lambda: f"B{B} {NH}x{DH}",
    )  # fmt: skip
    H = NH * DH

    def dense_inputs(dtype):
        torch.manual_seed(0)
        m = torch.nn.LSTM(H, H).to(runtime.device, dtype)
        return torch.randn(T, B, H, device=runtime.device, dtype=dtype), m, True

    dense = bench.Benchmark(
        lesson="07", name="split cuDNN fwd+bwd", inputs=dense_inputs,
        cases=[{"dtype": dt} for dt in runtime.pick(cpu=(torch.float32,), gpu=(torch.float16, torch.bfloat16))],
        providers={"cuDNN nn.LSTM": dense_run}, reference=dense_reference, check=check_states, on_mismatch="record",
        params=lambda dtype: {"kind": "fwd+bwd", "B": B, "NH": NH, "DH": DH, "T": T,
                              "case": f"cuDNN nn.LSTM {dtypes.name(dtype)} (dense, with the input product)"},
    )  # fmt: skip
    return [ours, dense]


def _inputs_nh(B, T, NH, DH, dtype):
    return tuple(t.requires_grad_(True) for t in problem_inputs(B, T, NH, DH, dtype))


def _shapes(shapes, default) -> tuple:
    shapes = default if shapes is None else shapes
    if not isinstance(shapes, (list, tuple)) or not shapes or not all(isinstance(s, (list, tuple)) for s in shapes):
        raise TypeError(f"shapes must be a non-empty list of (B, NH, DH), got {shapes!r}.")
    return tuple(tuple(runtime.positive_int("shapes", v) for v in s) for s in shapes)
