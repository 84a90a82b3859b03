"""gpulab.rnn.LSTM: equal to torch.nn.LSTM (one head), trains with several heads, refuses what nn.LSTM refuses."""

import pytest
import torch

from gpulab import check, rnn, runtime


@pytest.mark.parametrize("batch_first, layers", [(False, 1), (True, 2)])
def test_lstm_module_equals_nn_lstm(batch_first, layers):
    torch.manual_seed(0)
    ref = torch.nn.LSTM(5, 8, num_layers=layers, batch_first=batch_first).double()
    ours = rnn.LSTM.from_torch(ref, backend="vanilla")
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    state = (torch.randn(layers, 3 if batch_first else 4, 8).double(),) * 2
    for s in (None, state):
        y, (h, c) = ours(x, s)
        y_r, (h_r, c_r) = ref(x, s)
        for a, r_, name in ((y, y_r, "y"), (h, h_r, "h_n"), (c, c_r, "c_n")):
            check.assert_close(a, r_, dtype=torch.float64, name=name)
    (ours(x)[0].sum()).backward()
    (ref(x)[0].sum()).backward()
    check.assert_close(ours.weight_ih_l0.grad, ref.weight_ih_l0.grad, dtype=torch.float64, name="dW_ih")
    check.assert_close(ours.weight_hh_l0.grad, ref.weight_hh_l0.grad, dtype=torch.float64, name="dR")


def test_lstm_module_heads_trains_on_cpu():
    torch.manual_seed(0)
    m = rnn.LSTM(3, 8, num_heads=2, backend="vanilla", batch_first=True)
    assert m.recurrent_l0.shape == (4, 2, 4, 4)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    x, target = torch.randn(4, 6, 3), torch.randn(4, 6, 8) * 0.1
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = ((m(x)[0] - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    with pytest.raises(ValueError, match="not divisible"):
        rnn.LSTM(3, 10, num_heads=3)
    with pytest.raises(ValueError, match="backend="):
        rnn.LSTM(3, 8, backend="cudnn")


def test_fused_lstm_module_equals_nn_lstm():
    torch.manual_seed(0)
    ref = torch.nn.LSTM(6, 16, num_layers=2).to(runtime.device)
    ours = rnn.LSTM.from_torch(ref, backend="fused")
    x = torch.randn(5, 3, 6, device=runtime.device)
    y, (h, c) = ours(x)
    y_r, (h_r, c_r) = ref.double()(x.double())
    for a, r, name in ((y, y_r, "y"), (h, h_r, "h_n"), (c, c_r, "c_n")):
        check.assert_close(a, r, dtype=torch.float32, name=name)


def _small(**kw):
    torch.manual_seed(0)
    return rnn.LSTM(3, 8, num_layers=2, backend="vanilla", **kw)


def test_state_must_be_a_pair():
    m, x = _small(), torch.randn(4, 2, 3)
    h = torch.zeros(2, 2, 8)
    with pytest.raises(ValueError, match=r"hx must be a pair \(h0, c0\).*a tuple of 3"):
        m(x, (h, h, h))
    with pytest.raises(ValueError, match=r"hx must be a pair.*got one Tensor of shape \(2, 2, 8\)\.$") as info:
        m(x, hx=h)
    assert "tensor(" not in str(info.value), "the message names the tensor's type and shape, not its values"
    with pytest.raises(ValueError, match=r"hx's c0 has shape \(1, 2, 8\), expected \(2, 2, 8\)"):
        m(x, (h, torch.zeros(1, 2, 8)))


def test_mixed_dtypes_are_refused_like_nn_lstm():
    m, x = _small().double(), torch.randn(4, 2, 3)
    with pytest.raises(ValueError, match="does not match"):  # what nn.LSTM does
        torch.nn.LSTM(3, 8).double()(x)
    with pytest.raises(ValueError, match=r"x has dtype torch.float32 but the module's parameters are torch.float64"):
        m(x)
    h = torch.zeros(2, 2, 8)
    with pytest.raises(ValueError, match="hx's h0 has dtype torch.float32"):
        m(x.double(), (h, h.double()))
    y, (h_n, c_n) = m(x.double())
    assert y.dtype == h_n.dtype == c_n.dtype == torch.float64


def test_from_torch_refuses_what_is_not_an_nn_lstm():
    with pytest.raises(TypeError, match="module must be a torch.nn.LSTM, got GRU"):
        rnn.LSTM.from_torch(torch.nn.GRU(3, 8), backend="vanilla")


def test_from_torch_copies_and_keeps_batch_first():
    ref = torch.nn.LSTM(3, 8, batch_first=True)
    ours = rnn.LSTM.from_torch(ref, backend="vanilla")
    assert ours.batch_first and ours.weight_ih_l0.data_ptr() != ref.weight_ih_l0.data_ptr()
    with torch.no_grad():
        ours.weight_ih_l0.add_(1.0)  # a copy: training one leaves the other alone
    assert not torch.equal(ours.weight_ih_l0, ref.weight_ih_l0)


def test_bias_false_has_no_bias_to_train_save_or_load():
    torch.manual_seed(0)
    ref = torch.nn.LSTM(3, 8, num_layers=2, bias=False).double()
    m = rnn.LSTM.from_torch(ref, backend="vanilla")
    assert "bias=False" in repr(m)
    assert not any("bias" in n for n, _ in m.named_parameters()) and not any("bias" in k for k in m.state_dict())
    m.requires_grad_(True)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, weight_decay=0.1)
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    m(x)[0].sum().backward()
    opt.step()
    assert m.bias_l0.abs().sum() == 0 and m.bias_l1.abs().sum() == 0, "no step can make a bias appear"
    with pytest.raises(RuntimeError, match='Unexpected key.*"bias_ih_l0"'):
        m.load_state_dict(rnn.LSTM(3, 8, num_layers=2, backend="vanilla").double().state_dict())
    assert m.bias_l0.abs().sum() == 0
    m.load_state_dict(rnn.LSTM.from_torch(ref, backend="vanilla").state_dict())  # an unbiased one loads
    check.assert_close(m(x)[0], ref(x)[0], dtype=torch.float64, name="y, bias=False")
    assert m.float().bias_l0.dtype == torch.float32, "the zero bias follows the module's dtype"


@pytest.mark.parametrize("backend", ["vanilla", "alternating", "fused"])
def test_empty_batch_gives_empty_outputs_and_gradients(backend, monkeypatch):
    from gpulab.rnn import module

    monkeypatch.setattr(module, "flashrnn", None)  # an empty batch must not reach the backends
    m = rnn.LSTM(3, 8, num_layers=2, backend=backend)
    for batch_first, shape in ((False, (5, 0, 3)), (True, (0, 5, 3))):
        m.batch_first = batch_first
        m.zero_grad(set_to_none=True)
        x = torch.randn(shape, requires_grad=True)
        hx = tuple(torch.zeros(2, 0, 8, requires_grad=True) for _ in range(2))
        y, (h_n, c_n) = m(x, hx)
        y_ref, (h_r, _) = torch.nn.LSTM(3, 8, num_layers=2, batch_first=batch_first)(x)
        assert y.shape == y_ref.shape and h_n.shape == c_n.shape == h_r.shape
        (y.sum() + h_n.sum() + c_n.sum()).backward()
        assert x.grad.shape == x.shape and hx[0].grad.shape == (2, 0, 8)
        assert all(p.grad is not None and not p.grad.any() for p in m.parameters())


def test_no_time_steps_is_refused_naming_the_time_dimension():
    m = _small(batch_first=True)
    with pytest.raises(ValueError, match=r"x has shape \(2, 0, 3\): 0 time steps \(T is dimension 1 of \[B, T, I\]"):
        m(torch.zeros(2, 0, 3))
    with pytest.raises(ValueError, match="dimension 0 of an unbatched"):
        m(torch.zeros(0, 3))


def test_dtypes_the_triton_backends_cannot_take_run_the_pytorch_loop_with_a_warning():
    from gpulab.rnn import module

    m = rnn.LSTM(3, 8).double()
    module._WARNED.discard((str(torch.float64), "fused"))
    with pytest.warns(UserWarning, match="torch.float64 runs through backend='vanilla'") as info:
        y = m(torch.randn(4, 2, 3, dtype=torch.float64))[0]
    message = str(info[0].message)
    assert y.dtype == torch.float64 and "float32, float16" in message and "module.to(torch.float32)" in message
    m.backend = "vanilla"
    assert m(torch.randn(4, 2, 3, dtype=torch.float64))[0].dtype == torch.float64
    with pytest.raises(ValueError, match=r"x has dtype torch.int64.*x.to\(torch.float64\)") as err:
        m(torch.ones(4, 2, 3, dtype=torch.long))
    assert "module.to" not in str(err.value)
    if not runtime.on_gpu():
        module._WARNED.discard((str(torch.bfloat16), "alternating"))
        with pytest.warns(UserWarning, match="bfloat16 arithmetic is wrong"):
            rnn.LSTM(3, 8, backend="alternating").bfloat16()(torch.randn(4, 2, 3).bfloat16())


def test_drop_in_for_nn_lstm_arguments_and_unbatched_input():
    torch.manual_seed(0)
    ref = torch.nn.LSTM(3, 8, 2, False, True).double()  # num_layers=2, bias=False, batch_first=True, positionally
    ours = rnn.LSTM(3, 8, 2, False, True, 0.0, False, 0, backend="vanilla").double()
    assert (ours.num_layers, ours.bias, ours.batch_first, ours.num_heads) == (2, False, True, 1)
    ours.load_state_dict(rnn.LSTM.from_torch(ref, backend="vanilla").state_dict())
    assert ours.flatten_parameters() is None
    with pytest.raises(TypeError, match="positional"):
        rnn.LSTM(3, 8, 1, True, False, 0.0, False, 0, None, None, 2)  # num_heads is a keyword only
    x, h0 = torch.randn(5, 3, dtype=torch.float64), torch.randn(2, 8, dtype=torch.float64)
    for hx in (None, (h0, h0 * 0.5)):
        y, (h_n, c_n) = ours(x, hx=hx)
        y_r, (h_r, c_r) = ref(x, hx)
        assert y.shape == (5, 8) and h_n.shape == c_n.shape == (2, 8)
        for a, r_, name in ((y, y_r, "y"), (h_n, h_r, "h_n"), (c_n, c_r, "c_n")):
            check.assert_close(a, r_, dtype=torch.float64, name=name)
