"""FlashAttention as PyTorch custom ops, so ``torch.compile`` (``fullgraph=True``) and CUDA graphs accept it.

``torch.compile`` traces Python; it cannot trace into a Triton launcher run by Python code of its own. Registered with
:func:`torch.library.custom_op`, the forward and the backward are opaque nodes of the graph: the compiler sees their
signatures and, through ``register_fake``, the shapes and dtypes of what they return, and calls them as they are.
``register_autograd`` tells autograd that the backward op is the forward op's derivative.

- ``gpulab::attention_forward(q, k, v, is_causal, scale, allow_tf32, autotune) -> (o, lse)``
- ``gpulab::attention_backward(do, q, k, v, o, lse, is_causal, scale, allow_tf32, autotune) -> (dq, dk, dv)``

:func:`gpulab.attention.flash_attention` validates its arguments in Python (so a bad input raises the same clear
error compiled or not) and calls these ops when it is being compiled; eagerly it calls its autograd Function, a few
microseconds cheaper per call than the dispatcher's path through a custom op.
"""

from __future__ import annotations

import torch

from gpulab.attention.plan import attention_backward, attention_forward, check_inputs

__all__ = ["flash_attention_op", "forward_op", "backward_op"]


@torch.library.custom_op("gpulab::attention_forward", mutates_args=())
def forward_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, scale: float, allow_tf32: bool, autotune: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """O [B, H, Nq, D] (q's dtype) and the fp32 log-sum-exp [B, H, Nq] of validated inputs."""
    config = "auto" if autotune else None
    return attention_forward(q, k, v, is_causal=is_causal, scale=scale, allow_tf32=allow_tf32, config=config)


@forward_op.register_fake
def _(q, k, v, is_causal, scale, allow_tf32, autotune):
    b, h, n_q, _ = q.shape
    o = q.new_empty((b, h, n_q, v.shape[-1]))
    return o, q.new_empty((b, h, n_q), dtype=torch.float32)


@torch.library.custom_op("gpulab::attention_backward", mutates_args=())
def backward_op(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    is_causal: bool,
    scale: float,
    allow_tf32: bool,
    autotune: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV of validated inputs (the FlashAttention-2 backward: P recomputed from the log-sum-exp)."""
    configs = "auto" if autotune else None
    dq, dk, dv = attention_backward(
        do.contiguous(), q, k, v, o, lse, is_causal=is_causal, scale=scale, allow_tf32=allow_tf32, configs=configs
    )
    return dq.contiguous(), dk.contiguous(), dv.contiguous()


@backward_op.register_fake
def _(do, q, k, v, o, lse, is_causal, scale, allow_tf32, autotune):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, is_causal, scale, allow_tf32, autotune = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.flags = (is_causal, scale, allow_tf32, autotune)


def _backward(ctx, do, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = backward_op(do, q, k, v, o, lse, *ctx.flags)
    return dq, dk, dv, None, None, None, None


forward_op.register_autograd(_backward, setup_context=_setup_context)


def flash_attention_op(q, k, v, is_causal: bool = False, scale=None, allow_tf32: bool = False, autotune: bool = False):
    """:func:`gpulab.attention.flash_attention` through the custom ops (what it calls when compiled)."""
    scale = check_inputs(q, k, v, scale, allow_tf32)
    o, _ = forward_op(q, k, v, bool(is_causal), float(scale), bool(allow_tf32), bool(autotune))
    return o
