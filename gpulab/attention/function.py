"""Lesson 4, the public entry point: :func:`flash_attention`, the forward and backward kernels as one differentiable
function with the semantics of ``torch.nn.functional.scaled_dot_product_attention``.

What you will learn: what an autograd Function saves decides the memory of training. FlashAttention saves q, k, v,
the output O and the fp32 log-sum-exp ([B, H, Nq]) — nothing N x N — and its backward recomputes P from them
(:mod:`gpulab.attention.v1.backward`).
"""

from __future__ import annotations

import numbers

import torch

from gpulab import dtypes, hardware, runtime
from gpulab.attention.ops import flash_attention_op
from gpulab.attention.plan import attention_backward, check_inputs, forward_plan, run_backward, run_forward
from gpulab.attention.reference import check_window, default_scale

__all__ = ["FlashAttentionFunction", "flash_attention", "check_inputs"]

_AUTOCAST = ("cuda", "cpu")  # the device types whose torch.autocast flash_attention follows (others have none here)


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd glue: forward runs the Triton forward; backward the Triton backward.

    Saved for the backward: q [B, H, Nq, D], k and v [B, H, Nk, D], O [B, H, Nq, D] and the fp32 log-sum-exp
    [B, H, Nq], nothing N x N; and the call's :class:`gpulab.attention.plan.Plan` (checks done, tiles chosen), so
    the backward does no checks of its own. ``plan`` is :func:`flash_attention`'s; None makes one here.
    """

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False, scale=None, allow_tf32=False, autotune=False, plan=None,
                enable_gqa=False, window_size=(-1, -1)):  # fmt: skip
        if plan is None:
            autotune = runtime.strict_bool("autotune", autotune)
            config = "auto" if autotune else None
            plan = forward_plan(q, k, v, is_causal, scale, allow_tf32, config, None, enable_gqa, window_size)
        o, lse = run_forward(plan, q, k, v)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.plan = plan
        return o

    @staticmethod
    @runtime.once_differentiable  # the backward is kernels, not a graph: a second derivative raises, never a silent 0
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        plan = ctx.plan
        if do.shape == o.shape and do.dtype == o.dtype:
            dq, dk, dv = run_backward(plan, do, q, k, v, o, lse)
        else:  # not from autograd as it is: the full checks, and their clear error
            dq, dk, dv = attention_backward(do, q, k, v, o, lse, plan.is_causal, plan.scale, plan.allow_tf32,
                                            plan.backward_configs, plan.group > 1, plan.window)  # fmt: skip
        return dq, dk, dv, None, None, None, None, None, None, None


def flash_attention(
    q,
    k,
    v,
    attn_mask=None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    allow_tf32: bool = False,
    autotune: bool = False,
    window_size: tuple[int, int] = (-1, -1),
):
    """FlashAttention with SDPA's semantics and signature; differentiable in q, k, v.

    Args:
        q: [B, H, Nq, D] queries; k, v: [B, H, Nk, D] keys and values (same B, H, D; any Nq, Nk >= 0: as SDPA,
            Nq = 0 gives an empty output and Nk = 0 an output of zeros, with zero gradients); with ``enable_gqa``
            k and v may be [B, Hkv, Nk, D] with Hkv dividing H. As SDPA, [..., H, N, D] with any number of leading
            batch dims (none: [H, N, D] or [N, D]) is taken too, the same leading dims for q, k and v. As SDPA, v
            may have its own head dim Ev ([..., Nk, Ev], output [..., Nq, Ev]): run as the kernels' one head dim
            max(D, Ev), the narrower side padded with zeros (a copy of it; the scale stays 1 / sqrt(D)).
        attn_mask, dropout_p: SDPA's arguments in SDPA's places, so that calls written for SDPA read the same; not
            built here: an attention mask (anything but None) and ``dropout_p`` other than 0 raise a ValueError
            with what to use instead (``is_causal`` or ``window_size`` for causal and sliding masks,
            :func:`gpulab.attention.varlen_attn` for padding, torch's SDPA for an arbitrary mask or dropout).
        is_causal: SDPA's top-left causal mask (query i sees keys ``j <= i``, also when ``Nq != Nk``); a bool.
        scale: the softmax scale, any finite number as SDPA takes it (0 averages the visible values; negative
            favours the least similar keys) within float32's range, as the kernels take it; None for ``1 / sqrt(D)``.
        enable_gqa: SDPA's grouped-query attention: query head h reads KV head ``h // (H // Hkv)`` (Hkv = 1:
            multi-query); K and V are not copied, dK and dV are summed over each group inside the kernel.
        allow_tf32: fp32 inputs only: products in TF32 on a GPU (IEEE fp32 otherwise).
        autotune: on a GPU, time a few tile configs per problem on first use and keep the fastest
            (:func:`gpulab.attention.configs.autotune`; :func:`gpulab.attention.configs.tuned` lists the choices).
        window_size: ``(left, right)``, FlashAttention's sliding window, aligned bottom-right: query i sees key j iff
            ``i + Nk - Nq - left <= j <= i + Nk - Nq + right`` (-1: unbounded on that side); ``(-1, -1)`` full,
            ``(-1, 0)`` causal bottom-right, ``(W, 0)`` causal with a window of W. Key blocks outside the window
            are never loaded. Not together with ``is_causal=True`` (top-left): a ValueError. A query that sees no
            key (``Nq > Nk`` with a bounded right side, or a window past the keys) gets a row of zeros and zero
            gradients, as FlashAttention gives (and SDPA's math backend for a mask row of all False).

    Grouped heads and windows run on version 3 where the plain problem would (Hopper); elsewhere grouped heads on
    version 2 or 1 and windows on version 1 (:func:`gpulab.attention.plan.forward_plan` says which and why).

    Under ``torch.autocast`` the inputs are cast to its dtype first, as SDPA's are (mixed q, k, v dtypes then meet in
    one); an autocast dtype the kernels do not take here (bf16, CPU autocast's default, in the interpreter) is a
    ValueError saying so.

    Returns O [B, H, Nq, D] in q's dtype. fp16 and bf16 on a GPU, fp32 everywhere; head dims 1 to 256, powers of two
    or not; any sequence lengths. Unsupported inputs raise a ValueError or TypeError naming the argument. The checks
    and tile choices run once per input signature (shapes, strides, dtypes, devices, flags):
    :func:`gpulab.attention.plan.forward_plan`.

    Examples:
        >>> q, k, v = (torch.randn(1, 2, 17, 16, device=runtime.device) for _ in range(3))
        >>> flash_attention(q, k, v, is_causal=True).shape
        torch.Size([1, 2, 17, 16])
    """
    if attn_mask is not None or dropout_p.__class__ is not float or dropout_p:
        _check_sdpa_only(attn_mask, dropout_p)
    if q.__class__ is torch.Tensor and q.device.type in _AUTOCAST and torch.is_autocast_enabled(q.device.type):
        q, k, v = _autocast(q, k, v)
    if v.__class__ is torch.Tensor and k.__class__ is torch.Tensor and v.shape[-1:] != k.shape[-1:]:
        return _value_head_dim(q, k, v, is_causal, scale, enable_gqa, allow_tf32, autotune, window_size)
    if q.__class__ is not torch.Tensor or q.dim() != 4:
        if all(isinstance(t, torch.Tensor) and t.dim() == 2 for t in (q, k, v)):  # SDPA's [N, D]: one head
            o = flash_attention(q[None], k[None], v[None], None, 0.0, is_causal, scale, enable_gqa,
                                allow_tf32=allow_tf32, autotune=autotune, window_size=window_size)  # fmt: skip
            return o[0]
        leading = _leading_dims(q, k, v)
        if leading is not None:
            flat = (t.reshape(-1, *t.shape[-3:]) for t in (q, k, v))
            o = flash_attention(*flat, None, 0.0, is_causal, scale, enable_gqa, allow_tf32=allow_tf32,
                                autotune=autotune, window_size=window_size)  # fmt: skip
            return o.reshape(*leading, *o.shape[-3:])
    if autotune.__class__ is not bool:
        autotune = runtime.strict_bool("autotune", autotune)
    if torch.compiler.is_compiling():  # torch.compile: the custom ops (gpulab.attention.ops), opaque to the tracer
        enable_gqa = runtime.strict_bool("enable_gqa", enable_gqa)
        check_inputs(q, k, v, scale, allow_tf32, enable_gqa=enable_gqa)
        is_causal = runtime.strict_bool("is_causal", is_causal)
        window_size = check_window(window_size, is_causal)
        return flash_attention_op(q, k, v, is_causal, scale, allow_tf32, autotune, enable_gqa, window_size)
    config = "auto" if autotune else None
    plan = forward_plan(q, k, v, is_causal, scale, allow_tf32, config, None, enable_gqa, window_size)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return FlashAttentionFunction.apply(q, k, v, is_causal, scale, allow_tf32, autotune, plan)
    return run_forward(plan, q, k, v)[0]  # no graph to record: skip the autograd Function's own cost


def _check_sdpa_only(attn_mask, dropout_p) -> None:
    """A ValueError or TypeError for SDPA's arguments that the kernels do not take, saying what to use instead."""
    if attn_mask.__class__ is bool:
        raise TypeError(
            f"attn_mask={attn_mask!r}: flash_attention's 4th argument is SDPA's attn_mask, not is_causal; pass "
            f"is_causal={attn_mask!r} by keyword."
        )
    if attn_mask is not None:
        what = f"a tensor of shape {tuple(attn_mask.shape)}" if isinstance(attn_mask, torch.Tensor) else repr(attn_mask)
        raise ValueError(
            f"attn_mask is {what}; gpulab's kernels take no attention mask. Use is_causal=True or window_size=(left, "
            "right) for causal and sliding masks, gpulab.attention.varlen_attn for padded batches (pack the "
            "sequences), or torch.nn.functional.scaled_dot_product_attention for an arbitrary mask."
        )
    if dropout_p.__class__ is bool or not isinstance(dropout_p, numbers.Real):  # numpy's too, as SDPA
        raise TypeError(f"dropout_p must be a number (0.0: no dropout), got {dropout_p!r}.")
    if dropout_p != 0:
        raise ValueError(
            f"dropout_p={dropout_p}: gpulab's kernels have no attention dropout; pass dropout_p=0.0 (models do in "
            "eval, and many in training too), or use torch.nn.functional.scaled_dot_product_attention for dropout."
        )


def _leading_dims(q, k, v):
    """SDPA's [..., H, N, D] layouts with other than one leading batch dim: the leading dims, or None (the 4-D
    path's checks then name what is wrong)."""
    tensors = (q, k, v)
    if not all(isinstance(t, torch.Tensor) for t in tensors) or q.dim() < 3 or q.dim() == 4:
        return None
    if k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(
            f"q, k and v have {q.dim()}, {k.dim()} and {v.dim()} dims; as SDPA, give them the same leading batch "
            "dims before [heads, seq, head_dim]."
        )
    leading = q.shape[:-3]
    for name, t in (("k", k), ("v", v)):
        if t.shape[:-3] != leading:
            raise ValueError(
                f"{name} has leading dims {tuple(t.shape[:-3])} but q has {tuple(leading)}; flash_attention takes "
                "[..., heads, seq, head_dim] with the same leading batch dims for q, k and v (no broadcasting): "
                f"expand {name} to them."
            )
    return leading


def _autocast(q, k, v):
    """q, k, v cast to the enabled ``torch.autocast`` dtype, as autocast casts SDPA's (floating inputs but float64),
    or a ValueError where the kernels do not take that dtype here."""
    where = q.device.type
    dtype = torch.get_autocast_dtype(where)
    if dtype not in hardware.supported_dtypes():
        usable = dtypes.names_of(hardware.supported_dtypes())
        raise ValueError(
            f"torch.autocast({where!r}, dtype={dtype}) is on, so q, k and v would be cast to {dtype} (as SDPA's "
            f"are), but these kernels take {usable} here"
            + (" (Triton's CPU interpreter computes bfloat16 wrongly)" if runtime.INTERPRET else "")
            + f". Use torch.autocast({where!r}, dtype=torch.float16), or run this call outside autocast "
            f"(torch.autocast({where!r}, enabled=False)) with float32 q, k, v."
        )
    cast = [t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64
            else t for t in (q, k, v)]  # fmt: skip
    return tuple(cast)


def _value_head_dim(q, k, v, is_causal, scale, enable_gqa, allow_tf32, autotune, window_size):
    """SDPA's v of its own head dim Ev (q and k [..., D], v [..., Nk, Ev] -> O [..., Nq, Ev]) on the kernels' one head
    dim: v padded with zeros to D (the output's extra columns dropped) or q and k to Ev (zeros add nothing to a
    score), the scale kept at D's. Anything else is left to the checks, which say what is wrong."""
    if not (isinstance(q, torch.Tensor) and q.dim() == k.dim() == v.dim() >= 2 and q.shape[-1] == k.shape[-1]):
        raise ValueError(
            f"q {tuple(getattr(q, 'shape', ()))}, k {tuple(k.shape)} and v {tuple(v.shape)}: as SDPA, q and k share "
            "a head dim D and v may have its own, [..., Nk, Ev], the same number of dims for all three."
        )
    d, ev = k.shape[-1], v.shape[-1]
    scale = default_scale(d, scale)
    if ev < d:
        v = torch.nn.functional.pad(v, (0, d - ev))
    else:
        q, k = (torch.nn.functional.pad(t, (0, ev - d)) for t in (q, k))
    o = flash_attention(q, k, v, None, 0.0, is_causal, scale, enable_gqa, allow_tf32=allow_tf32, autotune=autotune,
                        window_size=window_size)  # fmt: skip
    return o[..., :ev] if ev < d else o
