"""Lesson 4, part 2: version 2 of the attention forward, for Hopper (sm_90): TMA descriptors and warp specialization.

What you will learn: what a Hopper GPU changes about the same algorithm. Version 1
(``v1/forward.py``) is FlashAttention-2 in portable Triton: every program computes its own addresses,
loads K/V tiles with ordinary loads, and the same warps that wait for memory also multiply and exponentiate. On an
H100 three pieces of hardware take work off those warps:

- **TMA (the tensor memory accelerator).** A *tensor descriptor* (``tl.make_tensor_descriptor``: base, shape,
  strides, block shape) lets one instruction copy a whole ``[BLOCK_N, D]`` tile from global to shared memory. The
  copy engine computes the addresses and zero-fills rows and columns outside the tensor's shape, so ragged
  sequence ends and head dims below the tile need no load masks at all (``Nk`` not a multiple of ``BLOCK_N``:
  the extra K rows read as 0 and their scores are masked to ``-inf`` as in version 1; the extra V rows are 0).
- **wgmma.** A warpgroup (4 warps) multiplies a ``[64, K]`` tile from registers or shared memory by a shared-memory
  tile asynchronously; Triton emits it for ``tl.dot`` on sm_90 when the operands are laid out for it (descriptor
  loads land there).
- **Warp specialization.** ``tl.range(..., warp_specialize=True)`` splits the loop's warps into a *producer* that
  only issues TMA copies for the next K/V tiles and *consumers* that only compute: the loads of step j+1 run while
  the consumers do step j's products and softmax. With ``BLOCK_M = 128`` and ``num_warps = 4`` Triton 3.6 builds
  one producer warp group and two consumer warpgroups of 64 query rows each (12 warps in all); with
  ``num_warps = 8`` it silently keeps the plain software pipeline. :func:`sm90_ttgir` compiles the kernel for sm_90
  on any machine, so a test checks that the warp-specialized form is what ships.

The math is version 1's, line for line: scores in base 2 (``S2 = Q K^T * scale * log2 e``), the online-softmax
update ``m' = max(m, rowmax S2)``, ``acc = acc * 2^(m - m') + 2^(S2 - m') V``, ``l = l * 2^(m - m') + rowsum``, masks
only on the key blocks that need them (the diagonal of a causal problem, the ragged last block), ``O = acc / l`` and
``LSE = (m + log2 l) ln 2`` saved for the backward (version 1's backward takes them unchanged). One difference: no
``-inf`` guard on the running max. Every row sees key 0 in the first key block it processes (causal top-left: key
0 is visible to every query; rows past ``Nq`` are padding that sees key 0 as well), so the max is finite from the
first block on and ``2^(m - m')`` never meets ``-inf - (-inf)``.

**Schedule.** One program per (Q block, batch*head), longest causal blocks first (as version 1), or, with
``persistent=True``, one program per SM looping over the tiles in that order. Which one is faster is measured, not
assumed: ``python -m gpulab bench 05 hopper`` times both.

**Where it runs.** :func:`supports` says when version 2 applies: fp16/bf16, head dims that are multiples of 8 (a
TMA row must be a multiple of 16 bytes) up to 128, and (automatically) a GPU of compute capability 9.x and a problem
past :data:`SMALL_WORK` (smaller calls are host-bound, and version 1's host path is shorter). Inputs that are not
16-byte aligned are copied first (TMA reads aligned addresses only).
:func:`gpulab.attention.attention_forward` takes ``version=2`` explicitly too, also in the interpreter, which runs
descriptors and ``warp_specialize`` loops as plain loads and loops, so the CPU tests check version 2's math.
"""

from __future__ import annotations

import dataclasses
import os

import torch
import triton
import triton.language as tl

from gpulab import runtime, triton_ops
from gpulab.attention.configs import HopperConfig, hopper_config
from gpulab.attention.sm90 import compile_for_sm90, sm_count, ttgir_in_fresh_process
from gpulab.launch import Launch

__all__ = [
    "supports",
    "attention_forward_v2_kernel",
    "forward_v2_launch",
    "WS_BROKEN_ON_SM90",
    "WS_RACE_FREE_TRITON",
    "sm90_compile",
    "sm90_ttgir",
]


WS_RACE_FREE_TRITON: tuple[str, ...] = ()
"""Triton versions (major.minor) on which version 2's warp-specialized loop passed its race check on the GPU (the
sweep of ``bench 05 hopper``, ``kind='sweep'``: every run equal to the reference). None yet: on Triton 3.6 it failed."""

WS_BROKEN_ON_SM90 = ".".join(triton.__version__.split(".")[:2]) not in WS_RACE_FREE_TRITON
"""True unless this Triton is in :data:`WS_RACE_FREE_TRITON`. Triton 3.6 compiles version 2's loop warp-specialized
for sm_90 (one producer warp group, two consumer warpgroups), but its results were wrong on the H100: most
warp-specialized runs failed their check against the reference, by amounts that changed from run to run, so a race
(the same code is exact in the interpreter and with the plain pipeline); a version not measured is not assumed
fixed. So a launch with ``warp_specialize=True`` on a compute-capability-9 GPU is refused unless
``GPULAB_ALLOW_WARP_SPECIALIZE=1`` (to measure it on this Triton)."""


def supports(dtype: torch.dtype, head_dim: int) -> str | None:
    """None when version 2 can run ``dtype`` inputs of ``head_dim``, else the reason it cannot (for error messages)."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype such as torch.bfloat16, got {type(dtype).__name__} {dtype!r}.")
    head_dim = runtime.integer("head_dim", head_dim, minimum=1)
    if dtype not in (torch.float16, torch.bfloat16):
        return f"version 2 takes float16 or bfloat16 inputs, got {dtype} (use version 1 for float32)"
    if head_dim % 8 or not 8 <= head_dim <= 128:
        return (f"version 2 takes head dims that are multiples of 8 from 8 to 128 (a TMA row is a multiple of 16 "
                f"bytes), got {head_dim} (use version 1)")  # fmt: skip
    return None


@triton.jit
def _update(acc, l_i, m_i, s, v_desc, start_n, qk_scale, SCALED: tl.constexpr):
    """One key block's online-softmax step: ``s`` [BLOCK_M, BLOCK_N] fp32 scores, raw (SCALED False) or already scaled
    and masked with ``-inf`` (SCALED True); V's block at ``start_n`` comes through TMA. Returns (acc, l, m)."""
    if SCALED:
        m_new = tl.maximum(m_i, tl.max(s, 1))
        s = s - m_new[:, None]
    else:  # scale >= 0 (plan.check_version), so max(S) * scale = max(S * scale): one FMA per score below
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        s = s * qk_scale - m_new[:, None]
    p = tl.exp2(s)  # [BLOCK_M, BLOCK_N]
    alpha = tl.exp2(m_i - m_new)  # [BLOCK_M]: how much the old max overestimated; 0 on the first block
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    v = v_desc.load([start_n, 0])  # [BLOCK_N, BLOCK_D]; rows >= Nk read as 0
    acc = tl.dot(p.to(v.dtype), v, acc)  # P in the operands' dtype, accumulated in fp32
    return acc, l_i, m_new


@triton.jit
def _v2_keys(
    acc, l_i, m_i, q, k_desc, v_desc, lo, hi, last, qk_scale, offs_n,
    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
):  # fmt: skip
    """Key blocks [lo, hi) of one Q block: update (acc [BLOCK_M, BLOCK_D], l [BLOCK_M], m [BLOCK_M]).

    MASKED: row r sees key column j only where ``j <= last[r]`` (``last = min(query, Nk - 1)`` for causal,
    ``Nk - 1`` otherwise): one compare and select per score covers both the causal and the bounds mask."""
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = k_desc.load([start_n, 0])  # [BLOCK_N, BLOCK_D] through TMA; rows >= Nk and columns >= D read as 0
        s = tl.dot(q, k.T)  # [BLOCK_M, BLOCK_N] fp32, not yet scaled
        if MASKED:
            s = tl.where((start_n + offs_n)[None, :] <= last[:, None], s * qk_scale, float("-inf"))
        acc, l_i, m_i = _update(acc, l_i, m_i, s, v_desc, start_n, qk_scale, MASKED)
    return acc, l_i, m_i


@triton.jit
def _v2_keys_overlap(acc, l_i, m_i, q, k_desc, v_desc, lo, hi, qk_scale, BLOCK_N: tl.constexpr):
    """Unmasked key blocks [lo, hi) (hi > lo, a whole number of blocks), one block ahead: block j+1's scores are
    issued (an asynchronous wgmma) before block j's softmax, so the tensor cores could work while the exponentials
    run: FlashAttention-3's overlap inside one warpgroup, written as a software pipeline by hand.

    It does not pay on Triton 3.6: the compiled TTGIR waits for the scores' wgmma right after issuing it
    (``warp_group_dot_wait {pendings = 0}`` before the softmax; only a product whose result feeds the next
    iteration's accumulator, here P V, stays in flight across iterations), so nothing overlaps and the extra live
    tile costs registers: slower than the plain loop, each at its best tiles, on every probed problem
    (``benchmarks/05_attention_hopper/hopper/sweep/``, the ``overlap`` run). Kept as an option
    (``HopperConfig(overlap=True)``) because it is the lesson's evidence."""
    s = tl.dot(q, k_desc.load([lo, 0]).T)  # block lo's scores
    for start_n in range(lo, hi - BLOCK_N, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        s_next = tl.dot(q, k_desc.load([start_n + BLOCK_N, 0]).T)  # issued first, needed next iteration
        acc, l_i, m_i = _update(acc, l_i, m_i, s, v_desc, start_n, qk_scale, False)
        s = s_next
    return _update(acc, l_i, m_i, s, v_desc, hi - BLOCK_N, qk_scale, False)


@triton.jit
def _v2_tile(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, bh, pid_m, n_q, n_k, qk_scale, group,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    IS_CAUSAL: tl.constexpr, NEEDS_MASK: tl.constexpr, WARP_SPECIALIZE: tl.constexpr, OVERLAP: tl.constexpr,
):  # fmt: skip
    """O and LSE of Q block ``pid_m`` of head ``bh`` (inputs contiguous [B*H, N, HEAD_DIM]; K and V [B*Hkv, Nk,
    HEAD_DIM], query head ``bh`` reading KV head ``bh // group``)."""
    head = bh.to(tl.int64)
    kv_head = head // group  # grouped-query heads: b*Hq + h reads b*Hkv + h // group, nothing copied
    # One descriptor per tensor and head: its shape is this head's [N, HEAD_DIM], so TMA stops at the head's end.
    q_desc = tl.make_tensor_descriptor(q_ptr + head * n_q * HEAD_DIM, shape=[n_q, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, BLOCK_D])  # fmt: skip
    k_desc = tl.make_tensor_descriptor(k_ptr + kv_head * n_k * HEAD_DIM, shape=[n_k, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, BLOCK_D])  # fmt: skip
    v_desc = tl.make_tensor_descriptor(v_ptr + kv_head * n_k * HEAD_DIM, shape=[n_k, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, BLOCK_D])  # fmt: skip
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = q_desc.load([start_m, 0])  # [BLOCK_M, BLOCK_D], kept for the whole key loop

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # Keys this block needs (causal: those up to its last query), the last one each row sees, and the blocks that
    # need no mask at all (left of the block's first query and inside the sequence).
    hi = n_k
    full = (n_k // BLOCK_N) * BLOCK_N
    if IS_CAUSAL:
        hi = tl.minimum(n_k, start_m + BLOCK_M)
        full = tl.minimum(full, ((start_m + 1) // BLOCK_N) * BLOCK_N)
        last = tl.minimum(offs_m, n_k - 1)
    else:
        last = tl.full([BLOCK_M], n_k - 1, tl.int32)
    if WARP_SPECIALIZE:  # Triton 3.6 specializes a kernel's only loop: one loop, masked throughout when any block is
        acc, l_i, m_i = _v2_keys(acc, l_i, m_i, q, k_desc, v_desc, 0, hi, last, qk_scale, offs_n,
                                 BLOCK_N, NEEDS_MASK, True)  # fmt: skip
    elif OVERLAP:  # unmasked blocks one ahead (scores of the next under this one's softmax), then the masked few
        if full > 0:
            acc, l_i, m_i = _v2_keys_overlap(acc, l_i, m_i, q, k_desc, v_desc, 0, full, qk_scale, BLOCK_N)
        acc, l_i, m_i = _v2_keys(acc, l_i, m_i, q, k_desc, v_desc, full, hi, last, qk_scale, offs_n,
                                 BLOCK_N, True, False)  # fmt: skip
    else:  # version 1's split: unmasked blocks, then the few that need a mask
        acc, l_i, m_i = _v2_keys(acc, l_i, m_i, q, k_desc, v_desc, 0, full, last, qk_scale, offs_n,
                                 BLOCK_N, False, False)  # fmt: skip
        acc, l_i, m_i = _v2_keys(acc, l_i, m_i, q, k_desc, v_desc, full, hi, last, qk_scale, offs_n,
                                 BLOCK_N, True, False)  # fmt: skip

    o = acc / l_i[:, None]
    lse = (m_i + tl.log2(l_i)) * triton_ops.LN2  # base 2 back to natural log
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < n_q
    o_ptrs = o_ptr + head * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & (offs_d < HEAD_DIM)[None, :])
    tl.store(lse_ptr + head * n_q + offs_m, lse, mask=row_ok)


@triton.jit
def attention_forward_v2_kernel(
    q_ptr,  # [B*H, Nq, HEAD_DIM] queries, contiguous
    k_ptr,  # [B*H, Nk, HEAD_DIM] keys
    v_ptr,  # [B*H, Nk, HEAD_DIM] values
    o_ptr,  # [B*H, Nq, HEAD_DIM] output O
    lse_ptr,  # [B*H, Nq] fp32 log-sum-exp of each score row (natural log)
    n_q,  # Nq: query rows per head
    n_k,  # Nk: key rows per head
    n_bh,  # B*H: heads in the batch
    qk_scale,  # scale * log2(e): the scores in base 2
    group,  # Hq // Hkv: query heads per KV head (1 without grouped-query heads)
    HEAD_DIM: tl.constexpr,  # D
    BLOCK_M: tl.constexpr,  # query rows per tile
    BLOCK_N: tl.constexpr,  # key rows per tile
    BLOCK_D: tl.constexpr,  # D padded to a power of two >= 16 (the tl.dot tile)
    IS_CAUSAL: tl.constexpr,  # SDPA's top-left causal mask
    NEEDS_MASK: tl.constexpr,  # causal, or Nk not a multiple of BLOCK_N: some key blocks need a mask
    WARP_SPECIALIZE: tl.constexpr,  # producer/consumer warps for the key loop
    OVERLAP: tl.constexpr,  # next block's scores issued before this softmax
    PERSISTENT: tl.constexpr,  # one program per SM looping over the tiles
):
    """Version 2 forward: O [B*H, Nq, HEAD_DIM] and LSE [B*H, Nq] (natural log). Grid: (Q blocks, B*H), or
    (programs,) with PERSISTENT, each program taking tiles ``pid, pid + programs, ...``."""
    if PERSISTENT:
        n_m = tl.cdiv(n_q, BLOCK_M)
        for tile in range(tl.program_id(0), n_m * n_bh, tl.num_programs(0)):
            if IS_CAUSAL:  # all heads' longest Q blocks first: the last tiles are the shortest
                pid_m = n_m - 1 - tile // n_bh
                bh = tile % n_bh
            else:  # Q blocks of one head are neighbours: programs running at once share its K/V in L2
                pid_m = tile % n_m
                bh = tile // n_m
            _v2_tile(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, bh, pid_m, n_q, n_k, qk_scale, group,
                     HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D, IS_CAUSAL, NEEDS_MASK, WARP_SPECIALIZE, OVERLAP)  # fmt: skip
    else:
        pid_m = tl.program_id(0)
        if IS_CAUSAL:  # the longest programs (last Q blocks, most keys) first
            pid_m = tl.num_programs(0) - 1 - pid_m
        _v2_tile(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, tl.program_id(1), pid_m, n_q, n_k, qk_scale, group,
                 HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_D, IS_CAUSAL, NEEDS_MASK, WARP_SPECIALIZE, OVERLAP)  # fmt: skip


def _constexprs(head_dim: int, is_causal: bool, n_k: int, cfg: HopperConfig) -> dict:
    return dict(HEAD_DIM=head_dim, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_D=runtime.dot_block(head_dim),
                IS_CAUSAL=is_causal, NEEDS_MASK=is_causal or n_k % cfg.block_n != 0,
                WARP_SPECIALIZE=cfg.warp_specialize, OVERLAP=cfg.overlap, PERSISTENT=cfg.persistent)  # fmt: skip


def forward_v2_launch(plan, cfg: HopperConfig):
    """The :class:`gpulab.launch.Launch` of :func:`attention_forward_v2_kernel` for ``plan`` with ``cfg``."""
    if (cfg.warp_specialize and WS_BROKEN_ON_SM90 and plan.device.type == "cuda"
            and os.environ.get("GPULAB_ALLOW_WARP_SPECIALIZE") != "1"):  # fmt: skip
        raise ValueError(
            f"warp_specialize=True is not known to give right results on this GPU with Triton {triton.__version__} (a "
            "race measured on the H100 with Triton 3.6; race-free on: "
            f"{', '.join(WS_RACE_FREE_TRITON) or 'no version measured'}; see "
            "gpulab.attention.v2.forward.WS_BROKEN_ON_SM90); use HopperConfig(warp_specialize=False), or set "
            "GPULAB_ALLOW_WARP_SPECIALIZE=1 to run it anyway for a measurement."
        )
    n_m = -(-plan.n_q // cfg.block_m)
    if cfg.persistent:
        sms = sm_count(plan.device.index) if plan.device.type == "cuda" else 4
        grid = (min(sms, n_m * plan.b * plan.h),)
    else:
        grid = (n_m, plan.b * plan.h)
    constexprs = _constexprs(plan.d, plan.is_causal, plan.n_k, cfg)
    constexprs.update(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return Launch(attention_forward_v2_kernel, grid, constexprs)


def sm90_compile(head_dim: int = 128, is_causal: bool = False, cfg: HopperConfig | None = None, dtype: str = "bf16"):
    """Compile version 2 for sm_90 (no GPU needed, nothing launched) and return Triton's compiled kernel, whose
    ``asm`` holds 'ttgir', 'ptx' and 'cubin'. Needs compiled mode: use :func:`sm90_ttgir` from an interpreter
    process (it compiles in a fresh one)."""
    cfg = cfg or hopper_config(head_dim, is_causal)
    runtime.one_of("dtype", dtype, ("bf16", "fp16"))
    ptr = f"*{dtype}"
    signature = {"q_ptr": ptr, "k_ptr": ptr, "v_ptr": ptr, "o_ptr": ptr, "lse_ptr": "*fp32",
                 "n_q": "i32", "n_k": "i32", "n_bh": "i32", "qk_scale": "fp32", "group": "i32"}  # fmt: skip
    constexprs = _constexprs(head_dim, is_causal, 1 if is_causal else cfg.block_n, cfg)
    return compile_for_sm90(attention_forward_v2_kernel, signature, constexprs, 5, cfg)


_BOOTSTRAP = (
    "import sys, json, torch; torch.cuda.is_available = lambda: True; "
    "from gpulab.attention.configs import HopperConfig; from gpulab.attention.v2 import forward as v2; "
    "a = json.loads(sys.argv[1]); k = v2.sm90_compile(a['d'], a['causal'], HopperConfig(**a['cfg']), a['dtype']); "
    "sys.stdout.write(k.asm['ttgir'])"
)


def sm90_ttgir(head_dim: int = 128, is_causal: bool = False, cfg: HopperConfig | None = None,
               dtype: str = "bf16", timeout: float = 600) -> str:  # fmt: skip
    """The TTGIR (Triton's GPU-level IR) of version 2 compiled for sm_90, from a fresh Python process that compiles
    without a GPU. A warp-specialized loop shows as a ``ttg.warp_specialize`` op with its partitions."""
    import json  # noqa: PLC0415

    cfg = cfg or hopper_config(head_dim, is_causal)
    if not isinstance(cfg, HopperConfig):
        raise TypeError(f"cfg must be a HopperConfig or None, got {type(cfg).__name__}.")
    arg = json.dumps({"d": runtime.integer("head_dim", head_dim, minimum=1), "causal": bool(is_causal),
                      "cfg": dataclasses.asdict(cfg), "dtype": dtype})  # fmt: skip
    return ttgir_in_fresh_process(_BOOTSTRAP, arg, "version 2", timeout)
