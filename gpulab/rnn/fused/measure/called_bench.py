"""``python -m gpulab bench 07 called``: the recurrence *as a training loop calls it* (``<gpu>-<date>-called.jsonl``).

Two problems, LSTM, bf16, Wx given, ``flashrnn(backend='fused')``: the main one (B 16, T 1024, 12 heads of 64) and a
tiny one (B 1, T 4, 2 heads of 64), where the host's work is all there is. Per problem (``kind='called'``,
``params['mode']``), every mode timed on the eager wall clock (calls back to back, one synchronize) and the device
clock, with the host's own time per call beside them (``params['host_ms']``: the same loops timed until the last call
returns, before the synchronize; where wall > device time and host ~ wall, the host is the slower of the two, and
no call waits for the GPU: the loop has no synchronizing call, ``notes/rnn-fused.md``).
The main problem's wall and host clocks are taken in :data:`ROUNDS` interleaved rounds over its modes, each mode's
median (the host's speed drifts during a run). After the ``graphed callable`` mode (whose captured graph keeps the
leaves' AccumulateGrad nodes alive on its capture stream) the problem's later parts run on fresh leaves:

- ``loop``: ``for p in leaves: p.grad = None``, forward, ``out.sum().backward()`` (what a training loop does with
  ``zero_grad(set_to_none=True)``, PyTorch's default);
- ``loop accumulating``: the same without clearing the gradients (autograd adds into ``.grad``: one more kernel per
  input);
- ``autograd.grad``: forward, ``torch.autograd.grad(out.sum(), leaves)``;
- ``graph``: the ``autograd.grad`` step captured in a CUDA graph and replayed (no host work per step);
- ``forward``: the forward alone, without autograd; ``forward kernel`` (main problem): the one-SM forward loop called
  directly (:func:`gpulab.rnn.fused.plan.single_sm_forward`, no ``flashrnn``, no autograd Function), timed right
  after it, so the API's path and the kernel are compared in one run (``params['sm_clock_mhz']`` on every GPU
  record: the SM clock NVML reports as the record is made);
- ``module loop`` / ``module graph`` (main problem): the loop, and ``autograd.grad`` in a CUDA graph, through
  ``gpulab.rnn.LSTM`` (input projection included, as cuDNN's): the module's eager overhead is their difference;
- ``graphed callable``: the loop's step through ``torch.cuda.make_graphed_callables`` (PyTorch's capture of a
  forward and its backward as two CUDA graphs, replayed inside an autograd Function): the optional capture of a
  repeated small shape; its gradients are compared with the eager step's (``params['check']``);
- ``cuDNN fp16 loop`` / ``cuDNN fp16 forward``: ``torch.nn.LSTM`` (dense, hidden NH * DH, fp16, input projection
  included) in the same loop, the peer of the same size.

Then the tiny problem's wall time taken apart (``kind='breakdown'``): the forward with autograd recording, the sum, the
gradients cleared and the backward alone (forwards made first), each timed the same way, against the whole step; the
number of kernels a step launches (torch.profiler); the wall time of one eager PyTorch op (an in-place add on one
element: dispatch and a launch, the floor of any eager op); and the host's share, the step's wall time less the
kernels' device time (the graph's replay). On CPU: the tiny problem in the interpreter, checked paths, no timing claims.

Then the tiny step's wall time as a sum (``kind='host parts'``, :func:`host_parts`), twice: first, in a fresh
process, and last, after everything else (the host's speed drifts during a run: the same step can take a
different wall time early and late in one run, ``notes/rnn-fused.md``). Every part is timed the
same way (calls back to back, one synchronize), the parts in interleaved rounds with the garbage collector off, each
part's median:

- ``autograd floor``: the same loop around a trivial autograd Function of the same inputs and outputs (empty
  outputs, empty gradients): what PyTorch's autograd costs for this signature, with the sum, the seed gradient and
  the four ``.grad`` assignments; the same on CPU tensors beside it (no device thread, no CUDA allocator);
- ``gpulab without launches``: the real step with every Triton launch a no-op: the floor plus gpulab's Python
  and the PyTorch ops on its path (allocations, the incoming gradient made contiguous);
- ``Triton launches``: the step's Triton launches (recorded from one step) replayed back to back;
- the residual: the step less the two above (what the pieces miss when run together).

``predicted`` = without launches + launches; the record says how close it comes to the step's wall time.

The main problem's backward alternatives (:data:`VARIANTS`, ``params['variant']``) are timed beside the shipped one,
with the kernels of one loop step (``kind='kernels'``: launches and device ms per kernel). An experiment beside the
modes that fails on a GPU leaves a ``kind='failed'`` record with its error instead of stopping the run.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time

import torch

from gpulab import bench, launch, runtime
from gpulab.rnn.api import flashrnn
from gpulab.rnn.fused import plan
from gpulab.rnn.fused.experiments import backward_as
from gpulab.rnn.fused.measure.benchmark import problem_inputs
from gpulab.rnn.module import LSTM

__all__ = ["called", "PROBLEMS", "host_parts", "host_parts_table"]

PROBLEMS = {"main": (16, 1024, 12, 64), "tiny": (1, 4, 2, 64)}
"""Problem name -> (B, T, NH, DH) on a GPU; in the interpreter both run as the tiny one with T = 3."""


def _shape(name):
    B, T, NH, DH = PROBLEMS[name]
    return runtime.pick(cpu=(1, 3, 2, 16), gpu=(B, T, NH, DH))


def _leaves(name):
    B, T, NH, DH = _shape(name)
    dtype = runtime.pick(cpu=torch.float32, gpu=torch.bfloat16)
    return [t.detach().requires_grad_(True) for t in problem_inputs(B, T, NH, DH, dtype)]


def _modes(x) -> dict:
    """The step functions of each mode on leaves ``x`` (the graph mode made from ``autograd.grad``; None on CPU)."""

    def forward():
        return flashrnn(*x, function="lstm", backend="fused")[0]

    def loop():
        for t in x:
            t.grad = None
        forward().sum().backward()

    def loop_accumulating():
        forward().sum().backward()

    def grad():
        return torch.autograd.grad(forward().sum(), x)

    def forward_only():
        with torch.no_grad():
            return forward()

    def forward_kernel():
        with torch.no_grad():
            return plan.single_sm_forward(*x, "lstm", save_gates=False)

    out = {"loop": loop, "loop accumulating": loop_accumulating, "autograd.grad": grad, "forward": forward_only}
    B, _, _, NH, DH = x[0].shape
    if plan.choose(B, NH, DH, "lstm", x[0].dtype).kind == "single":  # timed right after the API's forward
        out["forward kernel"] = forward_kernel
    if runtime.on_gpu():
        out["graph"] = bench.capture(grad)
    return out


def _module_modes(name) -> dict:
    """``module loop`` and ``module graph`` (GPU): ``gpulab.rnn.LSTM(H, H, num_heads=NH, batch_first=True)`` on x
    [B, T, H] (H = NH * DH), as the module docstring says."""
    B, T, NH, DH = _shape(name)
    dtype = runtime.pick(cpu=torch.float32, gpu=torch.bfloat16)
    torch.manual_seed(0)
    lstm = LSTM(NH * DH, NH * DH, num_heads=NH, batch_first=True, backend="fused").to(runtime.device, dtype)
    xin = torch.randn(B, T, NH * DH, device=runtime.device, dtype=dtype, requires_grad=True)
    leaves = [xin, *lstm.parameters()]

    def loop():
        for t in leaves:
            t.grad = None
        lstm(xin)[0].sum().backward()

    out = {"module loop": loop}
    if runtime.on_gpu():
        out["module graph"] = bench.capture(lambda: torch.autograd.grad(lstm(xin)[0].sum(), leaves))
    return out


def _graphed(x):
    """``(step, check)``: the loop's step through ``torch.cuda.make_graphed_callables`` (GPU), and how its gradients
    compare with one eager step's: 'equal' (bitwise), else the largest difference, or why the capture failed."""
    if not runtime.on_gpu():
        return None, "n/a on CPU"

    def forward(*inputs):
        return flashrnn(*inputs, function="lstm", backend="fused")[0]

    for t in x:
        t.grad = None
    forward(*x).sum().backward()
    eager = [t.grad.clone() for t in x]
    try:
        graphed = torch.cuda.make_graphed_callables(forward, tuple(x))
    except Exception as exc:  # noqa: BLE001 - recorded: a capture that fails is a finding, not a crash
        return None, f"capture failed: {type(exc).__name__}: {exc}"

    def step():
        for t in x:
            t.grad = None
        graphed(*x).sum().backward()

    step()
    runtime.synchronize()
    diff = max((t.grad.float() - e.float()).abs().max().item() for t, e in zip(x, eager))
    return step, "equal" if all(torch.equal(t.grad, e) for t, e in zip(x, eager)) else f"max |difference| {diff:.3g}"


def _cudnn(name) -> dict:
    """The cuDNN fp16 peer's modes (GPU): ``torch.nn.LSTM`` of hidden NH * DH on [B, T, NH * DH], fp16."""
    if not runtime.on_gpu():
        return {}
    B, T, NH, DH = _shape(name)
    H = NH * DH
    lstm = torch.nn.LSTM(H, H, batch_first=True).to("cuda", torch.float16)
    xin = torch.randn(B, T, H, device="cuda", dtype=torch.float16, requires_grad=True)
    leaves = [xin, *lstm.parameters()]

    def loop():
        for t in leaves:
            t.grad = None
        lstm(xin)[0].sum().backward()

    def forward():
        with torch.no_grad():
            return lstm(xin)[0]

    return {"cuDNN fp16 loop": loop, "cuDNN fp16 forward": forward}


def _clocks(fn, n, loops=3) -> tuple[float, float]:
    """``(wall, host)`` ms per call, the best of ``loops`` loops of ``n`` calls back to back and one synchronize:
    wall until the synchronize returns, host until the last call returns (the host's own work per call, what it
    spends launching; wall > device time with host ~ wall: the host is the slower of the two, not a wait for the
    GPU inside the step, which would show as host ~ wall with the GPU idle and no call ahead)."""
    wall = host = float("inf")
    for _ in range(loops):
        runtime.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        h = time.perf_counter()
        runtime.synchronize()
        wall, host = min(wall, (time.perf_counter() - t) / n * 1e3), min(host, (h - t) / n * 1e3)
    return wall, host


def _calls(name) -> int:
    return runtime.pick(cpu=2, gpu=20 if name == "main" else 300)


def _sm_clock():
    """The SM clock in MHz as NVML reports it now (None where it cannot be read)."""
    try:
        return torch.cuda.clock_rate() if runtime.on_gpu() else None
    except Exception:  # noqa: BLE001 - no NVML binding: the clock is not recorded
        return None


def _record(name, mode, fn, **extra) -> bench.Result:
    B, T, NH, DH = _shape(name)
    dtype = runtime.pick(cpu="float32", gpu="bfloat16")
    r = bench.measure(fn, lesson="07", case=f"{name} {mode}", dtype=dtype, wall_clock=False, kind="called",
                      problem=name, mode=mode, B=B, T=T, NH=NH, DH=DH, sm_clock_mhz=_sm_clock(), **extra)  # fmt: skip
    r.wall_ms, r.params["host_ms"] = _clocks(fn, _calls(name))
    return r


ROUNDS = 3
"""The main problem's modes get their wall clocks in this many interleaved rounds (see :func:`_interleaved`)."""


def _interleaved(records, fns, name, rounds=ROUNDS):
    """The wall and host clocks of ``records`` (one per mode of ``fns``) again, in ``rounds`` rounds that time every
    mode once each (one loop of calls back to back), each mode's median over the rounds: the host's speed drifts
    during a run (loops of the same step took from 1.3 to 2.5 ms of host time in one process on the H100 machine,
    ``notes/rnn-fused.md``), so modes timed one after another compare
    the host at different moments; interleaved, a drift reaches every mode alike. Each record keeps its rounds
    (``params['wall_rounds_ms']``, ``params['host_rounds_ms']``)."""
    n = _calls(name)
    walls = {r.params["mode"]: [] for r in records}
    hosts = {m: [] for m in walls}
    for _ in range(rounds):
        for r in records:
            w, h = _clocks(fns[r.params["mode"]], n, loops=1)
            walls[r.params["mode"]].append(w)
            hosts[r.params["mode"]].append(h)
    for r in records:
        m = r.params["mode"]
        r.wall_ms, r.params["host_ms"] = statistics.median(walls[m]), statistics.median(hosts[m])
        r.params.update(wall_rounds_ms=walls[m], host_rounds_ms=hosts[m], wall_rounds=rounds)
    return records


def _kernels_per_step(fn) -> int | None:
    if not runtime.on_gpu():
        return None
    from torch.profiler import ProfilerActivity, profile

    fn()
    runtime.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        runtime.synchronize()
    return sum(e.count for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA)


def _breakdown(x, step_fns, profiles) -> list[bench.Result]:
    """The tiny step's wall time in pieces (see the module): forward with autograd recording, the sum, the backward
    alone; the kernels per step; the host's share."""
    n = _calls("tiny")

    def forward():
        return flashrnn(*x, function="lstm", backend="fused")[0]

    outs = [forward() for _ in range(n)]
    sums = [o.sum() for o in outs]
    runtime.synchronize()
    t = time.perf_counter()
    for s in sums:  # as the loop runs it: the gradients cleared, then the backward
        for leaf in x:
            leaf.grad = None
        s.backward()
    runtime.synchronize()
    backward_ms = (time.perf_counter() - t) / n * 1e3
    pieces = {
        "forward (autograd recording)": _clocks(forward, n)[0],
        "sum": _clocks(lambda o=outs[0]: o.sum(), n)[0],
        "gradients cleared + backward": backward_ms,
    }
    whole = _clocks(step_fns["loop"], n)[0]
    one = torch.zeros(1, device=x[0].device)
    one_op = _clocks(lambda: one.add_(1), n)[0]  # the floor of one eager PyTorch op: dispatch and a launch
    graph = step_fns.get("graph")
    kernels_ms = bench.time_callable(graph).median_ms if graph is not None else None
    B, T, NH, DH = _shape("tiny")
    r = bench.record(lesson="07", case="tiny breakdown", kind="breakdown", problem="tiny", B=B, T=T, NH=NH, DH=DH,
                     pieces_ms=pieces, pieces_sum_ms=sum(pieces.values()), step_wall_ms=whole,
                     kernels_device_ms=kernels_ms, kernels_per_step=None,
                     host_ms=whole - kernels_ms if kernels_ms is not None else None, one_op_ms=one_op)  # fmt: skip
    r.wall_ms = whole

    def count(loop=step_fns["loop"]):  # run after every timing (see called)
        r.params["kernels_per_step"] = _kernels_per_step(loop)
        return []

    profiles.append(count)
    return [r]


def _guarded(case, make) -> list[bench.Result]:
    """``make()``'s records, or (on a GPU) one record of what went wrong (``status``): an experiment beside the
    modes (the variants, the host parts) that fails is a finding, and must not cost the modes' records."""
    if not runtime.on_gpu():
        return make()
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 - recorded, see the docstring
        r = bench.record(lesson="07", case=case, kind="failed", error=f"{type(exc).__name__}: {exc}"[:500])
        r.status = f"failed: {type(exc).__name__}"
        return [r]


def called(progress=None, problems=None):
    """``python -m gpulab bench 07 called``: every mode of ``problems`` (names of :data:`PROBLEMS`, default both; the
    main problem first, so its loop is timed before any other work of the process: a helper measured its host time
    per step at 1.1-1.4 ms in a fresh process and 2.2 ms after the tiny problem's host parts), then the tiny step's
    breakdown; the torch.profiler sessions (the variants' kernels, the kernels per tiny step)
    last, after every timing but the last host parts' own (whose profile ends them): a session can leave CUDA's
    profiling interface attached, which adds host time to every later CUDA call of the process (the main loop
    measured after one had 1.2x its graph's wall time; see the module docstring)."""
    problems = tuple(PROBLEMS) if problems is None else problems
    if isinstance(problems, str) or not isinstance(problems, (list, tuple)) or not problems:
        raise TypeError(f"problems must be a non-empty list of names from {list(PROBLEMS)}, got {problems!r}.")
    for name in problems:
        runtime.one_of("problems", name, tuple(PROBLEMS))
    out = []
    profiles = []  # torch.profiler sessions, run after every timing (see the docstring)
    for name in problems:
        if name == "tiny":  # before the tiny problem's modes, after the main problem's (timed in a fresh process)
            first = lambda: [host_parts(_leaves("tiny"), when="first", profile=False)]  # noqa: E731
            out += _guarded("tiny host parts first", first)
        x = _leaves(name)
        fns = _modes(x) | (_module_modes(name) if name == "main" else {})
        modes = [_record(name, mode, fn) for mode, fn in fns.items() if fn is not None]
        out += _interleaved(modes, fns, name) if name == "main" else modes
        step, check = _graphed(x)
        if step is not None:
            out.append(_record(name, "graphed callable", step, check=check))
        elif runtime.on_gpu():
            B, T, NH, DH = _shape(name)
            out.append(bench.record(lesson="07", case=f"{name} graphed callable", kind="called", problem=name,
                                    mode="graphed callable", B=B, T=T, NH=NH, DH=DH, check=check))  # fmt: skip
            out[-1].status = check
        for mode, fn in _cudnn(name).items():
            out.append(_record(name, mode, fn))
        # make_graphed_callables keeps its captured autograd graph, and with it the AccumulateGrad nodes of x made
        # on its capture stream: a later backward into x meets a stream mismatch (PyTorch warns) and pays extra
        # stream syncs. What comes after it runs on fresh leaves.
        x = _leaves(name)
        if name == "main":
            out += _guarded("main variants", lambda x=x, name=name: _variants(name, x, profiles))
        if name == "tiny":
            out += _breakdown(x, _modes(x), profiles)
            out += _guarded("tiny host parts last", lambda x=x: [host_parts(x, when="last")])
    for make in profiles:
        out += _guarded("profiles", make)
    return out


class _Trivial(torch.autograd.Function):
    """The fused op's inputs and outputs without its work: empty outputs, empty gradients (autograd's floor)."""

    @staticmethod
    def forward(ctx, Wx, R, b, states):
        S, B, _, NH, DH = states.shape
        ctx.inputs = [(t.shape, t.dtype, t.device) for t in (Wx, R, b, states)]
        return Wx.new_empty(S, B, Wx.shape[1], NH, DH), Wx.new_empty(S, B, 1, NH, DH)

    @staticmethod
    def backward(ctx, d_out, d_last):
        return tuple(torch.empty(shape, dtype=dtype, device=device) for shape, dtype, device in ctx.inputs)


@contextlib.contextmanager
def _launches_as(call):
    """Every :class:`gpulab.launch.Launch` call made through ``call(launch, stream, *args)`` for the duration."""
    saved = launch.Launch.__call__
    launch.Launch.__call__ = lambda self, stream, *args: call(saved, self, stream, *args)
    try:
        yield
    finally:
        launch.Launch.__call__ = saved


def _profiled(fn) -> tuple[dict, dict]:
    """One call of ``fn`` under torch.profiler: ({kernel name: [launches, device ms]}, {aten op: calls}); empty on
    CPU."""
    if not runtime.on_gpu():
        return {}, {}
    from torch.profiler import ProfilerActivity, profile

    fn()
    runtime.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        runtime.synchronize()
    kernels, ops = {}, {}
    for e in prof.key_averages():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0)
            kernels[e.key[:70]] = [e.count, us / 1e3]
        elif e.key.startswith("aten::"):
            ops[e.key] = e.count
    return kernels, ops


VARIANTS = {
    "time-major dG": {"layout": "time"},
    "cuts 1/8, 1/2": {"cuts": (0.125, 0.5)},
    "one piece": {"cuts": ()},
}
"""The backward's alternatives timed beside the shipped one (:func:`gpulab.rnn.fused.experiments.backward_as`): dG
time-major (dWx a transposed view, which autograd copies into Wx's layout in the loop), a second cut at T/2, and no
cut (the kernel, then the products on one stream: fewer host calls, the products no longer beside the kernel)."""


def _variants(name, x, profiles) -> list[bench.Result]:
    """The loop and ``autograd.grad`` under each of :data:`VARIANTS`; the kernels of one loop step (device time per
    kernel, torch.profiler) as shipped and under each variant (``kind='kernels'``, ``ms`` their device times summed)
    are left in ``profiles`` (functions returning records), to run after every timing (see :func:`called`)."""

    def loop():
        for t in x:
            t.grad = None
        flashrnn(*x, function="lstm", backend="fused")[0].sum().backward()

    def grad():
        return torch.autograd.grad(flashrnn(*x, function="lstm", backend="fused")[0].sum(), x)

    def kernels_of(label, how):
        with backward_as(**how):
            kernels, _ = _profiled(loop)
        busy = sum(ms for _, ms in kernels.values()) if kernels else math.nan
        return [bench.record(lesson="07", case=f"{name} loop kernels ({label})", kind="kernels", problem=name,
                             mode="loop", variant=label, kernels=kernels, ms=busy,
                             ms_is="the step's kernels' device times summed (torch.profiler, one step; the side "
                                   "stream's kernels overlap the main stream's: not the step's span)")]  # fmt: skip

    out = []
    for label, how in {"shipped": {}, **VARIANTS}.items():
        if label != "shipped":
            with backward_as(**how):
                for mode, fn in (("loop", loop), ("autograd.grad", grad)):
                    out.append(_record(name, f"{mode} ({label})", fn, variant=label))
        profiles.append(lambda label=label, how=how: kernels_of(label, how))
    return out


@contextlib.contextmanager
def _gc_on():
    enabled = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if not enabled:
            gc.disable()


def _loop_ms(fn, n) -> float:
    """Wall ms per call of ``n`` calls back to back after one warm-up call, one synchronize at the end."""
    fn()
    runtime.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    runtime.synchronize()
    return (time.perf_counter() - t) / n * 1e3


def host_parts(x, when: str = "", rounds: int = 5, profile: bool = True) -> bench.Result:
    """The tiny step's wall time as a sum of parts timed the same way (see the module): ``kind='host parts'``.
    ``x``: the four leaves (Wx, R, b, states) requiring grad; ``when``: a label for the record ('first' in a fresh
    process, 'last' after every other measurement). The parts are timed in ``rounds`` rounds, one loop of each per
    round (so a drift of the host's speed during the run reaches every part alike), with Python's cyclic garbage
    collector off (as ``timeit`` does; the step is also timed with it on); each part's median over the rounds.
    ``profile``: also list the step's kernels and ATen ops (torch.profiler, after the timings); off for the first
    run, so that no profiling session precedes the timings of :func:`called`."""
    if not isinstance(x, (list, tuple)) or len(x) != 4 or not all(isinstance(t, torch.Tensor) for t in x):
        raise TypeError(f"x must be the four leaves [Wx, R, b, states] (tensors), got {type(x).__name__}.")
    if not isinstance(when, str):
        raise TypeError(f"when must be a label (str), got {type(when).__name__}.")
    rounds = runtime.positive_int("rounds", rounds)
    profile = runtime.strict_bool("profile", profile)
    n = _calls("tiny")

    def step(inputs=x):
        for t in inputs:
            t.grad = None
        flashrnn(*inputs, function="lstm", backend="fused")[0].sum().backward()

    def trivial(inputs=x):
        for t in inputs:
            t.grad = None
        _Trivial.apply(*inputs)[0].sum().backward()

    on_cpu = [t.detach().cpu().requires_grad_(True) for t in x]
    recorded = []

    def record_launch(real, self, stream, *args):
        recorded.append((self, stream, args))
        real(self, stream, *args)

    step()
    with _launches_as(record_launch):
        step()

    def launches():
        for one, stream, args in recorded:
            one(stream, *args)

    none = contextlib.nullcontext
    timers = {  # name -> (function, context of its loop)
        "step": (step, none),
        "step (gc on)": (step, _gc_on),
        "autograd floor": (trivial, none),
        "autograd floor, CPU tensors": (lambda: trivial(on_cpu), none),
        "without launches": (step, lambda: _launches_as(lambda real, self, stream, *args: None)),
        "Triton launches": (launches, none),
    }
    samples = {k: [] for k in timers}
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, (fn, context) in timers.items():
                with context():
                    samples[name].append(_loop_ms(fn, n))
    finally:
        if enabled:
            gc.enable()
    med = {k: statistics.median(v) for k, v in samples.items()}
    n_launches = len(recorded)  # counted before the list is dropped (counted after, it is 0)
    recorded.clear()  # the recorded launches hold the step's outputs, and through them its autograd graph
    kernels, ops = _profiled(step) if profile else ({}, {})
    # the kernels' device time from the profiler (no CUDA graph captured here: a capture on leaves whose
    # AccumulateGrad nodes an eager step made on the default stream fails, "legacy stream depend on a capturing
    # blocking stream")
    kernels_ms = sum(ms for _, ms in kernels.values()) if kernels else None
    whole, bare, launched, floor = med["step"], med["without launches"], med["Triton launches"], med["autograd floor"]
    B, T, NH, DH = _shape("tiny")
    r = bench.record(
        lesson="07", case=f"tiny host parts {when}".strip(), kind="host parts", problem="tiny", when=when,
        B=B, T=T, NH=NH, DH=DH, rounds=rounds, calls=n, samples_ms=samples, medians_ms=med, step_wall_ms=whole,
        parts_ms={"autograd floor": floor, "gpulab's layers": bare - floor, "Triton launches": launched},
        autograd_floor_cpu_ms=med["autograd floor, CPU tensors"], without_launches_ms=bare,
        predicted_ms=bare + launched, residual_ms=whole - bare - launched, coverage=(bare + launched) / whole,
        step_gc_on_ms=med["step (gc on)"], triton_launches_per_step=n_launches, kernels=kernels,
        kernels_per_step=sum(c for c, _ in kernels.values()) if kernels else None, aten_ops=ops,
        kernels_device_ms=kernels_ms, sm_clock_mhz=_sm_clock(),
    )  # fmt: skip
    r.wall_ms = whole
    return r


def host_parts_table(rows) -> str:
    """The ``host parts`` rows (record dicts, flattened as :func:`gpulab.rnn.fused.measure.split_report.rows_of` makes
    them): the step's wall time, its parts and their sum, and where the floor is."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TypeError(f"rows must be a list of record dicts, got {type(rows).__name__}.")
    parts = [r for r in rows if r.get("kind") == "host parts"]
    if not parts:
        raise ValueError("no 'host parts' rows in these records: run `python -m gpulab bench 07 called` on a GPU.")
    lines = []
    for p in parts:
        spread = p.get("samples_ms", {}).get("step", [p["step_wall_ms"]])
        lines.append(f"{p['problem']} step (B{p['B']} T{p['T']} {p['NH']}x{p['DH']}), {p.get('when') or 'one'} run: "
                     f"{p['step_wall_ms']:.3f} ms wall (median of {len(spread)} loops, "
                     f"{min(spread):.3f} to {max(spread):.3f})")  # fmt: skip
        for name, ms in p["parts_ms"].items():
            lines.append(f"  {name:34s} {ms:8.3f} ms  {ms / p['step_wall_ms']:5.0%}")
        lines.append(f"  {'sum of the parts':34s} {p['predicted_ms']:8.3f} ms  {p['coverage']:5.0%} of the step")
        lines.append(f"  {'autograd floor on CPU tensors':34s} {p['autograd_floor_cpu_ms']:8.3f} ms")
        if p.get("step_gc_on_ms") is not None:
            lines.append(f"  {'step with the garbage collector on':34s} {p['step_gc_on_ms']:8.3f} ms")
        if p.get("kernels_device_ms") is not None:
            triton_n = p["triton_launches_per_step"]  # 0 in records that counted after clearing the list
            lines.append(f"  kernels: {p['kernels_per_step']} per step"
                         + (f" ({triton_n} Triton)" if triton_n else "")
                         + f", {p['kernels_device_ms']:.3f} ms device time (torch.profiler)")  # fmt: skip
    return "\n".join(lines)
