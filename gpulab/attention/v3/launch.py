"""Version 3's host side, cheap per call: what a launch needs is worked out once and kept.

What you will learn:

- where the time of a small kernel's launch goes when the kernel is fast: Triton's ``kernel[grid](...)`` binds and
  specializes every argument, hashes a cache key and, for each TMA descriptor, encodes a 128-byte ``CUtensorMap``
  on the host (``cuTensorMapEncodeTiled``), every call; at N = 1k the GPU then waits for the host;
- what may be cached and on what key: a tensor map is a pure function of (address, shape, strides, element type,
  block, swizzle), so a cache keyed on all of them is never stale (a freed tensor's address reused by another of the
  same geometry gets the same map), and it holds no tensor alive (no memory pinned);
- the launch itself: after the first call through Triton (which compiles), later calls hand the kept function, its
  metadata and the argument list straight to Triton's compiled C launcher.

:class:`BoundedCache` is the least-recently-used map both caches use; :func:`tma_key` the key of a tensor map;
:class:`RawLaunch` the launch through the C launcher, in either of its two layouts: Triton 3.6 takes the kernel's
arguments spread out after the fixed ones; Triton 3.7 to 3.9 take them as one list after the fixed ones, with the
argument annotations and kernel signature the launcher parses them by. Where the layout is neither,
:meth:`RawLaunch.of` returns None and the caller keeps Triton's ordinary path.
"""

from __future__ import annotations

import collections
import inspect

from triton import knobs

from gpulab import gluon_compat

__all__ = ["BoundedCache", "tma_key", "RawLaunch"]


class BoundedCache:
    """A least-recently-used map of at most ``maxsize`` entries: :meth:`get` returns the value kept under ``key``,
    or builds it with ``build()``, keeps it (dropping the least recently used entry beyond ``maxsize``) and returns
    it. ``hits`` and ``misses`` count the lookups."""

    def __init__(self, maxsize: int):
        if not isinstance(maxsize, int) or isinstance(maxsize, bool) or maxsize < 1:
            raise ValueError(f"maxsize must be a positive int, got {maxsize!r}; e.g. 64.")
        self.maxsize = maxsize
        self._data: collections.OrderedDict = collections.OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key, build):
        value = self._data.get(key)
        if value is not None:
            try:
                self._data.move_to_end(key)
            except KeyError:  # another thread evicted it meanwhile: the value is still valid
                pass
            self.hits += 1
            return value
        value = build()
        self._data[key] = value
        while len(self._data) > self.maxsize:
            try:
                self._data.popitem(last=False)
            except KeyError:  # emptied by another thread
                break
        self.misses += 1
        return value

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key) -> bool:
        return key in self._data

    def clear(self) -> None:
        self._data.clear()


def tma_key(ptr: int, shape: tuple, strides: tuple, meta: dict) -> tuple:
    """Everything a ``CUtensorMap`` is computed from: the global address, the global shape and strides (elements),
    and the kernel's view of the descriptor (``meta``: swizzle, element size and type, block shape, fp4 packing, as
    Triton's compile records it in ``tensordesc_meta``)."""
    return (ptr, tuple(shape), tuple(strides), meta["swizzle"], meta["elem_size"], meta["elem_type"],
            tuple(meta["block_size"]), bool(meta.get("fp4_padded", False)))  # fmt: skip


def _no_hooks(hook) -> bool:
    return hook is None or getattr(hook, "calls", None) == []


class RawLaunch:
    """A compiled kernel launched through Triton's C launcher with its tensor maps from a :class:`BoundedCache`.

    ``launch(grid, stream, descs, rest)``: ``descs`` are ``(address, shape, strides)`` of the kernel's descriptor
    arguments in order (they lead its signature), ``rest`` the remaining arguments as Triton's launcher takes them
    (tensors for pointers, Python numbers, and the constexprs' values, which it skips).
    """

    def __init__(self, compiled, c_launch, encode, cache: BoundedCache):
        self.c_launch = c_launch
        self.encode = encode  # the driver's tiled encoder: (ptr, swizzle, elem size, host type, block, shape, strides)
        self.cache = cache
        self.metas = list(compiled.metadata.tensordesc_meta)
        self.function = compiled.function
        self.packed_metadata = compiled.packed_metadata
        self.cooperative = compiled.run.launch_cooperative_grid
        self.pdl = compiled.run.launch_pdl
        # Triton 3.7+: the launcher parses the argument list by these two (absent on 3.6)
        self.annotations = getattr(compiled.run, "arg_annotations", None)
        self.signature = getattr(compiled.run, "kernel_signature", None)

    @classmethod
    def of(cls, compiled, cache: BoundedCache) -> RawLaunch | None:
        """The raw launch of ``compiled`` (a Triton ``CompiledKernel`` that has run once), or None where its launcher
        is not laid out as on Triton 3.6 or needs what this path does not provide (scratch memory, descriptors
        without kernel-side metadata)."""
        try:
            from triton.backends.nvidia import driver as nv  # noqa: PLC0415

            run = compiled.run
            if run.global_scratch_size or run.profile_scratch_size or compiled.function is None:
                return None
            metas = getattr(compiled.metadata, "tensordesc_meta", None)
            if not metas or any(m is None for m in metas):
                return None
            c_launch = inspect.getclosurevars(run.launch).nonlocals.get("launcher")
            if c_launch is None or not callable(c_launch):
                return None
            dtype_map = nv.TMA_DTYPE_DEVICE_TO_HOST
        except (AttributeError, ImportError, TypeError):
            return None

        def encoder():  # the driver's cuTensorMapEncodeTiled under this Triton's name (needs the active driver)
            return gluon_compat.tma_descriptor_encoder(nv.triton.runtime.driver.active.utils)

        try:
            if encoder() is None:  # neither known name: Triton's own launch
                return None
        except RuntimeError:  # no active driver (no GPU here): a descriptor's first encode finds it
            pass

        def encode(ptr, shape, strides, meta):
            fill = encoder()
            shape = list(shape)
            if meta.get("fp4_padded"):
                shape[-1] *= 2
            return fill(ptr, meta["swizzle"], meta["elem_size"], dtype_map[meta["elem_type"]], meta["block_size"],
                        shape, list(strides), 0)  # fmt: skip

        return cls(compiled, c_launch, encode, cache)

    @staticmethod
    def usable() -> bool:
        """No launch hooks are set (a profiler's hooks need Triton's ordinary path, which builds their metadata).
        Triton 3.6 keeps them as hook chains (empty: ``.calls == []``), older versions as None."""
        return _no_hooks(knobs.runtime.launch_enter_hook) and _no_hooks(knobs.runtime.launch_exit_hook)

    def tensor_map(self, ptr: int, shape: tuple, strides: tuple, meta: dict):
        return self.cache.get(tma_key(ptr, shape, strides, meta), lambda: self.encode(ptr, shape, strides, meta))

    def launch(self, grid: int, stream: int, descs, rest) -> None:
        args = []
        for (ptr, shape, strides), meta in zip(descs, self.metas):
            args.append(self.tensor_map(ptr, shape, strides, meta))
            args.extend(shape)
            args.extend(strides)
        self.call((grid, 1, 1), stream, [*args, *rest])

    def call(self, grid: tuple, stream: int, args: list) -> None:
        """One launch of ``grid`` (three ints) on ``stream`` with ``args`` as the C launcher takes them (each
        descriptor expanded to its tensor map, shape and strides), in this Triton's layout."""
        gx, gy, gz = grid
        if self.signature is None:  # Triton 3.6: scratch, scratch, metadata, launch metadata, hooks, *arguments
            self.c_launch(gx, gy, gz, stream, self.function, self.cooperative, self.pdl, None, None,
                          self.packed_metadata, None, None, None, *args)  # fmt: skip
        else:  # Triton 3.7-3.9: metadata, launch metadata, hooks, scratch, scratch, annotations, signature, [arguments]
            self.c_launch(gx, gy, gz, stream, self.function, self.cooperative, self.pdl, self.packed_metadata, None,
                          None, None, None, None, self.annotations, self.signature, list(args))  # fmt: skip
