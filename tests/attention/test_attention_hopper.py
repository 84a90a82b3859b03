"""Lesson 4, part 2: version 2 of the forward (gpulab.attention.v2.forward: TMA descriptors, warp specialization)
against the float64 reference in Triton's interpreter, its choice beside version 1, and its sm_90 compilation
(warp specialization present in the TTGIR, so a silent fallback fails here). Full sizes: `pytest -m gpu`."""

import copy

import pytest
import torch

from gpulab import attention as A
from gpulab import check, runtime
from gpulab.attention import configs, plan
from gpulab.attention import plan as attention_backward
from gpulab.attention.configs import HopperConfig
from gpulab.attention.experiments import v2_backward as hopper_backward
from gpulab.attention.plan import forward_plan
from gpulab.attention.v2 import forward as hopper
from gpulab.attention.v3 import forward as v3_forward

# (batch, heads, seq_q, seq_k, head_dim, causal, config): odd lengths, Nq != Nk both ways, one row, head dims that
# are multiples of 8 but not powers of two (the descriptor zero-fills the tile's extra columns), every schedule.
SMALL = HopperConfig(block_m=16, block_n=16)
CASES = [
    (1, 1, 1, 1, 8, False, SMALL),
    (1, 1, 1, 1, 16, True, SMALL),
    (1, 2, 17, 17, 16, True, SMALL),
    (2, 1, 33, 50, 24, False, HopperConfig(block_m=16, block_n=32)),
    (1, 2, 17, 40, 40, True, SMALL),
    (2, 1, 40, 17, 24, True, HopperConfig(block_m=32, block_n=16, warp_specialize=False)),
    (1, 1, 17, 33, 8, False, HopperConfig(block_m=16, block_n=16, warp_specialize=False)),
    (1, 3, 17, 40, 16, True, HopperConfig(block_m=16, block_n=16, persistent=True)),
    (2, 2, 33, 33, 24, False, HopperConfig(block_m=16, block_n=32, persistent=True, warp_specialize=False)),
    (1, 1, 17, 1, 16, True, SMALL),
    (1, 1, 40, 64, 128, True, HopperConfig(block_m=32, block_n=32)),
    (1, 2, 70, 80, 16, False, HopperConfig(block_m=16, block_n=16, overlap=True)),
    (2, 1, 40, 64, 24, True, HopperConfig(block_m=16, block_n=16, overlap=True)),
    (1, 1, 1, 48, 16, False, HopperConfig(block_m=16, block_n=16, overlap=True)),
]


def _inputs(b, h, nq, nk, d, dtype, device=None, scale=1.0):
    q = check.random_tensor(b, h, nq, d, dtype=dtype, scale=scale, device=device)
    k = check.random_tensor(b, h, nk, d, dtype=dtype, scale=scale, device=device)
    v = check.random_tensor(b, h, nk, d, dtype=dtype, device=device)
    return q, k, v


@pytest.mark.parametrize("b, h, nq, nk, d, causal, cfg", CASES)
def test_version2_matches_float64(b, h, nq, nk, d, causal, cfg):
    q, k, v = _inputs(b, h, nq, nk, d, torch.float16)
    o, lse = A.attention_forward(q, k, v, is_causal=causal, config=cfg, version=2)  # outputs poisoned first
    ctx = f"B={b} H={h} Nq={nq} Nk={nk} D={d} causal={causal} {cfg}"
    check.assert_close(o, A.attention_reference(q, k, v, is_causal=causal), dtype=torch.float16, name="O",
                       context=ctx)  # fmt: skip
    check.assert_close(lse, A.logsumexp_reference(q, k, is_causal=causal), dtype=torch.float16, name="LSE",
                       context=ctx)  # fmt: skip


def test_version2_agrees_with_version1_and_keeps_large_logits_finite():
    # logits of a few hundred: the online max keeps exp2 in range; version 1 and 2 round alike
    q, k, v = _inputs(1, 2, 33, 21, 16, torch.float16, scale=6.0)
    o2, lse2 = A.attention_forward(q, k, v, is_causal=True, config=SMALL, version=2)
    o1, lse1 = A.attention_forward(q, k, v, is_causal=True, version=1)
    assert torch.isfinite(o2).all() and torch.isfinite(lse2).all()
    check.assert_close(o2, o1.double(), dtype=torch.float16, name="O v2 vs v1")
    check.assert_close(lse2, lse1.double(), dtype=torch.float16, name="LSE v2 vs v1")


@pytest.mark.parametrize(
    "b, h, nq, nk, d, causal",
    [(1, 2, 17, 24, 16, True), (2, 1, 33, 50, 24, False), (1, 1, 40, 17, 40, True), (1, 1, 1, 5, 8, False)],
)
def test_gradients_through_version2(b, h, nq, nk, d, causal):
    # version 2's backward (gpulab.attention.experiments.v2_backward, off by default: no faster) takes version 2's O
    # and LSE: set as the backward of a copy of the cached plan
    q, k, v = _inputs(b, h, nq, nk, d, torch.float16)
    do = check.random_tensor(b, h, nq, d, dtype=torch.float16)
    plan = copy.copy(forward_plan(q, k, v, causal, None, False, SMALL, 2))
    assert plan.version == 2
    plan.backward = hopper_backward.v2_backward(plan)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    with runtime.poisoning(True):
        A.FlashAttentionFunction.apply(qg, kg, vg, causal, None, False, False, plan).backward(do)
    assert attention_backward.backward_kind(plan) == "two kernels, TMA"
    assert [launch.kernel for launch in plan.backward] == [
        hopper_backward.attention_dq_v2_kernel,
        hopper_backward.attention_dkdv_v2_kernel,
    ]
    _, dq, dk, dv = A.attention_reference(q, k, v, is_causal=causal, do=do)
    for name, g, ref in (("dQ", qg.grad, dq), ("dK", kg.grad, dk), ("dV", vg.grad, dv)):
        check.assert_close(g, ref, dtype=torch.float16, rtol=1e-2, name=name)


def test_automatic_choice_and_supports():
    assert plan.auto_version(torch.float16, 64, torch.device("cpu")) == 1  # no sm_90 here
    assert hopper.supports(torch.bfloat16, 128) is None and hopper.supports(torch.float16, 8) is None
    assert "float32" in hopper.supports(torch.float32, 64)
    assert "multiples of 8" in hopper.supports(torch.float16, 20)
    q, k, v = _inputs(1, 1, 5, 5, 16, torch.float16)
    assert forward_plan(q, k, v).version == (2 if runtime.on_gpu() and torch.cuda.get_device_capability()[0] == 9
                                             else 1)  # fmt: skip
    assert forward_plan(q, k, v, version=2).version == 2
    assert forward_plan(q, k, v, config=SMALL).version == 2  # a HopperConfig means version 2
    assert forward_plan(q, k, v, config=A.AttentionConfig(16, 16, 16, 4, 1)).version == 1


def test_default_configs_fit_and_tile_at_least_16():
    for d in (8, 24, 64, 128):
        for causal in (False, True):
            cfg = configs.hopper_config(d, causal)
            assert cfg.block_m >= 16 and cfg.block_n >= 16 and cfg.num_stages >= 1


def test_sm90_compile_is_warp_specialized():
    # Triton 3.6 keeps warp specialization on sm_90 only for a kernel whose loop is its only one and at 4 warps: a
    # change that breaks either falls back silently to the plain pipeline, and this fails.
    ttgir = hopper.sm90_ttgir(64, True, HopperConfig(warp_specialize=True))
    assert "ttg.warp_specialize" in ttgir, "version 2's key loop is no longer warp-specialized on sm_90"
    assert "ttng.async_tma_copy_global_to_local" in ttgir, "K/V no longer load through TMA"
    assert "ttng.warp_group_dot" in ttgir, "the products are no longer wgmma"
    shipped = configs.hopper_config(128, False)
    if shipped.warp_specialize:
        assert "ttg.warp_specialize" in hopper.sm90_ttgir(128, False, shipped)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "nq, nk, d, causal",
    [
        (4096, 4096, 128, True),
        (4096, 4096, 64, False),
        (1000, 3001, 80, True),
        (3001, 1000, 40, True),
        (777, 777, 128, False),
        (1, 4096, 64, True),
    ],
)
def test_version2_full_size_on_gpu(dtype, nq, nk, d, causal):
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("version 2 is for compute capability 9 (Hopper)")
    q, k, v = _inputs(2, 3, nq, nk, d, dtype, device="cuda")
    with runtime.poisoning(True):
        o, lse = A.attention_forward(q, k, v, is_causal=causal, version=2)
    big = 2 * 3 * nq * nk * d >= plan.SMALL_WORK  # the automatic choice: version 2 unless the call is host-bound,
    v3 = d in plan.V3_HEAD_DIMS and v3_forward.supported(q, k, v, causal)[0]  # or version 3 where it measured faster
    assert forward_plan(q, k, v, causal).version == ((3 if v3 else 2) if big else 1)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    # An early causal row averages a few values that may cancel: its rounding is relative to sum_j p_j |v_j|.
    size = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float().abs(), is_causal=causal)
    check.assert_close(o, ref.double(), dtype=dtype, name="O", context=f"{nq}x{nk} d{d} causal={causal}",
                       magnitude=size)  # fmt: skip
    o1, lse1 = A.attention_forward(q, k, v, is_causal=causal, version=1)
    check.assert_close(lse, lse1.double(), dtype=dtype, name="LSE v2 vs v1")


@pytest.mark.gpu
def test_version2_every_schedule_on_gpu():
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("version 2 is for compute capability 9 (Hopper)")
    q, k, v = _inputs(3, 5, 2049, 2049, 128, torch.bfloat16, device="cuda")
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True).double()
    for cfg in (
        HopperConfig(),
        HopperConfig(block_n=128, num_stages=2),
        HopperConfig(block_m=128, num_warps=8),
        HopperConfig(persistent=True),
        HopperConfig(block_m=128, num_warps=8, persistent=True),
    ):
        with runtime.poisoning(True):
            o, _ = A.attention_forward(q, k, v, is_causal=True, config=cfg)
        check.assert_close(o, ref, dtype=torch.bfloat16, name="O", context=str(cfg))


@pytest.mark.gpu
def test_warp_specialization_refused_on_sm90_unless_measured(monkeypatch):
    if torch.cuda.get_device_capability()[0] != 9 or not hopper.WS_BROKEN_ON_SM90:
        pytest.skip("the refusal is for Tritons outside WS_RACE_FREE_TRITON on compute capability 9")
    monkeypatch.delenv("GPULAB_ALLOW_WARP_SPECIALIZE", raising=False)
    q, k, v = _inputs(1, 1, 256, 256, 64, torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="warp_specialize"):
        A.attention_forward(q, k, v, config=HopperConfig(128, 64, 4, 2, warp_specialize=True))


def test_version2_takes_inputs_that_are_not_16_byte_aligned():
    # TMA reads aligned addresses only: a view starting 2 bytes into its storage is copied first, and still right
    q, k, v = _inputs(1, 2, 17, 21, 16, torch.float16)
    buf = torch.empty(q.numel() + 1, dtype=q.dtype)
    q_off = buf[1:].view(q.shape).copy_(q)
    assert q_off.data_ptr() % 16
    o, _ = A.attention_forward(q_off, k, v, is_causal=True, config=SMALL, version=2)
    check.assert_close(o, A.attention_reference(q, k, v, is_causal=True), dtype=torch.float16, name="O")


@pytest.mark.gpu
@pytest.mark.parametrize(
    "nq, nk, d, causal", [(4096, 4096, 128, True), (1000, 3001, 64, False), (3001, 1000, 80, True)]
)
def test_version2_gradients_full_size_on_gpu(nq, nk, d, causal):
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("version 2 is for compute capability 9 (Hopper)")
    q, k, v = _inputs(2, 3, nq, nk, d, torch.bfloat16, device="cuda")
    do = check.random_tensor(2, 3, nq, d, dtype=torch.bfloat16, device="cuda")
    grads = {}
    for tma in (True, False):  # version 2's backward kernels, then version 1's (not version 3's), after one forward
        plan = copy.copy(forward_plan(q, k, v, causal, None, False, None, 2))
        plan.backward = hopper_backward.v2_backward(plan) if tma else attention_backward.two_kernel_backward(plan)
        qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
        with runtime.poisoning(True):
            A.FlashAttentionFunction.apply(qg, kg, vg, causal, None, False, False, plan).backward(do)
        assert (plan.backward[0].kernel is hopper_backward.attention_dq_v2_kernel) == tma
        grads[tma] = (qg.grad, kg.grad, vg.grad)
    qr, kr, vr = (t.float().requires_grad_(True) for t in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=causal).backward(do.float())
    for name, g2, g1, ref in zip(("dQ", "dK", "dV"), grads[True], grads[False], (qr.grad, kr.grad, vr.grad)):
        where = f"{nq}x{nk} d{d} causal={causal}"
        # the same math as version 1: equal up to the order of fp32 sums
        check.assert_close(g2, g1.double(), dtype=torch.bfloat16, rtol=1e-2, name=f"{name} v2 vs v1", context=where)
        # against fp32 attention, as a whole: a few early causal rows (one or two keys) lose digits in dP - D with
        # O and dO in bf16, in version 1 and in SDPA's own kernels alike, so single elements are not compared here
        err = float(check.relative_error(g2, ref))
        assert err < check.tolerance(torch.bfloat16), f"{name} {where}: relative error {err:.3g}"


def test_sm90_compile_of_the_backward_uses_tma():
    # version 2's backward compiled for sm_90 without a GPU: its tiles still come through TMA, its products are wgmma
    ttgir = hopper_backward.sm90_backward_ttgir("dq", 64, True)
    assert "ttng.async_tma_copy_global_to_local" in ttgir, "the dQ kernel's K/V tiles no longer load through TMA"
    assert "ttng.warp_group_dot" in ttgir, "the dQ kernel's products are no longer wgmma"
    with pytest.raises(ValueError, match="kind"):
        hopper_backward.sm90_backward_ttgir("dv")
