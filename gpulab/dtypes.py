"""Dtypes in gpulab: the one table of their names, and which ones the kernels take here or on a given GPU.

- :data:`NAMES` is the only map between names and torch dtypes: :func:`as_dtype` parses a name (``'bf16'``,
  ``'bfloat16'``, ``'half'``, ...), :func:`name` gives the long name (``'bfloat16'``, as records store it) and
  :func:`short` the label tables print (``'bf16'``; ``'tf32'`` stays ``'tf32'``: fp32 storage with TF32 math).

Which dtypes the kernels take here or on a given GPU (bf16 exists from compute capability 8.0, and Triton's
interpreter computes it wrongly) is the GPU's business: :func:`gpulab.hardware.require_dtype` and its neighbours.
"""

from __future__ import annotations

import torch

from gpulab.runtime import ArgumentTypeError

__all__ = ["NAMES", "as_dtype", "name", "short", "names_of"]

NAMES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float64": torch.float64,
    "fp64": torch.float64,
    "double": torch.float64,
}
"""Every dtype name gpulab accepts, lower case, to its torch dtype."""

_SHORT = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}


def as_dtype(dtype, name: str = "dtype") -> torch.dtype:
    """``dtype`` as a torch dtype: a torch dtype as it is, or a name of :data:`NAMES` (any case, ``'torch.'`` prefix
    allowed). A ValueError naming ``name`` for anything else."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str):
        key = dtype.lower().removeprefix("torch.")
        if key in NAMES:
            return NAMES[key]
    raise ValueError(f"{name}={dtype!r} is not a dtype gpulab knows; use a torch dtype or one of {sorted(NAMES)}.")


def name(dtype) -> str:
    """The long name of ``dtype`` (``'bfloat16'``, ``'float32'``): what records store. ``'tf32'`` is kept as it is."""
    if isinstance(dtype, str) and dtype.lower() == "tf32":
        return "tf32"
    return str(as_dtype(dtype)).removeprefix("torch.")


def short(dtype) -> str:
    """The short label of ``dtype`` for tables (``'bf16'``, ``'fp16'``, ``'fp32'``, ``'fp64'``; ``'tf32'`` as it is).
    Takes a torch dtype or any name :func:`as_dtype` takes."""
    if isinstance(dtype, str) and dtype.lower() == "tf32":
        return "tf32"
    if not isinstance(dtype, (str, torch.dtype)):
        raise ArgumentTypeError(f"dtype must be a torch dtype or a name like 'bfloat16', got {type(dtype).__name__} "
                                f"{dtype!r}.")  # fmt: skip
    dtype = as_dtype(dtype)
    if dtype not in _SHORT:
        raise ValueError(f"dtype={dtype} has no short label; labelled: {', '.join(map(name, _SHORT))}.")
    return _SHORT[dtype]


def names_of(dtypes) -> str:
    """``'float32, float16'``: dtypes listed for an error message (``'nothing'`` for none)."""
    return ", ".join(name(d) for d in dtypes) or "nothing"
