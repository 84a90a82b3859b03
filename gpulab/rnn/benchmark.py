"""Lesson 5's measurement (`python -m gpulab bench 05`): the fused RNN against its peers, on the H100.

Problem (the issue's): LSTM, B = 16, T = 1024, hidden 768 in NH = 12 heads of DH = 64, bf16, Wx given
(recurrence only). Records, each with ``params``: ``backend``, ``pass`` ('fwd' or 'fwd+bwd'), ``mode`` ('eager' or
'graph'), ``B``, ``T``, ``NH``, ``DH``, ``ns_per_step``, ``vs_vanilla`` (vanilla ms / this ms in the same pass, where
vanilla was timed), ``sweep`` ('main', 'batch', 'head_dim', 'dense'), ``status`` ('ok' or why not), ``check``.

1. main: gpulab ``fused`` / ``alternating`` (eager and CUDA-graphed) / ``vanilla``; the ``flashrnn`` package's
   ``triton_fused`` and ``vanilla`` (what fails, e.g. its backward on Triton 3.6, is recorded with the error);
   ``torch.nn.LSTM`` (cuDNN, dense 768, fp16 and bf16, which also does the input projection) beside
   ``gpulab.rnn.LSTM`` (12 heads, fused, input projection included);
2. batch sweep 1..256 (forward; fused also forward+backward): where does ``alternating`` catch up?
3. head-dim sweep at hidden 768 (DH 16..256): fused wherever :mod:`gpulab.rnn.tiling` says it fits;
4. same FLOPs as cuDNN: NH = 1, DH = 768 (fused does not fit; alternating runs it).

FLOPs are the recurrence's ``2 B T G_r NH DH^2`` per pass (x3 for forward+backward: dh and dR); bytes are what a
persistent kernel must move (Wx read, states written; gates written and read again when training), so every record
sits on the lesson 1 roofline at the same intensity per problem (:func:`plot_roofline`).
"""

from __future__ import annotations

import dataclasses
import math
import sys

import torch

from gpulab import bench, check, roofline, runtime
from gpulab.bench import capture
from gpulab.rnn.api import flashrnn
from gpulab.rnn.backends.fused.backward import fused_backward_kernel
from gpulab.rnn.backends.fused.forward import fused_forward_kernel
from gpulab.rnn.functions import get_function
from gpulab.rnn.module import LSTM
from gpulab.rnn.tiling import fits, fused_tiling

__all__ = ["benchmark", "problem_inputs", "summary_table", "plot_results", "plot_roofline", "MAIN"]

MAIN = {"B": 16, "T": 1024, "NH": 12, "DH": 64}
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
HEAD_DIMS = (16, 32, 64, 128, 256)


def problem_inputs(B, T, NH, DH, dtype=torch.bfloat16, function="lstm", seed=0):
    """(Wx, R, b, states) on gpulab's device; R scaled by 0.5 / sqrt(DH) (a contractive, well-conditioned RNN)."""
    fn = get_function(function)
    B, T, NH, DH = (runtime.positive_int(k, v) for k, v in (("B", B), ("T", T), ("NH", NH), ("DH", DH)))
    dtype = runtime.as_dtype(dtype)
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


def _fwd(backend, inputs, package=False):
    if package:
        from flashrnn import flashrnn as pkg  # the optional peer package, imported only when it is timed

        return lambda: pkg(*inputs, function="lstm", backend=backend, dtype="bfloat16")
    return lambda: flashrnn(*inputs, function="lstm", backend=backend)


def _fwd_bwd(backend, inputs, package=False):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    fwd = _fwd(backend, leaves, package)
    grads = None

    def run():
        out, last = fwd()
        return torch.autograd.grad((out, last), leaves, (torch.ones_like(out), torch.ones_like(last)))

    _ = grads
    return run


def _graph(fn):
    with torch.no_grad():
        return capture(fn)


class _Bench:
    """Measures one configuration after another, catching failures as records with ``status``."""

    def __init__(self, quick):
        self.results = []
        self.quick = quick

    def time(self, fn, case, B, T, NH, DH, dtype, training, slow=False, kernel=None, **params):
        flops, moved = _cost(B, T, NH, DH, dtype, training)
        status = "ok"
        try:
            if params.get("mode") == "graph":
                fn = _graph(fn)
                if fn is None:
                    return None
            ctx = torch.enable_grad() if training else torch.no_grad()
            with ctx:
                r = bench.measure(
                    fn,
                    lesson="05",
                    case=case,
                    flops=flops,
                    bytes=moved,
                    dtype=dtype,
                    shape=[B, T, NH, DH],
                    kernel=kernel,
                    warmup_ms=runtime.pick(cpu=0, gpu=2 if slow else 20),
                    rep_ms=runtime.pick(cpu=1, gpu=1 if slow else self.quick),
                    B=B,
                    T=T,
                    NH=NH,
                    DH=DH,
                    status=status,
                    interpreter=not runtime.on_gpu(),
                    **{"pass": "fwd+bwd" if training else "fwd", "mode": "eager", **params},
                )
        except Exception as exc:  # noqa: BLE001 - a backend that cannot run here is a result too
            # The whole message (a compiler error's first line says only where it happened), trimmed for the file.
            msg = f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}" if str(exc) else type(exc).__name__
            print(f"{case}: unavailable ({msg[:300]})")
            r = _record(case, B, T, NH, DH, dtype, f"unavailable: {msg}",
                        **{"pass": "fwd+bwd" if training else "fwd", "mode": "eager", **params})  # fmt: skip
        r.params["ns_per_step"] = r.ms * 1e6 / T if r.ms == r.ms else None
        self.results.append(r)
        if runtime.on_gpu():
            torch.cuda.empty_cache()
        return r


def _check(fn, ref, dtype):
    try:
        with torch.no_grad():
            out = fn()[0]
        check.assert_close(out, ref, dtype=dtype, name="states")
        return "ok"
    except AssertionError as exc:
        return f"FAILED: {str(exc).splitlines()[0][:160]}"


def _ours(bm, sweep, B, T, NH, DH, dtype, backends=("fused", "alternating", "vanilla"), training=True, ref=True):
    """Our backends on one problem: forward (eager, and graphed for alternating), forward+backward."""
    inputs = problem_inputs(B, T, NH, DH, dtype)
    refs = None
    if ref:
        with torch.no_grad():
            refs = flashrnn(*(t.float() for t in inputs), function="lstm", backend="vanilla")[0].double()
    for backend in backends:
        if backend == "fused" and not fits(B, NH, DH, "lstm", dtype):
            try:
                fused_tiling(B, NH, DH, "lstm", dtype, direction="backward")
                fused_tiling(B, NH, DH, "lstm", dtype)
            except ValueError as exc:
                print(f"fused B={B} NH={NH} DH={DH}: {exc}")
                bm.results.append(_skip(sweep, backend, B, T, NH, DH, dtype, f"does not fit: {exc}"))
            continue
        status = _check(_fwd(backend, inputs), refs, dtype) if refs is not None and backend != "vanilla" else "-"
        slow = backend == "vanilla"
        kern = fused_forward_kernel if backend == "fused" else None
        case = f"gpulab {backend}"
        bm.time(_fwd(backend, inputs), case, B, T, NH, DH, dtype, False, slow, kern, backend=backend, sweep=sweep,
                check=status)  # fmt: skip
        if backend == "alternating":
            bm.time(_fwd(backend, inputs), case, B, T, NH, DH, dtype, False, backend=backend, sweep=sweep,
                    check=status, mode="graph")  # fmt: skip
        if training and (backend != "vanilla" or sweep in ("main", "head_dim")):
            kern = fused_backward_kernel if backend == "fused" else None
            bm.time(_fwd_bwd(backend, inputs), case, B, T, NH, DH, dtype, True, slow, kern, backend=backend,
                    sweep=sweep, check=status)  # fmt: skip


def _record(case, B, T, NH, DH, dtype, status, **params):
    """A record without a time: a configuration that did not run, and why (``status``)."""
    return bench.record(lesson="05", case=case, dtype=dtype, shape=[B, T, NH, DH], B=B, T=T, NH=NH, DH=DH,
                        status=status, ns_per_step=None, **params)  # fmt: skip


def _skip(sweep, backend, B, T, NH, DH, dtype, why):
    return _record(f"gpulab {backend}", B, T, NH, DH, dtype, why, backend=backend, sweep=sweep, mode="eager",
                   **{"pass": "fwd"})  # fmt: skip


def _package(bm, B, T, NH, DH, dtype):
    inputs = problem_inputs(B, T, NH, DH, dtype)
    for backend, slow in (("triton_fused", False), ("vanilla", True)):
        bm.time(_fwd(backend, inputs, True), f"flashrnn {backend}", B, T, NH, DH, dtype, False, slow,
                backend=f"flashrnn {backend}", sweep="main")  # fmt: skip
        bm.time(_fwd_bwd(backend, inputs, True), f"flashrnn {backend}", B, T, NH, DH, dtype, True, slow,
                backend=f"flashrnn {backend}", sweep="main")  # fmt: skip
    why = "unavailable, not attempted: flashrnn's CUDA extension does not build on CUDA 13 (see issue #7)"
    for backend in ("cuda", "cuda_fused"):  # CUDA extensions built at first use; not attempted (minutes, then fail)
        bm.results.append(
            _record(
                f"flashrnn {backend}",
                B,
                T,
                NH,
                DH,
                dtype,
                why,
                backend=f"flashrnn {backend}",
                sweep="main",
                mode="eager",
                **{"pass": "fwd"},
            )  # fmt: skip
        )


def _dense(bm, B, T, H, dtypes, heads):
    """torch.nn.LSTM (cuDNN) and gpulab.rnn.LSTM (12 heads, fused), both with the input projection."""
    for dtype in dtypes:
        torch.manual_seed(0)
        x = torch.randn(T, B, H, device=runtime.device, dtype=dtype)
        mods = [("cuDNN nn.LSTM (dense)", torch.nn.LSTM(H, H).to(runtime.device, dtype), 1, H)]
        if dtype == torch.bfloat16 or not runtime.on_gpu():
            fused = LSTM(H, H, num_heads=heads, backend="fused").to(runtime.device, dtype)
            mods.append(("gpulab.rnn.LSTM (fused)", fused, heads, H // heads))
        for case, m, nh, dh in mods:
            for training in (False, True):

                def run(m=m, training=training, x=x):
                    y, _ = m(x)
                    if training:
                        return torch.autograd.grad(y, list(m.parameters()), torch.ones_like(y))
                    return y

                r = bm.time(run, case, B, T, nh, dh, dtype, training, backend=case, sweep="dense")
                if r is not None:
                    r.params["includes_input_projection"] = True
                    r.flops = (r.flops or 0) + 2.0 * T * B * H * 4 * H * (3 if training else 1)


def benchmark(progress=None, quick_ms=None):
    """`python -m gpulab bench 05`. Returns (results, figure). On CPU: a tiny version (interpreter, not GPU numbers).
    ``quick_ms``: the timing budget per fast configuration (default 60 ms)."""
    import matplotlib  # deferred: heavy, and only the benchmark draws

    if "ipykernel" not in sys.modules:
        matplotlib.use("Agg")
    on_gpu = runtime.on_gpu()
    dtype = torch.bfloat16 if on_gpu else torch.float32
    main = MAIN if on_gpu else {"B": 2, "T": 4, "NH": 2, "DH": 16}
    batches = BATCHES if on_gpu else (1, 3)
    head_dims = HEAD_DIMS if on_gpu else (16, 32)
    hidden = 768 if on_gpu else 32
    bm = _Bench(60 if quick_ms is None else runtime.finite_float("quick_ms", quick_ms, positive=True))
    jobs = ["main", "package", "dense", "same_flops", "batch", "head_dim"]
    for job in progress(jobs) if progress else jobs:
        B, T, NH, DH = main["B"], main["T"], main["NH"], main["DH"]
        if job == "main":
            _ours(bm, "main", B, T, NH, DH, dtype)
        elif job == "package" and on_gpu:
            _package(bm, B, T, NH, DH, dtype)
        elif job == "dense":
            _dense(bm, B, T, hidden, (torch.float16, torch.bfloat16) if on_gpu else (torch.float32,), NH)
        elif job == "same_flops":
            _ours(bm, "same_flops", B, T, 1, hidden, dtype, backends=("fused", "alternating"), ref=False)
        elif job == "batch":
            for b in batches:
                if b != B:
                    _ours(bm, "batch", b, T, NH, DH, dtype, backends=("fused", "alternating", "vanilla"), ref=False)
        elif job == "head_dim":
            for dh in head_dims:
                if dh != DH:
                    _ours(bm, "head_dim", B, T, hidden // dh, dh, dtype)
    _annotate(bm.results)
    print(summary_table(bm.results))
    for line in targets(bm.results):
        print(line)
    return bm.results, plot_results(bm.results)


def _key(r):
    p = r.params
    return (p.get("B"), p.get("NH"), p.get("DH"), p.get("pass"))


def _annotate(results):
    """vs_vanilla: gpulab vanilla's ms (same problem and pass, eager) / this ms."""
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
        st = p.get("status", "ok")
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
    """The issue's targets at the main problem: fused fwd <= 0.7 ms, fwd+bwd <= 2.3 ms, >= 3x alternating."""
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


def _short(dtype) -> str:
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(str(dtype), str(dtype))


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
        f"{r.case} {r.params['pass']}{' graph' if r.params.get('mode') == 'graph' else ''} {_short(r.dtype)}"
        for r in main
    ]
    ax.barh(range(len(main)), [r.ms for r in main], color=["C1" if "gpulab fused" in c else "C0" for c in labels])
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
                groups.setdefault(name, []).append((p[x], p["ns_per_step"]))
        for name, pts in sorted(groups.items()):
            pts = sorted(pts)
            panel.plot([a for a, _ in pts], [b for _, b in pts], marker="o", ms=3, label=name)
        panel.set_xscale("log", base=2)
        tested = sorted({a for pts in groups.values() for a, _ in pts})
        if tested:
            panel.set_xticks(tested, [str(t) for t in tested])  # ticks at the tested values
            panel.minorticks_off()
        panel.set_yscale("log")
        panel.set_xlabel("batch B" if sweep == "batch" else "head dim DH (hidden 768 = NH x DH)")
        panel.set_ylabel("ns per time step")
        if groups:  # below the panel: inside, it covered points
            panel.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
        panel.grid(True, which="major", alpha=0.3)
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
