"""gpulab as PyTorch's flash attention: SDPA's flash backend and ``varlen_attn`` on gpulab's kernels.

What you will learn:

- a kernel package plugs into ``torch.nn.functional.scaled_dot_product_attention`` without a line of the model
  changed: PyTorch's flash backend is a handful of aten operators, and a library may give them new kernels for the
  CUDA dispatch key (``torch.library.Library("aten", "IMPL", "CUDA")``), as PyTorch's own FA3 and FA4 registrations
  (``torch/nn/attention/_fa3.py``, ``_fa4.py``) do;
- autograd needs nothing new: the aten forward returns the output and the fp32 log-sum-exp, and aten's derivative
  formula calls the aten backward with them, which here runs gpulab's backward from the saved log-sum-exp.

Importing :mod:`gpulab.attention` registers the implementation under the name ``"gpulab"`` (cheap: one dict entry,
nothing activated)::

    import torch.nn.attention as tna
    tna.activate_flash_attention_impl("gpulab")   # SDPA's flash backend and varlen_attn run gpulab's kernels
    tna.restore_flash_attention_impl()            # PyTorch's own flash kernels again

The operators and their layouts (B batch, H query heads, Hkv key/value heads, N sequence, D head dim, T packed
tokens):

- ``_scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, return_debug_mask, *, scale)``: SDPA's
  layout, q ``[B, H, Nq, D]``, k and v ``[B, Hkv, Nk, D]`` (Hkv < H: SDPA's ``enable_gqa``); returns O like q and
  the log-sum-exp ``[B, H, Nq]``; ``is_causal`` aligned bottom-right, as the FlashAttention-2 kernel it replaces
  takes it: SDPA's top-left mask where SDPA sends it (``Nq == Nk``; SDPA takes another backend for a causal mask
  with ``Nq != Nk``);
- ``_flash_attention_forward(q, k, v, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)``:
  FlashAttention's layout, dense q ``[B, Nq, H, D]`` (log-sum-exp ``[B, H, Nq]``) or packed q ``[T, H, D]`` with
  int32 offsets ``cum_seq_q`` (log-sum-exp ``[H, T]``); ``is_causal`` and ``window_size_left/right`` are
  FlashAttention's bottom-right window (``is_causal`` sets the right edge to 0);
- their backwards, and ``_flash_attention_forward_no_dropout_inplace`` (``varlen_attn_out``) where torch has it.

What these operators may be asked and gpulab does not do (dropout, the debug mask of probabilities, ALiBi slopes,
``seqused_k``, a block table, fp8) raises a RuntimeError that names it and says how to run PyTorch's own kernels
for it. :func:`sdpa_status` says whether the registration happened and, if not, why (torch without the registry).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpulab.attention.plan import attention_backward, attention_forward
from gpulab.attention.varlen import AuxRequest, varlen_attn, varlen_backward

__all__ = ["IMPL_NAME", "OPS", "register", "activate_kernels", "sdpa_status", "sdpa_flash_forward_impl",
           "sdpa_flash_backward_impl", "flash_attention_forward_impl", "flash_attention_forward_inplace_impl",
           "flash_attention_backward_impl"]  # fmt: skip

IMPL_NAME = "gpulab"
"""The name :func:`torch.nn.attention.activate_flash_attention_impl` takes."""

_FP8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
             if hasattr(torch, n))  # fmt: skip
_RESTORE = "call torch.nn.attention.restore_flash_attention_impl() to run PyTorch's own flash kernels for it"
_STATUS = {"registered": False, "why": "gpulab.attention.sdpa.register() has not run"}


def _refuse(op: str, what: str):
    raise RuntimeError(f"gpulab's flash attention ({op}) does not support {what}; {_RESTORE}.")


def _check_common(op, query, dropout_p, return_debug_mask=False, alibi_slopes=None, seqused_k=None,
                  block_table=None, num_splits=None, extra=None) -> None:  # fmt: skip
    """Refuse, by name, what the aten operators carry and gpulab's kernels do not compute."""
    if dropout_p != 0.0:
        _refuse(op, f"dropout (dropout_p={dropout_p}); pass dropout_p=0.0 (e.g. model.eval())")
    if return_debug_mask:
        _refuse(op, "return_debug_mask=True (the attention probabilities are never stored)")
    if alibi_slopes is not None:
        _refuse(op, "ALiBi slopes (alibi_slopes)")
    if seqused_k is not None:
        _refuse(op, "seqused_k (per-sequence key counts of a KV cache)")
    if block_table is not None:
        _refuse(op, "a block table (block_table: a paged KV cache)")
    if num_splits is not None and num_splits not in (0, 1):
        _refuse(op, f"num_splits={num_splits} (split-KV; its kernels never split the keys: pass None or 1)")
    if query.dtype in _FP8:
        _refuse(op, f"fp8 inputs ({query.dtype})")
    for name, value in (extra or {}).items():
        if value is not None:
            _refuse(op, f"the argument {name}={value!r}")


def _check_layout(op: str, packed: bool, **tensors) -> None:
    """The tensors' dimensions for the operator's layout: dense 4-D, packed (offsets given) 3-D."""
    want, layout = (3, "[T, H, D] (packed: cum_seq_q given)") if packed else (4, None)
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}.")
        if t.dim() != want:
            layout = layout or ("[B, H, N, D]" if op.startswith("_scaled") else "[B, N, H, D] (dense: no cum_seq_q)")
            raise ValueError(f"{op}: {name} must be {want}-dimensional {layout}, got shape {tuple(t.shape)}.")


def _window(is_causal: bool, left, right) -> tuple[int, int]:
    """FlashAttention's ``(left, right)`` from the aten arguments: None is -1 (unbounded), ``is_causal`` sets the
    right edge to 0 (as FlashAttention's kernels do)."""
    left = -1 if left is None else int(left)
    right = 0 if is_causal else (-1 if right is None else int(right))
    return left, right


def _mask(window: tuple[int, int], n_q: int, n_k: int) -> dict:
    """gpulab's mask arguments for a bottom-right ``window`` on ``n_q`` queries and ``n_k`` keys: nothing for full
    attention, ``is_causal`` where the bottom-right causal mask is SDPA's top-left one (``n_q == n_k``), else
    ``window_size``."""
    if window == (-1, -1):
        return {}
    if window == (-1, 0) and n_q == n_k:
        return {"is_causal": True}
    return {"window_size": window}


def _gqa(h_q: int, h_kv: int) -> dict:
    return {"enable_gqa": True} if h_kv != h_q else {}


def _like(t: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``t`` laid out as ``torch.empty_like(ref)`` (what the meta functions give, and torch.compile assumes):
    ``t`` itself where the strides agree (``t`` is dense, so then ``ref`` is too), else a copy."""
    if t.stride() == ref.stride():
        return t
    out = torch.empty_like(ref, dtype=t.dtype)
    return t if out.stride() == t.stride() else out.copy_(t)


def _aux(query: torch.Tensor):
    """rng_state [2] and the unused philox offset [] (uint64: no dropout, so zeros) and the empty debug mask."""
    rng = torch.zeros((2,), dtype=torch.uint64, device=query.device)
    offset = torch.zeros((), dtype=torch.uint64, device=query.device)
    return rng, offset, torch.empty(0, dtype=query.dtype, device=query.device)


# ----------------------------------------------------------------------------------------------------------------
# SDPA's layout: q [B, H, Nq, D], k and v [B, Hkv, Nk, D]


def sdpa_flash_forward_impl(query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, *,
                            scale=None, **extra):  # fmt: skip
    """``aten::_scaled_dot_product_flash_attention``: ``(O [B, H, Nq, D], LSE fp32 [B, H, Nq], None, None, Nq,
    Nk, rng_state, philox_offset, debug_mask)``; ``is_causal`` aligned bottom-right (top-left where Nq == Nk)."""
    op = "_scaled_dot_product_flash_attention"
    _check_layout(op, False, query=query, key=key, value=value)
    _check_common(op, query, dropout_p, return_debug_mask, extra=extra)
    mask = _mask(_window(bool(is_causal), None, None), query.shape[2], key.shape[2])
    with torch.no_grad():
        o, lse = attention_forward(query, key, value, scale=scale, **mask, **_gqa(query.shape[1], key.shape[1]))
    rng, offset, debug = _aux(query)
    return _like(o, query), lse, None, None, query.shape[2], key.shape[2], rng, offset, debug


def sdpa_flash_backward_impl(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
                             dropout_p, is_causal, philox_seed, philox_offset, *, scale=None, **extra):  # fmt: skip
    """``aten::_scaled_dot_product_flash_attention_backward``: dQ, dK, dV shaped and strided like q, k, v, from
    the forward's O and log-sum-exp."""
    op = "_scaled_dot_product_flash_attention_backward"
    _check_layout(op, False, grad_out=grad_out, query=query, key=key, value=value, out=out)
    _check_common(op, query, dropout_p, extra=extra)
    mask = _mask(_window(bool(is_causal), None, None), query.shape[2], key.shape[2])
    with torch.no_grad():
        dq, dk, dv = attention_backward(grad_out.to(query.dtype), query, key, value, out, logsumexp, scale=scale,
                                        **mask, **_gqa(query.shape[1], key.shape[1]))  # fmt: skip
    return _like(dq, query), _like(dk, key), _like(dv, value)


# ----------------------------------------------------------------------------------------------------------------
# FlashAttention's layout: dense q [B, Nq, H, D], or packed q [T, H, D] with int32 offsets


def _bhnd(*tensors):
    return tuple(t.transpose(1, 2) for t in tensors)


def _dense_forward(query, key, value, scale, window):
    q, k, v = _bhnd(query, key, value)
    with torch.no_grad():
        o, lse = attention_forward(q, k, v, scale=scale, **_mask(window, q.shape[2], k.shape[2]),
                                   **_gqa(q.shape[1], k.shape[1]))  # fmt: skip
    return _like(o.transpose(1, 2), query), lse


def _varlen_forward(op, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, scale, window):
    if cum_seq_k is None:
        _refuse(op, "cum_seq_k=None (a packed query needs the keys' offsets too)")
    gqa = key.shape[1] != query.shape[1]
    with torch.no_grad():
        o, lse = varlen_attn(query, key, value, cum_seq_q, cum_seq_k, int(max_q), int(max_k), scale=scale,
                             window_size=window, enable_gqa=gqa, return_aux=AuxRequest(lse=True))  # fmt: skip
    return _like(o, query), lse  # lse [H, T], as aten's


def flash_attention_forward_impl(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                                 return_debug_mask, *, scale=None, window_size_left=None, window_size_right=None,
                                 seqused_k=None, alibi_slopes=None, block_table=None, num_splits=None,
                                 **extra):  # fmt: skip
    """``aten::_flash_attention_forward``: ``(O like q, LSE, rng_state, philox_offset, debug_mask)``, LSE fp32
    ``[B, H, Nq]`` for dense q ``[B, Nq, H, D]`` or ``[H, T]`` for packed q ``[T, H, D]`` (``cum_seq_q`` given).
    The mask is FlashAttention's bottom-right window (``is_causal``: its right edge 0)."""
    op = "_flash_attention_forward"
    _check_layout(op, cum_seq_q is not None, query=query, key=key, value=value)
    _check_common(op, query, dropout_p, return_debug_mask, alibi_slopes, seqused_k, block_table, num_splits, extra)
    window = _window(bool(is_causal), window_size_left, window_size_right)
    if cum_seq_q is None:
        o, lse = _dense_forward(query, key, value, scale, window)
    else:
        o, lse = _varlen_forward(op, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, scale, window)
    rng, offset, debug = _aux(query)
    return o, lse, rng, offset, debug


def flash_attention_forward_inplace_impl(out, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
                                         is_causal, return_debug_mask, *, scale=None, window_size_left=None,
                                         window_size_right=None, seqused_k=None, alibi_slopes=None,
                                         block_table=None, num_splits=None, **extra):  # fmt: skip
    """``aten::_flash_attention_forward_no_dropout_inplace``: O written into ``out``; returns the LSE."""
    o, lse, *_ = flash_attention_forward_impl(
        query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask,
        scale=scale, window_size_left=window_size_left, window_size_right=window_size_right, seqused_k=seqused_k,
        alibi_slopes=alibi_slopes, block_table=block_table, num_splits=num_splits, **extra,
    )  # fmt: skip
    out.copy_(o)
    return lse


def flash_attention_backward_impl(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
                                  dropout_p, is_causal, rng_state, unused, *, scale=None, window_size_left=None,
                                  window_size_right=None, **extra):  # fmt: skip
    """``aten::_flash_attention_backward``: dQ, dK, dV like q, k, v (dense ``[B, N, H, D]`` or packed
    ``[T, H, D]``) from the forward's O and log-sum-exp."""
    op = "_flash_attention_backward"
    _check_layout(op, cum_seq_q is not None, grad_out=grad_out, query=query, key=key, value=value, out=out)
    _check_common(op, query, dropout_p, extra=extra)
    window = _window(bool(is_causal), window_size_left, window_size_right)
    grad_out = grad_out.to(query.dtype)
    with torch.no_grad():
        if cum_seq_q is None:
            q, k, v, o, do = _bhnd(query, key, value, out, grad_out)
            g = attention_backward(do, q, k, v, o, logsumexp, scale=scale, **_mask(window, q.shape[2], k.shape[2]),
                                   **_gqa(q.shape[1], k.shape[1]))  # fmt: skip
            return tuple(_like(t.transpose(1, 2), ref) for t, ref in zip(g, (query, key, value)))
        if cum_seq_k is None:
            _refuse(op, "cum_seq_k=None (a packed query needs the keys' offsets too)")
        g = varlen_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, int(max_q), int(max_k),
                            scale=scale, window_size=window, enable_gqa=query.shape[1] != key.shape[1])  # fmt: skip
        return tuple(_like(t, ref) for t, ref in zip(g, (query, key, value)))


# ----------------------------------------------------------------------------------------------------------------
# registration


OPS = {
    "_scaled_dot_product_flash_attention": sdpa_flash_forward_impl,
    "_scaled_dot_product_flash_attention_backward": sdpa_flash_backward_impl,
    "_flash_attention_forward": flash_attention_forward_impl,
    "_flash_attention_forward_no_dropout_inplace": flash_attention_forward_inplace_impl,
    "_flash_attention_backward": flash_attention_backward_impl,
}
"""aten operator (default overload) -> gpulab's implementation; :func:`activate_kernels` registers those this
torch has."""


@dataclass
class GpulabFlashHandle:
    """What activation returns to torch's registry: the Library holding the kernels; :meth:`remove` unregisters
    them (``restore_flash_attention_impl`` calls it)."""

    library: torch.library.Library | None
    ops: tuple[str, ...] = ()

    def remove(self) -> None:
        destroy = getattr(self.library, "_destroy", None)
        if destroy is not None:
            destroy()  # unregister now, not whenever the object is collected
        self.library = None


def activate_kernels(dispatch_key: str = "CUDA") -> GpulabFlashHandle:
    """Register gpulab's implementations of :data:`OPS` (those this torch defines) for ``dispatch_key``; the
    registry's activation calls this with CUDA. Another key (CPU) lets tests drive the aten operators, and so
    torch's own callers of them, through gpulab on CPU tensors."""
    if dispatch_key not in ("CUDA", "CPU"):
        raise ValueError(f"dispatch_key must be 'CUDA' (what activation registers) or 'CPU' (tests on CPU tensors), "
                         f"got {dispatch_key!r}.")  # fmt: skip
    lib = torch.library.Library("aten", "IMPL", dispatch_key)
    done = []
    for name, fn in OPS.items():
        if hasattr(torch.ops.aten, name):
            lib.impl(name, fn, dispatch_key)
            done.append(name)
    return GpulabFlashHandle(lib, tuple(done))


def register() -> bool:
    """Register ``"gpulab"`` with torch's flash-attention registry (not activated); True if done. On a torch without
    the registry nothing is registered and :func:`sdpa_status` says why."""
    try:
        from torch.nn.attention import register_flash_attention_impl
    except ImportError:
        _STATUS.update(registered=False, why=f"torch {torch.__version__} has no "
                       "torch.nn.attention.register_flash_attention_impl (PyTorch 2.11 and 2.13 have it)")  # fmt: skip
        return False
    missing = [n for n in ("_scaled_dot_product_flash_attention", "_flash_attention_forward")
               if not hasattr(torch.ops.aten, n)]  # fmt: skip
    if missing:
        _STATUS.update(registered=False, why=f"torch {torch.__version__} has no aten operator {missing[0]}")
        return False
    register_flash_attention_impl(IMPL_NAME, register_fn=activate_kernels)
    _STATUS.update(registered=True, why=None)
    return True


def sdpa_status() -> dict:
    """``{'name', 'registered', 'why', 'active'}``: whether ``"gpulab"`` is in torch's flash-attention registry,
    why not if it is not, and whether it is the active implementation."""
    try:
        from torch.nn.attention import current_flash_attention_impl
    except ImportError:
        return {"name": IMPL_NAME, **_STATUS, "active": False}
    active = current_flash_attention_impl() == IMPL_NAME
    return {"name": IMPL_NAME, **_STATUS, "active": active}
