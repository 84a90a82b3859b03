"""Where gpulab's kernels run: a CUDA GPU at full size, or Triton's CPU interpreter at small sizes.

This module decides once, at import, before any ``@triton.jit`` function is defined (Triton reads
``TRITON_INTERPRET`` when a kernel is decorated; set it too late and Triton raises "0 active drivers").
Every gpulab module that defines a kernel imports this one first.

The decision:
- ``GPULAB_DEVICE=cpu`` forces the interpreter, ``GPULAB_DEVICE=cuda`` insists on a GPU (an error if there is none);
- otherwise a CUDA device means GPU mode and no CUDA device means interpreter mode;
- an explicit ``TRITON_INTERPRET=1`` from the user is respected (interpreter on a GPU machine, for debugging).

Interpreter traps, handled here rather than only documented:
- bf16 *arithmetic* and bf16 ``tl.dot`` are silently wrong in the interpreter (bf16 load/store/cast and fp16 are
  fine): :func:`require_dtype` refuses bf16 on CPU with a clear error, and kernels compute in fp32.
- ``tl.dot`` needs K >= 16 on a GPU but not in the interpreter: :func:`dot_block` pads tile sizes to 16 everywhere,
  so a shape that works on CPU also compiles on the GPU.
- fp32 ``tl.dot`` is TF32 on a GPU unless ``input_precision="ieee"``: :func:`dot_precision` returns "ieee" unless
  the caller allows tf32.
- ``tl.device_assert`` and ``tl.debug_barrier`` do nothing in the interpreter, and programs run one after another,
  so cross-program synchronisation cannot be tested on CPU: wrappers validate inputs in Python, before launch.
- Triton 3.6's interpreter fails on numpy >= 2.3 (a loop over a runtime bound raises "only 0-dimensional arrays can
  be converted to Python scalars"): :data:`INTERPRETER_PROBLEM` says so, and `python -m gpulab info` shows it.
  Triton 3.7 and later run with numpy 2.3+.
- In Triton 3.6 to 3.9's interpreter a scalar condition broadcast into a block (``row_ok & (t < T - 1)``) holds numpy
  int32 data under its int1 type. 3.6 and 3.7 load and store through such a mask; Triton 3.9's loads and stores
  raise "mask has unsupported dtype". :func:`_bool_masks` makes every mask the interpreter loads or stores through a
  numpy bool array first (a no-op where it already is one).

Tested: Triton 3.6 (the benchmark H100's), 3.7 and 3.9 on CPU with torch 2.13 (README, "Which torch you get").
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import os
import warnings

import numpy
import torch

__all__ = [
    "MODE",
    "INTERPRET",
    "device",
    "on_gpu",
    "pick",
    "make_stream",
    "stream",
    "synchronize",
    "require_tensor",
    "ArgumentTypeError",
    "integer",
    "positive_int",
    "nonnegative_int",
    "finite_float",
    "is_finite",
    "as_device",
    "strict_bool",
    "one_of",
    "same_shape",
    "record_list",
    "dot_precision",
    "dot_block",
    "next_power_of_2",
    "describe",
    "INTERPRETER_PROBLEM",
    "POISON",
    "poisoning",
]


def _decide() -> str:
    forced = os.environ.get("GPULAB_DEVICE", "").strip().lower()
    if forced not in ("", "cpu", "cuda"):
        raise ValueError(f"GPULAB_DEVICE={forced!r} is not supported; use 'cpu', 'cuda' or leave it unset.")
    if forced == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("GPULAB_DEVICE=cuda, but torch sees no CUDA device; unset it to use the CPU interpreter.")
    if forced == "cpu" or os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return "interpreter"
    return "cuda"


MODE: str = _decide()
"""``"cuda"`` (kernels compiled for the GPU) or ``"interpreter"`` (kernels run by Triton's interpreter on CPU)."""

INTERPRET: bool = MODE == "interpreter"
if INTERPRET:
    os.environ["TRITON_INTERPRET"] = "1"

device: torch.device = torch.device("cuda" if MODE == "cuda" else "cpu")
"""The torch device that gpulab's kernels take their tensors on."""

POISON: bool = INTERPRET or os.environ.get("GPULAB_POISON", "") == "1"
"""One poison policy for every kernel: when True, kernel outputs are filled with NaN before the launch
(:func:`gpulab.check.new_output`), so an element a kernel never wrote fails every check. On in the interpreter and in
the tests (``GPULAB_POISON=1``, set by ``conftest.py``), off in timed GPU runs (a fill writes every output once more).
Change it for a block of code with :func:`poisoning`."""


@contextlib.contextmanager
def poisoning(on: bool = True):
    """``with runtime.poisoning(True): ...`` turns :data:`POISON` on (or off) inside the block."""
    global POISON
    on = strict_bool("on", on)
    before, POISON = POISON, on
    try:
        yield
    finally:
        POISON = before


def _interpreter_problem() -> str | None:
    if not INTERPRET:
        return None
    try:
        import triton  # deferred: importing Triton before TRITON_INTERPRET is set above would be too early
    except ImportError as exc:  # pragma: no cover - triton is a hard dependency on Linux
        return f"Triton is not importable ({exc}); install it with `pip install triton==3.6.0`."
    triton_v = tuple(int(p) for p in triton.__version__.split(".")[:2])
    numpy_v = tuple(int(p) for p in numpy.__version__.split(".")[:2])
    if triton_v <= (3, 6) and numpy_v >= (2, 3):
        return (
            f"Triton {triton.__version__}'s interpreter fails with numpy {numpy.__version__} (loops over a runtime "
            "bound raise 'only 0-dimensional arrays can be converted to Python scalars'); "
            "fix: pip install 'numpy<2.3'."
        )
    return None


def _bool_masks() -> None:
    """Triton 3.9's interpreter refuses a load or store mask whose numpy data is not bool ("mask has unsupported
    dtype"), and its own broadcast of a scalar condition makes int32 data (as 3.6 and 3.7 do, whose loads take it):
    wrap the interpreter builder's masked load and store to pass the mask as bool. Installed once, in interpreter
    mode; :mod:`gpulab.traffic` wraps the same two methods on top of these."""
    from triton.runtime import interpreter  # deferred: after TRITON_INTERPRET is set above

    cls = interpreter.InterpreterBuilder
    if getattr(cls, "_gpulab_bool_masks", False):
        return
    missing = [m for m in ("create_masked_load", "create_masked_store") if not hasattr(cls, m)]
    if missing:  # a Triton whose interpreter moved these: the rest of gpulab may still run, so say it, don't fail
        message = (f"Triton's interpreter has no InterpreterBuilder.{missing[0]}; masks are not made bool "
                   "(gpulab.runtime._bool_masks), so a mask with non-bool data may fail.")  # fmt: skip
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        return
    load, store, handle = cls.create_masked_load, cls.create_masked_store, interpreter.TensorHandle

    def as_bool(mask):
        if mask is None or getattr(mask.data, "dtype", None) == numpy.bool_:
            return mask
        data = numpy.asarray(mask.data)  # Triton 3.7's descriptor loads pass a memoryview
        if data.dtype == numpy.bool_:
            return mask
        return handle(data.astype(numpy.bool_), mask.dtype)

    def create_masked_load(self, ptrs, mask, *args, **kwargs):
        return load(self, ptrs, as_bool(mask), *args, **kwargs)

    def create_masked_store(self, ptrs, value, mask, *args, **kwargs):
        return store(self, ptrs, value, as_bool(mask), *args, **kwargs)

    cls.create_masked_load, cls.create_masked_store = create_masked_load, create_masked_store
    cls._gpulab_bool_masks = True


MIN_TRITON = (3, 6)
"""The oldest Triton gpulab runs on (pyproject.toml says why): the H100's. Tested: 3.6, 3.7 and 3.9."""


def _triton_too_old(version: str) -> str | None:
    """The error message for a Triton older than :data:`MIN_TRITON`, or None."""
    parts = tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in str(version).split(".")[:2])
    if parts >= MIN_TRITON:
        return None
    return (f"gpulab needs Triton >= {MIN_TRITON[0]}.{MIN_TRITON[1]} (its Hopper kernels use tl.range(warp_specialize="
            f"...) and device-side tensor descriptors; tested: 3.6, 3.7, 3.9), but this is Triton {version}; "
            "fix: pip install 'triton==3.6.0' (the H100's), or 'triton>=3.7' with numpy 2.3+.")  # fmt: skip


def _require_triton() -> None:
    try:
        import triton  # deferred: after TRITON_INTERPRET is set above
    except ImportError:  # pragma: no cover - reported by _interpreter_problem (interpreter) or at the first kernel
        return
    if (problem := _triton_too_old(triton.__version__)) is not None:
        raise ImportError(problem)


_require_triton()
if INTERPRET:
    _bool_masks()

INTERPRETER_PROBLEM: str | None = _interpreter_problem()
if INTERPRETER_PROBLEM:
    warnings.warn(INTERPRETER_PROBLEM, RuntimeWarning, stacklevel=2)


def on_gpu() -> bool:
    """True when kernels run on a CUDA GPU."""
    return MODE == "cuda"


def pick(cpu, gpu):
    """Return the problem size (or anything) for the current mode: ``pick(cpu=2**10, gpu=2**26)``.

    The interpreter runs a kernel as numpy code, one program at a time, so CPU sizes are a few thousand elements;
    the GPU wants sizes that fill every SM.
    """
    return gpu if on_gpu() else cpu


def make_stream():
    """A new CUDA stream on a GPU; None on CPU, where :func:`stream` is then a no-op."""
    return torch.cuda.Stream() if on_gpu() else None


@contextlib.contextmanager
def stream(s=None):
    """Run the block on stream ``s`` (from :func:`make_stream`); a no-op on CPU or when ``s`` is None."""
    if s is None or not on_gpu():
        yield s
    else:
        with torch.cuda.stream(s):
            yield s


def synchronize() -> None:
    """Wait for the GPU (no-op on CPU). Call before reading a host clock."""
    if on_gpu():
        torch.cuda.synchronize()


def _names(dtypes) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes) or "nothing"


# --- The validation vocabulary: every public function checks its arguments with these. ---------------------------
# Each error names the argument, what was given, what is allowed and, where there is one, the fix. Integers must be
# integers (5.0 is refused everywhere), booleans must be bools (0/1 and "no" are refused), floats must be finite.


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type (a float where an integer is needed, a string where a bool is): both a TypeError
    and a ValueError, so code that catches either sees it."""


def _integer_kind(minimum) -> str:
    return {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, "an integer")


def integer(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int if it is an integer (not a bool, not a float) within [minimum, maximum], else an error
    naming ``name``: :class:`ArgumentTypeError` for the wrong type, ValueError for a value out of range."""
    kind = _integer_kind(minimum)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        hint = f"; use {int(value)}" if isinstance(value, float) and value.is_integer() else ""
        raise ArgumentTypeError(f"{name} must be {kind}, got {value!r} ({type(value).__name__}){hint}.")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be {kind}{'' if minimum in (0, 1) else f' >= {minimum}'}, got {value}.")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be an integer <= {maximum}, got {value}.")
    return value


def positive_int(name: str, value) -> int:
    """``value`` as an int if it is a positive integer (not a bool, not a float), else an error naming ``name``."""
    return integer(name, value, minimum=1)


def nonnegative_int(name: str, value) -> int:
    """``value`` as an int if it is an integer >= 0 (not a bool, not a float), else an error naming ``name``."""
    return integer(name, value, minimum=0)


def is_finite(value) -> bool:
    """``math.isfinite`` by comparisons, which ``torch.compile`` can trace for a float that varies between calls
    (a symbolic float: ``math.isfinite`` would stop the graph). False for NaN (not equal to itself), +-inf and
    anything that is not a real number (a bool included)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return value == value and abs(value) != math.inf


def as_device(device, name: str = "device") -> torch.device:
    """``device`` (a torch.device, a name such as 'cpu' or 'cuda:0', or a CUDA index) as a torch.device, else an error
    naming ``name``: a ValueError for what torch cannot make a device of here, an :class:`ArgumentTypeError` for a
    value of another type."""
    if isinstance(device, torch.device):
        return device
    if isinstance(device, bool) or not isinstance(device, (str, int)):
        raise ArgumentTypeError(
            f"{name} must be a torch.device or a name such as 'cpu' or 'cuda:0', got {type(device).__name__} "
            f"{device!r}."
        )
    try:
        return torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(
            f"{name}={device!r} is not a device here; use e.g. 'cpu', 'cuda', 'cuda:0' or gpulab.runtime.device."
        ) from exc


def finite_float(name: str, value, minimum: float | None = None, positive: bool = False, maximum=None) -> float:
    """``value`` as a float if it is a finite real number (>= minimum; > 0 with ``positive``), else an error naming
    ``name``. Bools and strings are refused with a TypeError; NaN, inf and out-of-range values with a ValueError."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_complex:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__}).")
    value = float(value)
    if not is_finite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}.")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}.")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}.")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value!r}.")
    return value


def strict_bool(name: str, value) -> bool:
    """``value`` if it is a bool (or numpy bool), else a TypeError naming ``name``: 0, 1, "no" and None are refused."""
    if isinstance(value, numpy.bool_):
        return bool(value)
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__}).")
    return value


def one_of(name: str, value, choices):
    """``value`` if it is one of ``choices`` (compared with ==, hashable or not), else an error naming ``name`` that
    lists the choices."""
    choices = tuple(choices)
    try:
        ok = any(value == c and type(value) is type(c) for c in choices) or any(
            value == c for c in choices if not isinstance(c, (bool, int, float))
        )
    except Exception:  # noqa: BLE001 - a value that cannot even be compared is not one of the choices
        ok = False
    if not ok:
        raise ValueError(f"{name}={value!r} is not supported; use one of {', '.join(repr(c) for c in choices)}.")
    return value


def require_tensor(
    name: str,
    x,
    ndim: int | None = None,
    dtype=None,
    shape: tuple | None = None,
    device_check: bool = True,
) -> torch.Tensor:
    """Raise a clear error unless ``x`` is a tensor (on gpulab's device unless ``device_check=False``), of rank
    ``ndim``, dtype ``dtype`` (a dtype or a tuple of dtypes) and ``shape`` (None entries match any size), as given."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}.")
    if device_check and x.device.type != device.type:
        raise ValueError(
            f"{name} is on {x.device}, but gpulab runs kernels on {device} ({MODE} mode); "
            f"move it with {name}.to(gpulab.runtime.device)."
        )
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {tuple(x.shape)}.")
    if dtype is not None:
        allowed = tuple(dtype) if isinstance(dtype, (tuple, list)) else (dtype,)
        if x.dtype not in allowed:
            raise ValueError(f"{name} has dtype {x.dtype}; allowed: {_names(allowed)}. Convert it with {name}.to(...).")
    if shape is not None:
        if x.dim() != len(shape) or any(s is not None and s != n for s, n in zip(shape, x.shape)):
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise ValueError(f"{name} must have shape {want}, got {list(x.shape)}.")
    return x


def same_shape(name_a: str, a: torch.Tensor, name_b: str, b: torch.Tensor) -> None:
    """A ValueError unless ``a`` and ``b`` have exactly the same shape (no broadcasting); a TypeError naming the
    argument that is not a tensor."""
    for name, x in ((name_a, a), (name_b, b)):
        if not isinstance(x, torch.Tensor):
            raise ArgumentTypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}.")
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(
            f"{name_a} has shape {list(a.shape)} but {name_b} has shape {list(b.shape)}; they must match exactly "
            "(no broadcasting)."
        )


def _kind_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def record_list(name: str, value, kind, what: str | None = None, source: str = "", allow_empty: bool = False) -> list:
    """``value`` as a list if it is a list (tuple, or other iterable; not a string, a mapping or one record) of
    ``kind`` instances (a type or a tuple of types), with at least one unless ``allow_empty``; else an error naming
    ``name``: a TypeError for a value that is not a list or an item that is not a ``kind``, a ValueError for an empty
    list. ``what`` names the records in messages (default: the type's name), ``source`` says where they come from
    (e.g. " (from gpulab.bench.load)"). The one check of "a list of records" that every public function uses."""
    what = what or f"{_kind_name(kind)} records"
    if isinstance(value, kind):
        raise ArgumentTypeError(f"{name} must be a list of {what}, got one {type(value).__name__}; use [{name}].")
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise ArgumentTypeError(f"{name} must be a list of {what}{source}, got {type(value).__name__} {value!r:.80}.")
    items = list(value)
    if not items and not allow_empty:
        raise ValueError(f"{name} is empty; pass at least one of the {what}{source}.")
    for i, item in enumerate(items):
        if not isinstance(item, kind):
            raise ArgumentTypeError(
                f"{name}[{i}] is a {type(item).__name__} {item!r:.60}, not a {_kind_name(kind)}; {name} must hold "
                f"only {what}{source}."
            )
    return items


def dot_precision(dtype, allow_tf32: bool = False) -> str:
    """The ``input_precision`` to pass to ``tl.dot``: 'ieee' for fp32 unless the caller allows 'tf32'.

    fp16/bf16 operands are exact inputs to the tensor cores, so the argument only matters for fp32.
    """
    if not isinstance(dtype, torch.dtype):
        raise ArgumentTypeError(f"dtype must be a torch dtype such as torch.float32, got {type(dtype).__name__} "
                                f"{dtype!r}; pass the tensor's .dtype.")  # fmt: skip
    return "tf32" if (allow_tf32 and dtype == torch.float32 and on_gpu()) else "ieee"


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (n a positive integer)."""
    n = positive_int("n", n)
    return 1 << (n - 1).bit_length()


def dot_block(n: int, minimum: int = 16) -> int:
    """Tile size for a ``tl.dot`` dimension of extent ``n``: a power of two, at least 16 in every mode.

    GPUs need dot operands of at least 16 along each dimension; the interpreter does not, so without this a tile
    that works in CI could fail to compile on the GPU.
    """
    return max(positive_int("minimum", minimum), next_power_of_2(n))


def describe() -> dict:
    """Mode, device and versions, for `python -m gpulab info` and result records."""
    import triton  # deferred for the same reason as in _interpreter_problem

    info = {
        "mode": MODE,
        "device": str(device),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "numpy": numpy.__version__,
        "cuda_available": torch.cuda.is_available(),
    }
    if on_gpu():
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    if INTERPRETER_PROBLEM:
        info["problem"] = INTERPRETER_PROBLEM
    return info


def once_differentiable(backward):
    """``torch.autograd.function.once_differentiable`` for a backward made of kernels, which also covers what torch's
    leaves open: torch's marks the gradients only when the incoming gradients require grad, so after
    ``g = torch.autograd.grad(out.sum(), x, create_graph=True)`` (incoming ones, WGAN-GP's ``grad_outputs``) g comes
    back with no ``grad_fn`` and a penalty on it is silently 0. Here, under ``create_graph`` (grad mode on in the
    backward), every gradient returned carries a node that raises when differentiated: the kernels' gradients depend
    on the saved inputs, whatever the incoming gradients are."""

    @functools.wraps(backward)
    def run(ctx, *grads):
        with torch.no_grad():
            outputs = backward(ctx, *grads)
        if not torch.is_grad_enabled():
            return outputs
        single = not isinstance(outputs, tuple)
        outputs = (outputs,) if single else outputs
        raise_later = torch._C._functions.DelayedError(
            b"trying to differentiate twice a function that was marked with @once_differentiable: gpulab's kernel "
            b"backwards are kernels, not graphs; for a second derivative use the PyTorch path (SDPA, the vanilla "
            b"LSTM backend)",
            len(outputs),
        )
        marked = raise_later(*[None if t is None else t.detach().requires_grad_() for t in outputs])
        marked = marked if isinstance(marked, tuple) else (marked,)
        return marked[0] if single else marked

    return run
