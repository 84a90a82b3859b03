"""Checking kernels against float64 references.

Every check in the course (tests, graders, notebook cells) goes through here, so they all agree on:

- **the metric**: element i passes when ``|out_i - ref_i| <= tol * (|ref_i| + rms(ref))``: relative to the element
  where it is large, relative to the tensor's typical size where the element is near zero (so values that should be
  ~0 do not demand impossible precision). The norm-wise relative error ``||out - ref|| / ||ref||`` is reported too.
- **tolerances per dtype** (:data:`TOLERANCES`): what rounding in that precision can explain, no more.
- **NaN and inf never pass**, even where the reference has them in the same place, unless the caller allows it;
  tolerances must be finite and >= 0 (a NaN tolerance would pass anything), shapes must match exactly (no
  broadcasting: a (2, 1) output is not a (1, 2) one).
- **poison**: outputs are filled with NaN before a kernel runs (:func:`poisoned`), so an element the kernel never
  wrote shows up as a NaN and fails, instead of passing by accident because memory happened to hold the right value.
- **fresh random inputs** each call (:func:`random_tensor`), with the seed in the failure message to reproduce it.
- **messages for learners**: which element, expected vs got, how many mismatches. Failures raise AssertionError.
"""

from __future__ import annotations

import math
import secrets

import torch

from gpulab import dtypes, runtime

__all__ = [
    "ShapeMismatch",
    "TOLERANCES",
    "tolerance",
    "relative_error",
    "assert_close",
    "assert_close_drifting",
    "poisoned",
    "poison_",
    "new_output",
    "random_tensor",
    "new_seed",
    "to_float64",
    "check_function",
]

TOLERANCES: dict[str, float] = {
    "float64": 1e-10,
    "float32": 1e-5,  # IEEE fp32 arithmetic; long reductions in another order stay far below
    "tf32": 5e-3,  # fp32 operands rounded to a 10-bit mantissa inside tensor cores (~3e-4 typical)
    "float16": 5e-3,  # 10-bit mantissa, fp32 accumulation
    "bfloat16": 3e-2,  # 7-bit mantissa, fp32 accumulation
}


def _dtype_key(dtype) -> str:
    try:
        key = dtypes.name(dtype)
    except ValueError:
        key = None
    if key not in TOLERANCES:
        raise ValueError(f"dtype={dtype!r} has no tolerance; known: {', '.join(TOLERANCES)}.")
    return key


def tolerance(dtype) -> float:
    """Tolerance for results computed in ``dtype`` (a torch dtype or 'float32', 'tf32', 'float16', 'bfloat16')."""
    return TOLERANCES[_dtype_key(dtype)]


def to_float64(x):
    """Float tensors (and tensors inside tuples/lists/dicts) upcast to float64 on CPU; anything else unchanged."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64) if x.is_floating_point() else x.detach().cpu()
    if isinstance(x, (tuple, list)):
        return type(x)(to_float64(v) for v in x)
    if isinstance(x, dict):
        return {k: to_float64(v) for k, v in x.items()}
    return x


def _as_float64(x) -> torch.Tensor:
    return torch.as_tensor(x).detach().to("cpu", torch.float64)


class ShapeMismatch(AssertionError, ValueError):
    """An output whose shape differs from its reference's: a failed check (AssertionError, as graders expect) and a
    refused argument (ValueError) at once; never broadcast."""


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` in float64 (inf if either has a NaN/inf; absolute error if ref is all zero).

    ``out`` and ``ref`` must have the same shape (a ValueError otherwise: nothing is broadcast).
    """
    o, r = _as_float64(out), _as_float64(ref)
    runtime.same_shape("out", o, "ref", r)
    if not torch.isfinite(o).all() or not torch.isfinite(r).all():
        return math.inf
    num = torch.linalg.vector_norm(o - r).item()
    den = torch.linalg.vector_norm(r).item()
    return num / den if den > 0 else num


def new_seed() -> int:
    """A fresh seed from the OS: each check sees inputs nobody tuned the kernel for."""
    return secrets.randbits(31)


def random_tensor(*shape, dtype=torch.float32, device=None, seed=None, scale=1.0, distribution="normal"):
    """Random input of ``shape`` on ``device`` (default: gpulab's device), drawn from a fresh seed unless given.

    ``distribution`` is 'normal' (mean 0, std ``scale``) or 'uniform' (in [-scale, scale)); ``scale`` must be > 0.
    Never zeros: zeros hide unwritten outputs and wrong indexing, so an element that is 0 in ``dtype`` (a draw that
    underflows) becomes ``scale`` (or the dtype's smallest normal number, if ``scale`` itself underflows). Integer
    dtypes draw non-zero integers of magnitude 1..max(1, round(scale)) with a random sign (positive for unsigned
    types); bool is refused (its only non-zero value is True).
    """
    if device is None:
        device = runtime.device
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    shape = tuple(runtime.nonnegative_int(f"shape[{i}]", n) for i, n in enumerate(shape))
    if not isinstance(dtype, torch.dtype):
        raise runtime.ArgumentTypeError(f"dtype must be a torch dtype such as torch.float32, got {dtype!r}.")
    if dtype == torch.bool or dtype.is_complex:
        raise ValueError(f"dtype={dtype} is not supported by random_tensor; use a float or integer dtype.")
    scale = runtime.finite_float("scale", scale, positive=True)
    runtime.one_of("distribution", distribution, ("normal", "uniform"))
    seed = new_seed() if seed is None else runtime.nonnegative_int("seed", seed)
    g = torch.Generator().manual_seed(seed)
    if not dtype.is_floating_point:
        top = max(1, round(scale))
        magnitude = torch.randint(1, top + 1, shape, generator=g, dtype=torch.int64)
        signed = torch.iinfo(dtype).min < 0
        sign = torch.randint(0, 2, shape, generator=g, dtype=torch.int64) * 2 - 1 if signed else 1
        return (magnitude * sign).clamp(torch.iinfo(dtype).min, torch.iinfo(dtype).max).to(device=device, dtype=dtype)
    if distribution == "normal":
        x = torch.randn(shape, generator=g, dtype=torch.float64) * scale
    else:
        x = (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1) * scale
    x = x.to(dtype=dtype)
    zero = x == 0
    if zero.any():
        fill = torch.tensor(scale, dtype=dtype)
        x[zero] = fill if fill != 0 else torch.finfo(dtype).tiny
    return x.to(device=device)


def poison_(x: torch.Tensor) -> torch.Tensor:
    """Fill ``x`` in place with a value no kernel should produce: NaN for floats, the extreme for integers."""
    if x.is_floating_point():
        return x.fill_(float("nan"))
    if x.dtype == torch.bool:
        return x.fill_(True)
    info = torch.iinfo(x.dtype)
    return x.fill_(info.min if info.min < 0 else info.max)  # unsigned: the minimum is 0, a plausible value


def poisoned(*shape, dtype=torch.float32, device=None) -> torch.Tensor:
    """``torch.empty`` whose elements are all poison (see :func:`poison_`): pass it as a kernel's output."""
    if device is None:
        device = runtime.device
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    return poison_(torch.empty(shape, dtype=dtype, device=device))


def new_output(*shape, dtype, device=None) -> torch.Tensor:
    """A kernel's output buffer: :func:`poisoned` when :data:`gpulab.runtime.POISON` is on (interpreter, tests),
    else ``torch.empty`` (timed GPU runs). Every kernel wrapper allocates its outputs through this one function."""
    if runtime.POISON:
        return poisoned(*shape, dtype=dtype, device=device)
    if device is None:
        device = runtime.device
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    return torch.empty(shape, dtype=dtype, device=device)


def _fmt_index(flat: int, shape) -> str:
    if len(shape) == 0:
        return "()"
    idx = []
    for s in reversed(shape):
        idx.append(flat % s)
        flat //= s
    return "(" + ", ".join(str(i) for i in reversed(idx)) + ")"


def assert_close(
    out, ref, dtype=None, rtol=None, name="output", allow_nonfinite=False, context="", atol=0.0, magnitude=None
) -> float:
    """Raise AssertionError unless ``out`` matches the float64 ``ref`` within the tolerance for ``dtype``.

    ``dtype`` defaults to ``out``'s dtype; pass 'tf32' for fp32 matrix products that were allowed TF32. ``rtol``
    overrides the tolerance; ``atol`` adds an absolute allowance (both finite and >= 0, else a ValueError naming
    them). Integer and bool outputs must match exactly. A shape that differs from ``ref``'s fails with
    :class:`ShapeMismatch` (nothing is broadcast). Returns the norm-wise relative error (over the finite elements
    when ``allow_nonfinite``), so callers can print it.

    Each element may differ by ``tol * (|ref| + rms(ref)) + atol``. Where ``ref`` is a sum whose terms cancel (an
    attention row over a few keys: sum_j p_j v_j), rounding the terms moves it by ``tol * sum_j |p_j v_j|``, which can
    be far above ``|ref|``: pass that sum of the terms' sizes as ``magnitude`` (a finite, non-negative tensor of
    ``ref``'s shape) and ``max(|ref|, magnitude)`` takes the place of ``|ref|``.
    """
    if rtol is not None:
        rtol = runtime.finite_float("rtol", rtol, minimum=0.0)
    atol = runtime.finite_float("atol", atol, minimum=0.0)
    allow_nonfinite = runtime.strict_bool("allow_nonfinite", allow_nonfinite)
    if magnitude is not None and isinstance(out, (tuple, list)):
        raise TypeError("magnitude: one tensor for one output; compare the outputs of a tuple one by one to pass it.")
    if isinstance(out, (tuple, list)):
        if not isinstance(ref, (tuple, list)) or len(out) != len(ref):
            raise AssertionError(f"{name}: expected {len(ref) if isinstance(ref, (tuple, list)) else 1} outputs.")
        return max(
            (
                assert_close(o, r, dtype, rtol, f"{name}[{i}]", allow_nonfinite, context, atol)
                for i, (o, r) in enumerate(zip(out, ref))
            ),
            default=0.0,
        )
    if not isinstance(out, torch.Tensor):
        raise AssertionError(f"{name}: expected a torch.Tensor, got {type(out).__name__}.")
    if isinstance(ref, (tuple, list)) and any(isinstance(r, torch.Tensor) for r in ref):
        raise AssertionError(f"{name}: expected {len(ref)} outputs, got one tensor.")
    ref = torch.as_tensor(ref)
    where = f" ({context})" if context else ""
    if tuple(out.shape) != tuple(ref.shape):
        raise ShapeMismatch(
            f"{name}{where}: shape {tuple(out.shape)}, expected {tuple(ref.shape)} (shapes must match exactly; "
            "nothing is broadcast)."
        )
    if magnitude is not None:
        magnitude = _magnitude(magnitude, ref.shape)
    if rtol is not None:
        tol = rtol
    elif dtype is None and not out.is_floating_point():
        tol = 0.0  # integers and bools: exact
    else:
        tol = tolerance(dtype if dtype is not None else out.dtype)
    o = _as_float64(out).reshape(-1)
    r = _as_float64(ref).reshape(-1)
    n = o.numel()
    if n == 0:
        return 0.0

    # A NaN/inf in either tensor fails, unless the caller allows non-finite values and both agree exactly.
    bad_nonfinite = ~torch.isfinite(o) | ~torch.isfinite(r)
    if allow_nonfinite:  # only where the reference has exactly the same value (inf == inf, NaN == NaN)
        same = (o == r) | (torch.isnan(o) & torch.isnan(r))
        bad_nonfinite &= ~same
    problems = []
    if bad_nonfinite.any():
        k = int(bad_nonfinite.sum())
        first = int(bad_nonfinite.nonzero()[0])
        problems.append(
            f"{k} of {n} elements are NaN or inf in the output or the reference, first at index"
            f" {_fmt_index(first, out.shape)}: got {o[first].item():.6g}, expected {r[first].item():.6g}. (Outputs are"
            " poisoned with NaN before the run, so an element the kernel never wrote shows up here: check masks and"
            " the grid.)"
        )
    finite_r = torch.isfinite(r)
    scale = torch.sqrt(torch.mean(r[finite_r] ** 2)).item() if finite_r.any() else 0.0
    err = (o - r).abs()
    size = r.abs() if magnitude is None else torch.maximum(r.abs(), magnitude)
    limit = tol * (size + scale) + atol
    mismatch = (err > limit) & torch.isfinite(o) & finite_r
    if mismatch.any():
        k = int(mismatch.sum())
        worst = int(torch.where(mismatch, err / limit.clamp_min(1e-300), torch.zeros_like(err)).argmax())
        problems.append(
            f"{k} of {n} elements differ by more than the {tol:.0e} tolerance; worst at index"
            f" {_fmt_index(worst, out.shape)}: got {o[worst].item():.6g}, expected {r[worst].item():.6g}"
            f" (error {err[worst].item():.3g})."
        )
    finite = torch.isfinite(o) & finite_r
    rel = relative_error(o[finite], r[finite]) if not bad_nonfinite.any() else math.inf
    if problems:
        header = f"{name}{where} does not match the float64 reference (relative error {rel:.3g}, tolerance {tol:.0e})"
        raise AssertionError(header + ":\n  " + "\n  ".join(problems))
    return rel


def _magnitude(magnitude, shape) -> torch.Tensor:
    """``assert_close``'s ``magnitude``, checked: a finite, non-negative tensor of the reference's shape, flattened."""
    if not isinstance(magnitude, torch.Tensor):
        raise TypeError(
            f"magnitude: expected a tensor of the reference's shape {tuple(shape)} (the sum of the terms' sizes), "
            f"got {type(magnitude).__name__}."
        )
    if tuple(magnitude.shape) != tuple(shape):
        raise ValueError(
            f"magnitude: shape {tuple(magnitude.shape)}, expected the reference's {tuple(shape)} (one size per "
            "element; nothing is broadcast)."
        )
    m = _as_float64(magnitude).reshape(-1)
    if not bool(torch.isfinite(m).all()) or bool((m < 0).any()):
        raise ValueError("magnitude: every element must be finite and >= 0 (a sum of absolute values); got others.")
    return m


def assert_close_drifting(out, ref, name="output", slack=4.0) -> float:
    """:func:`assert_close` for a long chain of steps in a low precision (a recurrence over a thousand steps, a
    model's logits): within ``out``'s dtype tolerance norm-wise, and each element within ``slack`` times it. A state
    carried in bf16 drifts by a few ulps in a handful of elements out of millions, which is rounding, not a wrong
    element; an unwritten, NaN or misplaced element still fails, and so does a result off everywhere. Returns the
    norm-wise relative error."""
    if not isinstance(out, torch.Tensor):
        raise AssertionError(f"{name}: expected a torch.Tensor, got {type(out).__name__}.")
    slack = runtime.finite_float("slack", slack, minimum=1.0)
    tol = tolerance(out.dtype)
    rel = assert_close(out, ref, rtol=slack * tol, name=name)
    if rel > tol:
        raise AssertionError(f"{name}: norm-wise relative error {rel:.3g} above the {tol:.0e} tolerance")
    return rel


def check_function(fn, reference, inputs, dtype=None, rtol=None, name=None, context="") -> float:
    """Run ``fn(*inputs)`` and ``reference`` on float64 copies of the same inputs, and :func:`assert_close` them.

    ``inputs`` is a tuple of arguments (tensors are upcast for the reference; other values pass through).
    Returns the relative error.
    """
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    ref = reference(*to_float64(tuple(inputs)))
    out = fn(*inputs)
    return assert_close(
        out, ref, dtype=dtype, rtol=rtol, name=name or getattr(fn, "__name__", "output"), context=context
    )
