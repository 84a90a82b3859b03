"""flashrnn and gpulab.rnn.LSTM under torch.compile: custom ops that pass opcheck, no graph breaks, equal eager."""

import pytest
import torch

from gpulab import rnn
from gpulab.rnn import functions, ops


def _inputs(function, B=2, T=3, NH=2, DH=16, grad=False, seed=0):
    fn = functions.get_function(function)
    g = torch.Generator().manual_seed(seed)
    Wx = torch.randn(B, T, fn.gates_w, NH, DH, generator=g)
    R = torch.randn(fn.gates_r, NH, DH, DH, generator=g) / DH**0.5
    b = torch.randn(fn.gates_b, NH, DH, generator=g)
    s0 = torch.randn(fn.states, B, 1, NH, DH, generator=g)
    return tuple(t.requires_grad_(grad) for t in (Wx, R, b, s0))


@pytest.mark.parametrize("function, backend", [("lstm", "fused"), ("lstm", "alternating"), ("gru", "fused")])
def test_opcheck_forward_and_backward(function, backend):
    Wx, R, b, s0 = _inputs(function, B=1, T=2, NH=1)  # opcheck calls the op about ten times: one program per launch
    torch.library.opcheck(ops.rnn_forward_op, (Wx, R, b, s0, function, backend, True))
    out, last, gates = ops.rnn_forward_op(Wx, R, b, s0, function, backend, True)
    d_out, d_last = torch.randn_like(out), torch.randn_like(last)
    torch.library.opcheck(ops.rnn_backward_op, (d_out, d_last, gates, out, s0, R, function, backend))


@pytest.mark.parametrize("backend", ["fused", "alternating"])
def test_compiled_flashrnn_equals_eager(backend):
    def loss(Wx, R, b, s0):
        out, last = rnn.flashrnn(Wx, R, b, s0, function="lstm", backend=backend)
        return (out[0] * torch.linspace(-1, 1, out[0].numel()).view_as(out[0])).sum() + last[1].square().sum()

    assert torch._dynamo.explain(loss)(*_inputs("lstm")).graph_break_count == 0
    results = []
    for fn in (torch.compile(loss, fullgraph=True, backend="aot_eager"), loss):
        args = _inputs("lstm", grad=True)
        value = fn(*args)
        value.backward()
        results.append((value.detach(), *(a.grad for a in args)))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want)


def test_compiled_lstm_module_equals_eager():
    torch.manual_seed(0)
    module = rnn.LSTM(16, 16, num_heads=2, batch_first=True, backend="fused")
    x = torch.randn(2, 3, 16)
    y, (h, c) = torch.compile(module, fullgraph=True, backend="aot_eager")(x)
    y.sum().backward()
    compiled_grad = module.recurrent_l0.grad.clone()
    module.zero_grad()
    y_eager, _ = module(x)
    y_eager.sum().backward()
    torch.testing.assert_close(y, y_eager)
    torch.testing.assert_close(compiled_grad, module.recurrent_l0.grad)


def test_bad_input_raises_the_same_error_compiled():
    Wx, R, b, s0 = _inputs("lstm")

    def f(Wx, R, b):
        return rnn.flashrnn(Wx, R, b, function="lstm", backend="fused")

    with pytest.raises(ValueError, match="R must be"):
        torch.compile(f, backend="aot_eager")(Wx, R[:, :1], b)


def test_compiled_flashrnn_does_not_trace_the_eager_check_cache(monkeypatch):
    """The eager path's signature cache hashes a tuple, which torch 2.11's dynamo cannot trace: traced calls must
    check their inputs directly (found on the H100, where the compiled LSTM failed with "hash" untraceable)."""
    from gpulab.rnn import api

    def not_when_tracing(*args):
        if torch.compiler.is_compiling():
            raise AssertionError("flashrnn's eager signature cache was traced")
        return None

    monkeypatch.setattr(api, "_signature", not_when_tracing)
    torch._dynamo.reset()
    Wx, R, b, s0 = _inputs("lstm")
    f = torch.compile(lambda *a: rnn.flashrnn(*a, backend="fused")[0].sum(), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(f(Wx, R, b, s0), rnn.flashrnn(Wx, R, b, s0, backend="fused")[0].sum())
