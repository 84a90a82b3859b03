"""What one attention call needs, worked out once per input signature: validation, scale, tiles, grids, launches.

What you will learn: eager callers pay for every line of Python between their call and the kernel. Checking that
q, k, v are valid, choosing tiles for the GPU and computing grids depends only on the inputs' *signature* —
class, shape, strides, dtype and device of each tensor, and the flags — never on their values. So the first call
with a signature runs the full checks (:func:`check_inputs`, clear errors naming the argument) and builds a
:class:`Plan`; every later call with the same signature finds it with one dict lookup. Only a signature whose
checks passed is ever stored, so a bad input is refused on every call, whatever came before it.

Flags are looked up only when they have their plain types (``bool``, ``float`` or None for the scale): ``1 == True``
and ``hash(1) == hash(True)``, so a key holding ``is_causal=1`` would find the plan of ``is_causal=True`` and skip
the TypeError that an int must raise. Other types take the full checks on every call.
"""

from __future__ import annotations

import torch

from gpulab import dtypes, runtime
from gpulab.attention.configs import MAX_HEAD_DIM, AttentionConfig
from gpulab.attention.hopper import HopperConfig, auto_version, supports
from gpulab.attention.reference import default_scale
from gpulab.triton_ops import LOG2E_F

__all__ = ["Plan", "check_inputs", "check_config", "check_version", "forward_plan", "backward_plan", "plan_cache_info",
           "clear_plan_cache", "MAX_PLANS"]  # fmt: skip

MAX_PLANS = 512
"""Signatures kept per cache; when full, the cache starts over (a workload with ever-new lengths stays bounded)."""

_FORWARD: dict = {}
_BACKWARD: dict = {}
_MISSES = {"forward": 0, "backward": 0}


def check_inputs(q, k, v, scale=None, allow_tf32: bool = False, names=("q", "k", "v")) -> float:
    """Raise a clear error (naming the argument, saying what is supported) unless q, k, v are valid attention inputs:
    tensors on gpulab's device, one supported dtype, q [B, H, Nq, D], k and v [B, H, Nk, D] with the same B, H and
    D, 1 <= D <= 128, any Nq, Nk >= 0 (as SDPA: no queries give an empty output, no keys an output of zeros);
    ``scale`` None or any finite number (0 and negative as SDPA takes them); ``allow_tf32`` a bool. Returns the
    scale."""
    for name, t in zip(names, (q, k, v)):
        runtime.require_tensor(name, t)
        if t.dim() != 4:
            raise ValueError(
                f"{name} must be 4-dimensional [batch, heads, seq, head_dim], got shape {tuple(t.shape)}; "
                "add the missing dimensions with unsqueeze."
            )
    for name, t in zip(names[1:], (k, v)):
        if t.dtype != q.dtype:
            raise ValueError(
                f"{name} is {t.dtype} but {names[0]} is {q.dtype}; {', '.join(names)} must share one dtype."
            )
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but {names[0]} is on {q.device}; put q, k, v on one device.")
    dtypes.require_dtype(names[0], q.dtype, allowed=(torch.float32, torch.float16, torch.bfloat16))
    allow_tf32 = runtime.strict_bool("allow_tf32", allow_tf32)
    nq_, nk_, nv_ = names
    b, h, n_q, d = q.shape
    if tuple(k.shape[:2]) != (b, h) or tuple(v.shape[:2]) != (b, h):
        raise ValueError(
            f"batch and heads differ: {nq_} {tuple(q.shape)}, {nk_} {tuple(k.shape)}, {nv_} {tuple(v.shape)}; "
            "all three must be [batch, heads, seq, head_dim] with the same batch and heads (no broadcasting)."
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
    return default_scale(d, scale)


def check_config(name: str, config, head_dim: int) -> AttentionConfig | HopperConfig | str | None:
    """``config`` if it is None, ``"auto"``, a :class:`HopperConfig` (version 2) or an :class:`AttentionConfig`
    whose head-dim tile holds ``head_dim``."""
    if config is None or (isinstance(config, str) and config == "auto") or isinstance(config, HopperConfig):
        return config
    if not isinstance(config, AttentionConfig):
        raise TypeError(
            f"{name} must be None (the default tiles), 'auto' (autotune on a GPU), an AttentionConfig (version 1) "
            f"or a HopperConfig (version 2), got {config!r}."
        )
    if config.block_d < head_dim:
        raise ValueError(f"{name}.block_d={config.block_d} is smaller than head_dim {head_dim}; use block_d >= it.")
    return config


def _check_backward_configs(configs, head_dim: int):
    """``configs``: None, 'auto', or a dict mapping 'dkdv' and/or 'dq' to AttentionConfigs holding ``head_dim``."""
    if configs is None or (isinstance(configs, str) and configs == "auto"):
        return configs
    if not isinstance(configs, dict) or not set(configs) <= {"dkdv", "dq"}:
        raise TypeError(
            f"configs must be None, 'auto' or a dict with keys 'dkdv' and/or 'dq' mapping to AttentionConfig, "
            f"got {configs!r}."
        )
    for kind, config in configs.items():
        check_config(f"configs[{kind!r}]", config, head_dim)
    return dict(configs)


class Plan:
    """One validated input signature and what its launches need.

    ``forward`` and ``backward`` hold the kernels' :class:`gpulab.launch.Launch` objects once built (by
    :mod:`gpulab.attention.forward` and :mod:`gpulab.attention.backward`, on first use: with ``"auto"`` configs
    that is when the tiles are timed).
    """

    __slots__ = ("b", "h", "n_q", "n_k", "d", "dtype", "device", "scale", "qk_scale", "is_causal", "allow_tf32",
                 "precision", "is_fp32", "contiguous", "empty", "o_shape", "lse_shape", "config", "backward_configs",
                 "forward", "backward", "version")  # fmt: skip

    def __init__(self, q, k, scale, is_causal, allow_tf32, config, backward_configs, contiguous):
        self.b, self.h, self.n_q, self.d = q.shape
        self.n_k = k.shape[2]
        self.dtype, self.device = q.dtype, q.device
        self.scale = scale
        self.qk_scale = scale * LOG2E_F  # the kernels' scores in base 2
        self.is_causal, self.allow_tf32 = is_causal, allow_tf32
        self.precision = runtime.dot_precision(q.dtype, allow_tf32)
        self.is_fp32 = q.dtype == torch.float32
        self.contiguous = contiguous
        # nothing to launch (and no TMA descriptor, which refuses a size of 0): no batch, heads or queries, or no
        # keys, where every output row is 0 as SDPA's math backend returns (and every gradient 0)
        self.empty = self.b * self.h * self.n_q * self.n_k == 0
        self.o_shape = (self.b, self.h, self.n_q, self.d)
        self.lse_shape = (self.b, self.h, self.n_q)
        self.config, self.backward_configs = config, backward_configs
        self.forward = self.backward = None
        self.version = 1  # the forward kernel's version (forward_plan sets it)


def _store(cache: dict, key, plan: Plan) -> Plan:
    if key is not None:
        if len(cache) >= MAX_PLANS:
            cache.clear()
        cache[key] = plan
    return plan


def check_version(version, config, dtype, head_dim: int, device, work: int | None = None, scale: float = 1.0) -> int:
    """The forward version to run: ``version`` 1 or 2 as asked (2 only where
    :func:`gpulab.attention.hopper.supports` allows it and ``scale >= 0``), or with None the automatic choice
    (:func:`gpulab.attention.hopper.auto_version`; a version-1 config or ``"auto"`` means version 1, a
    :class:`HopperConfig` version 2; a negative scale version 1)."""
    if version is not None and (version.__class__ is not int or version not in (1, 2)):
        raise ValueError(f"version must be None (automatic), 1 (portable FlashAttention-2) or 2 (Hopper), "
                         f"got {version!r}.")  # fmt: skip
    if isinstance(config, HopperConfig):
        if version == 1:
            raise ValueError("config is a HopperConfig (version 2's tiles) but version=1; pass an AttentionConfig "
                             "for version 1, or version=2.")  # fmt: skip
        version = 2
    elif config is not None:
        if version == 2:
            raise ValueError(f"config {config!r} is for version 1; pass a HopperConfig (or None) with version=2.")
        version = 1
    # version 2 takes the row max of the raw scores times the scale (one fused multiply-add per score), which is the
    # max of the scaled scores only for scale >= 0
    negative = scale < 0
    if version is None:
        return 1 if negative else auto_version(dtype, head_dim, device, work)
    if version == 2 and (why := supports(dtype, head_dim)) is not None:
        raise ValueError(f"version=2 cannot run this input: {why}.")
    if version == 2 and negative:
        raise ValueError(f"version=2 takes scales >= 0 (its row max is max(S) * scale), got scale={scale!r}; "
                         "use version 1 (or None) for a negative scale.")  # fmt: skip
    return version


def forward_plan(q, k, v, is_causal=False, scale=None, allow_tf32=False, config=None, version=None) -> Plan:
    """The :class:`Plan` for ``attention_forward(q, k, v, is_causal, scale, allow_tf32, config)``: found by one dict
    lookup for a signature seen before, else built after the full checks (which raise on bad input).

    ``config``: None, ``"auto"``, an :class:`AttentionConfig` or a :class:`HopperConfig`; the backward of the same
    plan uses the default tiles with None or a config, and autotunes with ``"auto"``. ``version``: the forward
    kernel, None for the automatic choice (:func:`check_version`).
    """
    key = None
    if is_causal.__class__ is bool and allow_tf32.__class__ is bool and (scale is None or scale.__class__ is float):
        try:
            key = (q.__class__, q.shape, q.stride(), q.dtype, q.device,
                   k.__class__, k.shape, k.stride(), k.dtype, k.device,
                   v.__class__, v.shape, v.stride(), v.dtype, v.device,
                   is_causal, scale, allow_tf32, config, version)  # fmt: skip
            plan = _FORWARD.get(key)
        except (AttributeError, TypeError):  # not tensors, or an unhashable config: the checks below say which
            key = plan = None
        if plan is not None:
            return plan
    _MISSES["forward"] += 1
    scale = check_inputs(q, k, v, scale, allow_tf32)
    is_causal = runtime.strict_bool("is_causal", is_causal)
    config = check_config("config", config, q.shape[3])
    contiguous = q.is_contiguous() and k.is_contiguous() and v.is_contiguous()
    backward_configs = "auto" if isinstance(config, str) else None
    plan = Plan(q, k, scale, is_causal, bool(allow_tf32), config, backward_configs, contiguous)
    work = plan.b * plan.h * plan.n_q * plan.n_k * plan.d
    plan.version = check_version(version, config, q.dtype, q.shape[3], q.device, work, scale)
    return _store(_FORWARD, key, plan)


def backward_plan(do, q, k, v, o, lse, is_causal=False, scale=None, allow_tf32=False, configs=None) -> Plan:
    """The :class:`Plan` for ``attention_backward(do, q, k, v, o, lse, ...)``, cached like :func:`forward_plan`
    (``configs`` None or ``"auto"``; a dict of configs takes the full checks on every call)."""
    key = None
    if (is_causal.__class__ is bool and allow_tf32.__class__ is bool and (scale is None or scale.__class__ is float)
            and (configs is None or configs.__class__ is str)):  # fmt: skip
        try:
            key = tuple((t.__class__, t.shape, t.stride(), t.dtype, t.device) for t in (do, q, k, v, o, lse)) + (
                is_causal,
                scale,
                allow_tf32,
                configs,
            )
            plan = _BACKWARD.get(key)
        except (AttributeError, TypeError):
            key = plan = None
        if plan is not None:
            return plan
    _MISSES["backward"] += 1
    scale = check_inputs(q, k, v, scale, allow_tf32)
    check_inputs(o, do, o, scale, allow_tf32, names=("o", "do", "o"))
    is_causal = runtime.strict_bool("is_causal", is_causal)
    if o.shape != q.shape or do.shape != q.shape or o.dtype != q.dtype:
        raise ValueError(f"o and do must be shaped and typed like q {tuple(q.shape)}, {q.dtype}.")
    b, h, n_q, d = q.shape
    runtime.require_tensor("lse", lse, dtype=torch.float32, shape=(b, h, n_q))
    if lse.device != q.device:
        raise ValueError(f"lse is on {lse.device} but q is on {q.device}; put them on one device.")
    configs = _check_backward_configs(configs, d)
    contiguous = all(t.is_contiguous() for t in (q, k, v, o, lse))
    plan = Plan(q, k, scale, is_causal, bool(allow_tf32), None, configs, contiguous)
    return _store(_BACKWARD, key, plan)


def plan_cache_info() -> dict:
    """``{'forward_misses', 'backward_misses', 'forward_size', 'backward_size'}``: full checks run so far and the
    signatures held. A repeated call with one signature adds no miss."""
    return {"forward_misses": _MISSES["forward"], "backward_misses": _MISSES["backward"],
            "forward_size": len(_FORWARD), "backward_size": len(_BACKWARD)}  # fmt: skip


def clear_plan_cache() -> None:
    """Forget every plan (the next call with any signature runs the full checks again); the miss counts restart."""
    _FORWARD.clear()
    _BACKWARD.clear()
    _MISSES.update(forward=0, backward=0)
