"""Variable-length batches: :func:`varlen_attn`, torch's ``torch.nn.attention.varlen.varlen_attn`` on version 1, and
on version 3 on Hopper where it takes the padded problem (the forward: :func:`v3_gate`; the backward:
:func:`gpulab.attention.plan.varlen_takes_v3`).

What you will learn: a batch of sequences of different lengths needs no padding. The sequences are packed one after
another into ``[T, H, D]`` tensors and an int32 offsets tensor ``cu_seq`` (``[S + 1]``, ``cu_seq[0] = 0``) says where
each one starts. The kernels (:mod:`gpulab.attention.v1`) run all of them in one launch: the grid is (Q blocks of
the longest sequence, heads, sequences), and each program reads its sequence's offsets from ``cu_seq`` itself. A
program whose Q block lies past its sequence's end stores nothing. So the host never reads the offsets to launch: the
call can be captured in a CUDA graph. It does read them to check them (starting at 0, never decreasing, within the
tensors, no sequence longer than ``max_q``/``max_k``) outside graph capture
(``torch.cuda.is_current_stream_capturing()``; inside a capture these checks are the caller's), once per offsets
tensor: reading them waits for the GPU, so a model whose layers all take the same ``cu_seq`` tensors pays it in its
first layer only (:func:`checked_offsets`).

FLOPs: a padded batch computes ``S * max_q * max_k`` score entries per head, the packed one ``sum_s Nq_s Nk_s``.
"""

from __future__ import annotations

import os
import weakref
from typing import NamedTuple

import torch

from gpulab import check, hardware, runtime
from gpulab.attention import plan as attention_plan
from gpulab.attention.configs import MAX_HEAD_DIM, attention_config
from gpulab.attention.inputs import check_scale
from gpulab.attention.plan import plan_cache_info, varlen_backward_v3, varlen_takes_v3
from gpulab.attention.reference import check_window, gqa_group
from gpulab.attention.v1 import backward as v1_backward
from gpulab.attention.v1 import forward as v1_forward
from gpulab.launch import direct_stream
from gpulab.triton_ops import LOG2E_F

__all__ = [
    "varlen_attn",
    "varlen_backward",
    "AuxRequest",
    "VarlenPlan",
    "varlen_plan",
    "check_offsets",
    "checked_offsets",
    "VarlenFunction",
    "varlen_forward_op",
    "varlen_backward_op",
    "v3_gate",
]


class AuxRequest(NamedTuple):
    """What :func:`varlen_attn` returns beside the output, as ``torch.nn.attention.varlen.AuxRequest``:
    ``lse=True`` asks for the fp32 log-sum-exp ``[Hq, Tq]``."""

    lse: bool = False


class VarlenPlan:
    """One validated packed-batch signature: the fields :func:`gpulab.attention.v1.forward.forward_launch` and
    :func:`gpulab.attention.v1.backward.backward_launches` read (``b`` the number of sequences, ``n_q``/``n_k`` the
    longest lengths, ``max_q``/``max_k``, which size the grids), and the launches once built."""

    __slots__ = ("b", "h", "n_q", "n_k", "d", "t_q", "t_k", "group", "window", "scale", "qk_scale", "dtype",
                 "device", "precision", "is_fp32", "forward", "backward", "v3_forward", "forward_version")  # fmt: skip
    varlen = True
    is_causal = False

    def __init__(self, q, k, cu_seq_q, max_q, max_k, scale, window, group):
        self.t_q, self.h, self.d = q.shape
        self.t_k = k.shape[0]
        self.b = cu_seq_q.shape[0] - 1
        self.n_q, self.n_k = max_q, max_k
        self.group, self.window = group, window
        self.scale, self.qk_scale = scale, scale * LOG2E_F
        self.dtype, self.device = q.dtype, q.device
        self.precision = runtime.dot_precision(q.dtype, False)
        self.is_fp32 = q.dtype == torch.float32
        self.forward = self.backward = None
        self.v3_forward = None  # whether version 3 takes the forward (decided at the first forward call)
        self.forward_version = None  # the version whose forward ran last (1 or 3)

    @property
    def bounds(self) -> tuple[int, int]:
        return self.window

    @property
    def empty(self) -> bool:
        return self.b * self.t_q * self.h == 0 or self.t_k == 0


_PLANS: dict = {}


def _check_tensors(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, enable_gqa) -> int:
    """The checks that need no tensor values; returns Hq // Hkv."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        runtime.require_tensor(name, t)
        if t.dim() != 3:
            raise ValueError(
                f"{name} must be packed [tokens, heads, head_dim] (3-D), got shape {tuple(t.shape)}; pack the "
                "sequences one after another along dim 0 and give their offsets in cu_seq_q / cu_seq_k."
            )
        if t.dtype != query.dtype or t.device != query.device:
            raise ValueError(f"{name} is {t.dtype} on {t.device} but query is {query.dtype} on {query.device}; "
                             "query, key and value must share one dtype and device.")  # fmt: skip
    hardware.require_dtype("query", query.dtype, allowed=(torch.float32, torch.float16, torch.bfloat16))
    if key.shape != value.shape:
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} must have the same shape.")
    d = query.shape[2]
    if key.shape[2] != d:
        raise ValueError(f"query has head_dim {d} but key and value have {key.shape[2]}; they must match.")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim {d} is not supported; varlen_attn takes head dims 1 to {MAX_HEAD_DIM}.")
    group = gqa_group(query.shape[1], key.shape[1], enable_gqa)
    for name, cu in (("cu_seq_q", cu_seq_q), ("cu_seq_k", cu_seq_k)):
        runtime.require_tensor(name, cu)
        if cu.dtype != torch.int32:
            raise TypeError(f"{name} must be an int32 tensor of cumulative offsets, got {cu.dtype}; convert it with "
                            f"`{name}.to(torch.int32)`.")  # fmt: skip
        if cu.dim() != 1 or cu.shape[0] < 1:
            raise ValueError(f"{name} must be 1-D [sequences + 1] (cu_seq[0] = 0, cu_seq[s + 1] = end of sequence "
                             f"s), got shape {tuple(cu.shape)}.")  # fmt: skip
        if cu.device != query.device:
            raise ValueError(f"{name} is on {cu.device} but query is on {query.device}; put them on one device.")
    if cu_seq_q.shape != cu_seq_k.shape:
        raise ValueError(f"cu_seq_q {tuple(cu_seq_q.shape)} and cu_seq_k {tuple(cu_seq_k.shape)} must have the same "
                         "length: one entry more than there are sequences.")  # fmt: skip
    for name, m in (("max_q", max_q), ("max_k", max_k)):
        if m.__class__ is bool or not isinstance(m, int) or m < 1:
            raise ValueError(f"{name} must be a positive int (the longest sequence's length), got {m!r}.")
    return group


def check_offsets(cu_seq_q, cu_seq_k, t_q: int, t_k: int, max_q: int, max_k: int) -> None:
    """The checks that read the offsets (one device-to-host copy): each starts at 0, never decreases, ends within its
    tensor's tokens, and no sequence is longer than ``max_q`` / ``max_k`` (the grid is sized by them)."""
    rows = torch.stack((cu_seq_q, cu_seq_k)).tolist()
    for name, cu, total, longest, mname in (("cu_seq_q", rows[0], t_q, max_q, "max_q"),
                                            ("cu_seq_k", rows[1], t_k, max_k, "max_k")):  # fmt: skip
        if cu[0] != 0:
            raise ValueError(f"{name}[0] is {cu[0]}; cumulative offsets start at 0 (prepend a 0).")
        steps = [b - a for a, b in zip(cu, cu[1:])]
        if steps and min(steps) < 0:
            s = steps.index(min(steps))
            raise ValueError(f"{name} decreases at sequence {s}: {name}[{s}] = {cu[s]} > {name}[{s + 1}] = "
                             f"{cu[s + 1]}; offsets are cumulative lengths, never decreasing.")  # fmt: skip
        if cu[-1] > total:
            raise ValueError(f"{name}[-1] is {cu[-1]}, past the end of the packed tensor's {total} tokens; the "
                             "offsets must end within it.")  # fmt: skip
        if steps and max(steps) > longest:
            raise ValueError(f"a sequence of {max(steps)} tokens (by {name}) is longer than {mname}={longest}; pass "
                             f"{mname} >= the longest sequence (it sizes the grid).")  # fmt: skip


_CHECKED: dict = {}
"""Offsets that passed :func:`check_offsets`: (ids, sizes) -> (weak references, version counters)."""


def checked_offsets(cu_seq_q, cu_seq_k, t_q: int, t_k: int, max_q: int, max_k: int) -> None:
    """:func:`check_offsets`, skipped when these very tensors passed it with these sizes and neither was written
    since: autograd's version counter (``tensor._version``) counts every in-place write through torch, so offsets
    refilled in place (``cu.copy_(...)``) are read again. A write that bypasses the counter (through ``.data`` or a
    kernel's raw pointer) is not seen; tensors made in inference mode have no counter and are read every call."""
    try:
        versions = (cu_seq_q._version, cu_seq_k._version)
    except RuntimeError:  # inference tensors track no version
        return check_offsets(cu_seq_q, cu_seq_k, t_q, t_k, max_q, max_k)
    key = (id(cu_seq_q), id(cu_seq_k), t_q, t_k, max_q, max_k)
    seen = _CHECKED.get(key)
    if seen is not None and seen[0]() is cu_seq_q and seen[1]() is cu_seq_k and seen[2] == versions:
        return None
    check_offsets(cu_seq_q, cu_seq_k, t_q, t_k, max_q, max_k)
    if len(_CHECKED) >= 64:
        _CHECKED.clear()
    _CHECKED[key] = (weakref.ref(cu_seq_q), weakref.ref(cu_seq_k), versions)
    return None


def _validated(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, window_size, enable_gqa):
    """Every check that needs no offsets' values: returns ``(group, window, scale)`` (Hq // Hkv, the checked
    ``(left, right)``, the softmax scale with None resolved). :func:`varlen_plan` and the compiled path call it."""
    enable_gqa = runtime.strict_bool("enable_gqa", enable_gqa)
    group = _check_tensors(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, enable_gqa)
    return group, check_window(window_size), check_scale(query.shape[2], scale)


def varlen_plan(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, window_size, enable_gqa) -> VarlenPlan:
    """The :class:`VarlenPlan` of a signature (shapes, strides, dtypes, devices, lengths, flags): one dict lookup
    after the first call, whose checks raise on bad input (only signatures that passed are stored)."""
    key_ = None
    if (window_size.__class__ is tuple and enable_gqa.__class__ is bool and (scale is None or scale.__class__ is float)
            and max_q.__class__ is int and max_k.__class__ is int):  # fmt: skip
        try:
            key_ = tuple((t.__class__, t.shape, t.stride(), t.dtype, t.device)
                         for t in (query, key, value, cu_seq_q, cu_seq_k))  # fmt: skip
            key_ += (max_q, max_k, scale, enable_gqa, tuple((w.__class__, w) for w in window_size))
            plan = _PLANS.get(key_)
        except (AttributeError, TypeError):
            key_ = plan = None
        if plan is not None:
            return plan
    group, window, scale = _validated(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, window_size,
                                      enable_gqa)  # fmt: skip
    plan = VarlenPlan(query, key, cu_seq_q, max_q, max_k, scale, window, group)
    if key_ is not None:
        if len(_PLANS) >= plan_cache_info()["max_plans"]:
            _PLANS.clear()
        _PLANS[key_] = plan
    return plan


def _checked_plan(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, window_size, enable_gqa) -> VarlenPlan:
    """:func:`varlen_plan`, then the offsets' values checked (:func:`checked_offsets`) unless a CUDA graph is being
    captured (reading them would wait for the GPU; inside a capture these checks are the caller's)."""
    plan = varlen_plan(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, window_size, enable_gqa)
    if not (query.is_cuda and torch.cuda.is_current_stream_capturing()):
        checked_offsets(cu_seq_q, cu_seq_k, plan.t_q, plan.t_k, max_q, max_k)
    return plan


def _stream(plan, *tensors):
    aligned = not any(t.data_ptr() & 15 for t in tensors)
    return direct_stream(plan.device) if aligned else None


def v3_gate(plan: VarlenPlan, q, k, v) -> bool:
    """Whether version 3 (Hopper, Gluon) takes this packed forward: where ``flash_attention`` would take it for the
    padded problem (:func:`gpulab.attention.plan.auto_version` and :data:`gpulab.attention.plan.V3_HEAD_DIMS`, the
    same gate) and :func:`gpulab.attention.v3.varlen_forward.supported` says yes; version 1 otherwise. Version 3
    is reached through the plan's import (only the plan imports several versions)."""
    work = plan.t_q * plan.n_k * plan.h * plan.d
    if os.environ.get("GPULAB_ATTENTION_VERSION", "") == "2" or plan.d not in attention_plan.V3_HEAD_DIMS:
        return False
    if attention_plan.auto_version(plan.dtype, plan.d, plan.device, work) != 2:
        return False
    return attention_plan.v3_varlen.supported(q, k, v, plan.scale, plan.window, plan.group > 1)[0]


def _forward(plan: VarlenPlan, q, k, v, cu_q, cu_k):
    o = check.new_output(q.shape, dtype=q.dtype, device=q.device)
    lse = check.new_output((plan.h, plan.t_q), dtype=torch.float32, device=q.device)
    if plan.empty:
        return o.zero_(), lse.zero_()
    cu_q, cu_k = cu_q.contiguous(), cu_k.contiguous()  # the kernels read cu_seq[s] at its pointer + s (cu[::2])
    if plan.v3_forward is None:
        plan.v3_forward = v3_gate(plan, q, k, v)
    if plan.v3_forward and attention_plan.v3_varlen.aligned(q, k, v):
        plan.forward_version = 3
        return attention_plan.v3_varlen.attention_forward_varlen(q, k, v, cu_q, cu_k, plan.n_q, plan.scale, plan.window)
    plan.forward_version = 1
    if plan.forward is None:
        plan.forward = v1_forward.forward_launch(plan, attention_config("forward", plan.d, plan.dtype, plan.n_q,
                                                                        plan.n_k))  # fmt: skip
    plan.forward(_stream(plan, q, k, v, cu_q, cu_k), q, k, v, o, lse, cu_q, cu_k, plan.t_q, plan.t_k, plan.h,
                 plan.group, plan.qk_scale, *plan.window)  # fmt: skip
    return o, lse


def _backward(plan: VarlenPlan, do, q, k, v, o, lse, cu_q, cu_k):
    dq = check.new_output(q.shape, dtype=q.dtype, device=q.device)
    dk = check.new_output(k.shape, dtype=k.dtype, device=k.device)
    dv = check.new_output(v.shape, dtype=v.dtype, device=v.device)
    if plan.empty:
        return dq.zero_(), dk.zero_(), dv.zero_()
    cu_q, cu_k = cu_q.contiguous(), cu_k.contiguous()  # the kernels read cu_seq[s] at its pointer + s (cu[::2])
    if plan.backward is None:
        plan.backward = _backward_launches(plan, q, k, v)
    launches = plan.backward
    if launches == V3_KIND:
        if not torch.are_deterministic_algorithms_enabled():  # (dQ's atomic sums arrive in any order)
            return varlen_backward_v3(do, q, k, v, o, lse, cu_q, cu_k, plan.n_k, plan.scale, plan.window)
        launches = _backward_launches(plan, q, k, v, v1_only=True)
    dq_launch, dkdv_launch = launches
    delta = check.new_output((plan.h, plan.t_q), dtype=torch.float32, device=q.device)
    stream = _stream(plan, q, k, v, o, do, lse, cu_q, cu_k)
    extra = (cu_q, cu_k, plan.t_q, plan.t_k, plan.h, plan.group, plan.qk_scale, plan.scale, *plan.window)
    dq_launch(stream, q, k, v, o, do, lse, delta, dq, *extra)  # writes D = rowsum(dO * O)
    dkdv_launch(stream, q, k, v, do, lse, delta, dk, dv, *extra)  # reads D: runs second
    return dq, dk, dv


V3_KIND = "one pass, Gluon"
"""``VarlenPlan.backward`` where version 3's backward takes the batch (else version 1's two launches)."""


def _backward_launches(plan: VarlenPlan, q, k, v, v1_only: bool = False):
    """Version 3's backward (:data:`V3_KIND`) where :func:`gpulab.attention.plan.varlen_takes_v3` says so (the
    padded problem's gate), else version 1's two launches."""
    if not v1_only and varlen_takes_v3(plan, q, k, v):
        return V3_KIND
    cfg_kv = attention_config("dkdv", plan.d, plan.dtype, plan.n_q, plan.n_k)
    cfg_q = attention_config("dq", plan.d, plan.dtype, plan.n_q, plan.n_k)
    return v1_backward.backward_launches(plan, cfg_kv, cfg_q)


def varlen_backward(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q: int, max_k: int, *,
                    scale: float | None = None, window_size: tuple[int, int] = (-1, -1),
                    enable_gqa: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """dQ, dK, dV of :func:`varlen_attn` from its saved O and fp32 log-sum-exp ``lse`` ``[Hq, Tq]`` (what SDPA's
    flash backend hands a backward): the same two launches as autograd's backward, the offsets read on the device
    (checked on the host only outside CUDA graph capture). Arguments as :func:`varlen_attn`'s; ``grad_out`` like
    ``out``."""
    if window_size.__class__ is list:
        window_size = tuple(window_size)
    plan = _checked_plan(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, window_size, enable_gqa)
    q, k, v, o, do = (t.contiguous() for t in (query, key, value, out, grad_out.to(query.dtype)))
    return _backward(plan, do, q, k, v, o, lse.contiguous(), cu_seq_q, cu_seq_k)


class VarlenFunction(torch.autograd.Function):
    """Autograd glue of :func:`varlen_attn`: saves q, k, v, O, the LSE and the offsets (nothing T x T)."""

    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, plan):
        o, lse = _forward(plan, q, k, v, cu_q, cu_k)
        ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
        ctx.plan = plan
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    @runtime.once_differentiable  # the backward is kernels, not a graph: a second derivative raises, never a silent 0
    def backward(ctx, do, _dlse):
        q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
        dq, dk, dv = _backward(ctx.plan, do.contiguous(), q, k, v, o, lse, cu_q, cu_k)
        return dq, dk, dv, None, None, None


@torch.library.custom_op("gpulab::varlen_forward", mutates_args=())
def varlen_forward_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seq_q: torch.Tensor,
                      cu_seq_k: torch.Tensor, max_q: int, max_k: int, scale: float, window: list[int],
                      enable_gqa: bool) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """:func:`varlen_attn`'s forward as a custom op, what it calls under ``torch.compile`` (an opaque node, as
    :mod:`gpulab.attention.ops` for ``flash_attention``): O and the fp32 LSE ``[Hq, Tq]``; the offsets are read
    and checked here, on the real tensors."""
    plan = _checked_plan(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, tuple(window), enable_gqa)
    return _forward(plan, query.contiguous(), key.contiguous(), value.contiguous(), cu_seq_q, cu_seq_k)


@varlen_forward_op.register_fake
def _(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, window, enable_gqa):
    return query.new_empty(query.shape), query.new_empty((query.shape[1], query.shape[0]), dtype=torch.float32)


@torch.library.custom_op("gpulab::varlen_backward", mutates_args=())
def varlen_backward_op(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       out: torch.Tensor, lse: torch.Tensor, cu_seq_q: torch.Tensor, cu_seq_k: torch.Tensor,
                       max_q: int, max_k: int, scale: float, window: list[int],
                       enable_gqa: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """dQ, dK, dV of :func:`varlen_forward_op` (:func:`varlen_backward`)."""
    return varlen_backward(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k, scale=scale,
                           window_size=tuple(window), enable_gqa=enable_gqa)  # fmt: skip


@varlen_backward_op.register_fake
def _(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k, scale, window, enable_gqa):
    return query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape)


def _setup_varlen(ctx, inputs, output):
    query, key, value, cu_seq_q, cu_seq_k, *flags = inputs
    ctx.save_for_backward(query, key, value, output[0], output[1], cu_seq_q, cu_seq_k)
    ctx.flags = flags


def _varlen_op_backward(ctx, do, _dlse):
    q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
    return *varlen_backward_op(do, q, k, v, o, lse, cu_q, cu_k, *ctx.flags), None, None, None, None, None, None, None


varlen_forward_op.register_autograd(_varlen_op_backward, setup_context=_setup_varlen)


def varlen_attn(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor | None,
    max_q: int,
    max_k: int,
    *,
    return_aux: AuxRequest | None = None,
    scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    enable_gqa: bool = False,
    seqused_k: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    num_splits: int | None = None,
):
    """Attention over a packed batch of sequences of different lengths, with the signature and semantics of torch's
    ``torch.nn.attention.varlen.varlen_attn``; differentiable in query, key and value.

    Args:
        query: [Tq, Hq, D], the sequences' queries one after another; key, value: [Tk, Hkv, D] (Hkv = Hq unless
            ``enable_gqa``: then Hkv divides Hq and query head h reads KV head ``h // (Hq // Hkv)``).
        cu_seq_q, cu_seq_k: int32 [S + 1] cumulative offsets: sequence s holds query rows
            ``cu_seq_q[s]:cu_seq_q[s + 1]`` and key rows ``cu_seq_k[s]:cu_seq_k[s + 1]`` (empty sequences allowed).
        max_q, max_k: the longest query and key sequence (positive ints; they size the grid).
        return_aux: an :class:`AuxRequest`; with ``lse=True`` also the fp32 log-sum-exp ``[Hq, Tq]``, the layout
            torch returns. A row that sees no key (an empty key sequence, a window) has O = 0, as FlashAttention
            gives, and LSE = 0, where FlashAttention's CUDA kernels give +inf.
        scale: the softmax scale, None for ``1 / sqrt(D)``.
        window_size: ``(left, right)`` per sequence, aligned at its bottom-right corner; (-1, -1) full, (-1, 0)
            causal, (W, 0) causal with a window of W.
        seqused_k, block_table, num_splits: torch 2.13's paged-KV-cache and split-KV options, not built here:
            anything but None raises a ValueError naming it.

    Returns O [Tq, Hq, D] in query's dtype, or ``(O, LSE)``. Rows past the last offset belong to no sequence: the
    kernels write neither their outputs nor their gradients (dQ, dK, dV): those rows hold whatever the memory held,
    so slice them off before they reach a loss or a parameter. One forward launch (two backward) for the whole batch.
    Under ``torch.compile`` (``fullgraph=True`` too) it runs as the custom ops :func:`varlen_forward_op` and
    :func:`varlen_backward_op`.

    Examples:
        >>> q = torch.randn(10, 2, 16, device=runtime.device)
        >>> cu = torch.tensor([0, 3, 10], dtype=torch.int32, device=runtime.device)
        >>> varlen_attn(q, q, q, cu, cu, 7, 7, window_size=(-1, 0)).shape
        torch.Size([10, 2, 16])
    """
    for name, value_ in (("seqused_k", seqused_k), ("block_table", block_table), ("num_splits", num_splits)):
        if value_ is not None:
            raise ValueError(f"{name}={value_!r} is not supported by gpulab's varlen_attn (no paged KV cache or "
                             f"split-KV yet); pass {name}=None, or use torch's own varlen_attn.")  # fmt: skip
    if cu_seq_k is None:
        raise ValueError("cu_seq_k is None; without a block_table varlen_attn needs the key offsets (pass cu_seq_q "
                         "again when queries and keys have the same lengths).")  # fmt: skip
    if return_aux is not None and not isinstance(return_aux, AuxRequest) and not hasattr(return_aux, "lse"):
        raise TypeError(f"return_aux must be None or an AuxRequest(lse=...), got {return_aux!r}.")
    if window_size.__class__ is list:
        window_size = tuple(window_size)
    if torch.compiler.is_compiling():  # torch.compile: the checks (no plan cache to guard on), then the custom ops,
        group, window, scale = _validated(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, window_size,
                                          enable_gqa)  # opaque to the tracer; the ops read the offsets  # fmt: skip
        o, lse = varlen_forward_op(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, list(window), group > 1)
        return (o, lse) if return_aux is not None and return_aux.lse else o
    plan = _checked_plan(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, window_size, enable_gqa)
    q, k, v = query.contiguous(), key.contiguous(), value.contiguous()
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        o, lse = VarlenFunction.apply(q, k, v, cu_seq_q, cu_seq_k, plan)
    else:
        o, lse = _forward(plan, q, k, v, cu_seq_q, cu_seq_k)
    if return_aux is not None and return_aux.lse:
        return o, lse
    return o
