"""A second derivative through the package's kernels raises: their backwards are kernels, not graphs of PyTorch
operations, so ``create_graph=True`` cannot give the gradient's own gradient. Without ``once_differentiable`` the
first gradient would come back with no ``grad_fn`` and a gradient penalty would be silently wrong (a probe found the
fused LSTM's d(penalty)/dW off by 3% and dR missing). The PyTorch paths (attention's reference, the LSTM's
``vanilla`` backend, ``qkv_heads`` on CPU) stay twice differentiable. Incoming gradients of ones
(``grad(out.sum(), x, create_graph=True)``, WGAN-GP's ``grad_outputs``) raise too: torch's own ``once_differentiable``
let those through with no ``grad_fn`` (:func:`gpulab.runtime.once_differentiable`)."""

import pytest
import torch

from gpulab import attention as A
from gpulab import runtime
from gpulab.attention import rope
from gpulab.rnn import LSTM

INCOMING = ["squares", "ones"]  # incoming gradients that depend on the output (2 out), or constant ones


def _penalty_raises(out, x, incoming="squares"):
    loss = out.pow(2).sum() if incoming == "squares" else out.sum()
    (g,) = torch.autograd.grad(loss, x, create_graph=True)
    with pytest.raises(RuntimeError, match="(?i)differentiat|twice|once"):
        g.pow(2).sum().backward()


@pytest.mark.parametrize("incoming", INCOMING)
def test_flash_attention_second_derivative_raises(incoming):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 5, 8, generator=g).to(runtime.device) for _ in range(3))  # on CPU or the GPU
    q.requires_grad_()
    _penalty_raises(A.flash_attention(q, k, v, is_causal=True), q, incoming)


@pytest.mark.parametrize("incoming", INCOMING)
def test_varlen_attn_second_derivative_raises(incoming):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(8, 2, 8, generator=g).to(runtime.device) for _ in range(3))
    cu = torch.tensor([0, 3, 8], dtype=torch.int32, device=runtime.device)
    q.requires_grad_()
    _penalty_raises(A.varlen_attn(q, k, v, cu, cu, 5, 5, window_size=(-1, 0)), q, incoming)


def test_qkv_heads_kernel_second_derivative_raises():
    qkv = torch.randn(1, 3, 3 * 2 * 4, generator=torch.Generator().manual_seed(0)).to(runtime.device)
    q, k, v = rope.QKVHeadsFunction.apply(qkv.requires_grad_(), 2, True, 10000.0)
    _penalty_raises(q + k + v, qkv)  # (incoming ones: its gradient is linear in them, their second derivative 0)


@pytest.mark.parametrize("incoming", INCOMING)
@pytest.mark.parametrize("backend", ["fused", "alternating"])
def test_triton_lstm_second_derivative_raises(backend, incoming):
    x = torch.randn(4, 2, 3, generator=torch.Generator().manual_seed(1)).to(runtime.device).requires_grad_()
    _penalty_raises(LSTM(3, 8, backend=backend, device=runtime.device)(x)[0], x, incoming)
    _penalty_raises(LSTM(3, 8, backend=backend, bidirectional=True, device=runtime.device)(x)[0], x, incoming)


def test_the_pytorch_paths_stay_twice_differentiable():
    torch.manual_seed(2)
    x = torch.randn(4, 2, 3, dtype=torch.float64, requires_grad=True)
    lstm = LSTM(3, 5, backend="vanilla").double()
    assert torch.autograd.gradgradcheck(lambda x: lstm(x)[0], (x,))
    qkv = torch.randn(1, 3, 3 * 2 * 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda t: rope.qkv_heads(t, 2)[0], (qkv,))
