"""Lesson 4: the FlashAttention forward and backward kernels (gpulab.attention.v1.forward, .backward, .function)
against the float64 reference, on CPU (Triton's interpreter) and on the GPU (`pytest -m gpu`)."""

import pytest
import torch

from gpulab import attention as A
from gpulab import check

# (batch, heads, seq_q, seq_k, head_dim, causal): odd lengths, seq_q != seq_k both ways, batch 1, padded head dims
CPU_CASES = [
    (1, 1, 1, 1, 16, False),
    (1, 1, 1, 1, 16, True),
    (2, 2, 17, 17, 16, False),
    (2, 1, 17, 17, 24, True),
    (1, 2, 33, 17, 80, True),
    (1, 2, 17, 33, 24, True),
    (1, 1, 17, 33, 16, False),
    (2, 1, 33, 33, 16, True),
    (1, 1, 1, 17, 16, True),
    (1, 1, 17, 1, 24, True),
]


@pytest.mark.parametrize("b, h, nq, nk, d, causal", CPU_CASES)
def test_flash_attention_forward_and_gradients_fp32(check_attention, b, h, nq, nk, d, causal):
    check_attention(b, h, nq, nk, d, causal, torch.float32)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_fp16(check_attention, causal):
    # fp16 operands, fp32 accumulation; P and dS are rounded to fp16 before their products, as on the GPU.
    check_attention(1, 2, 33, 17, 24, causal, torch.float16, grad_rtol=1e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_large_logits_stay_finite_and_accurate(attention_inputs, check_attention, causal):
    # Logits of a few hundred: naive softmax overflows; the online max keeps everything finite. The reference's
    # softmax of exact logits differs from one of fp32-rounded logits by ~eps32 * |S| relative, hence the rtol.
    q, k, v, do = attention_inputs(1, 2, 33, 17, 16, scale=6.0)
    s = torch.matmul(q, k.transpose(-2, -1)) / 4.0
    assert s.abs().max() > 88, "the test needs logits that overflow exp in fp32"
    assert not torch.isfinite(A.softmax_naive(s)).all()
    check_attention(1, 2, 33, 17, 16, causal, torch.float32, scale=6.0, rtol=5e-4)


def test_forward_lse_matches_reference_and_explicit_scale(attention_inputs):
    q, k, v, _ = attention_inputs(2, 1, 33, 17, 24)
    o, lse = A.attention_forward(q, k, v, is_causal=True, scale=0.3)
    check.assert_close(o, A.attention_reference(q, k, v, is_causal=True, scale=0.3), name="O")
    check.assert_close(lse, A.logsumexp_reference(q, k, is_causal=True, scale=0.3), name="LSE")


def test_autograd_function_saves_inputs_output_and_lse_only(attention_inputs):
    b, h, nq, nk, d = 1, 2, 33, 17, 24
    q, k, v, _ = attention_inputs(b, h, nq, nk, d)
    q.requires_grad_(True)
    o = A.FlashAttentionFunction.apply(q, k, v, True, None, False)
    shapes = [tuple(t.shape) for t in o.grad_fn.saved_tensors]
    assert shapes == [(b, h, nq, d), (b, h, nk, d), (b, h, nk, d), (b, h, nq, d), (b, h, nq)]
    assert o.grad_fn.saved_tensors[4].dtype == torch.float32
    for s in shapes:  # nothing N x N
        assert not (nq in s[-2:] and nk in s[-2:] and s[-1] != d)


def test_outputs_follow_the_poison_policy(attention_inputs, monkeypatch):
    """Outputs come from check.new_output: NaN-filled when runtime.POISON (tests, interpreter), plain empty tensors
    in timed GPU runs; either way the kernels write every element."""
    from gpulab import runtime

    q, k, v, do = attention_inputs(1, 1, 17, 17, 16)
    seen = []
    real = check.new_output

    def spy(*shape, dtype, device=None):
        out = real(*shape, dtype=dtype, device=device)
        seen.append(bool(torch.isnan(out).all()) if out.numel() else None)
        return out

    monkeypatch.setattr(check, "new_output", spy)
    for poison in (True, False):
        seen.clear()
        with runtime.poisoning(poison):
            qg = q.clone().requires_grad_(True)
            A.flash_attention(qg, k, v).backward(do)
        assert len(seen) == 6, "O, LSE, dQ, dK, dV and delta are allocated through check.new_output"
        if poison:
            assert all(seen)
        assert torch.isfinite(qg.grad).all()


def test_flash_attention_autotune_flag_runs_on_cpu(attention_inputs):
    q, k, v, do = attention_inputs(1, 2, 17, 17, 16, torch.float32)
    qg = q.clone().requires_grad_(True)
    o = A.flash_attention(qg, k, v, is_causal=True, autotune=True)  # the interpreter keeps the fixed config
    o.backward(do)
    check.assert_close(o.detach(), A.attention_reference(q, k, v, is_causal=True), name="O")


# ----------------------------------------------------------------------------------------------------------------
# full grid on the GPU (`pytest -m gpu`)

GPU_RTOL = {torch.float32: (1e-5, 1e-4), torch.float16: (5e-3, 2e-2), torch.bfloat16: (3e-2, 8e-2)}


# Every case compiles its own kernels (~5 s each on the H100), so the grid is a covering set, not a full product:
# bf16 over head dims 64/80/128 and every shape; fp16 and fp32 over two head dims and the shapes that stress them.
_SHAPES = [(1, 1), (17, 17), (17, 1000), (1000, 17), (1000, 1000), (4096, 4096)]
_GPU_GRID = (
    [(torch.bfloat16, d, nq, nk) for d in (64, 80, 128) for nq, nk in _SHAPES]
    + [(torch.float16, d, nq, nk) for d in (96, 128) for nq, nk in [(17, 1000), (1000, 1000), (4096, 4096)]]
    + [(torch.float32, d, nq, nk) for d in (64, 80) for nq, nk in [(1, 1), (17, 1000), (1000, 17), (1000, 1000)]]
)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, d, nq, nk", _GPU_GRID)
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_full_grid(attention_inputs, dtype, d, nq, nk, causal):
    b, h = (1, 2) if nq * nk > 10**6 else (2, 3)
    q, k, v, do = attention_inputs(b, h, nq, nk, d, dtype)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = A.flash_attention(qg, kg, vg, is_causal=causal)
    o.backward(do)
    refs = A.attention_reference(q, k, v, is_causal=causal, do=do)
    # the peer in the same dtype: our error may be at most a small multiple of SDPA's own (norm-wise)
    qs, ks, vs = (t.clone().requires_grad_(True) for t in (q, k, v))
    os_ = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
    os_.backward(do)
    fwd_rtol, grad_rtol = GPU_RTOL[dtype]
    ctx = f"B={b} H={h} Nq={nq} Nk={nk} D={d} causal={causal} {dtype}"
    for name, ours, peer, ref, rtol in (
        ("O", o.detach(), os_.detach(), refs[0], fwd_rtol),
        ("dQ", qg.grad, qs.grad, refs[1], grad_rtol),
        ("dK", kg.grad, ks.grad, refs[2], grad_rtol),
        ("dV", vg.grad, vs.grad, refs[3], grad_rtol),
    ):
        assert torch.isfinite(ours).all(), f"{name} ({ctx}) has NaN or inf"
        if ref.abs().max() == 0:
            assert ours.abs().max().item() <= rtol, f"{name} ({ctx}) should be 0"
            continue
        err, err_peer = check.relative_error(ours, ref), check.relative_error(peer, ref)
        assert err <= max(3 * err_peer, rtol), f"{name} ({ctx}): relative error {err:.3g}, SDPA's {err_peer:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_large_logits_finite(attention_inputs, dtype):
    q, k, v, do = attention_inputs(2, 2, 1000, 1000, 64, dtype, scale=8.0)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = A.flash_attention(qg, kg, vg, is_causal=True)
    o.backward(do)
    for t in (o, qg.grad, kg.grad, vg.grad):
        assert torch.isfinite(t).all()
    check.assert_close(o.detach(), A.attention_reference(q, k, v, is_causal=True), dtype=dtype, rtol=0.1, name="O")


@pytest.mark.gpu
def test_gpu_tf32(attention_inputs):
    q, k, v, _ = attention_inputs(2, 2, 1000, 1000, 64)
    o = A.flash_attention(q, k, v, allow_tf32=True)
    # two chained TF32 products (S = QK^T, then PV; unit roundoff 2^-11 each): elementwise errors reach ~6e-3 of the
    # output's rms on some draws (one H100 run: 4 of 256000 elements over 5e-3, norm-wise error 1.6e-3), so 1e-2
    check.assert_close(o, A.attention_reference(q, k, v), dtype="tf32", rtol=1e-2, name="O (tf32)")


@pytest.mark.gpu
def test_gpu_autotune_is_correct_and_records_its_choice(attention_inputs):
    q, k, v, do = attention_inputs(2, 4, 1000, 1000, 64, torch.bfloat16)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = A.flash_attention(qg, kg, vg, is_causal=True, autotune=True)
    o.backward(do)
    refs = A.attention_reference(q, k, v, is_causal=True, do=do)
    for name, got, ref in zip(("O", "dQ", "dK", "dV"), (o.detach(), qg.grad, kg.grad, vg.grad), refs):
        check.assert_close(got, ref, dtype=torch.bfloat16, rtol=8e-2, name=name)
    kinds = {key[0] for key in A.tuned() if key[1:4] == (64, "bfloat16", True)}
    assert kinds == {"forward", "dkdv", "dq"}
