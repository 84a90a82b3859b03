"""One Gluon for Triton 3.6 to 3.9: the names gpulab's Gluon kernels call, whichever release is installed, and the one
list of Triton versions the package's GPU kernels were measured on.

What you will learn: Gluon is experimental and its API moves between releases, so kernels written against one release
call it through a thin layer that asks the installed Triton what it offers (by the parameters its functions take:
Triton 3.9 keeps the old TMA names as stubs that raise when compiled, so a name that exists proves nothing).

What the kernels call, and what it is on each release:

- :func:`barrier`: ``gl.thread_barrier()`` on 3.6, ``gl.barrier()`` from 3.7;
- :func:`async_load`, :func:`async_store`: ``tma.async_copy_global_to_shared`` and ``async_copy_shared_to_global``
  on 3.6 and 3.7, ``tma.async_load`` and ``async_store`` from 3.8 (3.9's old names raise "has been removed");
- :func:`reinterpret`: ``smem._reinterpret(dtype, shape, layout)`` up to 3.8, ``smem.reinterpret`` on 3.9;
- :func:`tma_descriptor_encoder`: the host's ``cuTensorMapEncodeTiled`` wrapper, ``utils.fill_tma_descriptor`` on
  3.6, ``utils.fill_tma_descriptor_tiled`` from 3.7 (the same arguments), for launches that build descriptors
  themselves;
- ``mbarrier.expect(bar, bytes)``: the byte count is ``bytes`` on 3.6 and ``bytes_per_cta`` from 3.7, so the kernels
  pass it by position (and ``mbarrier.init``'s ``count`` by name, the same on each).

:data:`TESTED_TRITON` lists the versions whose GPU tests (the race tests and the correctness checks) passed on the
course's GPU; a kernel that has only been compiled on a version, not run, refuses it (:func:`untested`) and says so
once (:func:`warn_once`). This module imports nothing of gpulab.
"""

from __future__ import annotations

import inspect
import os
import warnings

import triton
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import tma
from triton.language.core import builtin

__all__ = ["TESTED_TRITON", "ALLOW_UNTESTED", "triton_minor", "untested", "problem", "warn_once", "barrier",
           "async_load", "async_store", "reinterpret", "TMA_ENCODER_NAMES", "tma_descriptor_encoder"]  # fmt: skip

TESTED_TRITON: tuple[str, ...] = ("3.6", "3.7")
"""Triton versions (major.minor) on which gpulab's GPU kernels passed their GPU tests on the course's GPU (version 3's
race tests and correctness checks, version 2's warp-specialization race, the fused RNN's Gluon tests:
``scripts/gpu_triton.sh``). Versions 3 of attention and the warp-specialized version 2 run only on these; a version
measured there is added here, one entry. 3.7: its records are ``benchmarks/05_attention_hopper/triton/*-3.7.1*`` and
``benchmarks/selftest/*-triton-3.7.1-all.log`` (notes/attention-hopper.md)."""


def triton_minor(version: str | None = None) -> str:
    """``major.minor`` of ``version`` (default: the installed Triton's), what :data:`TESTED_TRITON` lists."""
    version = triton.__version__ if version is None else version
    if not isinstance(version, str) or version.count(".") < 1:
        raise ValueError(f"version must be a version string like '3.7.1', got {version!r}.")
    return ".".join(version.split(".")[:2])


ALLOW_UNTESTED = "GPULAB_ALLOW_UNTESTED_TRITON"
"""The environment variable that, set to 1, lets the kernels gated by :func:`untested` run on a Triton not in
:data:`TESTED_TRITON`: for measuring that Triton on the GPU (``scripts/gpu_triton.sh`` sets it)."""


def untested(what: str) -> str | None:
    """None when the installed Triton is in :data:`TESTED_TRITON` (or :data:`ALLOW_UNTESTED` is set to 1), else why
    ``what`` (e.g. "version 3 (Gluon)") does not run on it and the fix, naming both versions."""
    if triton_minor() in TESTED_TRITON or os.environ.get(ALLOW_UNTESTED) == "1":
        return None
    return (f"{what} was measured on Triton {', '.join(TESTED_TRITON)} only and this is Triton {triton.__version__}; "
            f"install the measured stack (pip install -r requirements/gpu.txt), or measure this Triton on the GPU "
            f"(scripts/gpu_triton.sh; {ALLOW_UNTESTED}=1 runs it unmeasured) and add it to "
            f"gpulab.gluon_compat.TESTED_TRITON")  # fmt: skip


def _params(fn) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


def _pick(candidates, needs: tuple[str, ...]):
    """The first of ``candidates`` whose parameters include ``needs`` (a raising stub takes ``*args``: it has none)."""
    for fn in candidates:
        if fn is not None and all(n in _params(fn) for n in needs):
            return fn
    return None


_smem = gl.shared_memory_descriptor
_BARRIER = _pick([getattr(gl, "barrier", None), getattr(gl, "thread_barrier", None)], ("_semantic",))
_LOAD = _pick([getattr(tma, "async_load", None), getattr(tma, "async_copy_global_to_shared", None)],
              ("tensor_desc", "coord", "barrier", "result", "pred"))  # fmt: skip
_STORE = _pick([getattr(tma, "async_store", None), getattr(tma, "async_copy_shared_to_global", None)],
               ("tensor_desc", "coord", "src"))  # fmt: skip
_REINTERPRET = _pick([getattr(_smem, "reinterpret", None), getattr(_smem, "_reinterpret", None)],
                     ("self", "dtype", "shape", "layout"))  # fmt: skip
_STORE_WAIT = _pick([getattr(tma, "store_wait", None)], ("pendings",))


def problem() -> str | None:
    """None when this Triton offers every Gluon call gpulab's kernels make (each found with the parameters the
    kernels pass), else what is missing, naming the Triton version and the fix."""
    missing = [name for name, fn in (("a CTA barrier (gl.barrier / gl.thread_barrier)", _BARRIER),
                                     ("a TMA load (tma.async_load / async_copy_global_to_shared)", _LOAD),
                                     ("a TMA store (tma.async_store / async_copy_shared_to_global)", _STORE),
                                     ("tma.store_wait", _STORE_WAIT),
                                     ("shared_memory_descriptor.reinterpret / _reinterpret", _REINTERPRET))
               if fn is None]  # fmt: skip
    if not missing:
        return None
    return (f"Triton {triton.__version__}'s Gluon lacks {'; '.join(missing)}; gpulab's Gluon kernels run on Triton "
            f"3.6 to 3.9: install one of them (pip install -r requirements/gpu.txt)")  # fmt: skip


_WARNED: set = set()


def warn_once(key, message: str) -> bool:
    """``warnings.warn(message)`` the first time ``key`` is seen in this process; True when it warned."""
    if key in _WARNED:
        return False
    _WARNED.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    return True


@builtin
def barrier(_semantic=None):
    """A barrier of the program's threads (every warp of the CTA reaches it before any passes)."""
    return _BARRIER(_semantic=_semantic)


@builtin
def async_load(tensor_desc, coord, barrier, result, pred=True, _semantic=None):
    """TMA copy of the block of ``tensor_desc`` at ``coord`` into shared memory ``result``; completes on the
    mbarrier ``barrier`` (which was told the bytes with ``mbarrier.expect``)."""
    return _LOAD(tensor_desc, coord, barrier, result, pred, _semantic=_semantic)


@builtin
def async_store(tensor_desc, coord, src, _semantic=None):
    """TMA copy of shared memory ``src`` to the block of ``tensor_desc`` at ``coord`` (wait with ``tma.store_wait``)."""
    return _STORE(tensor_desc, coord, src, _semantic=_semantic)


@builtin
def reinterpret(smem, dtype, shape, layout, _semantic=None):
    """``smem`` (a shared-memory descriptor) viewed as ``dtype`` elements of ``shape`` in ``layout``, same bytes."""
    return _REINTERPRET(smem, dtype, shape, layout, _semantic=_semantic)


TMA_ENCODER_NAMES = ("fill_tma_descriptor_tiled", "fill_tma_descriptor")
"""The names of the driver's tiled TMA-descriptor encoder, newest first: ``fill_tma_descriptor_tiled`` from Triton 3.7,
``fill_tma_descriptor`` on 3.6; both take (address, swizzle, element size, host element type, block, shape, strides,
padding)."""


def tma_descriptor_encoder(utils):
    """The tiled TMA-descriptor encoder of ``utils`` (``triton.runtime.driver.active.utils`` on a GPU) under whichever
    of :data:`TMA_ENCODER_NAMES` this Triton has, or None where it has neither (a caller then takes Triton's own
    launch path)."""
    for name in TMA_ENCODER_NAMES:
        fn = getattr(utils, name, None)
        if callable(fn):
            return fn
    return None
