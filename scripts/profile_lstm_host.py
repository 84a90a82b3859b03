"""Where the eager wall clock of one ``gpulab.rnn.LSTM`` training step goes, on the host (GPU machine).

    python scripts/profile_lstm_host.py [--calls 200] [--top 30] [--cases tiny,H256] [--no-cprofile]

For each case (the tiny call: B 1, T 4, 2 heads of 64; one head of 256, 512, 768 at B 16, T 256; one of 1024 at B 16
and B 64, T 256) prints: the device time and the eager wall time per forward+backward (calls back to back, one
synchronize), the CUDA kernels launched per call (torch.profiler, counted by name), the aten operators the call
dispatches (a TorchDispatchMode: allocations and anything that reads a GPU value back to the host), every call site
that synchronizes with the GPU (``torch.cuda.set_sync_debug_mode("warn")``, each with its Python stack; a
synchronization inside a Triton launcher or a driver call is not seen there, but shows as a wall time near device time
+ host time), the same for cuDNN's ``nn.LSTM`` of the same size, and the host functions that take the wall time
(cProfile, sorted by own time). A wall time well above the device time is host work: Python, allocations, launches;
this names which. On a machine without a GPU it runs the tiny case in Triton's interpreter and prints the aten
operators only (the times mean nothing there).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import pstats
import time
import traceback
import warnings

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from gpulab import launch, runtime
from gpulab.rnn.module import LSTM

CASES = {  # name -> (input size, hidden, heads, layers, B, T)
    "tiny B1 T4 2x64": (128, 128, 2, 1, 1, 4),
    "H256 L1 B16 T256": (256, 256, 1, 1, 16, 256),
    "H512 L1 B16 T256": (512, 512, 1, 1, 16, 256),
    "H768 L1 B16 T256": (768, 768, 1, 1, 16, 256),
    "H1024 L1 B16 T256": (1024, 1024, 1, 1, 16, 256),
    "H1024 L1 B64 T256": (1024, 1024, 1, 1, 64, 256),
}
SYNC_LIKE = ("item", "_local_scalar_dense", "nonzero", "is_nonzero", "equal", "tolist", "masked_select", "unique")
ALLOCATING = ("empty", "empty_strided", "new_empty", "zeros", "new_zeros", "zeros_like", "empty_like", "ones_like",
              "full", "new_full", "clone", "contiguous", "_to_copy", "cat", "stack")  # fmt: skip


class AtenCounter(TorchDispatchMode):
    """Counts the aten operators dispatched inside the block (not those of Triton's interpreter inside a launch),
    and the gpulab kernel launches."""

    def __init__(self):
        super().__init__()
        self.ops, self.launches, self._paused = collections.Counter(), 0, 0
        self._real = launch.Launch.__call__

    def __enter__(self):
        counter = self

        def counted(launch_self, *args):
            counter.launches += 1
            counter._paused += 1
            try:
                return counter._real(launch_self, *args)
            finally:
                counter._paused -= 1

        launch.Launch.__call__ = counted
        return super().__enter__()

    def __exit__(self, *exc):
        launch.Launch.__call__ = self._real
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self._paused:
            self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def _aten(step):
    step()
    with AtenCounter() as c:
        step()
    allocs = sum(n for k, n in c.ops.items() if k in ALLOCATING)
    sync = {k: n for k, n in c.ops.items() if k in SYNC_LIKE}
    print(f"   aten: {sum(c.ops.values())} operators, {allocs} allocating, gpulab launches {c.launches}, "
          f"sync-like {sync or 'none'}")  # fmt: skip
    print("   ", ", ".join(f"{k} {n}" for k, n in sorted(c.ops.items())))


def _syncs(step):
    """Every synchronizing call site of one step, with its stack (set_sync_debug_mode('warn'))."""
    step()
    torch.cuda.synchronize()
    sites = collections.Counter()

    def show(message, category, filename, lineno, file=None, line=None):
        if "is a prototype feature" in str(message):  # torch's note on turning the mode on, not a sync
            return
        stack = "".join(traceback.format_stack(limit=12)[:-1])
        sites[f"{message}\n{stack}"] += 1

    saved = warnings.showwarning
    warnings.showwarning = show
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
    finally:
        warnings.showwarning = saved
    print(f"   synchronizing call sites: {len(sites) or 'none'}")
    for site, n in sites.items():
        print(f"   -- {n}x {site}")


def _step(module, x, leaves):
    def step():
        for t in leaves:
            t.grad = None
        module(x)[0].sum().backward()

    return step


def _wall(step, calls):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e3


def _device(step, calls):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    step()
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def _kernels(step):
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(names), sorted(collections.Counter(names).items())


def _host_ms(step, calls=200):
    """The host's time per step on CPU (perf_counter over ``calls`` steps after three), and cProfile's top lines."""
    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(calls):
        step()
    ms = (time.perf_counter() - t0) / calls * 1e3
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(20):
        step()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(12)
    print(f"   host time per step (CPU, kernels mocked out): {ms:.3f} ms")
    print("\n".join("   " + line for line in s.getvalue().splitlines()[6:] if line.strip()))


def _cpu(name):
    """Without a GPU: the tiny case's aten operators per call in Triton's interpreter (POISON off, as timed), and
    the host time per call with the kernel launches mocked out (each launch returns at once; nothing computed)."""
    i, h, heads, layers, b, t = CASES[name]
    x = torch.randn(b, t, i, requires_grad=True)
    ours = LSTM(i, h, layers, batch_first=True, num_heads=heads)
    print(f"== {name} gpulab (CPU, interpreter)")
    step = _step(ours, x, [x, *ours.parameters()])
    with runtime.poisoning(False):
        _aten(step)
        real = launch.Launch.__call__
        launch.Launch.__call__ = lambda self, *args: None
        try:
            _host_ms(step)
        finally:
            launch.Launch.__call__ = real


MOCKED = {  # name -> (input size, hidden, B, T, packed): the grid points whose kernels cannot run on CPU
    "H256 L1 B16 T256": (256, 256, 16, 256, False),
    "H512 L1 B16 T256": (512, 512, 16, 256, False),
    "H512 L1 B64 T256 padded": (512, 512, 64, 256, False),
    "H512 L1 B64 T256 packed": (512, 512, 64, 256, True),
}


def _mocked_loops(monkeypatch):
    """Replace the fused plan's loops by stand-ins with the split kernels' host-visible results (outputs, the last
    states, the gates; dG and the carried gradient, then the real parameter products of ``parameter_grads``), so that
    a grid point's operators outside the kernels' own host code can be counted on CPU."""
    from gpulab.rnn.backends.parameter_grads import gate_gradients_to_parameters  # noqa: PLC0415
    from gpulab.rnn.fused import plan  # noqa: PLC0415

    def forward(Wx, R, b, states, function, save_gates):
        B, T, G, NH, DH = Wx.shape
        out, last = Wx.new_empty((2, B, T, NH, DH)), Wx.new_empty((2, B, 1, NH, DH))
        return out, last, Wx.new_empty((B, T, G, NH, DH)) if save_gates else None

    def backward(d_out, gates, out, states, R, function, d_last=None):
        dG, ds0 = torch.empty_like(gates), torch.empty_like(states)
        return (*gate_gradients_to_parameters(dG, out, states, function), ds0)

    def loops(*args, **kwargs):
        return forward, backward if args[6] else None

    try:
        from gpulab.rnn import layer  # noqa: PLC0415

        layer._LOOPS.clear()
    except ImportError:  # a tree before the layer op: the general path only
        pass
    monkeypatch(plan, "plan_kind", lambda *a, **k: "split")
    monkeypatch(plan, "problem_loops", loops)
    monkeypatch(plan, "_loops", loops)


def _cpu_mocked(names):
    """Without a GPU: the grid points' aten operators per step, the kernels mocked out (:func:`_mocked_loops`), and
    the host time per step (Python and the CPU's aten work; on a GPU each operator also costs its launch)."""
    saved = []

    def patch(obj, name, value):
        saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    _mocked_loops(patch)
    try:
        for name in names:
            i, h, b, t, packed = MOCKED[name]
            ours = LSTM(i, h, batch_first=True)
            x = torch.randn(b, t, i, requires_grad=True)
            if packed:  # mixed lengths as the grid's packed point: T // 4 .. T, the first T
                lengths = torch.randint(max(1, t // 4), t + 1, (b,), generator=torch.Generator().manual_seed(0))
                lengths[0] = t
                data = nn.utils.rnn.pack_padded_sequence(x.detach(), lengths, batch_first=True, enforce_sorted=False)
                x = data._replace(data=data.data.requires_grad_())
            print(f"== {name} gpulab (CPU, kernels mocked)")
            leaves = [x.data if packed else x, *ours.parameters()]
            step = (_packed_step if packed else _step)(ours, x, leaves)
            _aten(step)
            _host_ms(step, 20)
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)


def _packed_step(module, x, leaves):
    def step():
        for t in leaves:
            t.grad = None
        module(x)[0].data.sum().backward()

    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--cases", default="", help="comma-separated prefixes of the case names (default: all)")
    ap.add_argument("--no-cprofile", action="store_true", help="skip the cProfile table")
    args = ap.parse_args()
    torch.manual_seed(0)
    wanted = [c for c in args.cases.split(",") if c]
    cases = {k: v for k, v in CASES.items() if not wanted or any(k.startswith(w) for w in wanted)}
    if not torch.cuda.is_available():
        if not wanted or any("tiny".startswith(w) for w in wanted):
            _cpu("tiny B1 T4 2x64")
        _cpu_mocked([k for k in MOCKED if not wanted or any(k.startswith(w) for w in wanted)])
        return
    for name, (i, h, heads, layers, b, t) in cases.items():
        x = torch.randn(b, t, i, device="cuda", dtype=torch.float16, requires_grad=True)
        ours = LSTM(i, h, layers, batch_first=True, num_heads=heads).to("cuda", torch.float16)
        ref = nn.LSTM(i, h, layers, batch_first=True).to("cuda", torch.float16)
        for label, mod in (("gpulab", ours), ("cuDNN", ref)):
            step = _step(mod, x, [x, *mod.parameters()])
            calls = args.calls if t < 64 else max(20, args.calls // 10)
            wall, dev = _wall(step, calls), _device(step, calls)
            n, kinds = _kernels(step)
            print(f"== {name} {label}: wall {wall:.3f} ms, device {dev:.3f} ms per call, {n} kernels per call")
            print("   kernels:", "; ".join(f"{k[:60]} x{c}" for k, c in kinds[:25]))
            _aten(step)
            _syncs(step)
            if label == "gpulab" and not args.no_cprofile:
                prof = cProfile.Profile()
                prof.enable()
                for _ in range(calls):
                    step()
                torch.cuda.synchronize()
                prof.disable()
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(args.top)
                print("\n".join(line for line in s.getvalue().splitlines() if line.strip())[:6000])


if __name__ == "__main__":
    main()
