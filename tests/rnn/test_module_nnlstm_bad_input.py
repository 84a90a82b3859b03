"""Bad input to gpulab.rnn.LSTM's nn.LSTM arguments: refused with the argument, the value, what is allowed and the
fix; and the proj_size path on Triton backends says so once."""

import warnings

import pytest
import torch
from torch.nn.utils.rnn import pack_sequence

from gpulab import rnn
from gpulab.rnn import module as lstm_module


def _m(**kw):
    return rnn.LSTM(3, 8, **({"backend": "vanilla"} | kw))


@pytest.mark.parametrize(
    "make, error, words",
    [
        (lambda: _m(dropout=1.5), ValueError, ["dropout=1.5", "[0, 1]", "dropout=0.1"]),
        (lambda: _m(dropout=float("nan")), ValueError, ["dropout=nan", "[0, 1]"]),
        (lambda: _m(dropout=None), TypeError, ["dropout must be a number", "NoneType"]),
        (lambda: _m(proj_size=8), ValueError, ["proj_size=8", "[0, 8)", "smaller proj_size"]),
        (lambda: _m(proj_size=-2), ValueError, ["proj_size=-2", "[0, 8)"]),
        (lambda: _m(proj_size="2"), TypeError, ["proj_size must be an int", "'2'"]),
        (lambda: _m(proj_size=2, num_heads=2), ValueError, ["num_heads=2", "num_heads=1 with proj_size"]),
        (lambda: _m(bidirectional=1), TypeError, ["bidirectional must be True or False", "1"]),
        (lambda: _m(bidirectional="yes"), TypeError, ["bidirectional"]),
    ],
    ids=["dropout-1.5", "dropout-nan", "dropout-none", "proj-eq-hidden", "proj-negative", "proj-str", "proj-heads",
         "bidirectional-int", "bidirectional-str"],
)  # fmt: skip
def test_bad_constructor_arguments(make, error, words):
    with pytest.raises(error) as info:
        make()
    for w in words:
        assert w in str(info.value), f"{w!r} not in: {info.value}"


@pytest.mark.parametrize(
    "kw, hx, expected",
    [
        ({"bidirectional": True, "num_layers": 2}, ((4 - 1, 2, 8), (4, 2, 8)), "expected (4, 2, 8)"),
        ({"proj_size": 5}, ((1, 2, 8), (1, 2, 8)), "expected (1, 2, 5)"),
        ({"proj_size": 5}, ((1, 2, 5), (1, 2, 5)), "c0 has shape (1, 2, 5), expected (1, 2, 8)"),
        ({"bidirectional": True}, ((2, 3, 8), (2, 3, 8)), "expected (2, 2, 8)"),
    ],
    ids=["bi-layers", "proj-h0", "proj-c0", "batch"],
)
def test_initial_states_of_the_wrong_shape_name_the_expected_shape(kw, hx, expected):
    m = _m(**kw)
    with pytest.raises(ValueError, match="hx's") as info:
        m(torch.randn(4, 2, 3), tuple(torch.zeros(s) for s in hx))
    assert expected in str(info.value) and "num_layers * num_directions" in str(info.value)


def test_packed_sequence_of_the_wrong_feature_size():
    m = _m()
    with pytest.raises(ValueError, match=r"PackedSequence of data shape \(5, 4\).*input_size=3.*\[total steps, 3\]"):
        m(pack_sequence([torch.randn(3, 4), torch.randn(2, 4)]))
    packed = pack_sequence([torch.randn(3, 3), torch.randn(1, 3)])
    with pytest.raises(ValueError, match=r"expected \(1, 2, 8\).*B = the number of sequences"):
        m(packed, (torch.zeros(1, 3, 8), torch.zeros(1, 3, 8)))


@pytest.mark.parametrize("backend", ["alternating", "fused"])
def test_proj_size_on_a_triton_backend_warns_once_and_runs(backend, monkeypatch):
    monkeypatch.setattr(lstm_module, "_WARNED", set())
    m = rnn.LSTM(3, 8, proj_size=4, backend=backend)
    x = torch.randn(2, 1, 3)
    with pytest.warns(UserWarning, match=f"proj_size=4 runs through a PyTorch loop.*backend='{backend}'"):
        y, (h, c) = m(x)
    assert y.shape == (2, 1, 4) and h.shape == (1, 1, 4) and c.shape == (1, 1, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m(x)  # once
    m.backend = "vanilla"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m(x)  # the vanilla backend is a PyTorch loop itself: nothing to say


@pytest.mark.parametrize("backend", ["vanilla", "fused"])
def test_inputs_on_another_device_than_the_module_name_the_tensor(backend):
    # ("meta" stands for any other device): x used to reach flashrnn's checks, which named an internal "Wx", and
    # an h0 or c0 elsewhere failed inside torch with a RuntimeError naming neither
    m = _m(backend=backend, bidirectional=True)
    with pytest.raises(ValueError, match=r"x is on meta but the module's parameters are on cpu.*x\.to\('cpu'\)"):
        m(torch.randn(4, 2, 3, device="meta"))
    h, c = torch.zeros(2, 2, 8), torch.zeros(2, 2, 8)
    with pytest.raises(ValueError, match=r"hx's h0 is on meta but x is on cpu.*h0\.to\('cpu'\)"):
        m(torch.randn(4, 2, 3), (h.to("meta"), c))
    with pytest.raises(ValueError, match=r"hx's c0 is on meta but x is on cpu"):
        m(torch.randn(4, 2, 3), (h, c.to("meta")))


def test_dropout_takes_numpy_floats_as_nn_lstm_does():
    np = pytest.importorskip("numpy")
    m = _m(num_layers=2, dropout=np.float32(0.25))  # a TypeError before; nn.LSTM takes any numbers.Number
    assert m.dropout == 0.25 and type(m.dropout) is float
    assert torch.nn.LSTM(3, 8, 2, dropout=np.float32(0.25)).dropout == 0.25


def test_proj_size_takes_numpy_ints_as_nn_lstm_does():
    np = pytest.importorskip("numpy")
    m = _m(proj_size=np.int64(2))  # a TypeError before; nn.LSTM takes any integer
    assert m.proj_size == 2 and type(m.proj_size) is int and m.weight_hr_l0.shape == (2, 8)
    assert torch.nn.LSTM(3, 8, proj_size=np.int64(2)).proj_size == 2


def test_input_of_the_wrong_feature_size_names_the_shape_and_the_fix():
    with pytest.raises(ValueError) as info:
        _m()(torch.randn(4, 2, 5))
    for w in ["(4, 2, 5)", "5 features (its last dimension)", "input_size=3", "pass x with 3 features",
              "input_size=5"]:  # fmt: skip
        assert w in str(info.value), f"{w!r} not in: {info.value}"
