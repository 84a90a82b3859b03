"""The attention plan: the one module that chooses a kernel version, and what one call needs, worked out once per
input signature (validation, scale, version, tiles, grids, launches).

Versions live in leaf packages that never import each other: ``v1/`` (portable FlashAttention-2), ``v2/`` (Hopper:
TMA and wgmma), ``v3/`` (Hopper, Gluon: FlashAttention-3's warp-specialized forward and backward). This module picks
one (:func:`auto_version` and :data:`V3_HEAD_DIMS`: dtype, GPU, size; :data:`V3_BACKWARD`, a frozen
:class:`BackwardGate`, for version 3's backward) and launches it (:func:`run_forward`,
:func:`run_backward`). Kernels that are off by default live in :mod:`gpulab.attention.experiments`, each behind its own
frozen config; this module never imports them: an experiment hands :func:`run_backward` its launches (``launches=``),
an object with ``run``, ``kind`` and ``atomic``.

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

import os
from typing import NamedTuple

import torch

from gpulab import check, gluon_compat, runtime
from gpulab.attention import sm90
from gpulab.attention.backward_gate import BackwardGate
from gpulab.attention.configs import (
    AttentionConfig,
    HopperConfig,
    attention_config,
    autotuned_config,
    hopper_config,
)
from gpulab.attention.inputs import check_inputs
from gpulab.attention.reference import check_window
from gpulab.attention.v1 import backward as v1_backward
from gpulab.attention.v1 import forward as v1_forward
from gpulab.attention.v2 import forward as v2_forward
from gpulab.attention.v3 import backward as v3_backward
from gpulab.attention.v3 import backward_varlen as v3_backward_varlen
from gpulab.attention.v3 import forward as v3_forward
from gpulab.attention.v3 import varlen_forward as v3_varlen  # noqa: F401 - varlen_attn reaches version 3 here
from gpulab.launch import direct_stream
from gpulab.triton_ops import LOG2E_F

__all__ = ["Plan", "check_inputs", "check_config", "check_version", "forward_plan", "backward_plan", "plan_cache_info",
           "clear_plan_cache", "MAX_PLANS", "auto_version", "SMALL_WORK", "attention_forward", "attention_backward",
           "run_forward", "run_backward", "V3_HEAD_DIMS", "backward_kind", "two_kernel_backward",
           "V3_BACKWARD_HEAD_DIMS", "V3_BACKWARD_MIN_SEQ", "V3Backward", "BackwardGate", "V3_BACKWARD",
           "backward_launches", "launch_kind", "varlen_takes_v3", "varlen_backward_v3"]  # fmt: skip

MAX_PLANS = 512
"""Signatures kept per cache by default (:func:`clear_plan_cache` takes another); when full, the cache starts over."""


V3_BACKWARD = BackwardGate((), {(64, False): 1024, (64, True): 1024, (128, False): 1024, (128, True): 1024})
"""The package's gate: version 3's backward from N = 1024 on (``min_seq``, the shortest length of lesson 4's grid),
for head dims 64 and 128, causal or not. On the H200 (``bench 05 short``, ``benchmarks/05_attention_hopper/short/``:
every backward behind the same forward and autograd Function, checked first) version 3's measured default
(:func:`gpulab.attention.v3.backward_configs.backward_config`) took less device time than the two kernels on every
N = 1024 problem it timed (d128 causal and not, d64 causal; the H100 runs had shown it faster from N = 1024 only at
d64 without a mask, from 4096 elsewhere: notes/attention-hopper.md, 'The length gate');
``tests/attention/v3/test_v3_backward_plan.py`` holds this table to those records. Below N = 1024 the two kernels
run. No head dim 256: each consumer's dK and dV [64, 256] fp32 are 256 registers per thread (the sm_90 compile
spills 1.9-4.1 KB at steps 1, 3, 5, whose shared memory is over 227 KB past step 1): version 1 runs its backward."""

V3_BACKWARD_HEAD_DIMS, V3_BACKWARD_MIN_SEQ = V3_BACKWARD.head_dims, V3_BACKWARD.min_seq  # its fields, read-only


class V3Backward(NamedTuple):
    """The plan's backward when it is version 3's: the kernel's launch fields."""

    cfg: v3_backward.V3BackwardConfig


_FORWARD: dict = {}
_BACKWARD: dict = {}
_MISSES = {"forward": 0, "backward": 0}
_LIMIT = {"plans": MAX_PLANS}


def check_config(name: str, config, head_dim: int) -> AttentionConfig | HopperConfig | str | None:
    """``config`` if it is None, ``"auto"``, a :class:`HopperConfig` (version 2), a
    :class:`gpulab.attention.v3.forward.V3Config` (version 3) or an :class:`AttentionConfig` whose head-dim tile
    holds ``head_dim``."""
    if (config is None or (isinstance(config, str) and config == "auto")
            or isinstance(config, (HopperConfig, v3_forward.V3Config))):  # fmt: skip
        return config
    if not isinstance(config, AttentionConfig):
        raise TypeError(
            f"{name} must be None (the default tiles), 'auto' (autotune on a GPU), an AttentionConfig (version 1), "
            f"a HopperConfig (version 2) or a V3Config (version 3), got {config!r}."
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
    :func:`run_forward` and :func:`run_backward`, on first use: with ``"auto"`` configs
    that is when the tiles are timed). ``group`` is Hq // Hkv (grouped-query heads; 1 without), ``window`` the
    ``(left, right)`` window ((-1, -1): none), ``varlen`` False (packed batches have
    :class:`gpulab.attention.varlen.VarlenPlan`).
    """

    __slots__ = ("b", "h", "n_q", "n_k", "d", "dtype", "device", "scale", "qk_scale", "is_causal", "allow_tf32",
                 "precision", "is_fp32", "contiguous", "empty", "o_shape", "lse_shape", "config", "backward_configs",
                 "forward", "backward", "version", "group", "window", "varlen")  # fmt: skip

    def __init__(self, q, k, scale, is_causal, allow_tf32, config, backward_configs, contiguous, window=(-1, -1)):
        self.b, self.h, self.n_q, self.d = q.shape
        self.n_k = k.shape[2]
        self.group = self.h // k.shape[1] if k.shape[1] else 1
        self.window, self.varlen = window, False
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

    @property
    def bounds(self) -> tuple[int, int]:
        """The kernels' ``(left, right)``: the window, or SDPA's causal mask as ``right = 0`` (diagonal top-left)."""
        return (-1, 0) if self.is_causal else self.window

    @property
    def plain(self) -> bool:
        """No grouped heads and no window (version 3's forward and backward take both where the plain problem would
        take them, version 2's forward grouped heads, version 1 everything)."""
        return self.group == 1 and self.window == (-1, -1)


def _store(cache: dict, key, plan: Plan) -> Plan:
    if key is not None:
        if len(cache) >= _LIMIT["plans"]:
            cache.clear()
        cache[key] = plan
    return plan


SMALL_WORK = 2**31
"""Query-key pairs (B H Nq Nk) times the head dim below which ``version=None`` keeps version 1: such a call takes
tens of microseconds, set by the host rather than the GPU, and version 1's host path is a few microseconds shorter
(no descriptor workspace; ``kind='tiny'`` records of ``python -m gpulab bench 05 hopper``). Lesson 4's smallest
problem is about 8x above it."""


def auto_version(dtype: torch.dtype, head_dim: int, device: torch.device, work: int | None = None) -> int:
    """The forward version ``version=None`` picks: 2 on a compute-capability-9 GPU where
    :func:`gpulab.attention.v2.forward.supports` allows it and the problem's ``work`` (B H Nq Nk d; None: large) is at
    least :data:`SMALL_WORK`, else 1.
    ``GPULAB_ATTENTION_VERSION=1`` (or 2) in the environment overrides the choice where allowed."""
    if work is not None:
        work = runtime.integer("work", work, minimum=0)
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be a torch.device, got {type(device).__name__} {device!r}; e.g. q.device.")
    why = v2_forward.supports(dtype, head_dim)
    forced = os.environ.get("GPULAB_ATTENTION_VERSION", "")
    if forced == "1":
        return 1
    if device.type != "cuda" or why is not None:
        return 1
    if forced == "2":
        return 2
    if work is not None and work < SMALL_WORK:
        return 1
    index = device.index if device.index is not None else torch.cuda.current_device()
    return 2 if sm90.capability(index)[0] == 9 else 1


def check_version(version, config, dtype, head_dim: int, device, work: int | None = None, scale: float = 1.0) -> int:
    """The forward version to run: ``version`` 1 or 2 as asked (2 only where
    :func:`gpulab.attention.v2.forward.supports` allows it and ``scale >= 0``), or with None the automatic choice
    (:func:`auto_version`; a version-1 config or ``"auto"`` means version 1, a :class:`HopperConfig` version 2; a
    negative scale version 1)."""
    if version is not None and (version.__class__ is not int or version not in (1, 2, 3)):
        raise ValueError(f"version must be None (automatic), 1 (portable FlashAttention-2), 2 (Hopper, TMA) or 3 "
                         f"(Hopper, Gluon warp specialization), got {version!r}.")  # fmt: skip
    if isinstance(config, v3_forward.V3Config):
        if version not in (None, 3):
            raise ValueError(f"config is a V3Config (version 3's launch) but version={version}; pass version=3 or "
                             "None, or the config of that version.")  # fmt: skip
        version = 3
    if version == 3:
        if scale < 0:
            raise ValueError(f"version=3 takes scales >= 0 (its row max is max(S) * scale), got scale={scale!r}; "
                             "use version 1 (or None) for a negative scale.")  # fmt: skip
        if config is not None and not isinstance(config, v3_forward.V3Config):
            raise ValueError(f"config {config!r} is not version 3's; pass a V3Config (or None) with version=3.")
        return 3  # whether it can run these tensors: forward_plan asks v3's supported() with the tensors at hand
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
    if version == 2 and (why := v2_forward.supports(dtype, head_dim)) is not None:
        raise ValueError(f"version=2 cannot run this input: {why}.")
    if version == 2 and negative:
        raise ValueError(f"version=2 takes scales >= 0 (its row max is max(S) * scale), got scale={scale!r}; "
                         "use version 1 (or None) for a negative scale.")  # fmt: skip
    return version


V3_HEAD_DIMS: tuple[int, ...] = (64, 128, 256)
"""Head dims at which ``version=None`` takes version 3 (:mod:`gpulab.attention.v3`, Gluon) instead of version 2 on
Hopper, where :func:`gpulab.attention.v3.forward.supported` allows it: the head dims at which the newest H100 run
(``benchmarks/05_attention_hopper/v3/``: the tuned kernel beside version 2 and cuDNN in one run) shows it faster than
version 2 on every problem of lesson 4's grid, device time (``tests/attention/v3/test_v3_plan_records.py`` holds
this list to the records). Head dim 64 joined once causal tiles went in (longest, shortest) pairs
(notes/attention-hopper.md, 'Forward configs'). Head dim 256 (no version 2: version 1 below it) is here because
the newest H200 features record shows version 3's forward faster than version 1's on every d=256 problem (about
cuDNN's time; the backward stays version 1's)."""


def _say_v3_refused(kind: str, why: str, instead: str) -> None:
    """Warn once per reason that version 3's ``kind`` would have run here and cannot (this Triton, GPU or dtype)."""
    gluon_compat.warn_once(("attention v3", kind, why), f"gpulab.attention: version 3's {kind} (the fastest on Hopper) "
                           f"does not run here: {why}. Running {instead} instead (correct, slower).")  # fmt: skip


def forward_plan(q, k, v, is_causal=False, scale=None, allow_tf32=False, config=None, version=None,
                 enable_gqa=False, window_size=(-1, -1)) -> Plan:  # fmt: skip
    """The :class:`Plan` for ``attention_forward(q, k, v, is_causal, scale, allow_tf32, config)``: found by one dict
    lookup for a signature seen before, else built after the full checks (which raise on bad input).

    ``config``: None, ``"auto"``, an :class:`AttentionConfig` or a :class:`HopperConfig`; the backward of the same
    plan uses the default tiles with None or a config, and autotunes with ``"auto"``. ``version``: the forward
    kernel, None for the automatic choice (:func:`check_version`).

    Grouped-query heads (``enable_gqa`` with Hkv < Hq) and windows take version 3 where ``version=None`` would take
    it for the plain problem (the same gate) and it can run them (:func:`gpulab.attention.v3.forward.supported`);
    where it cannot, grouped heads take version 2 or 1 as the plain problem would, windows version 1 (version 2 has
    none). Asking for version 2 with a window is a ValueError.
    """
    key = None
    if (is_causal.__class__ is bool and allow_tf32.__class__ is bool and (scale is None or scale.__class__ is float)
            and enable_gqa.__class__ is bool and window_size.__class__ is tuple):  # fmt: skip
        try:
            key = (q.__class__, q.shape, q.stride(), q.dtype, q.device,
                   k.__class__, k.shape, k.stride(), k.dtype, k.device,
                   v.__class__, v.shape, v.stride(), v.dtype, v.device,
                   is_causal, scale, allow_tf32, config, version, enable_gqa,
                   tuple((w.__class__, w) for w in window_size))  # fmt: skip
            plan = _FORWARD.get(key)
        except (AttributeError, TypeError):  # not tensors, or an unhashable config: the checks below say which
            key = plan = None
        if plan is not None:
            return plan
    _MISSES["forward"] += 1
    scale = check_inputs(q, k, v, scale, allow_tf32, enable_gqa=runtime.strict_bool("enable_gqa", enable_gqa))
    is_causal = runtime.strict_bool("is_causal", is_causal)
    window = check_window(window_size, is_causal)
    config = check_config("config", config, q.shape[3])
    contiguous = q.is_contiguous() and k.is_contiguous() and v.is_contiguous()
    backward_configs = "auto" if isinstance(config, str) else None
    plan = Plan(q, k, scale, is_causal, bool(allow_tf32), config, backward_configs, contiguous, window)
    work = plan.b * plan.h * plan.n_q * plan.n_k * plan.d
    windowed = window != (-1, -1)  # versions 1 and 3 have windows; grouped heads: every version
    if windowed and (version == 2 or isinstance(config, HopperConfig)):
        raise ValueError(f"version={version} (config {config!r}) cannot run a window ({window}): versions 1 and 3 "
                         "have it; pass version=None, 1 or 3 and that version's config or None.")  # fmt: skip
    plan.version = check_version(version, config, q.dtype, q.shape[3], q.device, work, scale)
    auto3 = version is None and config is None and plan.d in V3_HEAD_DIMS and (plan.version == 2 or (  # or d > 128
        plan.version == 1 and plan.scale >= 0 and auto_version(q.dtype, 128, q.device, work) == 2))  # fmt: skip
    if plan.version == 3 or (auto3 and os.environ.get("GPULAB_ATTENTION_VERSION", "") != "2"):
        ok, why = v3_forward.supported(q, k, v, is_causal, plan.scale, enable_gqa=plan.group > 1, window_size=window)
        if plan.version == 3 and not ok:
            raise ValueError(f"version=3 cannot run this input: {why}.")
        if not ok:
            _say_v3_refused("forward", why, "version 1" if windowed or plan.version == 1 else "version 2")
        plan.version = 3 if ok else plan.version
    if windowed and plan.version == 2:  # where version 3 would have taken the plain problem and cannot
        plan.version = 1
    return _store(_FORWARD, key, plan)


def backward_plan(do, q, k, v, o, lse, is_causal=False, scale=None, allow_tf32=False, configs=None,
                  enable_gqa=False, window_size=(-1, -1)) -> Plan:  # fmt: skip
    """The :class:`Plan` for ``attention_backward(do, q, k, v, o, lse, ...)``, cached like :func:`forward_plan`
    (``configs`` None or ``"auto"``; a dict of configs takes the full checks on every call)."""
    key = None
    if (is_causal.__class__ is bool and allow_tf32.__class__ is bool and (scale is None or scale.__class__ is float)
            and (configs is None or configs.__class__ is str) and enable_gqa.__class__ is bool
            and window_size.__class__ is tuple):  # fmt: skip
        try:
            key = tuple((t.__class__, t.shape, t.stride(), t.dtype, t.device) for t in (do, q, k, v, o, lse)) + (
                is_causal, scale, allow_tf32, configs, enable_gqa, tuple((w.__class__, w) for w in window_size),
            )  # fmt: skip
            plan = _BACKWARD.get(key)
        except (AttributeError, TypeError):
            key = plan = None
        if plan is not None:
            return plan
    _MISSES["backward"] += 1
    scale = check_inputs(q, k, v, scale, allow_tf32, enable_gqa=runtime.strict_bool("enable_gqa", enable_gqa))
    check_inputs(o, do, o, scale, allow_tf32, names=("o", "do", "o"))
    is_causal = runtime.strict_bool("is_causal", is_causal)
    window = check_window(window_size, is_causal)
    if o.shape != q.shape or do.shape != q.shape or o.dtype != q.dtype:
        raise ValueError(f"o and do must be shaped and typed like q {tuple(q.shape)}, {q.dtype}.")
    b, h, n_q, d = q.shape
    runtime.require_tensor("lse", lse, dtype=torch.float32, shape=(b, h, n_q))
    if lse.device != q.device:
        raise ValueError(f"lse is on {lse.device} but q is on {q.device}; put them on one device.")
    configs = _check_backward_configs(configs, d)
    contiguous = all(t.is_contiguous() for t in (q, k, v, o, lse))
    plan = Plan(q, k, scale, is_causal, bool(allow_tf32), None, configs, contiguous, window)
    return _store(_BACKWARD, key, plan)


def plan_cache_info() -> dict:
    """``{'forward_misses', 'backward_misses', 'forward_size', 'backward_size', 'max_plans'}``: full checks run so
    far, the signatures held and the bound per cache. A repeated call with one signature adds no miss."""
    return {"forward_misses": _MISSES["forward"], "backward_misses": _MISSES["backward"],
            "forward_size": len(_FORWARD), "backward_size": len(_BACKWARD), "max_plans": _LIMIT["plans"]}  # fmt: skip


def clear_plan_cache(max_plans: int = MAX_PLANS) -> None:
    """Forget every plan (the next call with any signature runs the full checks again); the miss counts restart.
    ``max_plans``: the signatures each cache keeps from now on (its own and :mod:`gpulab.attention.varlen`'s)."""
    _LIMIT["plans"] = runtime.integer("max_plans", max_plans, minimum=1)
    _FORWARD.clear()
    _BACKWARD.clear()
    _MISSES.update(forward=0, backward=0)


# ----------------------------------------------------------------------------------------------------------------
# the runners: the version the plan picked, launched


def run_forward(plan: Plan, q, k, v):
    """``(O, LSE)`` for inputs whose signature ``plan`` was made for (no checks here: :func:`forward_plan` did them).

    The host work per call: two allocations, ``contiguous()`` only where the plan says an input is not, one launch.
    """
    if plan.empty:  # no batch, heads or queries (nothing to write), or no keys: O = 0 and LSE = 0, as SDPA's O
        return (check.new_output(plan.o_shape, dtype=plan.dtype, device=plan.device).zero_(),
                check.new_output(plan.lse_shape, dtype=torch.float32, device=plan.device).zero_())  # fmt: skip
    if not plan.contiguous:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if plan.version == 3:  # Hopper, Gluon (gpulab.attention.v3.forward; it allocates O and LSE)
        cfg = plan.config if isinstance(plan.config, v3_forward.V3Config) else None
        return v3_forward.attention_forward(q, k, v, plan.is_causal, plan.scale, cfg, enable_gqa=plan.group > 1,
                                            window_size=plan.window)  # fmt: skip
    o = check.new_output(plan.o_shape, dtype=plan.dtype, device=plan.device)
    lse = check.new_output(plan.lse_shape, dtype=torch.float32, device=plan.device)
    launch = plan.forward
    if plan.version == 2:  # Hopper: TMA descriptors (gpulab.attention.v2.forward)
        if launch is None:
            cfg = plan.config or hopper_config(plan.d, plan.is_causal)
            launch = plan.forward = v2_forward.forward_v2_launch(plan, cfg)
        if not runtime.INTERPRET:
            sm90.ensure_allocator()
        if (q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15:  # TMA reads from 16-byte aligned addresses only
            q, k, v = (t.clone() if t.data_ptr() & 15 else t for t in (q, k, v))  # fresh, aligned copies
        launch(
            direct_stream(plan.device), q, k, v, o, lse, plan.n_q, plan.n_k, plan.b * plan.h, plan.qk_scale, plan.group
        )
        return o, lse
    if launch is None:
        cfg = plan.config
        if cfg == "auto":  # time the candidates once for this problem, keep the fastest
            run = lambda c: attention_forward(q, k, v, plan.is_causal, plan.scale, plan.allow_tf32, config=c,  # noqa: E731
                                              enable_gqa=plan.group > 1, window_size=plan.window)  # fmt: skip
            cfg = autotuned_config("forward", plan.d, plan.dtype, plan.is_causal, plan.n_q, plan.n_k, run)
        elif cfg is None:
            cfg = attention_config("forward", plan.d, plan.dtype, plan.n_q, plan.n_k)
        launch = plan.forward = v1_forward.forward_launch(plan, cfg)
    aligned = not ((q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15)
    stream = direct_stream(plan.device) if aligned else None
    launch(stream, q, k, v, o, lse, q, q, plan.n_q, plan.n_k, plan.h, plan.group, plan.qk_scale, *plan.bounds)
    return o, lse


def attention_forward(
    q,
    k,
    v,
    is_causal: bool = False,
    scale: float | None = None,
    allow_tf32: bool = False,
    config=None,
    version=None,
    enable_gqa: bool = False,
    window_size=(-1, -1),
):
    """The attention forward of the version the plan picks; returns ``(O, LSE)``: O like q, LSE fp32 [B, H, Nq]
    (natural log).

    ``config``: an :class:`AttentionConfig`, None for :func:`attention_config`'s, or ``"auto"`` to autotune on a GPU
    (:func:`gpulab.attention.configs.autotune`; the interpreter uses the fixed config). The checks and the tile
    choice run once per input signature (:func:`gpulab.attention.plan.forward_plan`). ``config`` may also be a
    :class:`gpulab.attention.configs.HopperConfig` for version 2.

    ``version``: None picks the kernel (version 2, :mod:`gpulab.attention.v2.forward`, on a compute-capability-9 GPU
    for fp16/bf16 and head dims that are multiples of 8; else version 1); 1 or 2 asks for one (version 2 also runs
    in the interpreter).

    No autograd here; :func:`gpulab.attention.flash_attention` is the differentiable entry point.
    """
    plan = forward_plan(q, k, v, is_causal, scale, allow_tf32, config, version, enable_gqa, window_size)
    return run_forward(plan, q, k, v)


def backward_launches(plan: Plan, q, k, v, o, lse, do, gate: BackwardGate = V3_BACKWARD):
    """The backward's launches for ``plan`` (contiguous inputs): version 3's one-pass kernel where ``gate`` takes it
    (grouped heads and windows where it takes the plain problem of their sizes) and no tiles were asked for, else
    version 1's two kernels. :func:`run_backward` builds the plan's own with :data:`V3_BACKWARD`; pass the result of
    another gate as its ``launches``."""
    if not isinstance(gate, BackwardGate):
        raise TypeError(f"gate must be a BackwardGate such as plan.V3_BACKWARD, got {type(gate).__name__} {gate!r}.")
    if gate.takes_v3(plan.d, plan.is_causal, plan.n_q, plan.n_k) and plan.backward_configs is None:
        ok, why = v3_backward.backward_supported(q, k, v, plan.is_causal)
        if ok:
            return V3Backward(v3_backward.backward_config(plan.d, plan.is_causal, seq=plan.n_q))
        if (q.device.type == "cuda" and torch.cuda.get_device_capability(q.device)[0] == 9
                and not torch.are_deterministic_algorithms_enabled()):  # fmt: skip
            _say_v3_refused("backward", why, "the two-kernel backward")
    return _two_kernel_launches(plan, q, k, v, o, lse, do)


def _two_kernel_launches(plan: Plan, q, k, v, o, lse, do) -> tuple:
    configs = plan.backward_configs
    if configs == "auto":  # tune each kernel once for this problem (the other at its default)
        tuned = {}
        for kind in ("dkdv", "dq"):

            def run(c, kind=kind):
                return attention_backward(do, q, k, v, o, lse, plan.is_causal, plan.scale, plan.allow_tf32,
                                          {kind: c}, plan.group > 1, plan.window)  # fmt: skip

            tuned[kind] = autotuned_config(kind, plan.d, plan.dtype, plan.is_causal, plan.n_q, plan.n_k, run)
        configs = tuned
    configs = configs if isinstance(configs, dict) else {}
    cfg_kv = configs.get("dkdv") or attention_config("dkdv", plan.d, plan.dtype, plan.n_q, plan.n_k)
    cfg_q = configs.get("dq") or attention_config("dq", plan.d, plan.dtype, plan.n_q, plan.n_k)
    return v1_backward.backward_launches(plan, cfg_kv, cfg_q)


def run_backward(plan: Plan, do, q, k, v, o, lse, launches=None):
    """``(dQ, dK, dV)`` for inputs whose signature ``plan`` was made for (checked by :func:`backward_plan`, or the
    forward's plan with ``o``, ``lse`` its own outputs and ``do`` shaped and typed like ``o``).

    ``launches``: None for the plan's own choice (built on first use, kept in ``plan.backward``), or another backward
    for this call only: :func:`two_kernel_backward`'s, or an experiment's (:mod:`gpulab.attention.experiments`: an
    object with ``run(plan, do, q, k, v, o, lse, dq, dk, dv)``, ``kind`` and ``atomic``), so a cached plan is never
    changed by an experiment."""
    if plan.empty:  # no queries or no keys: O does not depend on q, k, v (it is empty or 0), so every gradient is 0
        return tuple(check.new_output(t.shape, dtype=t.dtype, device=t.device).zero_() for t in (q, k, v))
    if not plan.contiguous:
        q, k, v, o, lse = q.contiguous(), k.contiguous(), v.contiguous(), o.contiguous(), lse.contiguous()
    do = do.contiguous()
    if launches is None:
        launches = plan.backward
        if launches is None:
            launches = plan.backward = backward_launches(plan, q, k, v, o, lse, do)
    if launches.__class__ is not tuple:  # version 3's, or an experiment's
        atomic = launches.__class__ is V3Backward or launches.atomic
        if atomic and torch.are_deterministic_algorithms_enabled():
            launches = _two_kernel_launches(plan, q, k, v, o, lse, do)  # the atomic dQ sums in no fixed order
        elif launches.__class__ is V3Backward:  # allocates its own gradients
            return v3_backward.attention_backward(do, q, k, v, o, lse, plan.is_causal, plan.scale, launches.cfg,
                                                  plan.window)  # fmt: skip
    dq, dk, dv = (check.new_output(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    if launches.__class__ is not tuple:  # an experiment's
        return launches.run(plan, do, q, k, v, o, lse, dq, dk, dv)
    dq_launch, dkdv_launch = launches
    aligned = not ((q.data_ptr() | k.data_ptr() | v.data_ptr() | o.data_ptr() | do.data_ptr() | lse.data_ptr()) & 15)
    stream = direct_stream(plan.device) if aligned else None
    delta = check.new_output(plan.lse_shape, dtype=torch.float32, device=plan.device)
    n_q, n_k, qk_scale, scale = plan.n_q, plan.n_k, plan.qk_scale, plan.scale
    extra = (q, q, n_q, n_k, plan.h, plan.group, qk_scale, scale, *plan.bounds)  # no offsets: q stands in, unread
    dq_launch(stream, q, k, v, o, do, lse, delta, dq, *extra)  # writes D = rowsum(dO * O)
    dkdv_launch(stream, q, k, v, do, lse, delta, dk, dv, *extra)  # reads D: runs second
    return dq, dk, dv


def attention_backward(
    do,
    q,
    k,
    v,
    o,
    lse,
    is_causal: bool = False,
    scale: float | None = None,
    allow_tf32: bool = False,
    configs=None,
    enable_gqa: bool = False,
    window_size=(-1, -1),
):
    """dQ, dK, dV from the inputs, the output O, its gradient dO and the saved LSE (fp32 [B, H, Nq]).

    ``configs`` optionally maps 'dkdv' and 'dq' to :class:`AttentionConfig` s, or is ``"auto"`` to autotune both
    on a GPU (:func:`gpulab.attention.configs.autotune`). Uses O(N d) memory beyond the
    gradients themselves: the fp32 ``D = rowsum(dO * O)``. The checks and tile choices run once per input
    signature (:func:`gpulab.attention.plan.backward_plan`).
    """
    plan = backward_plan(do, q, k, v, o, lse, is_causal, scale, allow_tf32, configs, enable_gqa, window_size)
    return run_backward(plan, do, q, k, v, o, lse)


def backward_kind(plan: Plan) -> str | None:
    """Which backward ``plan`` holds (built by its first backward call): :func:`launch_kind` of it; None before any
    ran."""
    return None if plan.backward is None else launch_kind(plan.backward)


def launch_kind(launches) -> str:
    """``'one pass, Gluon'`` (version 3's backward), ``'two kernels'`` (version 1's) or an experiment's ``kind``."""
    if launches.__class__ is V3Backward:
        return "one pass, Gluon"
    return "two kernels" if launches.__class__ is tuple else launches.kind


def two_kernel_backward(plan: Plan) -> tuple:
    """Version 1's two backward kernels for ``plan`` at its default tiles (or the tiles its backward configs name;
    not ``"auto"``): launches to pass as :func:`run_backward`'s ``launches``, e.g. to time them where the plan would
    take version 3's."""
    if isinstance(plan.backward_configs, str):
        raise ValueError("two_kernel_backward takes a plan without 'auto' backward configs; autotuning needs inputs.")
    return _two_kernel_launches(plan, None, None, None, None, None, None)


def varlen_takes_v3(vplan, q, k, v, gate: BackwardGate = V3_BACKWARD) -> bool:
    """Whether a packed batch's backward (:class:`gpulab.attention.varlen.VarlenPlan`) takes version 3's
    (:mod:`gpulab.attention.v3.backward_varlen`): where ``gate`` takes the padded problem of its longest lengths and
    version 3 can run it (else version 1's two launches)."""
    if not isinstance(gate, BackwardGate):
        raise TypeError(f"gate must be a BackwardGate such as plan.V3_BACKWARD, got {type(gate).__name__} {gate!r}.")
    return (
        gate.takes_v3(vplan.d, False, vplan.n_q, vplan.n_k) and v3_backward_varlen.varlen_backward_supported(q, k, v)[0]
    )


varlen_backward_v3 = v3_backward_varlen.attention_backward_varlen
"""Version 3's packed backward, for :mod:`gpulab.attention.varlen` (which imports no version but 1 itself)."""
