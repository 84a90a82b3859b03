"""A stand-in for ``torch.cuda``'s streams, events and graphs on CPU, so graders can check a learner's stream
schedule and CUDA-graph capture without a GPU (lesson 3's streams and graph steps).

The learner's code is written against the ``torch.cuda`` API (``Stream()``, ``stream(s)``, ``current_stream()``,
``Event()``, ``event.record(s)``, ``s.wait_event(e)``, ``s.wait_stream(other)``, ``CUDAGraph()``, ``graph(g)``,
``g.replay()``, ``synchronize()``) and receives either ``torch.cuda`` (on a GPU) or a :class:`FakeCuda`. Inside
``with fake:`` every aten op is *issued*, not run, as on a GPU: views run at once (they only alias), an op that
computes gets its output allocated and filled with NaN (its result is not there yet) and is queued on the current
stream (or on the graph being captured). :meth:`FakeCuda.synchronize` then runs the queues in the most adversarial
order the streams and events allow (the newest stream first, as far as its waits let it), so a missing wait reads
NaN; :meth:`FakeCuda.critical_path` is the longest chain of matrix products the dependencies force (a serial
schedule's chain is every product). A captured graph replays its ops on the tensors captured, like a real one.
"""

from __future__ import annotations

import contextlib
import itertools
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from gpulab import runtime

__all__ = ["FakeCuda"]  # its streams, events and graphs come from its methods, as torch.cuda's do

_ALLOCATIONS = ("empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided")
_PRODUCTS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "mv", "addmv", "dot", "linear")


class _Op:
    """One queued aten op: ``out`` is the tensor (or list) its result is copied into, None for in-place ops."""

    def __init__(self, func, args, kwargs, out):
        self.func, self.args, self.kwargs, self.out = func, args, kwargs, out
        self.product = str(func).split(".")[1] in _PRODUCTS

    def run(self):
        result = self.func(*self.args, **self.kwargs)
        if self.out is not None:
            for dst, src in zip(tree_flatten(self.out)[0], tree_flatten(result)[0]):
                if isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor):
                    dst.copy_(src)


class _Record:
    def __init__(self):
        self.done = False


class _Wait:
    def __init__(self, record):
        self.record = record  # None: the event was never recorded when the wait was issued (a no-op, as in CUDA)


class FakeStream:
    """A queue of issued work; ``index`` 0 is the default stream."""

    def __init__(self, owner: FakeCuda, index: int):
        self.owner, self.index, self.queue = owner, index, []

    def wait_event(self, event: FakeEvent) -> None:
        self.queue.append(_Wait(event.last))

    def record_event(self, event: FakeEvent | None = None) -> FakeEvent:
        event = event or FakeEvent()
        event.record(self)
        return event

    def wait_stream(self, other: FakeStream) -> None:
        self.wait_event(other.record_event())

    def synchronize(self) -> None:
        self.owner.synchronize()

    def __repr__(self):
        return f"FakeStream({self.index})"


class FakeEvent:
    """An event: each :meth:`record` marks the point of its stream's queue a later wait waits for."""

    def __init__(self, *args, **kwargs):
        self.last = None

    def record(self, stream: FakeStream | None = None) -> None:
        if stream is None:
            raise ValueError("event.record(stream): pass the stream whose work the event marks.")
        self.last = _Record()
        self.owner = stream.owner
        stream.queue.append(self.last)

    def synchronize(self) -> None:
        if self.last is not None:
            self.owner.synchronize()


class FakeGraph:
    """A captured graph: the ops issued inside ``with cuda.graph(g):``, replayed on the same tensors. A replay is
    issued on the current stream like any op (after the copies into the static inputs issued before it)."""

    def __init__(self, owner: FakeCuda):
        self.owner = owner
        self.ops: list[_Op] = []
        self.captured = False
        self.replays = 0

    def replay(self) -> None:
        if not self.captured:
            raise RuntimeError("replay() of a graph that was never captured: capture it with `with cuda.graph(g):`.")
        self.replays += 1
        self.owner._issue(_Replay(self))


class _Replay:
    product = False

    def __init__(self, graph: FakeGraph):
        self.graph = graph

    def run(self):
        for op in self.graph.ops:
            op.run()


class _Issuing(TorchDispatchMode):
    def __init__(self, owner: FakeCuda):
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.is_view or str(func).startswith(("aten.sym_", "aten._local_scalar")):
            return func(*args, **kwargs)
        if str(func).split(".")[1] in _ALLOCATIONS:  # memory, no kernel: nothing to queue; the contents are junk
            out = func(*args, **kwargs)
            if out.is_floating_point():
                out.fill_(math.nan)
            return out
        if func._schema.is_mutable:  # in place or out=: nothing to allocate, the op is queued
            self.owner._issue(_Op(func, args, kwargs, None))
            return kwargs["out"] if "out" in kwargs else args[0]
        out = func(*args, **kwargs)  # only to allocate an output of the right shape: its values are not there yet
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                t.fill_(math.nan)
        self.owner._issue(_Op(func, args, kwargs, out))
        return out


class FakeCuda:
    """``torch.cuda``'s streams, events and graphs, simulated on CPU (see the module docstring). Use
    ``with fake: answer(..., cuda=fake)``, then :meth:`synchronize` to run what was issued."""

    def __init__(self):
        self._count = itertools.count()
        self.default = FakeStream(self, next(self._count))
        self.streams = [self.default]
        self._current = self.default
        self._capturing: FakeGraph | None = None
        self._mode = _Issuing(self)
        self.order: list = []  # items as synchronize ran them
        self.captures = 0
        self.host_syncs = 0  # synchronize() called by the code under test (the host waits for the GPU)

    # -- torch.cuda's API -------------------------------------------------------------------------------------
    def Stream(self, *args, **kwargs) -> FakeStream:  # noqa: N802 - torch.cuda's name
        s = FakeStream(self, next(self._count))
        self.streams.append(s)
        return s

    Event = FakeEvent

    def CUDAGraph(self, *args, **kwargs) -> FakeGraph:  # noqa: N802 - torch.cuda's name
        return FakeGraph(self)

    def current_stream(self, device=None) -> FakeStream:
        return self._current

    def default_stream(self, device=None) -> FakeStream:
        return self.default

    @contextlib.contextmanager
    def stream(self, s: FakeStream):
        if not isinstance(s, FakeStream):
            raise runtime.ArgumentTypeError(
                f"stream(s): s must be a stream from cuda.Stream(), got {type(s).__name__}."
            )
        saved, self._current = self._current, s
        try:
            yield s
        finally:
            self._current = saved

    @contextlib.contextmanager
    def graph(self, g: FakeGraph, *args, **kwargs):
        if not isinstance(g, FakeGraph):
            raise runtime.ArgumentTypeError(f"graph(g): g must be a cuda.CUDAGraph(), got {type(g).__name__}.")
        if self._capturing is not None:
            raise RuntimeError("graph(g) inside another capture: capture one graph at a time.")
        syncs = self.host_syncs
        self.synchronize()  # torch.cuda.graph synchronizes before the capture
        self.host_syncs = syncs
        self._capturing, g.ops = g, []
        self.captures += 1
        try:
            yield g
        finally:
            self._capturing, g.captured = None, True

    def is_current_stream_capturing(self) -> bool:
        return self._capturing is not None

    def is_available(self) -> bool:
        return True

    def synchronize(self, device=None) -> None:
        """Run every issued op: records and satisfied waits as soon as they reach the head of their stream, then
        ops of the newest stream first, as far as its waits allow (a consumer runs before its producer unless a
        wait orders them). Called while issuing (the learner's ``cuda.synchronize()``, ``stream.synchronize()``,
        ``event.synchronize()``), it counts as a host synchronization: ``host_syncs``."""
        self.host_syncs += _issuing(self)
        with _paused(self):
            while True:
                ready = [s for s in reversed(self.streams) if s.queue and _runnable(s.queue[0])]
                # events and satisfied waits first (they cost nothing), then the newest stream's op
                ready.sort(key=lambda s: isinstance(s.queue[0], (_Op, _Replay)))
                if not ready:
                    stuck = [s for s in self.streams if s.queue]
                    if stuck:  # pragma: no cover - a wait on a later record cannot be issued
                        raise RuntimeError(f"streams {stuck} wait for each other.")
                    return
                s = ready[0]
                item = s.queue.pop(0)
                if isinstance(item, (_Op, _Replay)):
                    item.run()
                elif isinstance(item, _Record):
                    item.done = True
                self.order.append((s.index, item))

    # -- what graders read ------------------------------------------------------------------------------------
    def critical_path(self) -> int:
        """The longest chain of matrix products that stream order and event waits force, over everything
        :meth:`synchronize` ran (a product on a stream waits for all earlier work of its stream)."""
        last: dict[int, int] = {}  # stream -> chain length at its newest item
        at_record: dict[int, int] = {}
        for index, item in self.order:
            here = last.get(index, 0)
            if isinstance(item, _Wait) and item.record is not None:
                here = max(here, at_record.get(id(item.record), 0))
            elif isinstance(item, _Record):
                at_record[id(item)] = here
            elif isinstance(item, _Op) and item.product:
                here += 1
            last[index] = here
        return max(last.values(), default=0)

    def product_streams(self) -> int:
        """How many streams ran at least one matrix product."""
        return len({index for index, item in self.order if isinstance(item, _Op) and item.product})

    def joined(self) -> bool:
        """Whether the default stream's last op waited for every side stream's last op."""
        seen_ops: dict[int, _Op] = {}
        for index, item in self.order:
            if isinstance(item, _Op):
                seen_ops[index] = item
        reach: dict[int, set] = {}  # stream -> side streams whose work so far it has waited for
        done_at: dict[int, set] = {}
        for index, item in self.order:
            mine = reach.setdefault(index, {index})
            if isinstance(item, _Record):
                done_at[id(item)] = set(mine)
            elif isinstance(item, _Wait) and item.record is not None:
                mine |= done_at.get(id(item.record), set())
            elif isinstance(item, _Op) and item is seen_ops.get(index):
                done_at[id(item)] = set(mine)
        final = done_at.get(id(seen_ops.get(self.default.index)), set())
        return all(i in final for i in seen_ops if i != self.default.index)

    def paused(self):
        """A context in which ops run at once, not issued (a grader's own copies of the results)."""
        return _paused(self)

    # -- issuing ----------------------------------------------------------------------------------------------
    def _issue(self, op) -> None:
        if self._capturing is not None and isinstance(op, _Op):
            self._capturing.ops.append(op)
        else:
            self._current.queue.append(op)

    def __enter__(self):
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)


def _runnable(item) -> bool:
    return not isinstance(item, _Wait) or item.record is None or item.record.done


def _issuing(fake: FakeCuda) -> bool:
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack  # noqa: PLC0415

    return fake._mode in _get_current_dispatch_mode_stack()


@contextlib.contextmanager
def _paused(fake: FakeCuda):
    """Ops run for real inside (synchronize, replay): the issuing mode is off while they do."""
    if _issuing(fake):
        with torch.utils._python_dispatch._disable_current_modes():
            yield
    else:
        yield
