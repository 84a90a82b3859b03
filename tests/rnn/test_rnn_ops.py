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


@pytest.mark.parametrize("backend, with_b_ih", [("fused", True), ("alternating", False)])
def test_opcheck_the_layer_op(backend, with_b_ih):
    g = torch.Generator().manual_seed(1)
    x, w_ih = torch.randn(1, 2, 5, generator=g), torch.randn(4 * 16, 5, generator=g) / 3
    b_ih = torch.randn(4 * 16, generator=g) if with_b_ih else None
    _, R, b, s0 = _inputs("lstm", B=1, T=2, NH=1, seed=2)
    torch.library.opcheck(ops.lstm_layer_forward_op, (x, w_ih, b_ih, R, b, s0, backend, True))


def _graphs(module, x):
    """The aten operators of the compiled forward and backward graphs of ``module(x)[0].sum()``, and its gradients."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    seen = {}

    def keep(tag):
        def compiler(gm, example_inputs):
            seen[tag] = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
            return make_boxed_func(gm.forward)

        return compiler

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"))
    compiled = torch.compile(module, fullgraph=True, backend=backend)
    compiled(x)[0].sum().backward()
    return seen


def test_compiled_layer_is_the_eager_layers_work():
    """Compiled, an nn.LSTM-layout layer runs as one custom op whose backward takes b_ih's gradient from the
    backend's db: no reduction of dWx in the backward graph (a traced ``nn.functional.linear`` adds one, a pass over
    [B*T, 4H] per layer and step that the eager layer does not make), and every gradient equals the eager one."""
    torch.manual_seed(0)
    module = rnn.LSTM(6, 16, num_layers=2, batch_first=True, backend="fused")
    x = torch.randn(2, 3, 6, requires_grad=True)
    seen = _graphs(module, x)
    assert seen["fw"].count("gpulab.lstm_layer_forward.default") == 2, seen["fw"]
    assert not any("sum" in op for op in seen["bw"]), f"a reduction in the compiled backward: {seen['bw']}"
    compiled = {n: p.grad.clone() for n, p in module.named_parameters()}
    dx = x.grad.clone()
    module.zero_grad(set_to_none=True)
    x.grad = None
    module(x)[0].sum().backward()
    for name, p in module.named_parameters():
        torch.testing.assert_close(compiled[name], p.grad, msg=name)
    torch.testing.assert_close(dx, x.grad)
    assert module.bias_ih_l0.grad.data_ptr() != module.bias_hh_l0.grad.data_ptr()


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


def test_compiled_lstm_at_a_split_head_equals_eager():
    """A head too large for one SM (fp32, head dim 128 here: R alone needs 256 KB) runs the split loops under
    torch.compile as it does eagerly (the custom op once ran the one-SM loops only and raised the tiler's
    ValueError: the H200's compile of one head of 768)."""
    from gpulab.rnn.fused import plan

    assert plan.plan_kind(1, 1, 128, "lstm", torch.float32, True) == "split"
    torch.manual_seed(0)
    module = rnn.LSTM(128, 128, batch_first=True, backend="fused")
    x = torch.randn(1, 2, 128)
    grads = []
    for run in (torch.compile(module, fullgraph=True, backend="aot_eager"), module):
        module.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        y, (h, c) = run(xi)
        (y.sum() + c.square().sum()).backward()
        grads.append((y.detach(), c.detach(), xi.grad, module.weight_hh_l0.grad, module.bias_ih_l0.grad))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want)


def test_compiled_calls_choose_their_tiles_once(monkeypatch):
    """The custom ops run the loops chosen once per problem: repeated compiled calls weigh no tile candidates (the
    one-SM tiler enumerated them on every call, forward and backward: host time that made the compiled tiny call
    slower than the eager one)."""
    from gpulab.rnn.fused import plan, tiling

    torch._dynamo.reset()
    plan.clear_cache()
    module = rnn.LSTM(16, 16, num_heads=2, batch_first=True, backend="fused")
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 3, 16, requires_grad=True)
    compiled(x)[0].sum().backward()  # compiles, chooses the loops
    calls = []
    real = tiling.candidates
    monkeypatch.setattr(tiling, "candidates", lambda *a, **k: calls.append(a) or real(*a, **k))
    for _ in range(2):
        compiled(x)[0].sum().backward()
    assert calls == [], f"tile candidates weighed again on repeated compiled calls: {calls}"


@pytest.mark.gpu
@pytest.mark.parametrize("H, L, B, heads", [(256, 2, 16, 1), (768, 1, 64, 1), (128, 1, 1, 2)])
def test_gpu_inductor_module_equals_eager(H, L, B, heads):
    """torch.compile with inductor (the grid's compiled point among them): outputs and every gradient as eager's."""
    from gpulab import check

    torch.manual_seed(0)
    module = rnn.LSTM(H, H, L, batch_first=True, num_heads=heads, backend="fused").to("cuda", torch.float16)
    x = torch.randn(B, 32, H, device="cuda", dtype=torch.float16)
    torch._dynamo.reset()
    results = []
    for run in (torch.compile(module), module):
        module.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        y, (h, c) = run(xi)
        (y.float().square().mean() + c.float().sum()).backward()
        results.append([y, c, xi.grad, *(p.grad for p in module.parameters())])
    for got, want in zip(*results):
        check.assert_close(got, want.double(), dtype=torch.float16, name="compiled vs eager")
