"""FlashAttention as PyTorch custom ops, so ``torch.compile`` (``fullgraph=True``) and CUDA graphs accept it.

``torch.compile`` traces Python; it cannot trace into a Triton launcher run by Python code of its own. Registered with
:func:`torch.library.custom_op`, the forward and the backward are opaque nodes of the graph: the compiler sees their
signatures and, through ``register_fake``, the shapes and dtypes of what they return, and calls them as they are.
``register_autograd`` tells autograd that the backward op is the forward op's derivative.

- ``gpulab::attention_forward(q, k, v, is_causal, scale, allow_tf32, autotune, enable_gqa, window) -> (o, lse)``
  (``enable_gqa`` False and ``window`` None, for (-1, -1), by default)
- ``gpulab::attention_backward(do, q, k, v, o, lse, is_causal, scale, allow_tf32, autotune, enable_gqa, window)
  -> (dq, dk, dv)``

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
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    scale: float,
    allow_tf32: bool,
    autotune: bool,
    enable_gqa: bool = False,
    window: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """O [B, H, Nq, D] (q's dtype) and the fp32 log-sum-exp [B, H, Nq] of validated inputs."""
    config = "auto" if autotune else None
    return attention_forward(q, k, v, is_causal=is_causal, scale=scale, allow_tf32=allow_tf32, config=config,
                             enable_gqa=enable_gqa, window_size=tuple(window or (-1, -1)))  # fmt: skip


@forward_op.register_fake
def _(q, k, v, is_causal, scale, allow_tf32, autotune, enable_gqa=False, window=None):
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
    enable_gqa: bool = False,
    window: list[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV of validated inputs (the FlashAttention-2 backward: P recomputed from the log-sum-exp)."""
    configs = "auto" if autotune else None
    dq, dk, dv = attention_backward(
        do.contiguous(), q, k, v, o, lse, is_causal=is_causal, scale=scale, allow_tf32=allow_tf32, configs=configs,
        enable_gqa=enable_gqa, window_size=tuple(window or (-1, -1)),
    )  # fmt: skip
    return dq.contiguous(), dk.contiguous(), dv.contiguous()


@backward_op.register_fake
def _(do, q, k, v, o, lse, is_causal, scale, allow_tf32, autotune, enable_gqa=False, window=None):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, is_causal, scale, allow_tf32, autotune, enable_gqa, window = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.flags = (is_causal, scale, allow_tf32, autotune, enable_gqa, None if window is None else list(window))


def _backward(ctx, do, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = backward_op(do, q, k, v, o, lse, *ctx.flags)
    return dq, dk, dv, None, None, None, None, None, None


forward_op.register_autograd(_backward, setup_context=_setup_context)


def flash_attention_op(q, k, v, is_causal: bool = False, scale=None, allow_tf32: bool = False, autotune: bool = False,
                       enable_gqa: bool = False, window_size=(-1, -1)):  # fmt: skip
    """:func:`gpulab.attention.flash_attention` through the custom ops (what it calls when compiled)."""
    scale = check_inputs(q, k, v, scale, allow_tf32, enable_gqa=bool(enable_gqa))
    window = [int(w) for w in window_size]
    o, _ = forward_op(
        q, k, v, bool(is_causal), float(scale), bool(allow_tf32), bool(autotune), bool(enable_gqa), window
    )
    return o
