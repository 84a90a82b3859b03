"""Version 3 compiled for sm_90 without a GPU: the structure of what the hardware runs, read from PTX and ptxas -v.

One fresh process compiles the three kernels below (Gluon compiles only outside the interpreter)."""

import dataclasses
import functools

import pytest
import triton

from gpulab.attention.v3 import compile_check, forward

_PROBLEM = compile_check.gluon_api_problem()
if _PROBLEM is None and ".".join(triton.__version__.split(".")[:2]) not in forward.TESTED_TRITON:
    _PROBLEM = f"version 3 is written against Triton {', '.join(forward.TESTED_TRITON)}; this is {triton.__version__}"
pytestmark = pytest.mark.skipif(_PROBLEM is not None, reason=str(_PROBLEM))

SMEM_LIMIT = 227 * 1024  # the H100's largest shared-memory allocation per block
CASES = {  # name: (head dim, causal, step override)
    "d128 default": (128, False, None),
    "d128 step 3": (128, False, 3),
    "d64 causal default": (64, True, None),
}


@functools.lru_cache(maxsize=1)
def _structures() -> dict:
    configs = []
    for d, causal, step in CASES.values():
        cfg = forward.v3_config(d, causal, step)
        configs.append(dict(d=d, causal=causal, step=cfg.step, cfg=_fields(cfg)))
    return dict(zip(CASES, compile_check.structures_in_fresh_process(configs)))


def _fields(cfg):
    return dataclasses.asdict(cfg)


@pytest.mark.parametrize("name", list(CASES))
def test_structure(name):
    d, causal, step = CASES[name]
    cfg = forward.v3_config(d, causal, step)
    s = _structures()[name]
    # wgmma.mma_async per consumer: a Q K^T is D/16 instructions (K = 16 each), a P V is BLOCK_N/16. Step 1 has one
    # of each in its loop; steps 2-3 also a prologue Q K^T and an epilogue P V.
    per_pass = d // 16 + cfg.block_n // 16
    assert s["wgmma"] == cfg.consumers * per_pass * (1 if cfg.step == 1 else 2), s
    # Step 3 waits for the scores with one product (P V) still in flight; steps 1-2 only ever wait for all.
    assert s["wait_depths"] == ([0, 1] if cfg.step == 3 else [0]), s
    # Register budgets per partition: the consumers' raised, the producer's lowered.
    regs = {(kind, int(n)) for kind, n in s["setmaxnreg"]}
    assert ("dec", cfg.producer_regs) in regs, s["setmaxnreg"]
    assert any(n == cfg.consumer_regs for _, n in regs), s["setmaxnreg"]
    assert s["warps"] == 4 * (cfg.consumers + 1)  # consumer warpgroups + the producer's (one warp, padded)
    # The buffers fit: Q tiles, K and V stages, within the H100's limit.
    buffers = 2 * d * (64 * cfg.consumers + 2 * cfg.stages * cfg.block_n)
    assert buffers <= s["shared"] <= SMEM_LIMIT, s["shared"]
    assert s["spill_stores"] == 0 and s["spill_loads"] == 0, s["ptxas"]
    assert s["tma_loads"] >= 3 and s["tma_stores"] >= 1  # Q, K, V copies in; O out through TMA
