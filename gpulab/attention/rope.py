"""Rotary position embedding (RoPE) and the heads of a qkv projection, fused: one pass over memory each way.

What you will learn:

- **RoPE is a rotation of feature pairs.** Pairs ``(x_k, x_{k + D/2})`` of q and k at position p turn by the angle
  ``p * base^(-2k/D)``; a score ``q_i . k_j`` then depends on i - j only (:func:`rope`, the reference).
- **Its backward is the same rotation, backwards.** A rotation's Jacobian is the rotation matrix, and the gradient
  goes through its transpose, the rotation by the opposite angle: ``dx1 = dy1 cos + dy2 sin``,
  ``dx2 = -dy1 sin + dy2 cos``. No input needs to be saved for it.
- **A memory-bound op costs its passes over memory.** Written as PyTorch operations (slices to fp32, four products,
  two sums, a concatenation, a cast, then the permute and ``contiguous`` to the attention's [B, H, N, D] layout),
  each op reads and writes the whole of q or k, and autograd replays as many for the backward: at lesson 8's
  capstone (B 32, N 1024, d 768) the profile of a Transformer training step on the H100 showed them as a large
  share of it (``scripts/profile06_capstone.py``; lesson 8 states the measured difference from its records).
  :func:`qkv_heads` does the split into heads, the rotation and the layout in one Triton kernel
  (:func:`qkv_heads_kernel`): it reads the projection's output [B, N, 3, H, D] once and writes q, k, v
  [B, H, N, D] once; its backward reads dq, dk, dv once and writes d(qkv) once.

The angles come from one table per (N, D/2, base, device), computed in fp32 exactly as :func:`rope` computes them
(:func:`rope_tables`), so the kernel and the reference round the same products. :func:`qkv_heads` runs the kernel
for fp16, bf16 and fp32 on a GPU and PyTorch's operations elsewhere (CPU, fp64: :func:`qkv_heads_reference`); the
tests run the kernel on CPU through Triton's interpreter. Compiled (``torch.compile``), the kernel's forward and
backward are custom ops, as FlashAttention's are (:mod:`gpulab.attention.ops`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from gpulab import runtime
from gpulab.check import new_output
from gpulab.launch import aligned, direct_stream, keyed_launch

__all__ = [
    "rope",
    "rope_angles",
    "rope_tables",
    "qkv_heads",
    "qkv_heads_reference",
    "qkv_heads_kernel",
    "QKVHeadsFunction",
    "POSITIONAL",
]

POSITIONAL = ("rope", "none")
"""What :func:`qkv_heads` does to q and k: rotate them (``"rope"``) or only split the heads (``"none"``)."""

_KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_TABLES: dict = {}


def rope(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding of ``x`` [B, H, N, D] (D even), computed in fp32 (or fp64), returned in ``x``'s dtype.

    Pairs of features ``(x_k, x_{k + D/2})`` at position p are rotated by the angle ``p * base^(-2k/D)``. A rotation
    of q by angle a and of k by angle b changes ``q . k`` by a rotation of b - a only, so scores depend on relative
    position, at any length.
    """
    runtime.require_tensor("x", x, device_check=False)
    if x.dim() < 2 or not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor [..., N, D], got {x.dtype} of shape {list(x.shape)}.")
    base = runtime.finite_float("base", base, positive=True)
    n, d = x.shape[-2], x.shape[-1]
    if d % 2 or not d:
        raise ValueError(
            f"rope needs a positive even head dimension, got {d} (x's last dimension; x has shape {list(x.shape)}); "
            "choose d_model / num_heads even and > 0."
        )
    half, work = d // 2, torch.promote_types(x.dtype, torch.float32)  # fp32 at least (fp64 stays fp64)
    angles = rope_angles(n, half, base, x.device, work)  # [N, D/2]
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., :half].to(work), x[..., half:].to(work)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).to(x.dtype)


def rope_angles(n: int, half: int, base: float = 10000.0, device=None, dtype=torch.float32) -> torch.Tensor:
    """RoPE's angles ``p * base^(-k/half)`` for positions p < n and pairs k < half, [n, half] in ``dtype`` (a
    floating dtype): the one place they are computed, so that :func:`rope` and the kernel's tables
    (:func:`rope_tables`) round them alike."""
    n, half = runtime.nonnegative_int("n", n), runtime.positive_int("half", half)
    base = runtime.finite_float("base", base, positive=True)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype such as torch.float32, got {dtype!r}.")
    device = _device(device)
    freqs = base ** (-torch.arange(half, device=device, dtype=dtype) / half)
    return torch.arange(n, device=device, dtype=dtype)[:, None] * freqs[None, :]


def _cuda_count() -> int:
    """CUDA devices torch sees (0 without CUDA); a constant to ``torch.compile``, which then need not trace it."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


_cuda_count = torch.compiler.assume_constant_result(_cuda_count)


def _device(device) -> torch.device:
    """``device`` (None: gpulab's, a name such as 'cuda:0', or a torch.device) as a torch.device with memory here
    (CPU, or a CUDA device torch sees), else an error naming ``device``."""
    if device is None:
        return runtime.device
    device = runtime.as_device(device)
    count = _cuda_count()
    if device.type == "cpu" or (device.type == "cuda" and (device.index or 0) < count):
        return device
    have = f"'cpu' or 'cuda:0'..'cuda:{count - 1}'" if count else "'cpu' (torch sees no CUDA device)"
    raise ValueError(f"device={str(device)!r} is not one this machine can compute on; use {have}, or None for "
                     f"gpulab's ({runtime.device}).")  # fmt: skip


def rope_tables(n: int, half: int, base: float = 10000.0, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of the angles ``p * base^(-k/half)``, fp32 [n, half], as :func:`rope` computes them. Fresh copies,
    the caller's to change: the kernel reads its own, kept per (n, half, base, device)."""
    n, half = runtime.nonnegative_int("n", n), runtime.positive_int("half", half)
    base = runtime.finite_float("base", base, positive=True)
    cos, sin = _cached_tables(n, half, base, _device(device))
    return cos.clone(), sin.clone()


def _cached_tables(n: int, half: int, base: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rope_tables` for checked arguments, the cached tensors themselves (never handed to a caller)."""
    key = (n, half, base, device)
    tables = _TABLES.get(key)
    if tables is None:
        angles = rope_angles(n, half, base, device)
        if len(_TABLES) >= 64:
            _TABLES.clear()
        tables = _TABLES[key] = (angles.cos().contiguous(), angles.sin().contiguous())
    return tables


@triton.jit
def qkv_heads_kernel(src_ptr, q_ptr, k_ptr, v_ptr, cos_ptr, sin_ptr, ROWS, N, H,
                     D: tl.constexpr, HALF: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr,
                     ROTATE: tl.constexpr, BACKWARD: tl.constexpr):  # fmt: skip
    """Rows [r0, r0 + BLOCK_N) of head h of slot s (0 q, 1 k, 2 v); program (row block, h, s).

    Forward: ``src`` is the projection's output [B, N, 3, H, D] (row r = b N + n), q, k, v [B, H, N, D] are written:

        y[:HALF] = x[:HALF] cos - x[HALF:] sin,   y[HALF:] = x[:HALF] sin + x[HALF:] cos     (q and k, if ROTATE)
        y = x                                                                                 (v; all if not ROTATE)

    BACKWARD: q, k, v hold dq, dk, dv and ``src`` d(qkv) is written, each pair turned back (sin negated).
    fp32 arithmetic, the tensors' dtype in memory. D even when ROTATE (HALF = D / 2, BLOCK_H >= HALF); else HALF = D.
    """
    rb, h, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    r = rb * BLOCK_N + tl.arange(0, BLOCK_N)  # [BLOCK_N] rows b N + n
    c = tl.arange(0, BLOCK_H)  # [BLOCK_H] features of one half (all D when not ROTATE)
    row_ok = r < ROWS
    mask = row_ok[:, None] & (c < HALF)[None, :]
    n = r % N
    b = (r // N).to(tl.int64)
    packed = ((r.to(tl.int64) * 3 + s) * H + h) * D  # [BLOCK_N]: row start in [B, N, 3, H, D]
    heads = ((b * H + h) * N + n) * D  # [BLOCK_N]: row start in [B, H, N, D]
    if s == 0:
        dst_ptr = q_ptr
    elif s == 1:
        dst_ptr = k_ptr
    else:
        dst_ptr = v_ptr
    if BACKWARD:
        src = src_ptr + packed[:, None] + c[None, :]  # written
        dst = dst_ptr + heads[:, None] + c[None, :]  # read
        read, write = dst, src
    else:
        read = src_ptr + packed[:, None] + c[None, :]
        write = dst_ptr + heads[:, None] + c[None, :]
    x1 = tl.load(read, mask=mask, other=0.0)  # [BLOCK_N, BLOCK_H]
    if ROTATE:
        x2 = tl.load(read + HALF, mask=mask, other=0.0)
        if s < 2:
            angle = n[:, None] * HALF + c[None, :]
            cos = tl.load(cos_ptr + angle, mask=mask, other=0.0)  # [BLOCK_N, BLOCK_H] fp32
            sin = tl.load(sin_ptr + angle, mask=mask, other=0.0)
            if BACKWARD:
                sin = -sin
            a, z = x1.to(tl.float32), x2.to(tl.float32)
            tl.store(write, (a * cos - z * sin).to(x1.dtype), mask=mask)
            tl.store(write + HALF, (a * sin + z * cos).to(x1.dtype), mask=mask)
        else:
            tl.store(write, x1, mask=mask)
            tl.store(write + HALF, x2, mask=mask)
    else:
        tl.store(write, x1, mask=mask)


def _launch(src, q, k, v, cos, sin, rows, n, h, d, rotate, backward):
    half = d // 2 if rotate else d
    ints = (rows, n, h)

    def make():  # grid and constexprs, once per problem (keyed_launch)
        block_h = runtime.next_power_of_2(half)
        block_n = max(1, min(64, 4096 // block_h))
        grid = (triton.cdiv(rows, block_n), h, 3)
        return grid, dict(D=d, HALF=half, BLOCK_N=block_n, BLOCK_H=block_h, ROTATE=rotate, BACKWARD=backward,
                          num_warps=4)  # fmt: skip

    launch = keyed_launch((qkv_heads_kernel, src.dtype, d, rotate, backward) + ints, make)
    tensors = (src, q, k, v, cos, sin)
    launch(direct_stream(src.device) if aligned(*tensors) else None, *tensors, *ints)


def _tables(n, d, base, rotate, device):
    if not rotate:
        dummy = torch.empty(1, dtype=torch.float32, device=device)
        return dummy, dummy
    return _cached_tables(n, d // 2, base, device)


def _forward(qkv, num_heads, rotate, base):
    B, N, three_d = qkv.shape
    d = three_d // 3 // num_heads
    qkv = qkv.contiguous()
    q, k, v = (new_output(B, num_heads, N, d, dtype=qkv.dtype, device=qkv.device) for _ in range(3))
    if q.numel():
        cos, sin = _tables(N, d, base, rotate, qkv.device)
        _launch(qkv, q, k, v, cos, sin, B * N, N, num_heads, d, rotate, False)
    return q, k, v


def _backward(dq, dk, dv, rotate, base):
    B, H, N, d = dq.shape
    dqkv = new_output(B, N, 3 * H * d, dtype=dq.dtype, device=dq.device)
    if dqkv.numel():
        cos, sin = _tables(N, d, base, rotate, dq.device)
        _launch(dqkv, dq.contiguous(), dk.contiguous(), dv.contiguous(), cos, sin, B * N, N, H, d, rotate, True)
    return dqkv


def _filled(dq, dk, dv):
    """The three gradients, a missing one (an output not used) as zeros."""
    known = next(g for g in (dq, dk, dv) if g is not None)
    return [torch.zeros_like(known) if g is None else g for g in (dq, dk, dv)]


class QKVHeadsFunction(torch.autograd.Function):
    """``QKVHeadsFunction.apply(qkv, num_heads, rotate, base) -> (q, k, v)``: :func:`qkv_heads`'s kernel path
    (checked inputs). Saves nothing: the backward needs only the angles (the cached tables) and the gradients."""

    @staticmethod
    def forward(ctx, qkv, num_heads, rotate, base):
        ctx.flags = (rotate, base)
        return _forward(qkv, num_heads, rotate, base)

    @staticmethod
    @once_differentiable  # the backward is kernels, not a graph: a second derivative raises, never a silent 0
    def backward(ctx, dq, dk, dv):
        return _backward(*_filled(dq, dk, dv), *ctx.flags), None, None, None


@torch.library.custom_op("gpulab::qkv_heads", mutates_args=())
def _forward_op(qkv: torch.Tensor, num_heads: int, rotate: bool, base: float) -> tuple[torch.Tensor, torch.Tensor,
                                                                                          torch.Tensor]:  # fmt: skip
    return _forward(qkv, num_heads, rotate, base)


@_forward_op.register_fake
def _(qkv, num_heads, rotate, base):
    B, N, three_d = qkv.shape
    shape = (B, num_heads, N, three_d // 3 // num_heads)
    return qkv.new_empty(shape), qkv.new_empty(shape), qkv.new_empty(shape)


@torch.library.custom_op("gpulab::qkv_heads_backward", mutates_args=())
def _backward_op(dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, rotate: bool, base: float) -> torch.Tensor:
    return _backward(dq, dk, dv, rotate, base)


@_backward_op.register_fake
def _(dq, dk, dv, rotate, base):
    B, H, N, d = dq.shape
    return dq.new_empty((B, N, 3 * H * d))


def _setup_context(ctx, inputs, output):
    ctx.flags = inputs[2:]


def _op_backward(ctx, dq, dk, dv):
    return _backward_op(*_filled(dq, dk, dv), *ctx.flags), None, None, None


_forward_op.register_autograd(_op_backward, setup_context=_setup_context)


def _checked(qkv, num_heads, positional, base):
    runtime.require_tensor("qkv", qkv, device_check=False)
    if qkv.dim() != 3 or not qkv.is_floating_point():
        raise ValueError(
            f"qkv must be a floating-point [B, N, 3 * d_model] tensor (the qkv projection's output), got {qkv.dtype} "
            f"of shape {list(qkv.shape)}."
        )
    num_heads = runtime.positive_int("num_heads", num_heads)
    positional = runtime.one_of("positional", positional, POSITIONAL)
    base = runtime.finite_float("base", base, positive=True)
    if qkv.shape[-1] % (3 * num_heads):
        raise ValueError(
            f"qkv's last dimension {qkv.shape[-1]} is not 3 * num_heads * head_dim for num_heads={num_heads}; it must "
            f"be divisible by {3 * num_heads}."
        )
    d = qkv.shape[-1] // (3 * num_heads)
    if positional == "rope" and (d % 2 or not d):
        raise ValueError(
            f"rope needs a positive even head dimension, got {d} (qkv's last dimension {qkv.shape[-1]} = 3 * "
            f"num_heads={num_heads} * head_dim); choose d_model / num_heads even and > 0."
        )
    return num_heads, positional == "rope", base


def qkv_heads_reference(qkv, num_heads: int, positional: str = "rope", base: float = 10000.0):
    """:func:`qkv_heads` as PyTorch operations (differentiable by autograd; any dtype and device)."""
    return _reference(qkv, *_checked(qkv, num_heads, positional, base))


def _reference(qkv, num_heads, rotate, base):
    B, N, three_d = qkv.shape
    q, k, v = qkv.view(B, N, 3, num_heads, three_d // 3 // num_heads).permute(2, 0, 3, 1, 4)
    if rotate:
        q, k = rope(q, base), rope(k, base)
    return q.contiguous(), k.contiguous(), v.contiguous()


def qkv_heads(qkv, num_heads: int, positional: str = "rope", base: float = 10000.0):
    """The attention's q, k, v [B, H, N, D] (contiguous) from a qkv projection's output ``qkv`` [B, N, 3 * H * D]
    (its features ordered q, k, v, then heads), with RoPE applied to q and k (``positional="rope"``, D even) or not
    (``"none"``). Differentiable in ``qkv``. One Triton kernel each way for fp16, bf16 and fp32 on a GPU
    (:func:`qkv_heads_kernel`), PyTorch's operations elsewhere (:func:`qkv_heads_reference`)."""
    num_heads, rotate, base = _checked(qkv, num_heads, positional, base)
    if not qkv.is_cuda or qkv.dtype not in _KERNEL_DTYPES:
        return _reference(qkv, num_heads, rotate, base)
    if torch.compiler.is_compiling():
        return _forward_op(qkv, num_heads, rotate, base)
    if torch.is_grad_enabled() and qkv.requires_grad:
        return QKVHeadsFunction.apply(qkv, num_heads, rotate, base)
    return _forward(qkv, num_heads, rotate, base)
