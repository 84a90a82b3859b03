"""Graders used by the exercise notebooks. Each takes the learner's function, runs it on fresh random inputs
against a reference through :mod:`gpulab.check`, and raises AssertionError with a message that says what to fix.
On success it prints one deterministic line (nbval compares it)."""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping, Sequence

import torch

from gpulab import check, hardware, runtime


def fresh_rng() -> tuple[random.Random, int]:
    """A random generator from a fresh seed (and the seed, for messages): graders draw new cases every run, so no
    answer can be tuned to fixed ones."""
    seed = check.new_seed()
    return random.Random(seed), seed


def require_callable(name: str, fn) -> None:
    """A TypeError naming ``name`` unless ``fn`` is the learner's function (a callable): a grader given a string,
    a number or None says so before it draws a case."""
    if not callable(fn):
        raise runtime.ArgumentTypeError(
            f"{name} must be your function (a callable), got {type(fn).__name__} {fn!r:.60}; pass the function "
            "itself, without calling it or quoting its name."
        )


def require_kernel(name: str, kernel, called_as: str | None = None) -> None:
    """A TypeError naming ``name`` unless ``kernel`` is a ``@triton.jit`` function. A kernel the grader launches as
    ``kernel[grid](...)`` may also be a launcher object with ``[]`` (not a string, list or dict, which have ``[]``
    too); a device function the grader's own kernel calls (``called_as``, e.g. "gru_cell(g, r, z, n, h)") must be
    jitted itself (compiled and interpreted ones both wrap the Python function as ``.fn``)."""
    jitted = hasattr(kernel, "fn") and not isinstance(kernel, (str, bytes))
    launcher = hasattr(kernel, "__getitem__") and not isinstance(kernel, (str, bytes, Sequence, Mapping))
    if not (jitted if called_as else jitted or launcher):
        use = f"calls it inside its kernel as {called_as}" if called_as else f"launches it as {name}[grid](...)"
        raise runtime.ArgumentTypeError(
            f"{name} is a {type(kernel).__name__} ({kernel!r:.60}), not a @triton.jit function; decorate it with "
            f"@triton.jit and pass the function itself (the grader {use})."
        )


def raised_not_implemented(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it was raised from is the exercise stub's NotImplementedError (also as the
    quoted source line of a GPU compilation error)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        # A GPU compilation error quotes the offending source line, `raise NotImplementedError()`.
        if isinstance(exc, NotImplementedError) or "NotImplementedError" in str(exc):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def grader(title):
    """Turn 'not implemented yet' into a clear failure, and print a one-line pass message."""

    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                detail = fn(*args, **kwargs)
            except AssertionError:
                raise
            except Exception as exc:
                # Inside a Triton kernel the stub's NotImplementedError arrives wrapped (an InterpreterError on CPU,
                # a compilation error on a GPU): look through the chain of causes for it.
                if not raised_not_implemented(exc):
                    raise
                raise AssertionError(
                    f"{title}: not implemented yet. Replace `raise NotImplementedError()` with your code."
                ) from exc
            print(f"PASSED {title}" + (f": {detail}" if detail else ""))

        return run

    return wrap


@grader("masked copy kernel")
def grade_copy_kernel(kernel, sizes=(1, 17, 1000, 1024, 4097), blocks=(16, 256, 1024)):
    """``kernel[grid](src, dst, n, BLOCK=...)`` must copy n elements and write nothing past n."""
    import triton

    require_kernel("kernel", kernel)
    for name, values in (("sizes", sizes), ("blocks", blocks)):
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__") or not list(values):
            raise runtime.ArgumentTypeError(f"{name} must be a non-empty list of positive integers, got {values!r}.")
        for v in values:
            runtime.positive_int(f"{name}' item", v)

    for block in blocks:
        for n in sizes:
            src = check.random_tensor(n, dtype=torch.float32)
            guard = check.poisoned(n + block, dtype=torch.float32)  # elements past n must stay poisoned
            dst = guard[:n]
            kernel[(triton.cdiv(n, block),)](src, dst, n, BLOCK=block)
            check.assert_close(dst, src, name="dst", context=f"n={n}, BLOCK={block}")
            if not torch.isnan(guard[n:]).all():
                k = int((~torch.isnan(guard[n:])).sum())
                raise AssertionError(
                    f"n={n}, BLOCK={block}: the kernel wrote {k} elements past the end of dst. "
                    "Mask the store: lanes whose offset is >= n must not write (tl.store(..., mask=offs < n))."
                )
    return f"{len(sizes)} sizes x {len(blocks)} block sizes, nothing written past the end"


@grader("which level serves a working set")
def grade_which_level(which_level):
    """``which_level(working_set_bytes, gpu_spec) -> 'L1' | 'L2' | 'HBM'``, checked on every GPU in the table."""
    require_callable("which_level", which_level)
    tried = 0
    for spec in hardware.SPECS.values():
        for w in sorted({1, spec.l1_per_sm, spec.l1_per_sm + 1, spec.l2_bytes, spec.l2_bytes + 1, 4 << 30}):
            got, want = which_level(w, spec), hardware.cache_level(w, spec)
            tried += 1
            if got != want:
                raise AssertionError(
                    f"{spec.name}: which_level({w:,} bytes) returned {got!r}, expected {want!r} "
                    f"(L1 per SM {spec.l1_per_sm:,} bytes, L2 {spec.l2_bytes:,} bytes)."
                )
    return f"{tried} cases on {len(hardware.SPECS)} GPUs"


@grader("copy bandwidth")
def grade_copy_bandwidth(copy_gbps):
    """``copy_gbps(n_elements, dtype, ms) -> GB/s``: bytes read + written over time."""
    require_callable("copy_gbps", copy_gbps)
    cases = [(1000, torch.float32, 1.0), (1 << 28, torch.float32, 0.36), (12345, torch.float16, 0.002)]
    cases.append((7, torch.float64, 1e-3))
    for n, dtype, ms in cases:
        want = 2 * n * torch.empty(0, dtype=dtype).element_size() / (ms * 1e-3) / 1e9
        got = copy_gbps(n, dtype, ms)
        if not isinstance(got, (int, float)) or abs(got - want) > 1e-9 * max(1.0, abs(want)):
            raise AssertionError(
                f"copy_gbps({n}, {dtype}, {ms}) returned {got!r}, expected {want:.6g}. A copy reads n elements and "
                "writes n elements; GB/s is 1e9 bytes per second, and ms is milliseconds."
            )
    return f"{len(cases)} cases"


def check_number(where: str, got, want, mistakes, unit: str = "") -> None:
    """Check a learner's number ``got`` against ``want``: on a miss, the likely wrong answers ``mistakes`` ([(value,
    message)]) are tried first and a match fails with its "common mistake" message; else the miss itself fails."""
    if got == want:
        return
    for wrong, message in mistakes:
        if got == wrong and wrong != want:
            raise AssertionError(f"{where}: common mistake: {message}")
    raise AssertionError(f"{where}: got {got!r}, expected {want}{unit}.")


def check_gradients(where: str, names, out, want, mistakes, shape_hint: str = "") -> None:
    """Check a learner's tuple of tensors ``out`` against float64 ``want`` (same order as ``names``), for graders of
    backward passes: a wrong count or shape fails first (with ``shape_hint``); then, if any value is off, the likely
    wrong answers ``mistakes()`` (a callable returning [(tuple of tensors or None, message)]) are tried, and a match
    fails with its "common mistake" message; else the first wrong tensor fails :func:`gpulab.check.assert_close`."""
    if not isinstance(out, (tuple, list)) or len(out) != len(names):
        raise AssertionError(f"{where}: got {type(out).__name__}; return the tuple ({', '.join(names)}).")
    for name, got, ref in zip(names, out, want):
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(ref.shape):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise AssertionError(
                f"{where}: {name} has shape {shape}, expected {tuple(ref.shape)}. {shape_hint}".strip()
            )

    def same(a, b):
        return bool(torch.allclose(a.double(), b.double(), rtol=1e-6, atol=1e-10))

    close = [same(g, r) for g, r in zip(out, want)]
    if all(close):
        return
    for wrong, message in mistakes():
        if any(not ok and w is not None and same(g, w) for g, w, ok in zip(out, wrong, close)):
            raise AssertionError(f"{where}: common mistake: {message}")
    for name, got, ref, ok in zip(names, out, want, close):
        if not ok:
            check.assert_close(got.double(), ref.double(), dtype=torch.float64, rtol=1e-6, name=name, context=where)
