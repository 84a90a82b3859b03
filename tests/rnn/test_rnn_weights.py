"""Reading an nn.LSTM's weights (gpulab.rnn.weights): layouts, shared or copied as a whole, derived layouts rebuilt
when the module changes."""

import pytest
import torch

from gpulab import check, runtime
from gpulab.rnn import LSTMWeights, from_torch_lstm, ladder


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_from_torch_lstm_layouts(batch_first, bias):
    m = torch.nn.LSTM(5, 7, num_layers=3, batch_first=batch_first, bias=bias)
    w = from_torch_lstm(m)
    assert isinstance(w, LSTMWeights) and w.batch_first == batch_first
    assert (w.input_size, w.hidden_size, w.num_layers) == (5, 7, 3)
    assert [tuple(t.shape) for t in w.w_ih] == [(28, 5), (28, 7), (28, 7)]
    assert all(tuple(t.shape) == (28, 7) for t in w.w_hh) and all(tuple(b.shape) == (28,) for b in w.bias)
    assert torch.equal(w.w_ih[1], m.weight_ih_l1.detach()) and torch.equal(w.w_hh[2], m.weight_hh_l2.detach())
    want = (m.bias_ih_l0 + m.bias_hh_l0).detach() if bias else torch.zeros(28)
    check.assert_close(w.bias[0], want.double(), rtol=1e-6)
    half = w.to(dtype=torch.float16)
    assert half.dtype == torch.float16 and half.cache == {}


def test_from_torch_lstm_rejects():
    with pytest.raises(ValueError, match="module must be a torch.nn.LSTM"):
        from_torch_lstm(torch.nn.GRU(4, 4))
    with pytest.raises(ValueError, match="bidirectional"):
        from_torch_lstm(torch.nn.LSTM(4, 4, bidirectional=True))
    with pytest.raises(ValueError, match="proj_size"):
        from_torch_lstm(torch.nn.LSTM(4, 8, proj_size=2))


def test_weights_share_the_module_or_copy_all_of_it():
    m = torch.nn.LSTM(3, 4, num_layers=2)
    shared = from_torch_lstm(m)
    for t, p in zip(shared.sources(), [m.weight_ih_l0, m.weight_ih_l1, m.weight_hh_l0, m.weight_hh_l1,
                                       m.bias_ih_l0, m.bias_ih_l1, m.bias_hh_l0, m.bias_hh_l1]):  # fmt: skip
        assert t.data_ptr() == p.data_ptr()
    copied = from_torch_lstm(m, dtype=torch.float16)
    params = {p.data_ptr() for p in m.parameters()}
    assert all(t.data_ptr() not in params for t in copied.sources())
    bias = copied.bias[1].clone()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.5)
    assert torch.equal(copied.bias[1], bias), "a copy is a snapshot"
    check.assert_close(shared.bias[1], (m.bias_ih_l1 + m.bias_hh_l1).detach().double(), rtol=1e-6, name="bias")


def test_every_step_follows_an_optimizer_step_on_the_module():
    """Steps 3-8 cache derived layouts (transposed, stacked, summed bias); after the module trains, every step
    computes the trained module, as nn.LSTM itself and the float64 reference do."""
    torch.manual_seed(0)
    m = torch.nn.LSTM(5, 8, num_layers=3).to(runtime.device)
    w = from_torch_lstm(m)
    x = check.random_tensor(4, 2, 5)
    for n in ladder.STEPS:  # build every cached layout from the untrained weights
        ladder.run_step(n, x, w)
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    m(x)[0].square().sum().backward()
    opt.step()
    with torch.no_grad():
        want = m.double()(x.double())
        m.float()
    check.assert_close(ladder.lstm_reference(x, w)[0], want[0], rtol=1e-6, name="reference y")
    for n in ladder.STEPS:
        y, (h, c) = ladder.run_step(n, x, w)
        for got, ref, name in ((y, want[0], "y"), (h, want[1][0], "h_n"), (c, want[1][1], "c_n")):
            check.assert_close(got, ref, dtype=torch.float32, name=name, context=f"step {n} after training")


def test_derived_layouts_are_built_once_while_the_weights_stay():
    w = from_torch_lstm(torch.nn.LSTM(3, 4))
    calls = []
    build = lambda: calls.append(1) or len(calls)
    assert w.derived("k", build) == w.derived("k", build) == 1
    with torch.no_grad():
        w.w_hh[0].mul_(2.0)
    assert w.derived("k", build) == 2 and len(calls) == 2
