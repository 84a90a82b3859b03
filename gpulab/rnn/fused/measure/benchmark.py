"""Lesson 6's measurement (`python -m gpulab bench 06`): the fused RNN against its peers, on the H100.

Problem (the lesson's): LSTM, B = 16, T = 1024, hidden 768 in NH = 12 heads of DH = 64, bf16, Wx given
(recurrence only). Every pass of every problem is a :class:`gpulab.bench.Benchmark` case
(:func:`recurrence_benchmarks`, :func:`dense_benchmarks`): each implementation is checked against the float64
states before any is timed. Records: ``provider`` and ``case`` name the implementation (the graphed one's case is its
eager case, told apart by ``mode``), ``status`` ('ok' or why it did not run: a kernel that does not fit, a peer left
out of a sweep), and ``params``: ``backend``, ``pass`` ('fwd' or 'fwd+bwd'), ``mode`` ('eager' or 'graph'), ``B``,
``T``, ``NH``, ``DH``, ``ns_per_step``, ``vs_vanilla`` (vanilla ms / this ms in the same pass, where vanilla was
timed), ``sweep`` ('main', 'same_flops', 'batch', 'head_dim', 'dense'), ``check`` (a training pass is checked on its
forward states; a mismatch is recorded, not raised). Records stored before the harness kept ``status`` in ``params``.

1. main: gpulab ``fused`` / ``alternating`` (eager and CUDA-graphed) / ``vanilla``; the ``flashrnn`` package's
   ``triton_fused`` and ``vanilla`` (what fails, e.g. its backward on Triton 3.6, is recorded with the error);
   ``torch.nn.LSTM`` (cuDNN, dense 768, fp16 and bf16, which also does the input projection) beside
   ``gpulab.rnn.LSTM`` (12 heads, fused, input projection included);
2. batch sweep 1..256 (forward and forward+backward, vanilla forward only): where does ``alternating`` catch up?
3. head-dim sweep at hidden 768 (DH 16..256): fused wherever :func:`gpulab.rnn.fused.plan.choose` finds a tiling;
4. same FLOPs as cuDNN: NH = 1, DH = 768 (fused split over several SMs, lesson 7; alternating beside it).

FLOPs are the recurrence's ``2 B T G_r NH DH^2`` per pass (x3 for forward+backward: dh and dR); bytes are what a
persistent kernel must move (Wx read, states written; gates written and read again when training), so every record
sits on the lesson 1 roofline at the same intensity per problem (:func:`plot_roofline`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys

import torch

from gpulab import bench, check, dtypes, roofline, runtime
from gpulab.course import palette
from gpulab.rnn.api import flashrnn
from gpulab.rnn.functions import get_function
from gpulab.rnn.fused import plan
from gpulab.rnn.module import LSTM

__all__ = ["benchmark", "problem_inputs", "summary_table", "targets", "plot_results", "plot_roofline", "MAIN"]

MAIN = {"B": 16, "T": 1024, "NH": 12, "DH": 64}
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
HEAD_DIMS = (16, 32, 64, 128, 256)


def problem_inputs(B, T, NH, DH, dtype=torch.bfloat16, function="lstm", seed=0):
    """(Wx, R, b, states) on gpulab's device; R scaled by 0.5 / sqrt(DH) (a contractive, well-conditioned RNN)."""
    fn = get_function(function)
    B, T, NH, DH = (runtime.positive_int(k, v) for k, v in (("B", B), ("T", T), ("NH", NH), ("DH", DH)))
    dtype = dtypes.as_dtype(dtype)
    g = torch.Generator(device="cpu").manual_seed(seed)
    r = lambda *s, sc=1.0: (torch.randn(*s, generator=g) * sc).to(runtime.device, dtype)
    return (
        r(B, T, fn.gates_w, NH, DH),
        r(fn.gates_r, NH, DH, DH, sc=0.5 / DH**0.5),
        r(fn.gates_b, NH, DH, sc=0.1),
        torch.zeros(fn.states, B, 1, NH, DH, device=runtime.device, dtype=dtype),
    )


def _cost(B, T, NH, DH, dtype, training):
    e = torch.empty((), dtype=dtype).element_size()
    H = NH * DH
    flops = 2.0 * B * T * 4 * NH * DH * DH * (3 if training else 1)
    moved = B * T * 4 * H + 2 * B * T * H + 4 * NH * DH * DH  # Wx, states, R
    if training:  # gates written and read, d(states) read, dG written and read (dR, db)
        moved += 2 * B * T * 4 * H + 2 * B * T * H + 2 * B * T * 4 * H + B * T * 4 * H
    return flops, float(e * moved)


PASSES = {"fwd": False, "fwd+bwd": True}


def recurrence(run):
    """A provider of one pass of ``run(Wx, R, b, states) -> (out, last)``: its outputs (fwd, without autograd), or
    its outputs and the gradients of all four inputs (fwd+bwd: the inputs require grad)."""

    def provider(*inputs):
        if not inputs[0].requires_grad:
            with torch.no_grad():
                return run(*inputs)
        out, last = run(*inputs)
        return out, last, *torch.autograd.grad((out, last), inputs, (torch.ones_like(out), torch.ones_like(last)))

    return provider


def _ours(backend):
    return recurrence(lambda *inputs: flashrnn(*inputs, function="lstm", backend=backend))


def _package(backend):
    def run(*inputs):
        from flashrnn import flashrnn as pkg  # the optional peer package, imported only when it runs

        return pkg(*inputs, function="lstm", backend=backend, dtype="bfloat16")

    return recurrence(run)


def states_reference(*inputs):
    """gpulab's vanilla recurrence in fp32 on the same inputs, in float64: the states every backend must match."""
    with torch.no_grad():
        return flashrnn(*(t.detach().float() for t in inputs), function="lstm", backend="vanilla")[0].double()


def check_states(out, ref):
    """The states (or the module's output) against float64; a training pass is checked on its forward.

    :func:`gpulab.check.assert_close_drifting`: over T = 1024 steps a recurrence that carries its state in bf16 (the
    ``vanilla`` backend, as eager PyTorch does) drifts by a few bf16 ulps in a handful of elements out of millions
    (norm-wise 0.004 against 0.03 on the H100), which is rounding, not a wrong element. Returns the relative error
    for the record."""
    out = out[0] if isinstance(out, tuple) else out
    return {"rel_err": check.assert_close_drifting(out, ref, name="states")}


def fused_kernel(sweep, B, T, NH, DH, dtype, training):
    """The kernel whose registers the fused provider's record reports: the one the chooser runs for this problem
    (:func:`gpulab.rnn.fused.plan.kernel`)."""
    return plan.kernel(B, NH, DH, "lstm", dtype, training=training)


def _does_not_fit(B, NH, DH, dtype, training) -> str | None:
    """Why the fused backend cannot run this problem (None when it can: on one SM per head, or split over several,
    as :func:`gpulab.rnn.fused.plan.choose` chooses)."""
    try:
        plan.choose(B, NH, DH, "lstm", dtype, training=training)
    except ValueError as exc:
        return f"does not fit: {exc}"
    return None


OURS = {
    "gpulab fused": {"backend": "fused", "mode": "eager"},
    "gpulab alternating": {"backend": "alternating", "mode": "eager"},
    "gpulab alternating (graph)": {"backend": "alternating", "mode": "graph"},
    "gpulab vanilla": {"backend": "vanilla", "mode": "eager"},
}
PACKAGE = ("triton_fused", "vanilla", "cuda", "cuda_fused")
NOT_ATTEMPTED = "not attempted: flashrnn's CUDA extension does not build on CUDA 13 (NX-AI/flashrnn#7)"


def _skip_ours(provider, sweep, B, T, NH, DH, dtype, training):
    if provider == "gpulab fused":
        return _does_not_fit(B, NH, DH, dtype, training)
    if provider == "gpulab vanilla" and sweep == "same_flops":
        return "not in the same-FLOPs case (it compares fused and alternating)"
    if provider == "gpulab vanilla" and training and sweep == "batch":
        return "forward only in the batch sweep (its backward takes minutes at large batches)"
    return None


def recurrence_benchmarks(problems, dtype, quick_ms=60.0, package=False) -> list[bench.Benchmark]:
    """The recurrence (Wx given) on ``problems`` (dicts of sweep, B, T, NH, DH), one :class:`gpulab.bench.Benchmark`
    per pass: gpulab's backends (``alternating`` also replayed from a CUDA graph) and, with ``package``, the flashrnn
    package's at the main problem. Every provider's states are checked against :func:`states_reference` before any
    is timed (a training pass on its forward states); a mismatch is recorded in ``params['check']``."""
    out = []
    for pass_, training in PASSES.items():

        def inputs(sweep, B, T, NH, DH, dtype=dtype, training=training):
            return tuple(t.requires_grad_(training) for t in problem_inputs(B, T, NH, DH, dtype))

        def cost(i, sweep, B, T, NH, DH, training=training):
            return _cost(B, T, NH, DH, dtype, training)[i]

        common = dict(
            lesson="06",
            inputs=inputs,
            reference=states_reference,
            check=check_states,
            on_mismatch="record",
            params={"pass": pass_},
            flops=lambda cost=cost, **x: cost(0, **x),
            bytes=lambda cost=cost, **x: cost(1, **x),
            shape=lambda sweep, B, T, NH, DH: [B, T, NH, DH],
            warmup_ms=runtime.pick(cpu=0.0, gpu=20.0),
            rep_ms=runtime.pick(cpu=1.0, gpu=quick_ms),
        )
        ours = {name: _ours(p["backend"]) for name, p in OURS.items() if p["mode"] == "eager"}
        ours["gpulab alternating (graph)"] = bench.graphed(ours["gpulab alternating"])
        if training:
            del ours["gpulab alternating (graph)"]
        out.append(
            bench.Benchmark(
                name=f"lstm recurrence {pass_}",
                cases=list(problems),
                providers=ours,
                provider_params={name: OURS[name] for name in ours},
                skip=lambda provider, training=training, **x: _skip_ours(provider, **x, dtype=dtype, training=training),
                kernels={
                    "gpulab fused": lambda training=training, **x: fused_kernel(**x, dtype=dtype, training=training)
                },
                **common,
            )
        )
        if package:
            main = [p for p in problems if p["sweep"] == "main"]
            peers = {f"flashrnn {b}": _package(b) for b in PACKAGE[:2]}
            peers.update({f"flashrnn {b}": bench.unavailable(NOT_ATTEMPTED) for b in PACKAGE[2:]})
            params = {name: {"backend": name, "mode": "eager"} for name in peers}
            out.append(bench.Benchmark(name=f"flashrnn package {pass_}", cases=main, providers=peers,
                                       provider_params=params, **common))  # fmt: skip
    return out


def dense_run(x, m, training):
    if not training:
        with torch.no_grad():
            return m(x)[0]
    y, _ = m(x)
    return y, *torch.autograd.grad(y, list(m.parameters()), torch.ones_like(y))


def dense_reference(x, m, training):
    """The same module in float64 (gpulab's on its vanilla backend)."""
    m64 = copy.deepcopy(m).double()
    if isinstance(m64, LSTM):
        m64.backend = "vanilla"
    with torch.no_grad():
        return m64(x.double())[0]


def dense_benchmarks(B, T, H, dtypes, heads) -> list[bench.Benchmark]:
    """``torch.nn.LSTM`` (cuDNN, dense H) and ``gpulab.rnn.LSTM`` (``heads`` heads, fused; bf16 only on a GPU), both
    with the input projection, forward and forward+backward; each checked against its own module in float64. Cases:
    dicts of ``dtype`` and ``pass``."""
    out = []
    for name, nh in (("cuDNN nn.LSTM (dense)", 1), ("gpulab.rnn.LSTM (fused)", heads)):
        dh = H // nh

        def inputs(nh=nh, **x):
            torch.manual_seed(0)
            m = torch.nn.LSTM(H, H) if nh == 1 else LSTM(H, H, num_heads=nh, backend="fused")
            x_in = torch.randn(T, B, H, device=runtime.device, dtype=x["dtype"])
            return x_in, m.to(runtime.device, x["dtype"]), PASSES[x["pass"]]

        def cost(i, nh=nh, dh=dh, **x):
            training = PASSES[x["pass"]]
            projection = 2.0 * T * B * H * 4 * H * (3 if training else 1)  # the input product, in FLOPs only
            return _cost(B, T, nh, dh, x["dtype"], training)[i] + (projection if i == 0 else 0.0)

        gpu_bf16 = nh > 1 and runtime.on_gpu()
        cases = [{"dtype": dt, "pass": p} for dt in dtypes for p in PASSES if not gpu_bf16 or dt == torch.bfloat16]
        out.append(
            bench.Benchmark(
                lesson="06",
                name=f"lstm with input projection, {nh} heads",
                cases=cases,
                inputs=inputs,
                providers={name: dense_run},
                provider_params={name: {"backend": name, "mode": "eager"}},
                reference=dense_reference,
                check=check_states,
                on_mismatch="record",
                params={"sweep": "dense", "includes_input_projection": True, "B": B, "T": T, "NH": nh, "DH": dh},
                flops=lambda cost=cost, **x: cost(0, **x),
                bytes=lambda cost=cost, **x: cost(1, **x),
                shape=[B, T, nh, dh],
                warmup_ms=runtime.pick(cpu=0.0, gpu=20.0),
                rep_ms=runtime.pick(cpu=1.0, gpu=60.0),
            )
        )
    return out


def problems(main, batches, head_dims, hidden) -> list[dict]:
    """The recurrence's cases: the main problem, the same FLOPs as cuDNN (one head of ``hidden``), the batch sweep and
    the head-dim sweep at width ``hidden``."""
    B, T, NH, DH = main["B"], main["T"], main["NH"], main["DH"]
    out = [dict(sweep="main", B=B, T=T, NH=NH, DH=DH), dict(sweep="same_flops", B=B, T=T, NH=1, DH=hidden)]
    out += [dict(sweep="batch", B=b, T=T, NH=NH, DH=DH) for b in batches if b != B]
    out += [dict(sweep="head_dim", B=B, T=T, NH=hidden // dh, DH=dh) for dh in head_dims if dh != DH]
    return out


def benchmark(progress=None, quick_ms=None):
    """`python -m gpulab bench 06`. Returns (results, figure). On CPU: a tiny version (interpreter, not GPU numbers).
    ``quick_ms``: the timing budget per fast configuration (default 60 ms)."""
    results = bench.run(benchmarks(quick_ms), progress)
    return report(results)


def benchmarks(quick_ms=None) -> list[bench.Benchmark]:
    """Lesson 6's benchmarks, as `python -m gpulab bench 06` runs them (tiny ones on CPU): the recurrence's two
    passes over :func:`problems`, then the dense comparison with ``nn.LSTM``."""
    quick_ms = 60.0 if quick_ms is None else runtime.finite_float("quick_ms", quick_ms, positive=True)
    on_gpu = runtime.on_gpu()
    dtype = torch.bfloat16 if on_gpu else torch.float32
    main = MAIN if on_gpu else {"B": 2, "T": 4, "NH": 2, "DH": 16}
    hidden = 768 if on_gpu else 32
    cases = problems(main, BATCHES if on_gpu else (1, 3), HEAD_DIMS if on_gpu else (16, 32), hidden)
    out = recurrence_benchmarks(cases, dtype, quick_ms, package=on_gpu)
    dense_dtypes = (torch.float16, torch.bfloat16) if on_gpu else (torch.float32,)
    return out + dense_benchmarks(main["B"], main["T"], hidden, dense_dtypes, main["NH"])


def report(results):
    """Annotate the results of :func:`benchmarks` for lesson 6's readers, print the table and the targets; returns
    (results, figure)."""
    import matplotlib  # deferred: heavy, and only the benchmark draws

    if "ipykernel" not in sys.modules:
        matplotlib.use("Agg")
    _annotate(results)
    print(summary_table(results))
    for line in targets(results):
        print(line)
    return results, plot_results(results)


def _key(r):
    p = r.params
    return (p.get("B"), p.get("NH"), p.get("DH"), p.get("pass"))


def _annotate(results):
    """The fields lesson 6's readers use beyond the harness's: ``case`` names the implementation (as in the stored
    records and the README table; the graphed provider's case is its eager one's, told apart by ``mode``),
    ``ns_per_step``, ``interpreter``, and ``vs_vanilla``: gpulab vanilla's ms (same problem and pass, eager) / this
    ms."""
    for r in results:
        r.case = r.provider.removesuffix(" (graph)")
        r.params["ns_per_step"] = r.ms * 1e6 / r.params["T"] if r.ms == r.ms else None
        r.params["interpreter"] = r.interpreter
    base = {
        _key(r): r.ms
        for r in results
        if r.params.get("backend") == "vanilla" and r.params.get("mode") == "eager" and r.ms == r.ms
    }
    for r in results:
        v = base.get(_key(r))
        r.params["vs_vanilla"] = v / r.ms if (v and r.ms == r.ms) else None


def _find(results, backend, pass_, mode="eager", sweep="main"):
    for r in results:
        p = r.params
        if (p.get("backend"), p.get("pass"), p.get("mode"), p.get("sweep")) == (backend, pass_, mode, sweep):
            return r
    return None


def summary_table(results) -> str:
    """Every record: case, dtype, pass, mode, B/NH/DH, ms, ns per step, TFLOP/s, x vanilla, status."""
    results = bench.result_list("results", results)
    head = (
        f"{'case':30s} {'dtype':8s} {'sweep':10s} {'pass':8s} {'mode':5s} {'B':>4s} {'NH':>3s} {'DH':>4s} {'ms':>9s} "
    )
    head += f"{'ns/step':>9s} {'TFLOP/s':>8s} {'x vanilla':>9s}  status"
    lines = [head, "-" * len(head)]
    for r in results:
        p = r.params
        ms = "n/a" if r.ms != r.ms else (f"{r.ms:.3g}" if r.ms < 100 else f"{r.ms:.0f}")
        ns = f"{p['ns_per_step']:.0f}" if p.get("ns_per_step") else "-"
        tf = f"{r.tflops:.3g}" if r.tflops and r.ms == r.ms else "-"
        vs = f"{p['vs_vanilla']:.1f}x" if p.get("vs_vanilla") else "-"
        st = r.status if r.status != "ok" else p.get("status", "ok")  # stored records before the harness: in params
        st = st if st == "ok" else st[:70]
        if p.get("check") not in (None, "ok", "-"):
            st += " CHECK " + p["check"][:40]
        lines.append(
            f"{r.case[:30]:30s} {(r.dtype or '')[:8]:8s} {p.get('sweep', ''):10s} {p.get('pass', ''):8s} "
            f"{p.get('mode', ''):5s} {p.get('B', '')!s:>4s} {p.get('NH', '')!s:>3s} {p.get('DH', '')!s:>4s} "
            f"{ms:>9s} {ns:>9s} {tf:>8s} {vs:>9s}  {st}"
        )
    return "\n".join(lines)


def targets(results) -> list[str]:
    """The lesson's targets at the main problem: fused fwd <= 0.7 ms, fwd+bwd <= 2.3 ms, >= 3x alternating."""
    results = bench.result_list("results", results)
    out = []
    f, fb = _find(results, "fused", "fwd"), _find(results, "fused", "fwd+bwd")
    alt = [r for r in (_find(results, "alternating", "fwd"), _find(results, "alternating", "fwd", "graph")) if r]
    note = " [interpreter: not GPU numbers]" if results and results[0].params.get("interpreter") else ""
    if f:
        out.append(f"target fused forward <= 0.7 ms: {f.ms:.3g} ms: {'MET' if f.ms <= 0.7 else 'not met'}{note}")
    if fb:
        out.append(f"target fused fwd+bwd <= 2.3 ms: {fb.ms:.3g} ms: {'MET' if fb.ms <= 2.3 else 'not met'}{note}")
    if f and alt:
        best = min(alt, key=lambda r: r.ms)
        ratio = best.ms / f.ms
        out.append(
            f"target fused >= 3x alternating (best mode, {best.params['mode']}) at B=16: {ratio:.1f}x: "
            f"{'MET' if ratio >= 3 else 'not met'}{note}"
        )
    sweep = {}
    for r in results:
        p = r.params
        if p.get("sweep") in ("batch", "main") and p.get("pass") == "fwd" and r.ms == r.ms:
            if p.get("backend") in ("fused", "alternating") and p.get("NH") == _main_problem(results)["NH"]:
                k = (p["B"], p["backend"])
                sweep[k] = min(sweep.get(k, math.inf), r.ms)
    for b in sorted({k[0] for k in sweep}):
        if (b, "fused") in sweep and (b, "alternating") in sweep and b <= 16:
            ratio = sweep[(b, "alternating")] / sweep[(b, "fused")]
            out.append(f"  B={b}: fused {ratio:.1f}x faster than alternating (best mode){note}")
    return out


def _main_problem(results) -> dict:
    """B, T, NH, DH of the main problem as recorded (the CPU run uses a tiny one), else :data:`MAIN`."""
    for r in results:
        if r.params.get("sweep") == "main" and all(k in r.params for k in MAIN):
            return {k: r.params[k] for k in MAIN}
    return dict(MAIN)


def plot_results(results):
    """Three panels: the main problem (ms per implementation), the batch sweep and the head-dim sweep (ns per step);
    the roofline is :func:`plot_roofline`'s own figure."""
    results = bench.result_list("results", results)
    import matplotlib.pyplot as plt  # deferred: heavy, and only figures need it

    fig, axes = plt.subplots(1, 3, figsize=(16, 5.5), gridspec_kw={"width_ratios": [1.2, 1, 1]})
    prob = _main_problem(results)
    ax = axes[0]
    main = [r for r in results if r.params.get("sweep") in ("main", "dense") and r.ms == r.ms]
    labels = [
        f"{r.case} {r.params['pass']}{' graph' if r.params.get('mode') == 'graph' else ''} {dtypes.short(r.dtype)}"
        for r in main
    ]
    for i, r in enumerate(main):  # each bar its provider's palette colour; forward+backward hatched
        key = palette.key_of(r.case, "gpulab")
        hatch = "//" if r.params["pass"] != "fwd" else None
        ax.barh(i, r.ms, color=palette.color(key), hatch=hatch, edgecolor=palette.guide("faint"))
    ax.set_yticks(range(len(main)), labels, fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("ms (log, device time)")
    where = "interpreter, not GPU numbers" if results and results[0].params.get("interpreter") else results[0].device
    ax.set_title(f"LSTM B={prob['B']} T={prob['T']} hidden {prob['NH'] * prob['DH']} ({where})", fontsize=9)
    for panel, sweep, x in ((axes[1], "batch", "B"), (axes[2], "head_dim", "DH")):
        groups = {}
        for r in results:
            p = r.params
            if (
                (p.get("sweep") in (sweep, "main"))
                and r.ms == r.ms
                and p.get("backend") in ("fused", "alternating", "vanilla")
            ):
                if sweep == "batch" and p.get("NH") != prob["NH"]:
                    continue
                if sweep == "head_dim" and p.get("B") != prob["B"]:
                    continue
                name = f"{p['backend']} {p['pass']}" + (" graph" if p.get("mode") == "graph" else "")
                groups.setdefault((p["backend"], p["pass"], p.get("mode")), []).append((p[x], p["ns_per_step"]))
        for (backend, pss, mode), pts in sorted(groups.items()):
            pts = sorted(pts)
            name = f"gpulab {backend} {pss}" + (" graph" if mode == "graph" else "")
            # forward solid, forward+backward dashed with hollow markers, graphs dotted; one palette colour a backend
            ls = ":" if mode == "graph" else "--" if pss != "fwd" else "-"
            face = "none" if pss != "fwd" else None
            if len(pts) == 1:  # measured at the main problem only: a labelled point, not a lone dot among lines
                name += f" (only at {x} = {pts[0][0]})"
            panel.plot([a for a, _ in pts], [b for _, b in pts], **palette.style(backend, label=name, linestyle=ls,
                       ms=4 if len(pts) > 1 else 7, markerfacecolor=face))  # fmt: skip
        panel.set_xscale("log", base=2)
        tested = sorted({a for pts in groups.values() for a, _ in pts})
        if tested:
            panel.set_xticks(tested, [str(t) for t in tested])  # ticks at the tested values
            panel.minorticks_off()
        panel.set_yscale("log")
        panel.set_xlabel("batch B" if sweep == "batch" else "head dim DH (hidden 768 = NH x DH)")
        panel.set_ylabel("ns per time step")
        panel.set_title(
            f"batch sweep: NH {prob['NH']}, DH {prob['DH']}, T {prob['T']}" if sweep == "batch"
            else f"head-dim sweep: B {prob['B']}, hidden {prob['NH'] * prob['DH']}, T {prob['T']}", fontsize=9,
        )  # fmt: skip
        if groups:  # below the panel: inside, it covered points
            panel.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
        palette.apply(panel)
    fig.tight_layout()
    return fig


def plot_roofline(results, ax=None):
    """The main problem's implementations (forward, eager; fused also fwd+bwd) on the lesson 1 roofline."""
    results = bench.result_list("results", results)
    picked = [
        dataclasses.replace(r, case=f"{r.case} {r.params['pass']}")
        for r in results
        if r.params.get("sweep") == "main" and r.ms == r.ms and r.params.get("mode") == "eager"
    ]
    return roofline.plot(picked, ax=ax, title="LSTM recurrence B=16 T=1024 NH=12 DH=64 on the roofline")
