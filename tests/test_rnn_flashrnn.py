"""gpulab.rnn.flashrnn's interface and vanilla backend (against the flashrnn package), and the LSTM module."""

import pytest
import torch

from gpulab import check, rnn
from gpulab.rnn import functions

flashrnn_pkg = pytest.importorskip("flashrnn")

COUNTS = {"lstm": (4, 4, 4, 2), "gru": (3, 3, 4, 1), "elman": (1, 1, 1, 1)}


def make_inputs(function, B, T, NH, DH, dtype=torch.float32, device="cpu", seed=0, scale=0.5):
    gw, gr, gb, s = COUNTS[function]
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape, sc=1.0: (torch.randn(*shape, generator=g, dtype=torch.float64) * sc).to(device, dtype)
    return r(B, T, gw, NH, DH), r(gr, NH, DH, DH, sc=scale / DH**0.5), r(gb, NH, DH), r(s, B, 1, NH, DH)


def test_gate_counts_match_the_package():
    from flashrnn.flashrnn.flashrnn import rnn_function_registry

    for name, f in functions.FUNCTIONS.items():
        gr, gw, _, gt, s = rnn_function_registry[name]["gates_states"]
        assert (f.gates_w, f.gates_r, f.gates_b, f.states) == (gw, gr, gt, s) == COUNTS[name][:2] + (gt, s)


@pytest.mark.parametrize("function", ["lstm", "gru", "elman"])
def test_vanilla_equals_the_flashrnn_package(function):
    """Forward, last states and all gradients equal the package's vanilla backend (same layouts, same R index)."""
    inputs = [t.requires_grad_() for t in make_inputs(function, B=3, T=5, NH=2, DH=7)]
    ours = rnn.flashrnn(*inputs, function=function, backend="vanilla")
    grads = torch.autograd.grad(ours[0].sum() + 2 * ours[1].sum(), inputs)
    theirs = flashrnn_pkg.flashrnn(*inputs, function=function, backend="vanilla", dtype="float32")
    ref_grads = torch.autograd.grad(theirs[0].sum() + 2 * theirs[1].sum(), inputs)
    for a, b, name in zip(ours + grads, theirs + ref_grads, ["states", "last", "dWx", "dR", "db", "dstates"]):
        assert a.shape == b.shape, name
        check.assert_close(a, b.double(), dtype=torch.float32, name=name)


def test_default_states_are_zero_and_positional_call():
    Wx, R, b, s0 = make_inputs("lstm", B=2, T=3, NH=1, DH=4)
    a = rnn.flashrnn(Wx, R, b, None, "lstm", "vanilla")
    z = rnn.flashrnn(Wx, R, b, torch.zeros_like(s0), "lstm", "vanilla")
    assert torch.equal(a[0], z[0]) and torch.equal(a[1], z[1])
    assert a[0].shape == (2, 2, 3, 1, 4) and a[1].shape == (2, 2, 1, 1, 4)


def test_dtype_casts_inputs_and_outputs():
    Wx, R, b, s0 = make_inputs("elman", B=2, T=3, NH=1, DH=4)
    out, last = rnn.flashrnn(Wx, R, b, s0, "elman", "vanilla", dtype="float64")
    assert out.dtype == last.dtype == torch.float64


@pytest.mark.parametrize(
    "change, match",
    [
        ({"function": "slstm"}, "function='slstm' is not supported"),
        ({"backend": "cuda_fused"}, "corresponds to backend='fused'"),
        ({"Wx": torch.zeros(2, 3, 4, 4)}, "Wx must be"),
        ({"Wx": torch.zeros(2, 3, 3, 1, 4)}, "takes G_w = 4"),
        ({"R": torch.zeros(4, 1, 4, 5)}, "R must be"),
        ({"b": torch.zeros(4, 4)}, "b must be"),
        ({"states": torch.zeros(2, 2, 3, 1, 4)}, "states must be"),
        ({"dtype": "float8"}, "not a dtype"),
    ],
)
def test_validation(change, match):
    Wx, R, b, s0 = make_inputs("lstm", B=2, T=3, NH=1, DH=4)
    args = {"Wx": Wx, "R": R, "b": b, "states": s0, "function": "lstm", "backend": "vanilla"} | change
    with pytest.raises(ValueError, match=match):
        rnn.flashrnn(**args)


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
