"""Version 3's packed (variable-length) backward (``GQA_WIN`` bit 8, v3/backward_varlen.py) compiled for sm_90
without a GPU: the defaults' products, waits, register budgets, shared memory and dQ atomics unchanged by it, its
spills within the plain kernel's bounds (one fresh process compiles the kernels below)."""

import dataclasses
import functools

import pytest

from gpulab import gluon_compat
from gpulab.attention.measure import v3_compile_check as compile_check
from gpulab.attention.v3 import backward, backward_configs

_PROBLEM = compile_check.gluon_api_problem()
pytestmark = pytest.mark.skipif(_PROBLEM is not None, reason=str(_PROBLEM))

VARLEN = {  # name: (head dim, GQA_WIN)
    "d128 plain": (128, 0),
    "d128 varlen": (128, 8),
    "d128 varlen grouped window": (128, 15),
    "d64 plain": (64, 0),
    "d64 varlen grouped": (64, 9),
    "d64 varlen window right": (64, 12),
}
SPILL_BOUND = 64
"""Spill-store bytes allowed (the plain step 5+11 defaults' bound; Triton 3.6: 16-40 at d128, 4 at d64)."""
LOOP_LOCAL_BOUND = 2
"""Local-memory instructions allowed in the block loops (Triton 3.6: 1 at d128 grouped with a window, else 0)."""


@functools.lru_cache(maxsize=1)
def _structures() -> dict:
    configs = [dict(d=d, causal=False, cfg=dataclasses.asdict(backward.backward_config(d, False)), gqa_win=flags)
               for d, flags in VARLEN.values()]  # fmt: skip
    return dict(zip(VARLEN, compile_check.backward_structures_in_fresh_process(configs)))


@pytest.mark.parametrize("name", [n for n in VARLEN if "varlen" in n])
def test_varlen_variants_keep_the_plain_structure(name):
    d, _ = VARLEN[name]
    s, p = _structures()[name], _structures()[f"d{d} plain"]
    for key in ("wgmma", "wgmma_rs", "wait_depths", "setmaxnreg", "warps", "tma_loads", "atomic_adds"):
        assert s[key] == p[key], (key, s[key], p[key])
    assert abs(s["shared"] - p["shared"]) <= 1024, (s["shared"], p["shared"])
    assert len(s["loop_local"]) == 2, s["loop_local"]
    if gluon_compat.triton_minor() != "3.6":  # spills pinned on the Triton the GPU measured
        return
    assert s["spill_stores"] <= SPILL_BOUND, s
    assert sum(st + ld for st, ld in s["loop_local"]) <= LOOP_LOCAL_BOUND, s["loop_local"]


def test_varlen_runs_in_the_writer_step_only():
    cfg = backward.backward_config(128, False)
    assert (
        backward_configs.constexprs(128, False, cfg, backward_configs.gqa_win(2, (3, -1), varlen=True))["GQA_WIN"] == 11
    )
    for bad in (backward_configs.V3BackwardConfig(step=3), backward_configs.V3BackwardConfig(step=7),
                backward_configs.V3BackwardConfig(step=5, dq_cast=True)):  # fmt: skip
        with pytest.raises(ValueError, match="variable-length"):
            backward_configs.constexprs(128, False, bad, 8)
