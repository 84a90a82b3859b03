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
    check.assert_close(ours.recurrent_l0.grad.view(32, 8), ref.weight_hh_l0.grad, dtype=torch.float64, name="dR")


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
    with pytest.raises(ValueError, match=r"state must be a pair \(h0, c0\).*a tuple of 3"):
        m(x, (h, h, h))
    with pytest.raises(ValueError, match="state must be a pair"):
        m(x, h)
    with pytest.raises(ValueError, match=r"state's c0 must have shape \[2, 2, 8\]"):
        m(x, (h, torch.zeros(1, 2, 8)))


def test_mixed_dtypes_are_refused_like_nn_lstm():
    m, x = _small().double(), torch.randn(4, 2, 3)
    with pytest.raises(ValueError, match="does not match"):  # what nn.LSTM does
        torch.nn.LSTM(3, 8).double()(x)
    with pytest.raises(ValueError, match=r"x has dtype torch.float32 but the module's parameters are torch.float64"):
        m(x)
    h = torch.zeros(2, 2, 8)
    with pytest.raises(ValueError, match="state's h0 has dtype torch.float32"):
        m(x.double(), (h, h.double()))
    y, (h_n, c_n) = m(x.double())
    assert y.dtype == h_n.dtype == c_n.dtype == torch.float64


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: torch.nn.LSTM(3, 8, num_layers=2, dropout=0.5), "dropout=0.5"),
        (lambda: torch.nn.LSTM(3, 8, bidirectional=True), "bidirectional"),
        (lambda: torch.nn.LSTM(3, 8, proj_size=4), "proj_size=4"),
        (lambda: torch.nn.GRU(3, 8), "module must be a torch.nn.LSTM"),
    ],
    ids=["dropout", "bidirectional", "proj_size", "not-an-lstm"],
)
def test_from_torch_refuses_what_it_cannot_reproduce(make, match):
    with pytest.raises(ValueError, match=match):
        rnn.LSTM.from_torch(make(), backend="vanilla")


def test_from_torch_copies_and_keeps_batch_first():
    ref = torch.nn.LSTM(3, 8, batch_first=True)
    ours = rnn.LSTM.from_torch(ref, backend="vanilla")
    assert ours.batch_first and ours.weight_ih_l0.data_ptr() != ref.weight_ih_l0.data_ptr()
    with torch.no_grad():
        ours.weight_ih_l0.add_(1.0)  # a copy: training one leaves the other alone
    assert not torch.equal(ours.weight_ih_l0, ref.weight_ih_l0)
