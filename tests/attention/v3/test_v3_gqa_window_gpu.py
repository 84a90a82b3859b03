"""Version 3's forward with grouped-query heads and sliding windows on a Hopper GPU (``pytest -m gpu``): against the
float64 reference, with the plan checked to have chosen version 3, rows that see no key exactly 0, the backward
(version 1's two kernels) fed by version 3's LSE, and a race test. Skipped without CUDA (tests/conftest.py) and where
:func:`gpulab.attention.v3.forward.supported` says no (not sm_90, or an untested Triton)."""

import pytest
import torch

from gpulab import attention as A
from gpulab import check
from gpulab.attention import plan
from gpulab.attention.v3 import forward as v3

pytestmark = pytest.mark.gpu


def _inputs(b, hq, hkv, n_q, n_k, d, dtype, window=(-1, -1), causal=False, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, hq, n_q, d, device="cuda", dtype=dtype, generator=gen)
    k, v = (torch.randn(b, hkv, n_k, d, device="cuda", dtype=dtype, generator=gen) for _ in "kv")
    ok, why = v3.supported(q, k, v, causal, enable_gqa=hq != hkv, window_size=window)
    if not ok:
        pytest.skip(why)
    return q, k, v


def _check(o, lse, q, k, v, causal, window, dtype, ctx):
    gqa = q.shape[1] != k.shape[1]
    ref_o = A.attention_reference(q, k, v, causal, enable_gqa=gqa, window_size=window)
    ref_lse = A.logsumexp_reference(q, k, causal, enable_gqa=gqa, window_size=window).to(q.device)
    assert o.shape == q.shape and lse.shape == q.shape[:3] and lse.dtype == torch.float32
    assert torch.isfinite(o).all() and torch.isfinite(lse).all(), f"{ctx}: NaN or inf (an unwritten row?)"
    err_o, err_lse = check.relative_error(o, ref_o), check.relative_error(lse, ref_lse)
    assert err_o <= check.tolerance(dtype), f"{ctx}: o relative error {err_o:.3g}"
    assert err_lse <= 1e-3, f"{ctx}: lse relative error {err_lse:.3g}"
    seen = A.visible_mask(q.shape[2], k.shape[2], causal, window, q.device).any(1)
    assert (o[:, :, ~seen] == 0).all() and (lse[:, :, ~seen] == 0).all(), f"{ctx}: a row that sees no key"


# (B, Hq, Hkv, Nq, Nk, causal, window)
PROBLEMS = [
    (2, 8, 2, 1024, 1024, False, (-1, -1)),  # GQA, group 4
    (1, 8, 1, 1024, 1024, True, (-1, -1)),  # MQA, causal
    (2, 4, 2, 4096, 4096, True, (-1, -1)),  # GQA causal, N 4k
    (1, 4, 4, 4096, 4096, False, (256, 0)),  # a causal window of 256
    (1, 8, 2, 4096, 4096, False, (1000, 1000)),  # GQA, a two-sided window
    (1, 4, 2, 1000, 1000, False, (-1, 0)),  # bottom-right causal, odd N
    (2, 4, 4, 1, 1, False, (0, 0)),  # one token
    (1, 4, 2, 17, 17, False, (5, 0)),
    (1, 2, 1, 100, 100, False, (3, 7)),
    (1, 4, 2, 300, 517, False, (-1, 4)),  # Nq < Nk
    (1, 4, 1, 777, 129, False, (0, 0)),  # Nq > Nk: whole tiles see no key
    (1, 4, 2, 4097, 4097, False, (129, 63)),
]


IDS = [f"{c[1]}x{c[2]}-{c[3]}x{c[4]}-{'causal' if c[5] else c[6]}" for c in PROBLEMS]


@pytest.mark.parametrize("case", PROBLEMS, ids=IDS)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_v3_with_gqa_and_windows_matches_float64(dtype, d, case):
    b, hq, hkv, n_q, n_k, causal, window = case
    q, k, v = _inputs(b, hq, hkv, n_q, n_k, d, dtype, window, causal, seed=n_q + hq)
    gqa = hq != hkv
    o, lse = v3.attention_forward(q, k, v, causal, enable_gqa=gqa, window_size=window)  # version 3 directly
    _check(o, lse, q, k, v, causal, window, dtype, f"direct {case}")
    p = plan.forward_plan(q, k, v, causal, enable_gqa=gqa, window_size=window, version=3)
    assert p.version == 3
    o3, lse3 = A.attention_forward(q, k, v, causal, enable_gqa=gqa, window_size=window, version=3)
    assert torch.equal(o3, o) and torch.equal(lse3, lse)  # the plan's launch is the same kernel


@pytest.mark.parametrize("d", [64, 128])
def test_automatic_choice_takes_version_3_for_gqa_and_windows(d):
    """``version=None`` on problems whose plain form takes version 3 (large enough, bf16, d 64/128) takes it with
    grouped heads and with windows too, and the result is version 3's."""
    for hkv, window in ((2, (-1, -1)), (8, (512, 0)), (2, (-1, 0))):
        q, k, v = _inputs(2, 8, hkv, 4096, 4096, d, torch.bfloat16, window)
        gqa = hkv != 8
        p = plan.forward_plan(q, k, v, enable_gqa=gqa, window_size=window)
        assert p.version == 3, (hkv, window, p.version)
        o, lse = A.attention_forward(q, k, v, enable_gqa=gqa, window_size=window)
        _check(o, lse, q, k, v, False, window, torch.bfloat16, f"auto {hkv} {window}")


@pytest.mark.parametrize("window", [(-1, -1), (100, 0), (3, 7)])
def test_backward_reads_version_3s_lse(window):
    """flash_attention's forward on version 3 (grouped heads, a window), its backward on version 1's two kernels
    reading version 3's LSE: every gradient against the float64 reference."""
    q, k, v = _inputs(2, 8, 2, 2047, 2047, 128, torch.bfloat16, window, seed=5)  # above plan.SMALL_WORK
    assert plan.forward_plan(q, k, v, enable_gqa=True, window_size=window).version == 3
    do = torch.randn_like(q)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = A.flash_attention(qg, kg, vg, enable_gqa=True, window_size=window)
    o.backward(do)
    refs = A.attention_reference(q, k, v, do=do, enable_gqa=True, window_size=window)
    for name, out, ref in zip(("O", "dQ", "dK", "dV"), (o.detach(), qg.grad, kg.grad, vg.grad), refs):
        err = check.relative_error(out, ref)
        assert err <= 2 * check.tolerance(torch.bfloat16), f"{name} {window}: relative error {err:.3g}"


@pytest.mark.parametrize("window, hkv", [((-1, -1), 2), ((128, 0), 4), ((-1, 0), 4), ((3, 7), 1)])
@pytest.mark.parametrize("d", [64, 128])
def test_v3_gqa_window_race_free(d, window, hkv):
    q, k, v = _inputs(4, 8, hkv, 2000, 2000, d, torch.bfloat16, window, seed=7)  # more tiles than SMs
    gqa = hkv != 8
    o0, lse0 = v3.attention_forward(q, k, v, enable_gqa=gqa, window_size=window)
    differing = sum(
        not (torch.equal(o, o0) and torch.equal(lse, lse0))
        for o, lse in (v3.attention_forward(q, k, v, enable_gqa=gqa, window_size=window) for _ in range(100))
    )
    assert differing == 0, f"{differing}/100 runs differ from the first: a race"


def test_window_launch_through_the_raw_launcher_equals_tritons():
    q, k, v = _inputs(2, 8, 2, 1000, 1000, 128, torch.bfloat16, (64, 0), seed=3)
    o_ref, lse_ref = v3.attention_forward(q, k, v, enable_gqa=True, window_size=(64, 0), raw_launch=False)
    for _ in range(3):
        o, lse = v3.attention_forward(q, k, v, enable_gqa=True, window_size=(64, 0))
        assert torch.equal(o, o_ref) and torch.equal(lse, lse_ref)
