"""Cheap kernel launches: one :class:`Launch` per (kernel, tile config, problem shape), reused call after call.

What you will learn: at short sequences a kernel takes a few microseconds on the GPU, and launching it from Python
can take longer. ``kernel[grid](*args, **constexprs)`` goes through Triton's ``JITFunction.run`` every time: it
binds the arguments, computes the specialization key (dtype and 16-byte alignment of every pointer, divisibility of
every integer), formats the options into a cache key, looks the compiled kernel up and only then launches it.
For a problem whose shapes, dtypes and flags are fixed, all of that gives the same answer every call.

So a :class:`Launch` keeps the grid and the constexprs, launches through ``JITFunction`` the first time, and
keeps the :class:`triton.compiler.CompiledKernel` it returns; later calls go to that kernel's launcher
(``CompiledKernel.run``, the call ``JITFunction.run`` itself ends with) with the arguments in signature order.
Every condition under which ``JITFunction.run`` could pick a different kernel sends the call back through it:

- a pointer that is not 16-byte aligned (the caller passes ``stream=None``; the compiled kernel assumes alignment),
- a launch hook installed (profilers such as Proton), or Triton's debug mode,
- the current CUDA device is not the one the kernel was compiled on (the caller checks: :func:`direct_stream`),
- no compiled kernel yet, or a Triton whose compiled kernel lacks ``run``/``function``/``packed_metadata``,
- the interpreter (CPU): ``InterpretedFunction`` has no compiled kernel, so every call goes through it,
- ``GPULAB_DIRECT_LAUNCH=0`` in the environment (:data:`DIRECT` False), or inside ``with through_jit():``, to
  compare the two paths.

Integer arguments (sequence lengths) are part of the caller's key, so their specialization cannot change.
"""

from __future__ import annotations

import contextlib
import os

import torch

from gpulab import runtime

__all__ = [
    "Launch",
    "DIRECT",
    "direct_stream",
    "through_jit",
    "launch_counts",
    "cached_launch",
    "keyed_launch",
    "aligned",
    "in_order",
]

DIRECT: bool = os.environ.get("GPULAB_DIRECT_LAUNCH", "1") != "0"
"""Launch compiled kernels directly after their first launch (see the module docstring); False
(``GPULAB_DIRECT_LAUNCH=0``, read once at import): always through Triton's ``JITFunction.run``."""

_THROUGH_JIT = [0]  # open through_jit() blocks


@contextlib.contextmanager
def through_jit():
    """Within the block every launch goes through Triton's ``JITFunction.run`` (as with :data:`DIRECT` off): to
    compare the two paths in one process."""
    _THROUGH_JIT[0] += 1
    try:
        yield
    finally:
        _THROUGH_JIT[0] -= 1


_COUNTS = {"jit": 0, "direct": 0}
_LAUNCHES: dict = {}
MAX_LAUNCHES = 512  # kept Launch objects (one per kernel, grid, constexprs and integer arguments); then start over

if runtime.INTERPRET:
    _knobs = _stream_of = None
else:  # pragma: no cover - needs a GPU
    from triton import knobs as _knobs
    from triton.runtime import driver as _driver

    _stream_of = None  # the driver's current-stream getter, looked up on first use (importing needs no GPU)


def launch_counts() -> dict:
    """How many launches went through ``JITFunction.run`` ('jit') and straight to a compiled kernel ('direct')."""
    return dict(_COUNTS)


def direct_stream(device: torch.device):
    """The raw CUDA stream to launch on directly, or None when launches must go through Triton's ``JITFunction``:
    in the interpreter, with :data:`DIRECT` off or inside :func:`through_jit`, with a launch hook or Triton's debug
    mode on, or when ``device`` is not the current CUDA device (Triton compiles and launches for the current one)."""
    if _knobs is None or not DIRECT or _THROUGH_JIT[0]:
        return None
    rt = _knobs.runtime
    if rt.debug or rt.launch_enter_hook.calls or rt.launch_exit_hook.calls:
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index != torch.cuda.current_device():
        return None
    global _stream_of
    if _stream_of is None:
        _stream_of = _driver.active.get_current_stream
    return _stream_of(index)


class Launch:
    """``kernel[grid](*args, **constexprs)`` for one fixed grid and constexprs, launched directly once compiled.

    ``args`` of :meth:`__call__` are the kernel's leading (non-constexpr) parameters, in order; ``constexprs`` name
    every remaining parameter (block sizes, flags) plus launch options (``num_warps``, ``num_stages``).
    """

    __slots__ = ("kernel", "grid", "kwargs", "tail", "compiled", "_run", "_function", "_meta")

    def __init__(self, kernel, grid: tuple, constexprs: dict):
        self.kernel, self.grid, self.kwargs = kernel, tuple(grid) + (1,) * (3 - len(grid)), dict(constexprs)
        self.tail = None  # the constexpr values in signature order, after the leading args (once compiled)
        self.compiled = self._run = self._function = self._meta = None

    def __call__(self, stream, *args):
        """Launch with the leading ``args``; ``stream`` from :func:`direct_stream` (None: through ``JITFunction``,
        e.g. when a pointer is not 16-byte aligned)."""
        if stream is not None and self._run is not None:
            g = self.grid
            self._run(g[0], g[1], g[2], stream, self._function, self._meta, None, None, None, *args, *self.tail)
            _COUNTS["direct"] += 1
            return
        compiled = self.kernel[self.grid](*args, **self.kwargs)
        _COUNTS["jit"] += 1
        if stream is not None and self.compiled is None:
            self._remember(compiled, len(args))

    def _remember(self, compiled, n_args: int) -> None:
        """Keep ``compiled``'s launcher if it has the API this module uses and the signature is fully known."""
        names = list(getattr(self.kernel, "arg_names", ()))
        tail = names[n_args:]
        if not names or any(n not in self.kwargs for n in tail):
            return  # a parameter left to its default: its value is not known here, stay on the JIT path
        if hasattr(compiled, "result"):  # Triton's asynchronous compile mode hands back a future
            compiled = compiled.result()
        try:
            run, function, meta = compiled.run, compiled.function, compiled.packed_metadata
        except AttributeError:
            return
        if not callable(run):
            return
        self.tail = tuple(self.kwargs[n] for n in tail)
        self.compiled, self._run, self._function, self._meta = compiled, run, function, meta


def cached_launch(kernel, grid: tuple, constexprs: dict, ints: tuple = ()) -> Launch:
    """The :class:`Launch` of ``kernel`` for ``grid`` and ``constexprs``, made once and kept: ``ints`` are the values
    of the kernel's integer arguments (sizes), which Triton specializes on, so a new value gets its own Launch."""
    key = (kernel, grid, tuple(constexprs.items()), ints)
    launch = _LAUNCHES.get(key)
    if launch is None:
        if len(_LAUNCHES) >= MAX_LAUNCHES:
            _LAUNCHES.clear()
        launch = _LAUNCHES[key] = Launch(kernel, grid, constexprs)
    return launch


def keyed_launch(key: tuple, make) -> Launch:
    """The :class:`Launch` kept under ``key``, a tuple whose first item is the kernel and whose rest determines the
    grid, the constexprs and the integer arguments (e.g. the problem's sizes, dtype and tile choice); ``make()``
    returns ``(grid, constexprs)`` and runs only the first time. The hot path of a wrapper called again and again
    with one problem: one hash of a short key instead of the constexpr dict built and hashed on every call
    (:func:`cached_launch`)."""
    kernel = key[0] if isinstance(key, tuple) and key else None
    if isinstance(kernel, (str, bytes, tuple, list, dict)) or not callable(getattr(kernel, "__getitem__", None)):
        raise TypeError(f"key must be a tuple starting with a @triton.jit kernel, got {key!r:.80}.")
    launch = _LAUNCHES.get(key)
    if launch is None:
        grid, constexprs = make()
        if len(_LAUNCHES) >= MAX_LAUNCHES:
            _LAUNCHES.clear()
        launch = _LAUNCHES[key] = Launch(key[0], grid, constexprs)
    return launch


def aligned(*tensors) -> bool:
    """Whether every tensor's data pointer is 16-byte aligned (what a compiled kernel assumes of its pointers)."""
    bits = 0
    for t in tensors:
        bits |= t.data_ptr()
    return not bits & 15


def in_order(kernel, **named) -> tuple:
    """The values of ``named`` in the order of ``kernel``'s leading parameters (a :class:`Launch` takes them
    positionally): a host that names every argument keeps the kernel's order out of its own code. ValueError
    naming the parameters when ``named`` is not exactly the kernel's first ``len(named)`` parameters."""
    names = tuple(kernel.arg_names[: len(named)])
    try:
        return tuple(named[n] for n in names)
    except KeyError:
        raise ValueError(
            f"in_order({getattr(kernel, '__name__', kernel)!s}): got the arguments {sorted(named)}, but the kernel's "
            f"first {len(named)} parameters are {list(names)}; name exactly those (in any order)."
        ) from None
