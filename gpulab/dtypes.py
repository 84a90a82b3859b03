"""Which dtypes gpulab's kernels take, here or on a given GPU, and the clear errors for the others.

Kept apart from :mod:`gpulab.runtime` (which imports nothing of gpulab) because the answer reads the GPU's spec
from :mod:`gpulab.hardware`: bf16 exists from compute capability 8.0, and Triton's interpreter computes bf16 wrongly.
"""

from __future__ import annotations

import torch

from gpulab import hardware
from gpulab.runtime import INTERPRET, _names, as_dtype

__all__ = ["supported_dtypes", "default_dtype", "require_dtype", "as_dtype"]


def supported_dtypes(gpu=None) -> tuple[torch.dtype, ...]:
    """Dtypes gpulab kernels accept in the current mode, or on ``gpu`` (a name or :class:`gpulab.hardware.GPUSpec`).

    In the interpreter: fp32 and fp16 (bf16 arithmetic is wrong there). On a GPU: fp32, fp16, and bf16 where the
    architecture has it (compute capability 8.0 and newer; not on a T4 or V100).
    """
    if gpu is None and INTERPRET:
        return (torch.float32, torch.float16)
    has_bf16 = _this_gpu_has_bf16() if gpu is None else hardware.spec(gpu).has_bf16
    return (torch.float32, torch.float16, torch.bfloat16) if has_bf16 else (torch.float32, torch.float16)


@torch.compiler.assume_constant_result
def _this_gpu_has_bf16() -> bool:
    """Whether the current GPU has bf16 (read once per call eagerly; a constant to ``torch.compile``, which cannot
    trace the CUDA property query: so a compiled function that validates its dtype has no graph break)."""
    return hardware.spec().has_bf16


def default_dtype(gpu=None) -> torch.dtype:
    """The low-precision dtype a lesson should use: bf16 where the GPU has it, else fp16; fp32 in the interpreter.

    With ``gpu`` (a name or GPUSpec) the answer is for that GPU, so the choice can be tested on CPU for any GPU.
    """
    if gpu is None and INTERPRET:
        return torch.float32
    return torch.bfloat16 if torch.bfloat16 in supported_dtypes(gpu) else torch.float16


def require_dtype(name: str, dtype, gpu=None, allowed=None) -> torch.dtype:
    """Raise a ValueError naming ``name`` unless ``dtype`` is usable here (or on ``gpu``); return it as a torch dtype.

    ``allowed`` narrows the kernel's own choice (e.g. ``(torch.float32,)``) before the mode's restrictions apply.
    """
    dtype = as_dtype(dtype, name)
    supported = tuple(allowed) if allowed is not None else (torch.float32, torch.float16, torch.bfloat16)
    if dtype not in supported:
        raise ValueError(f"{name} has dtype {dtype}; this kernel supports {_names(supported)}.")
    here = supported_dtypes(gpu)
    if dtype not in here:
        if gpu is None and INTERPRET and dtype == torch.bfloat16:
            fix = f"{name}='float32'" if name == "dtype" else f"{name}.float()"  # an argument, or a tensor's dtype
            raise ValueError(
                f"{name} is bfloat16, which Triton's CPU interpreter computes wrongly (silently); on CPU use "
                f"{_names(tuple(d for d in supported if d in here))}, e.g. `{fix}`, or run on a GPU with bf16."
            )
        where = f"GPU {gpu}" if gpu is not None else "this GPU"
        usable = _names(tuple(d for d in supported if d in here))
        raise ValueError(f"{name} is {dtype}, which {where} has no hardware for; use {usable}.")
    return dtype


# --- Names: the one map between dtypes and the names records store and tables print. ------------------------------
__all__ += ["name", "short"]

_SHORT = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}


def name(dtype) -> str:
    """The long name of ``dtype`` (``'bfloat16'``, ``'float32'``): what records store. Takes a torch dtype or any name
    :func:`as_dtype` takes."""
    return str(as_dtype(dtype)).removeprefix("torch.")


def short(dtype) -> str:
    """The short label of ``dtype`` for tables (``'bf16'``, ``'fp16'``, ``'fp32'``, ``'fp64'``). Takes a torch dtype
    or any name :func:`as_dtype` takes; a ValueError for a dtype without a label."""
    dtype = as_dtype(dtype)
    if dtype not in _SHORT:
        raise ValueError(f"dtype={dtype} has no short label; labelled: {', '.join(map(name, _SHORT))}.")
    return _SHORT[dtype]
