"""Lesson 4: from online softmax to FlashAttention, forward and backward, in Triton.

The path, one module per step, each checked against a float64 reference:

1. :func:`naive_attention` materializes the N x N scores (``reference``);
2. softmax three ways: :func:`softmax_naive`, :func:`softmax_safe`, :func:`softmax_online`, and a Triton
   online-softmax kernel for long rows, :func:`online_softmax` (``softmax``);
3. :func:`tiled_attention`: blocks of Q against blocks of K/V with online-softmax rescaling, in PyTorch
   (``reference``, beside the float64 :func:`attention_reference`);
4. version 1, portable FlashAttention-2 (``v1/``): the Triton forward kernel (``v1/forward``) returns O and the
   log-sum-exp; which blocks it loads with and without masks, :func:`block_schedule` (``schedule``); the backward
   (``v1/backward``) recomputes P from the log-sum-exp, no N x N buffer, no atomics;
5. block sizes, warps and stages per GPU, and opt-in autotuning, :func:`attention_config` (``configs``);
6. version 2, Hopper (``v2/``): the same math with tiles through TMA and wgmma, and its sm_90 compile checks;
7. version 3, Hopper in Gluon (``v3/``): FlashAttention-3's warp-specialized forward and backward;
8. the plan (``plan``): the one module that picks a version (by dtype, GPU and size) and launches it,
   :func:`attention_forward` and :func:`attention_backward`;
9. SDPA's flash backend (``sdpa``): importing gpulab registers its kernels as the flash implementation
   ``"gpulab"``; ``torch.nn.attention.activate_flash_attention_impl("gpulab")`` routes SDPA's flash backend and
   ``varlen_attn`` to them, :func:`gpulab.attention.sdpa.sdpa_status` says whether it is registered and active;
10. variable-length batches (``varlen``): :func:`varlen_attn`, torch's ``varlen_attn`` on version 1's kernels.

Beside the shipped path, and never imported by it: ``measure/`` (``python -m gpulab bench 04`` against PyTorch's SDPA
backends, the record readers, CPU replays and compile checks) and ``experiments/`` (kernels that are off by default,
each behind one frozen config: the one-pass backward, version 2's backward).

:func:`flash_attention` (``function``) ties them together as a differentiable function with the semantics of
``torch.nn.functional.scaled_dot_product_attention``: q ``[B, H, Nq, D]``, k, v ``[B, H, Nk, D]``, default scale
``1/sqrt(D)``, ``is_causal`` SDPA's top-left mask (query i sees keys ``j <= i``, also when ``Nq != Nk``), SDPA's
grouped-query heads (``enable_gqa``) and FlashAttention's bottom-right sliding windows (``window_size``). Its
autograd Function, :class:`FlashAttentionFunction`, saves only q, k, v, O and the log-sum-exp. :func:`varlen_attn`
(``varlen``) is torch's ``varlen_attn`` for packed batches of sequences of different lengths, in one launch.
"""

from __future__ import annotations

from gpulab.attention.configs import (
    MAX_HEAD_DIM,
    AttentionConfig,
    attention_config,
    autotune,
    candidates,
    smem_estimate,
    tuned,
)
from gpulab.attention.function import FlashAttentionFunction, flash_attention
from gpulab.attention.plan import attention_backward, attention_forward, check_inputs
from gpulab.attention.reference import (
    attention_reference,
    causal_mask,
    default_scale,
    logsumexp_reference,
    naive_attention,
    tiled_attention,
    varlen_attention_reference,
    visible_mask,
)
from gpulab.attention.schedule import block_schedule, plot_block_schedule
from gpulab.attention.sdpa import register as _register_sdpa
from gpulab.attention.shared import attention_preprocess_kernel
from gpulab.attention.softmax import (
    online_softmax,
    online_softmax_kernel,
    softmax_naive,
    softmax_online,
    softmax_safe,
)
from gpulab.attention.v1.backward import attention_dkdv_kernel, attention_dq_kernel
from gpulab.attention.v1.forward import attention_forward_kernel
from gpulab.attention.varlen import AuxRequest, varlen_attn

__all__ = [
    "flash_attention",
    "varlen_attn",
    "AuxRequest",
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
    "varlen_attention_reference",
    "visible_mask",
    "causal_mask",
    "default_scale",
    "naive_attention",
    "softmax_naive",
    "softmax_safe",
    "softmax_online",
    "tiled_attention",
]

_register_sdpa()  # "gpulab" in torch's flash-attention registry, not activated (gpulab.attention.sdpa)
