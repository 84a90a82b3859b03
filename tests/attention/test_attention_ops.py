"""flash_attention under torch.compile: custom ops that pass opcheck, trace without graph breaks, equal eager."""

import pytest
import torch

from gpulab import attention as A
from gpulab.attention import ops


def _inputs(nq, nk, d=16, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, nq, d, generator=g).requires_grad_(grad)
    k, v = (torch.randn(1, 2, nk, d, generator=g).requires_grad_(grad) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("nq, nk, causal", [(17, 17, True), (5, 33, False)], ids=["causal-17", "full-5x33"])
def test_opcheck_forward_and_backward(nq, nk, causal):
    q, k, v = _inputs(nq, nk)
    torch.library.opcheck(ops.forward_op, (q, k, v, causal, 0.25, False, False))
    o, lse = ops.forward_op(q, k, v, causal, 0.25, False, False)
    do = torch.randn_like(o)
    torch.library.opcheck(ops.backward_op, (do, q, k, v, o, lse, causal, 0.25, False, False))


def test_compiled_fullgraph_equals_eager_forward_and_backward():
    def f(q, k, v):
        return A.flash_attention(q, k, v, is_causal=True)

    q, k, v = _inputs(19, 19, grad=True)
    assert torch._dynamo.explain(f)(q, k, v).graph_break_count == 0
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    grads = []
    for fn in (compiled, f):
        o = fn(q, k, v)
        (o * torch.linspace(-1, 1, o.numel()).view_as(o)).sum().backward()
        grads.append((o.detach(), *(x.grad.clone() for x in (q, k, v))))
        for x in (q, k, v):
            x.grad = None
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want)


def test_bad_input_raises_the_same_error_compiled():
    def f(q, k, v):
        return A.flash_attention(q, k, v)

    q, k, v = _inputs(4, 4)
    with pytest.raises(ValueError, match="v is torch.float64 but q is torch.float32"):
        torch.compile(f, backend="aot_eager")(q, k, v.double())

    def g(q, k, v):
        return A.flash_attention(q, k, v)

    with pytest.raises(Exception) as err:  # fullgraph: Dynamo may wrap it (Unsupported), the ValueError as its cause
        torch.compile(g, fullgraph=True, backend="aot_eager")(q, k, v.double())
    assert "must share one dtype" in str(err.value) + repr(err.value.__cause__)


def test_compiled_with_a_scale_that_varies_between_calls():
    # dynamic=True (or a second float after the first) hands the scale to the trace as a symbolic float: the checks
    # must trace (no math.isfinite on it), every value must give SDPA's result, and inf must still be refused.
    def f(q, k, v, scale):
        return A.flash_attention(q, k, v, is_causal=True, scale=scale)

    q, k, v = _inputs(9, 9, grad=True)
    compiled = torch.compile(f, fullgraph=True, dynamic=True, backend="aot_eager")
    for scale in (0.3, -0.7, 0.0):
        o = compiled(q, k, v, scale)
        ref = A.attention_reference(q, k, v, is_causal=True, scale=scale)
        assert (o.detach().double() - ref).abs().max().item() < 1e-5
        o.sum().backward()
        q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
        want = torch.autograd.grad(A.naive_attention(q64, k64, v64, is_causal=True, scale=scale).sum(), (q64, k64, v64))
        for x, w in zip((q, k, v), want):
            assert (x.grad.double() - w).abs().max().item() < 1e-5
            x.grad = None
    with pytest.raises(Exception) as err:
        compiled(q, k, v, float("inf"))
    assert "finite" in str(err.value) + repr(err.value.__cause__)
