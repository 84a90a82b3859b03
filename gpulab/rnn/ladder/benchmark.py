"""Lesson 3's measurement (`python -m gpulab bench 03`): every ladder step, eager and graphed, beside cuDNN.

Each implementation is checked against ``nn.LSTM`` run in float64 on the same weights before it is timed; the table
(:func:`ladder_table`) and the targets (:func:`targets`) read the records; :mod:`gpulab.rnn.ladder.plot` draws them.
The problem is the article's (:data:`ARTICLE`) on a GPU and a tiny one in the interpreter (:func:`problem`).
"""

from __future__ import annotations

import copy
import sys

import torch

from gpulab import bench, check, roofline, runtime
from gpulab.bench import Result, no_tf32
from gpulab.dtypes import as_dtype
from gpulab.rnn.ladder.plot import find, plot_ladder, result_dtypes, short_dtype
from gpulab.rnn.ladder.steps import BEYOND_ARTICLE, STEPS, run_step
from gpulab.rnn.weights import from_torch_lstm

__all__ = [
    "ARTICLE",
    "ARTICLE_M40",
    "problem",
    "make_problem",
    "check_outputs",
    "benchmark",
    "ladder_table",
    "targets",
    "same_mode",
    "SAME_MODE_CLOCKS",
    "mode_ms",
    "same_mode_summary",
    "slower_graphed",
    "math_floor_ms",
]

ARTICLE = {"layers": 4, "hidden": 512, "batch": 64, "seq": 100}
"""The article's problem: 4 layers, hidden (= input) 512, minibatch 64, sequence 100, forward only."""

ARTICLE_M40 = {"step 0 GFLOP/s": 349, "best GFLOP/s": 3898, "speed-up": 11.1}
"""The article's own numbers on a 2016 Tesla M40 (fp32)."""


def problem():
    """The problem size for this mode: the article's on a GPU, a tiny one for the CPU interpreter."""
    return runtime.pick(cpu={"layers": 2, "hidden": 16, "batch": 3, "seq": 4}, gpu=dict(ARTICLE))


def make_problem(dtype=torch.float32, layers=None, hidden=None, batch=None, seq=None, input_size=None, seed=0):
    """(module, weights, x): a seeded ``nn.LSTM`` in ``dtype`` on gpulab's device (flattened for cuDNN), its
    :class:`LSTMWeights` and a random input [T, B, I]."""
    p = problem()
    size = lambda name, v, default: default if v is None else runtime.positive_int(name, v)  # 0 is refused
    layers, hidden = size("layers", layers, p["layers"]), size("hidden", hidden, p["hidden"])
    batch, seq = size("batch", batch, p["batch"]), size("seq", seq, p["seq"])
    input_size = size("input_size", input_size, hidden)
    dtype = as_dtype(dtype)
    torch.manual_seed(seed)
    module = torch.nn.LSTM(input_size, hidden, num_layers=layers).to(runtime.device, dtype).eval()
    if runtime.on_gpu():
        module.flatten_parameters()
    x = check.random_tensor(seq, batch, input_size, dtype=dtype, seed=seed + 1)
    return module, from_torch_lstm(module), x


def check_outputs(out, ref, dtype, context):
    """Assert that a step's ``(y, (h_n, c_n))`` match the reference's (:func:`gpulab.check.assert_close`)."""
    y, (h, c) = out
    y_r, (h_r, c_r) = ref
    check.assert_close(y, y_r, dtype=dtype, name="y", context=context)
    check.assert_close(h, h_r, dtype=dtype, name="h_n", context=context)
    check.assert_close(c, c_r, dtype=dtype, name="c_n", context=context)


def _provider(step):
    """Step ``step`` (or cuDNN's ``nn.LSTM``) on a problem's (module, weights, x), without autograd."""

    def run(module, weights, x):
        with torch.no_grad():
            return module(x) if step == "cuDNN" else run_step(step, x, weights)

    return run


def _reference(module, weights, x):
    """``nn.LSTM`` in float64 on the same weights and input."""
    with torch.no_grad():
        return copy.deepcopy(module).double()(x.double())


def ladder_benchmark(dtypes, steps) -> bench.Benchmark:
    """Every step of ``steps`` and cuDNN (each also replayed from a CUDA graph on a GPU) on :func:`problem` in each
    of ``dtypes``, as a :class:`gpulab.bench.Benchmark`: every implementation checked against ``nn.LSTM`` in float64
    (:func:`check_outputs`) before any is timed; a mismatch is recorded in ``params['check']``."""
    p = problem()
    names = {n: f"step {n}: {STEPS[n][0]}" for n in steps}
    names["cuDNN"] = "cuDNN (nn.LSTM)"
    providers, fields = {}, {}
    for n, name in names.items():
        providers[name] = _provider(n)
        fields[name] = {"step": n, "mode": "eager", "beyond": n in BEYOND_ARTICLE}
    if runtime.on_gpu():  # graphs are a CUDA feature: on CPU, no graphed records at all
        for name in names.values():
            providers[f"{name} (graph)"] = bench.graphed(providers[name])
            fields[f"{name} (graph)"] = {**fields[name], "mode": "graph"}
    cost = lambda dtype: roofline.lstm_sequence(p["batch"], p["seq"], p["hidden"], p["hidden"], dtype,  # noqa: E731
                                                layers=p["layers"])  # fmt: skip
    return bench.Benchmark(
        lesson="03",
        name="lstm ladder",
        cases=[{"dtype": dt} for dt in dtypes],
        inputs=make_problem,
        providers=providers,
        provider_params=fields,
        reference=_reference,
        check=lambda out, ref: check_outputs(out, ref, out[0].dtype, "against nn.LSTM in float64"),
        on_mismatch="record",
        flops=lambda dtype: cost(dtype).flops,
        bytes=lambda dtype: cost(dtype).bytes,
        shape=[p["layers"], p["seq"], p["batch"], p["hidden"]],
        label=lambda dtype: short_dtype(str(dtype).replace("torch.", "")),
        warmup_ms=runtime.pick(cpu=0.0, gpu=25.0),
        rep_ms=runtime.pick(cpu=1.0, gpu=150.0),
    )


def benchmark(progress=None, dtypes=None, steps=None):
    """`python -m gpulab bench 03`: every step, eager and graphed, and cuDNN, in fp32 (no TF32), fp16, bf16.

    Each implementation is checked against ``nn.LSTM`` run in float64 on the same weights before it is timed
    (``params['check']``: 'ok', or the failure). Records: params ``step`` (0-7 or 'cuDNN'), ``mode`` ('eager' or
    'graph'), ``speedup`` over step 0 in the same dtype and mode, ``vs_cudnn`` (cuDNN's ms in the same mode / this
    ms: above 1 is faster than cuDNN), ``beyond`` (not in the article). An implementation that did not run (e.g. a
    graph capture that failed) is printed, not returned. Returns (results, bar chart figure).
    """
    import matplotlib  # deferred: heavy, and only the benchmark draws

    if "ipykernel" not in sys.modules:  # headless from the command line; a notebook keeps its inline backend
        matplotlib.use("Agg")
    if dtypes is None:
        dtypes = runtime.pick(cpu=[torch.float32, torch.float16], gpu=[torch.float32, torch.float16, torch.bfloat16])
    steps = sorted(STEPS) if steps is None else [runtime.one_of("steps' item", n, sorted(STEPS)) for n in steps]
    dtypes = [as_dtype(dt, "dtypes' item") for dt in dtypes]
    with no_tf32():
        records = bench.run(ladder_benchmark(dtypes, steps), progress)
    results = []
    for r in records:
        if r.status != "ok":
            print(f"{r.provider} [{r.dtype}]: {r.status}")
            continue
        if not r.params["check"] == "ok":
            print(f"{r.provider} [{r.dtype}]: check {r.params['check']}")
        r.case = r.provider.removesuffix(" (graph)")  # the stored records' case: the step, its mode in params
        r.params["interpreter"] = r.interpreter
        results.append(r)
    _annotate(results)
    if runtime.on_gpu():
        print(ladder_table(results))
        for line in targets(results):
            print(line)
    else:  # a CPU run checks the steps; its timings would only mislead
        print(bench.interpreter_summary(results, "nn.LSTM in float64"))
    return results, plot_ladder(results)


def _annotate(results):
    """speedup (over step 0) and vs_cudnn (cuDNN ms / ms) on every record, both in the same dtype and mode."""
    for r in results:
        base = find(results, r.dtype, 0, r.params["mode"])
        cudnn = find(results, r.dtype, "cuDNN", r.params["mode"])
        r.params["speedup"] = base.ms / r.ms if base else None
        r.params["vs_cudnn"] = cudnn.ms / r.ms if cudnn else None


def ladder_table(results) -> str:
    """The ladder as text, one block per dtype: eager and graphed ms, TFLOP/s, speed-up over step 0, vs cuDNN."""
    results = bench.result_list("results", results)
    lines = []
    for dt in result_dtypes(results):
        rs = [r for r in results if r.dtype == dt]
        where = rs[0].device + (" (interpreter: not GPU numbers)" if rs[0].params.get("interpreter") else "")
        lines.append(f"{short_dtype(dt)} on {where}")
        head = f"{'step':>5s}  {'what':56s} {'eager dev':>9s} {'graph dev':>9s} {'TFLOP/s':>8s}"
        head += f" {'x step 0':>9s} {'vs cuDNN':>9s}"
        lines += [head, "-" * len(head)]
        steps = list(dict.fromkeys(r.params["step"] for r in rs))
        for s in steps:
            e, g = find(rs, dt, s, "eager"), find(rs, dt, s, "graph")
            best = min([r for r in (e, g) if r], key=lambda r: r.ms)
            what = "cuDNN (torch.nn.LSTM, flattened)" if s == "cuDNN" else STEPS[s][0]
            bad = any(r and r.params.get("check", "ok") != "ok" for r in (e, g))
            what = (what + " [CHECK FAILED]") if bad else what
            sp = best.params.get("speedup")
            peer = find(rs, dt, "cuDNN", best.params["mode"])  # cuDNN in the same mode: graphed vs graphed
            vs = peer.ms / best.ms if peer else None
            lines.append(
                f"{s!s:>5s}  {what[:56]:56s} {_ms(e):>9s} {_ms(g):>9s} {best.tflops:8.3g} "
                f"{'-' if sp is None else f'{sp:8.1f}x':>9s} {'-' if vs is None else f'{vs:8.2f}x':>9s}"
            )
        lines.append("")
    lines.append("dev: device time in ms (CUDA events), eager launches and graph replays alike; TFLOP/s and the ratios "
                 "on it. An eager loop pays wall time: the same-mode summary prints it.")  # fmt: skip
    return "\n".join(lines).rstrip()


def _ms(r):
    if r is None:
        return "n/a"
    return f"{r.ms:.3g}" if r.ms < 100 else f"{r.ms:.0f}"


def same_mode(results) -> list[tuple[str, str, Result, Result]]:
    """``(dtype, mode, best step, cuDNN)`` per dtype and mode ('eager', 'graph'): the fastest checked step against
    cuDNN in the same mode, graphed against graphed and eager against eager (a graphed step against eager cuDNN
    would credit the ladder with launch costs that cuDNN sheds in a graph too)."""
    results = bench.result_list("results", results)
    out = []
    for dt in result_dtypes(results):
        for mode in ("eager", "graph"):
            rs = [r for r in results if r.dtype == dt and r.params["mode"] == mode]
            steps = [r for r in rs if r.params["step"] != "cuDNN" and r.params.get("check", "ok") == "ok"]
            cud = [r for r in rs if r.params["step"] == "cuDNN"]
            if steps and cud:
                out.append((dt, mode, min(steps, key=lambda r: r.ms), cud[0]))
    return out


SAME_MODE_CLOCKS = (
    "Eager times are wall clock per call (what a loop pays), graphed times device time; each step is compared with "
    "cuDNN in the same mode."
)
"""How lesson 3's comparison reads its records (:func:`mode_ms`), said once for the notebook and the README."""


def mode_ms(record: Result) -> float:
    """``record``'s time on its mode's clock: an eager call on the wall clock (what a loop pays; the device time for
    a record without a wall time), a graphed one on device time (a graph leaves the host no work)."""
    if record.params["mode"] == "eager" and record.wall_ms is not None:
        return record.wall_ms
    return record.ms


def same_mode_summary(results) -> str:
    """:data:`SAME_MODE_CLOCKS`, then for every :func:`same_mode` pair the best step against cuDNN, both read with
    :func:`mode_ms`: eager on wall clock, graphed on device time."""
    lines = [SAME_MODE_CLOCKS]
    for dt, mode, best, cud in same_mode(results):
        clock = "wall" if mode == "eager" else "device"
        b, c = mode_ms(best), mode_ms(cud)
        lines.append(
            f"{dt:9s} {mode:5s} ({clock} clock): best step {best.params['step']} {b:6.2f} ms, cuDNN {c:6.2f} ms: "
            f"{c / b:.2f}x cuDNN's speed"
        )
    return "\n".join(lines)


def slower_graphed(results) -> list[tuple[str, object, Result, Result]]:
    """``(dtype, step, eager, graphed)`` for every step whose graph took longer than its eager call (device time)."""
    results = bench.result_list("results", results)
    out = []
    for dt in result_dtypes(results):
        for step in dict.fromkeys(r.params["step"] for r in results if r.dtype == dt):
            e, g = find(results, dt, step, "eager"), find(results, dt, step, "graph")
            if e is not None and g is not None and g.ms > e.ms:
                out.append((dt, step, e, g))
    return out


def targets(results) -> list[str]:
    """Per dtype: is the best step at least as fast as cuDNN in the same mode (graphed if the run has graphs)?"""
    results = bench.result_list("results", results)
    out = []
    pairs = same_mode(results)
    for dt in result_dtypes(results):
        mine = [p for p in pairs if p[0] == dt]
        if not mine:
            continue
        _, mode, best, cud = max(mine, key=lambda p: p[1] == "graph")
        out.append(
            f"target {short_dtype(dt)}: best step {best.params['step']} ({mode}) {best.ms:.3g} ms vs cuDNN "
            f"({mode}) {cud.ms:.3g} ms: {'MET' if best.ms <= cud.ms else 'not met'}"
            + (" [interpreter: not GPU numbers]" if best.params.get("interpreter") else "")
        )
    return out


def math_floor_ms(dtype, ceilings=None) -> float | None:
    """The article problem's FLOPs at the compute roof of ``dtype``: the time no implementation can beat."""
    p = dict(ARTICLE)
    cost = roofline.lstm_sequence(p["batch"], p["seq"], p["hidden"], p["hidden"], dtype, layers=p["layers"])
    c = roofline.ceilings(ceilings) if ceilings is not None and not isinstance(ceilings, roofline.Ceilings) else None
    c = c or (ceilings if isinstance(ceilings, roofline.Ceilings) else roofline.ceilings())
    peak = c.compute(cost.compute)
    return cost.flops / (peak * 1e12) * 1e3 if peak else None
