"""Lesson 4: from online softmax to FlashAttention, forward and backward, in Triton.

The path, one module per step, each checked against a float64 reference:

1. :func:`naive_attention` materializes the N x N scores (``reference``);
2. softmax three ways: :func:`softmax_naive`, :func:`softmax_safe`, :func:`softmax_online` (``reference``), and a
   Triton online-softmax kernel for long rows, :func:`online_softmax` (``softmax``);
3. :func:`tiled_attention`: blocks of Q against blocks of K/V with online-softmax rescaling, in PyTorch;
4. the Triton forward kernel, :func:`attention_forward` (``forward``): returns O and the log-sum-exp;
5. the Triton backward (FlashAttention-2), :func:`attention_backward` (``backward``): recomputes P from the
   log-sum-exp, no N x N buffer, no atomics;
6. block sizes, warps and stages per GPU, :func:`attention_config` (``configs``).

:func:`flash_attention` ties them together as a differentiable function with the semantics of
``torch.nn.functional.scaled_dot_product_attention``: q ``[B, H, Nq, D]``, k, v ``[B, H, Nk, D]``, default scale
``1/sqrt(D)``, ``is_causal`` SDPA's top-left mask (query i sees keys ``j <= i``, also when ``Nq != Nk``). Its
autograd Function, :class:`FlashAttentionFunction`, saves only q, k, v, O and the log-sum-exp.
"""

from __future__ import annotations

import torch

from gpulab.attention.backward import (
    attention_backward,
    attention_dkdv_kernel,
    attention_dq_kernel,
    attention_preprocess_kernel,
)
from gpulab.attention.configs import (
    MAX_HEAD_DIM,
    AttentionConfig,
    attention_config,
    autotune,
    candidates,
    smem_estimate,
    tuned,
)
from gpulab.attention.forward import (
    attention_forward,
    attention_forward_kernel,
    block_schedule,
    check_inputs,
    plot_block_schedule,
)
from gpulab.attention.reference import (
    attention_reference,
    causal_mask,
    default_scale,
    logsumexp_reference,
    naive_attention,
    softmax_naive,
    softmax_online,
    softmax_safe,
    tiled_attention,
)
from gpulab.attention.softmax import online_softmax, online_softmax_kernel

__all__ = [
    "flash_attention",
    "FlashAttentionFunction",
    "attention_forward",
    "attention_backward",
    "attention_forward_kernel",
    "attention_preprocess_kernel",
    "attention_dkdv_kernel",
    "attention_dq_kernel",
    "check_inputs",
    "block_schedule",
    "plot_block_schedule",
    "AttentionConfig",
    "attention_config",
    "smem_estimate",
    "candidates",
    "autotune",
    "tuned",
    "MAX_HEAD_DIM",
    "online_softmax",
    "online_softmax_kernel",
    "attention_reference",
    "logsumexp_reference",
    "causal_mask",
    "default_scale",
    "naive_attention",
    "softmax_naive",
    "softmax_safe",
    "softmax_online",
    "tiled_attention",
]


class FlashAttentionFunction(torch.autograd.Function):
    """Autograd glue: forward runs the Triton forward; backward the Triton backward.

    Saved for the backward: q, k, v, O and the fp32 log-sum-exp ([B, H, Nq]), nothing N x N.
    """

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False, scale=None, allow_tf32=False, autotune=False):
        config = "auto" if autotune else None
        o, lse = attention_forward(q, k, v, is_causal=is_causal, scale=scale, allow_tf32=allow_tf32, config=config)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.is_causal, ctx.scale, ctx.allow_tf32, ctx.autotune = is_causal, scale, allow_tf32, autotune
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(
            do, q, k, v, o, lse, is_causal=ctx.is_causal, scale=ctx.scale, allow_tf32=ctx.allow_tf32,
            configs="auto" if ctx.autotune else None,
        )  # fmt: skip
        return dq, dk, dv, None, None, None, None


def flash_attention(
    q, k, v, is_causal: bool = False, scale: float | None = None, allow_tf32: bool = False, autotune: bool = False
):
    """FlashAttention with SDPA's semantics; differentiable in q, k, v.

    fp16 and bf16 on a GPU, fp32 everywhere (IEEE products unless ``allow_tf32``); head dims 1 to 128, powers of
    two or not; any sequence lengths. Unsupported inputs raise ValueError saying what is supported. ``autotune``:
    on a GPU, time a few tile configs per problem on first use and keep the fastest
    (:func:`gpulab.attention.configs.autotune`; :func:`gpulab.attention.configs.tuned` lists the choices).
    """
    check_inputs(q, k, v, scale, allow_tf32)
    if not isinstance(autotune, bool):
        raise ValueError(f"autotune must be True or False, got {autotune!r}.")
    return FlashAttentionFunction.apply(q, k, v, bool(is_causal), scale, bool(allow_tf32), autotune)
