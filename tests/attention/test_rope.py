"""RoPE and the heads of a qkv projection (gpulab.attention.rope): the fused kernel (Triton's interpreter on CPU,
outputs poisoned) against float64 through PyTorch's operations, forward and backward; the custom ops; the GPU path."""

import pytest
import torch

from gpulab import check, runtime
from gpulab.attention import rope as R


def _against_float64(B, N, H, D, positional, dtype, used=(0, 1, 2)):
    qkv = check.random_tensor(B, N, 3 * H * D, dtype=dtype).requires_grad_()
    out = R.QKVHeadsFunction.apply(qkv, H, positional == "rope", 10000.0)
    x64 = qkv.detach().double().requires_grad_()
    ref = R.qkv_heads_reference(x64, H, positional)
    for name, o, r in zip("qkv", out, ref):
        assert o.shape == (B, H, N, D) and o.is_contiguous() and o.dtype == dtype
        check.assert_close(o, r, dtype=dtype, name=name, context=f"B{B} N{N} H{H} D{D} {positional}")
    grads = [check.random_tensor(B, H, N, D, dtype=dtype) for _ in range(3)]
    (dx,) = torch.autograd.grad([out[i] for i in used], qkv, [grads[i] for i in used])
    (rdx,) = torch.autograd.grad([ref[i] for i in used], x64, [grads[i].double() for i in used])
    check.assert_close(dx, rdx, dtype=dtype, name="d(qkv)", context=f"B{B} N{N} H{H} D{D} {positional} {used}")


@pytest.mark.parametrize(
    "B, N, H, D, positional, dtype",
    [
        (1, 1, 1, 2, "rope", torch.float32),
        (2, 17, 3, 8, "rope", torch.float32),
        (2, 5, 2, 6, "rope", torch.bfloat16),  # D / 2 = 3: a half that is not a power of two
        (3, 33, 2, 64, "rope", torch.float16),
        (2, 9, 2, 5, "none", torch.float32),  # an odd head dim without rotation
        (1, 70, 1, 4, "none", torch.bfloat16),  # rows past one block
    ],
)
def test_kernel_matches_float64(B, N, H, D, positional, dtype):
    _against_float64(B, N, H, D, positional, dtype)


def test_kernel_backward_with_an_unused_output():
    _against_float64(2, 7, 2, 4, "rope", torch.float32, used=(0, 2))  # k's gradient is None: zeros


def test_rotation_depends_on_relative_position_only():
    torch.manual_seed(0)
    H, D, N = 1, 8, 12
    row = torch.randn(1, 1, 3 * H * D, dtype=torch.float32).expand(1, N, 3 * H * D).contiguous()
    q, k, _ = R.QKVHeadsFunction.apply(row, H, True, 10000.0)
    s = (q.double() @ k.double().transpose(-1, -2))[0, 0]  # the same token everywhere: s[i, j] depends on i - j
    for i in range(1, N):
        for j in range(1, N):
            assert torch.allclose(s[i, j], s[i - 1, j - 1], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(s[0, 0], s[0, 5]), "the angles turn"


def test_tables_are_the_references_angles():
    cos, sin = R.rope_tables(5, 3, 100.0, "cpu")
    angles = torch.arange(5.0)[:, None] * 100.0 ** (-torch.arange(3.0) / 3)
    assert torch.equal(cos, angles.cos()) and torch.equal(sin, angles.sin())
    kept = R._cached_tables(5, 3, 100.0, torch.device("cpu"))
    assert R._cached_tables(5, 3, 100.0, torch.device("cpu"))[0] is kept[0], "kept per (n, half, base, device)"
    assert cos is not kept[0] and sin is not kept[1], "the caller gets copies"


def test_editing_the_tables_changes_nothing_else():
    cos, sin = R.rope_tables(9, 2)
    cos.mul_(0)
    sin.fill_(5.0)
    fresh = R.rope_tables(9, 2)
    angles = R.rope_angles(9, 2)
    assert torch.equal(fresh[0], angles.cos()) and torch.equal(fresh[1], angles.sin())
    qkv = check.random_tensor(1, 9, 3 * 4, dtype=torch.float32)  # 1 head of 4: the kernel reads the (9, 2) tables
    for got, want in zip(R.QKVHeadsFunction.apply(qkv, 1, True, 10000.0), R.qkv_heads_reference(qkv, 1)):
        torch.testing.assert_close(got, want)


def test_cpu_dispatch_runs_pytorchs_operations():
    qkv = check.random_tensor(2, 4, 12, dtype=torch.float32)
    got = R.qkv_heads(qkv, 2)
    for g, r in zip(got, R.qkv_heads_reference(qkv, 2)):
        assert torch.equal(g, r)


def test_custom_ops_pass_opcheck():
    qkv = check.random_tensor(1, 3, 12, dtype=torch.float32).requires_grad_()
    torch.library.opcheck(torch.ops.gpulab.qkv_heads.default, (qkv, 2, True, 10000.0))
    grads = [check.random_tensor(1, 2, 3, 2, dtype=torch.float32) for _ in range(3)]
    torch.library.opcheck(torch.ops.gpulab.qkv_heads_backward.default, (*grads, True, 10000.0))


@pytest.mark.gpu
@pytest.mark.skipif(not runtime.on_gpu(), reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gpu_path_matches_float64_and_compiles(dtype):
    qkv = check.random_tensor(4, 300, 3 * 768, dtype=dtype, device="cuda").requires_grad_()
    out = R.qkv_heads(qkv, 12)
    ref = R.qkv_heads_reference(qkv.detach().double().requires_grad_(), 12)
    # the angles are fp32 (as the PyTorch path computes them): their rounding grows with the position, ~p 2^-24
    rtol = 2e-2 if dtype == torch.bfloat16 else 300 * 2.0**-24 * 4
    for o, r in zip(out, ref):
        check.assert_close(o, r, dtype=dtype, rtol=rtol, name="q/k/v")
    for o, r in zip(out, R.qkv_heads_reference(qkv.detach(), 12)):  # the same fp32 angles: fp32 rounding only
        check.assert_close(o, r, dtype=dtype, name="q/k/v against the fp32 path")
    compiled = torch.compile(lambda x: R.qkv_heads(x, 12), fullgraph=True)
    for o, c in zip(out, compiled(qkv)):
        assert torch.equal(o, c)


@pytest.mark.gpu
@pytest.mark.skipif(not runtime.on_gpu(), reason="needs a GPU")
def test_gpu_transformer_same_with_and_without_the_kernel():
    from gpulab import tasks

    t = tasks.get_task("parity")
    x, _ = t(4, 200, generator=torch.Generator().manual_seed(0))
    logits = []
    for rope_kernel in (True, False):
        torch.manual_seed(1)
        m = tasks.TransformerModel(t.vocab, t.classes, d_model=96, num_heads=3, num_layers=2, attention="sdpa",
                                   rope_kernel=rope_kernel).cuda().to(torch.bfloat16)  # fmt: skip
        out = m(x.cuda())
        out.float().sum().backward()
        logits.append((out.float(), m.blocks[0].mixer.qkv.weight.grad.float()))
    for a, b in zip(*logits):
        assert check.relative_error(a, b) < 2e-2


def test_empty_sequence():
    qkv = torch.zeros(2, 0, 12, requires_grad=True)
    q, k, v = R.QKVHeadsFunction.apply(qkv, 2, True, 10000.0)
    assert q.shape == k.shape == v.shape == (2, 2, 0, 2)
    (dx,) = torch.autograd.grad((q.sum() + k.sum() + v.sum(),), qkv)
    assert dx.shape == qkv.shape
