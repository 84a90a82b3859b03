"""The checks every attention entry point runs once per input signature: tensors, dtypes, devices, shapes
(grouped-query heads included), head dims, the scale. Each error names the argument, what was given and what is
allowed."""

from __future__ import annotations

import torch

from gpulab import dtypes, hardware, runtime
from gpulab.attention.configs import MAX_HEAD_DIM
from gpulab.attention.reference import default_scale, gqa_group

__all__ = ["check_inputs", "check_scale"]

_FP32_MAX = torch.finfo(torch.float32).max
"""The largest scale magnitude :func:`check_inputs` takes: the kernels take the scale as float32."""


def check_inputs(q, k, v, scale=None, allow_tf32: bool = False, names=("q", "k", "v"), enable_gqa: bool = False):
    """Raise a clear error (naming the argument, saying what is supported) unless q, k, v are valid attention inputs:
    tensors on gpulab's device, one supported dtype, q [B, H, Nq, D], k and v [B, H, Nk, D] with the same B, H and
    D (with ``enable_gqa`` k and v may have Hkv heads, Hkv dividing H), 1 <= D <= 256, any Nq, Nk >= 0 (as SDPA:
    no queries give an empty output, no keys an output of zeros);
    ``scale`` None or any finite number within float32's range, which the kernels take it in (0 and negative as SDPA
    takes them); ``allow_tf32`` a bool. Returns the scale."""
    for name, t in zip(names, (q, k, v)):
        runtime.require_tensor(name, t)
        if t.dim() != 4:
            raise ValueError(
                f"{name} must be 4-dimensional [batch, heads, seq, head_dim], got shape {tuple(t.shape)}; "
                "add the missing dimensions with unsqueeze."
            )
    unique = list(dict.fromkeys(names))  # the backward checks (o, do, o): name each tensor once
    together = ", ".join(unique[:-1]) + " and " + unique[-1]
    for name, t in zip(names[1:], (k, v)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name} is {t.dtype} but {names[0]} is {q.dtype}; {together} must share one dtype.")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but {names[0]} is on {q.device}; put {together} on one device.")
    if q.dtype == torch.float64:  # no kernel computes in it: say where float64 attention is
        raise ValueError(
            f"{names[0]} has dtype torch.float64; these kernels support {dtypes.names_of(hardware.supported_dtypes())} "
            f"here. Convert the inputs, e.g. `{names[0]}.float()`, or for a float64 reference call "
            "gpulab.attention.attention_reference (PyTorch, in float64)."
        )
    hardware.require_dtype(names[0], q.dtype, allowed=(torch.float32, torch.float16, torch.bfloat16))
    allow_tf32 = runtime.strict_bool("allow_tf32", allow_tf32)
    nq_, nk_, nv_ = names
    b, h, n_q, d = q.shape
    h_kv = k.shape[1] if enable_gqa and k.shape[1] != h else h
    if k.shape[0] == v.shape[0] == b and k.shape[1] == v.shape[1] != h:
        gqa_group(h, k.shape[1], enable_gqa)  # heads differ: a clear error unless grouped-query heads were asked for
    if tuple(k.shape[:2]) != (b, h_kv) or tuple(v.shape[:2]) != (b, h_kv):
        shapes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in dict(zip(names, (q, k, v))).items())
        raise ValueError(
            f"batch and heads differ: {shapes}; {together} must be [batch, heads, seq, head_dim] with the same batch "
            "and heads (no broadcasting)."
        )
    if b * h > 65535:
        raise ValueError(
            f"batch * heads = {b * h} is over 65535, the largest second grid dimension these kernels launch; "
            "split the batch into chunks of at most 65535 // heads."
        )
    if k.shape != v.shape:
        raise ValueError(f"{nk_} {tuple(k.shape)} and {nv_} {tuple(v.shape)} must have the same shape.")
    if k.shape[3] != d:
        raise ValueError(f"{nq_} has head_dim {d} but {nk_} and {nv_} have {k.shape[3]}; they must match.")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(
            f"head_dim {d} is not supported; these kernels take head dims 1 to {MAX_HEAD_DIM} (any value, "
            "powers of two or not)."
        )
    if allow_tf32 and q.dtype != torch.float32:
        raise ValueError(f"allow_tf32 only applies to float32 inputs, got {q.dtype}.")
    return check_scale(d, scale)


def check_scale(head_dim: int, scale=None) -> float:
    """The softmax scale the kernels take: :func:`gpulab.attention.reference.default_scale` (None for
    ``1 / sqrt(head_dim)``, else any finite number), and a ValueError beyond float32's range, in which the kernels
    take it (an inf scale would make every output NaN)."""
    scale = default_scale(head_dim, scale)
    if abs(scale) > _FP32_MAX:  # comparisons only: a symbolic float under torch.compile traces them
        raise ValueError(
            f"scale={scale!r} is beyond float32's largest finite value {_FP32_MAX:.6g}; the kernels take the scale as "
            "float32, where it would be inf (every output NaN). Pass a scale of magnitude at most that."
        )
    return scale
