"""Version 3 compiled for sm_90 without a GPU: the structure of what the hardware runs, read from PTX and ptxas -v.

One fresh process compiles the three kernels below (Gluon compiles only outside the interpreter)."""

import dataclasses
import functools

import pytest

from gpulab import gluon_compat
from gpulab.attention.measure import v3_compile_check as compile_check
from gpulab.attention.v3 import forward, varlen_forward

_PROBLEM = compile_check.gluon_api_problem()
pytestmark = pytest.mark.skipif(_PROBLEM is not None, reason=str(_PROBLEM))

SMEM_LIMIT = 227 * 1024  # the H100's largest shared-memory allocation per block
CASES = {  # name: (head dim, causal, step of the ladder or None for the measured default, query length)
    "d128 step 1": (128, False, 1, None),
    "d128 step 3": (128, False, 3, None),
    "d128 default": (128, False, None, None),
    "d128 causal default": (128, True, None, None),
    "d128 causal short default": (128, True, None, 1024),
    "d64 default": (64, False, None, None),
    "d64 short default": (64, False, None, 1024),
    "d64 causal short default": (64, True, None, 1024),
    "d64 causal default": (64, True, None, None),
    "d256 step 1": (256, False, 1, None),
    "d256 step 3": (256, False, 3, None),
    "d256 default": (256, False, None, None),
    "d256 causal default": (256, True, None, None),
}
Q_REGS = {"d128 q_regs": (128, False)}
"""Measured choices without ``q_regs`` compiled with it (Q read from registers by every score product; the causal
defaults take it already): d=128 non-causal, the headline problem's kernel, compiles without spills with it (the
three-consumer d=64 kernel does not: 160 registers per thread leave no room for Q's 16)."""
"""Every choice of :data:`~gpulab.attention.v3.configs.MEASURED` and ``MEASURED_SHORT`` and the ladder's ends. ``ptxas
-v`` reports no spill bytes for any of them on Triton 3.6 to 3.9 (a change that spills fails; on 3.9 the d=64
non-causal default is :data:`~gpulab.attention.v3.configs.NO_SPILL_BY_TRITON`'s). Two source choices got the
last ones out (``forward._consumer``): block 0's first key is opaque to the compiler (a literal 0 made the block-0
mask tile-invariant, hoisted and spilled, 108 bytes at d=128 non-causal), and the pipelined loop carries P already
rounded to bf16/fp16 (an fp32 P across the back edge spilled 96 bytes of loop state with three consumer warpgroups at
160 registers, d=64, and 4-12 bytes in the d=128 causal kernels)."""

D256_TILES = """Head dim 256, bf16, the sm_90 compile on Triton 3.6 (two consumers at 240 registers, producer 24;
ptxas -v, shared memory as allocated, limit 227 KB = 232448 bytes):

    block_n  stages  q_buffers  q_regs  consumers   shared (B)   spills (B)   key-loop STL/LDL
    64       2       1          no      2           196968       0            0 / 0      <- the configs (steps 1-3)
    64       2       1          yes     2           196968       400          10 / 24
    64       2       2          no      2           262536       0            -          over the limit
    64       3       1          no      2           262568       0            -          over the limit
    128      2       1          no      2           328040       232          12 / 6     over the limit
    64       2       1          no      3 (160)     -            -            -          ptxas: needs 158+ registers

O is [64, 256] fp32 per consumer: 128 registers per thread, S [64, 64] 32 more, P as bf16 16; Q in registers would
add 64. FlashAttention-3 takes 128 x 80 tiles at d=256 (one 128-row Q tile per warpgroup pair); here a warpgroup
owns 64 rows and the key block is a power of two: 64. Windows (spill bytes, all outside the key loop):

    window               step 3 (3.6)   step 2 (3.6)   step 2 (3.7)   step 2 (3.9)   step 1 (3.6-3.9)
    (3, 7)               4              0              -              4              0
    (8, 0), gqa          4              0              -              4              0
    (-1, 0), paired      4              0              4              0              0

so ``window_config`` takes step 1 for every window at d=256.
Not timed yet: ``bench 05 features`` on the H200 decides."""


VARIANTS = {  # name: (head dim, causal, query length, window, grouped-query heads)
    "d128 gqa window (8, 0)": (128, False, None, (8, 0), True),
    "d128 window (-1, 0)": (128, False, None, (-1, 0), False),
    "d128 short window (3, 7)": (128, False, 1024, (3, 7), False),
    "d128 causal gqa": (128, True, None, (-1, -1), True),
    "d64 window (-1, 4)": (64, False, None, (-1, 4), False),
    "d64 gqa window (200, -1)": (64, False, None, (200, -1), True),
    "d64 short gqa window (-1, 0)": (64, False, 1024, (-1, 0), True),
    "d64 gqa": (64, False, None, (-1, -1), True),
    "d256 gqa window (8, 0)": (256, False, None, (8, 0), True),
    "d256 window (-1, 0)": (256, False, None, (-1, 0), False),
    "d256 causal gqa": (256, True, None, (-1, -1), True),
    "d256 window (3, 7)": (256, False, None, (3, 7), False),
    "d256 short gqa window (0, 0)": (256, False, 17, (0, 0), True),
}
"""Grouped-query heads and windows: the kernel's constexpr variants (``GQA``, ``HAS_LEFT``, ``HAS_RIGHT``) with the
tiles :func:`~gpulab.attention.v3.configs.window_config` gives them, held to the plain kernels' structure: the same
wgmma schedule, no spills, no local memory in the key loop. (The plain kernels' PTX is the same as before the
variants existed but for three unused parameters: the window's and the groups' code is all behind the flags.)"""


VARLEN = {  # name: (head dim, longest query length, window, grouped-query heads, persistent)
    "varlen d128": (128, 1024, (-1, -1), False, True),
    "varlen d128 causal gqa": (128, 4096, (-1, 0), True, True),
    "varlen d128 window (3, 7)": (128, 1024, (3, 7), False, True),
    "varlen d64": (64, 1024, (-1, -1), False, True),
    "varlen d64 long gqa": (64, 16384, (-1, -1), True, True),
    "varlen d64 window (200, -1)": (64, 4096, (200, -1), False, True),
    "varlen d128 one tile per program": (128, 4096, (-1, -1), False, False),
    "varlen d128 causal one tile per program": (128, 4096, (-1, 0), False, False),
    "varlen d64 causal one tile per program": (64, 1024, (-1, 0), False, False),
}
"""The packed batch's kernels (``VARLEN``, :mod:`gpulab.attention.v3.varlen_forward`: persistent programs walking
the tiles with two Q buffers, :func:`~gpulab.attention.v3.varlen_forward.varlen_config`'s default, and one tile per
program, ``persistent=False``), held to the same structure: the offsets' loads, the skip of tiles past a sequence's
end, the per-sequence masks and the last tile's masked register store add no spill and no local memory in the key
loop."""


@functools.lru_cache(maxsize=4)
def _structures(group: str) -> dict:
    """The compiled structures of one group of cases (one fresh process per group: each test's time limit covers
    one group's compiles, not all of them)."""
    names = list({"cases": CASES, "q_regs": Q_REGS, "variants": VARIANTS, "varlen": VARLEN}[group])
    configs = []
    for name in names:
        cfg = _config(name)
        if name in VARLEN:
            d, _, window, gqa, _ = VARLEN[name]
            configs.append(dict(d=d, causal=False, step=cfg.step, cfg=dataclasses.asdict(cfg), window=window,
                                gqa=gqa, varlen=True))  # fmt: skip
            continue
        d, causal = (CASES.get(name) or Q_REGS.get(name) or VARIANTS[name])[:2]
        window, gqa = VARIANTS[name][3:] if name in VARIANTS else ((-1, -1), False)
        configs.append(dict(d=d, causal=causal, step=cfg.step, cfg=dataclasses.asdict(cfg), window=window, gqa=gqa))
    return dict(zip(names, compile_check.structures_in_fresh_process(configs)))


def _structure(name) -> dict:
    group = "cases" if name in CASES else "q_regs" if name in Q_REGS else "variants" if name in VARIANTS else "varlen"
    return _structures(group)[name]


def _config(name) -> forward.V3Config:
    if name in VARLEN:
        d, max_q, window, _, persistent = VARLEN[name]
        return varlen_forward.varlen_config(d, window, max_q, persistent)
    if name in Q_REGS:
        d, causal = Q_REGS[name]
        return dataclasses.replace(forward.v3_config(d, causal), q_regs=True)
    if name in VARIANTS:
        d, causal, seq, window, _ = VARIANTS[name]
        return forward.window_config(d, causal, window, seq)
    d, causal, step, seq = CASES[name]
    return forward.v3_config(d, causal, step, seq)


VARLEN_NEWER_TRITON = {"3.9": 24}
"""Spill-store bytes the packed (VARLEN) variants may report per Triton (major.minor) past the ones they were measured
on (3.6, 3.7: none): Triton 3.9's ptxas spills 12-20 bytes in them (loads up to twice that) and reloads one of them
in each key loop (one LDL, no STL there); on 3.6 and 3.7 the key loops hold no local memory."""


@pytest.mark.parametrize("name", [*CASES, *Q_REGS, *VARIANTS, *VARLEN])
def test_structure(name):
    d = (CASES.get(name) or Q_REGS.get(name) or VARIANTS.get(name) or VARLEN[name])[0]
    cfg = _config(name)
    s = _structure(name)
    # wgmma.mma_async per consumer: a Q K^T is D/16 instructions (K = 16 each), a P V is BLOCK_N/16. Step 1 has one
    # of each in its loop; steps 2-3 also a prologue Q K^T and an epilogue P V.
    per_pass = d // 16 + cfg.block_n // 16
    passes = cfg.consumers * (1 if cfg.step == 1 else 2)
    assert s["wgmma"] == passes * per_pass, s
    # P V always takes P from registers; Q K^T reads Q from registers only with q_regs (else from shared memory).
    assert s["wgmma_rs"] == passes * (cfg.block_n // 16 + (d // 16 if cfg.q_regs else 0)), s
    # Step 3 waits for the scores with one product (P V) still in flight; steps 1-2 only ever wait for all.
    assert s["wait_depths"] == ([0, 1] if cfg.step == 3 else [0]), s
    # Register budgets per partition: the consumers' raised, the producer's lowered.
    regs = {(kind, int(n)) for kind, n in s["setmaxnreg"]}
    assert ("dec", cfg.producer_regs) in regs, s["setmaxnreg"]
    assert any(n == cfg.consumer_regs for _, n in regs), s["setmaxnreg"]
    assert s["warps"] == 4 * (cfg.consumers + 1)  # consumer warpgroups + the producer's (one warp, padded)
    # The buffers fit: Q tiles, K and V stages, within the H100's limit.
    buffers = 2 * d * (64 * cfg.consumers * cfg.q_buffers + 2 * cfg.stages * cfg.block_n)
    assert buffers <= s["shared"] <= SMEM_LIMIT, s["shared"]
    spills = VARLEN_NEWER_TRITON.get(gluon_compat.triton_minor(), 0) if name in VARLEN else 0
    assert s["spill_stores"] <= spills and s["spill_loads"] <= 2 * spills, s["ptxas"]
    assert spills or s["stack"] == 0, s["ptxas"]
    loop_loads = 1 if spills else 0  # Triton 3.9's packed variants: one LDL per key loop, never an STL
    assert all(loop[0] == 0 and loop[1] <= loop_loads for loop in s["loop_local"]), s["loop_local"]
    assert s["tma_loads"] >= 3 and s["tma_stores"] >= 1  # Q, K, V copies in; O out through TMA
