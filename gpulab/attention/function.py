"""Lesson 4, the public entry point: :func:`flash_attention`, the forward and backward kernels as one differentiable
function with the semantics of ``torch.nn.functional.scaled_dot_product_attention``.

What you will learn: what an autograd Function saves decides the memory of training. FlashAttention saves q, k, v,
the output O and the fp32 log-sum-exp ([B, H, Nq]) — nothing N x N — and its backward recomputes P from them
(:mod:`gpulab.attention.v1.backward`).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from gpulab import runtime
from gpulab.attention.ops import flash_attention_op
from gpulab.attention.plan import attention_backward, check_inputs, forward_plan, run_backward, run_forward
from gpulab.attention.reference import check_window

__all__ = ["FlashAttentionFunction", "flash_attention", "check_inputs"]


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
    @once_differentiable  # the backward is kernels, not a graph: a second derivative raises, never a silent 0
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
    is_causal: bool = False,
    scale: float | None = None,
    allow_tf32: bool = False,
    autotune: bool = False,
    enable_gqa: bool = False,
    window_size: tuple[int, int] = (-1, -1),
):
    """FlashAttention with SDPA's semantics; differentiable in q, k, v.

    Args:
        q: [B, H, Nq, D] queries; k, v: [B, H, Nk, D] keys and values (same B, H, D; any Nq, Nk >= 0: as SDPA,
            Nq = 0 gives an empty output and Nk = 0 an output of zeros, with zero gradients); with ``enable_gqa``
            k and v may be [B, Hkv, Nk, D] with Hkv dividing H.
        is_causal: SDPA's top-left causal mask (query i sees keys ``j <= i``, also when ``Nq != Nk``); a bool.
        scale: the softmax scale, any finite number as SDPA takes it (0 averages the visible values; negative
            favours the least similar keys) within float32's range, as the kernels take it; None for ``1 / sqrt(D)``.
        allow_tf32: fp32 inputs only: products in TF32 on a GPU (IEEE fp32 otherwise).
        autotune: on a GPU, time a few tile configs per problem on first use and keep the fastest
            (:func:`gpulab.attention.configs.autotune`; :func:`gpulab.attention.configs.tuned` lists the choices).
        enable_gqa: SDPA's grouped-query attention: query head h reads KV head ``h // (H // Hkv)`` (Hkv = 1:
            multi-query); K and V are not copied, dK and dV are summed over each group inside the kernel.
        window_size: ``(left, right)``, FlashAttention's sliding window, aligned bottom-right: query i sees key j iff
            ``i + Nk - Nq - left <= j <= i + Nk - Nq + right`` (-1: unbounded on that side); ``(-1, -1)`` full,
            ``(-1, 0)`` causal bottom-right, ``(W, 0)`` causal with a window of W. Key blocks outside the window
            are never loaded. Not together with ``is_causal=True`` (top-left): a ValueError.

    Windows run on version 1, grouped heads on version 1 or 2 (:func:`gpulab.attention.plan.forward_plan` says why).

    Returns O [B, H, Nq, D] in q's dtype. fp16 and bf16 on a GPU, fp32 everywhere; head dims 1 to 256, powers of two
    or not; any sequence lengths. Unsupported inputs raise a ValueError or TypeError naming the argument. The checks
    and tile choices run once per input signature (shapes, strides, dtypes, devices, flags):
    :func:`gpulab.attention.plan.forward_plan`.

    Examples:
        >>> q, k, v = (torch.randn(1, 2, 17, 16, device=runtime.device) for _ in range(3))
        >>> flash_attention(q, k, v, is_causal=True).shape
        torch.Size([1, 2, 17, 16])
    """
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
