"""gpulab.rnn.flashrnn's interface and vanilla backend (against the flashrnn package), and the LSTM module."""

import pytest
import torch

from gpulab import check, rnn
from gpulab.rnn import functions

flashrnn_pkg = pytest.importorskip("flashrnn")


def test_gate_counts_match_the_package(gate_counts):
    from flashrnn.flashrnn.flashrnn import rnn_function_registry

    for name, f in functions.FUNCTIONS.items():
        gr, gw, _, gt, s = rnn_function_registry[name]["gates_states"]
        assert (f.gates_w, f.gates_r, f.gates_b, f.states) == (gw, gr, gt, s) == gate_counts[name][:2] + (gt, s)


@pytest.mark.parametrize("function", ["lstm", "gru", "elman"])
def test_vanilla_equals_the_flashrnn_package(function, make_inputs):
    """Forward, last states and all gradients equal the package's vanilla backend (same layouts, same R index)."""
    inputs = [t.requires_grad_() for t in make_inputs(function, B=3, T=5, NH=2, DH=7)]
    ours = rnn.flashrnn(*inputs, function=function, backend="vanilla")
    grads = torch.autograd.grad(ours[0].sum() + 2 * ours[1].sum(), inputs)
    theirs = flashrnn_pkg.flashrnn(*inputs, function=function, backend="vanilla", dtype="float32")
    ref_grads = torch.autograd.grad(theirs[0].sum() + 2 * theirs[1].sum(), inputs)
    for a, b, name in zip(ours + grads, theirs + ref_grads, ["states", "last", "dWx", "dR", "db", "dstates"]):
        assert a.shape == b.shape, name
        check.assert_close(a, b.double(), dtype=torch.float32, name=name)


def test_default_states_are_zero_and_positional_call(make_inputs):
    Wx, R, b, s0 = make_inputs("lstm", B=2, T=3, NH=1, DH=4)
    a = rnn.flashrnn(Wx, R, b, None, "lstm", "vanilla")
    z = rnn.flashrnn(Wx, R, b, torch.zeros_like(s0), "lstm", "vanilla")
    assert torch.equal(a[0], z[0]) and torch.equal(a[1], z[1])
    assert a[0].shape == (2, 2, 3, 1, 4) and a[1].shape == (2, 2, 1, 1, 4)


def test_dtype_casts_inputs_and_outputs(make_inputs):
    Wx, R, b, s0 = make_inputs("elman", B=2, T=3, NH=1, DH=4)
    out, last = rnn.flashrnn(Wx, R, b, s0, "elman", "vanilla", dtype="float64")
    assert out.dtype == last.dtype == torch.float64


@pytest.mark.parametrize(
    "change, match",
    [
        ({"function": "slstm"}, "function='slstm' is not supported"),
        ({"backend": "cuda_fused"}, "corresponds to backend='fused'"),
        ({"Wx": torch.zeros(2, 3, 4, 4)}, "Wx must be"),
        ({"Wx": torch.zeros(2, 3, 3, 1, 4)}, "takes G_w = 4 input gates: give Wx .*function='gru'"),
        ({"R": torch.zeros(4, 1, 4, 5)}, "R must be"),
        ({"b": torch.zeros(4, 4)}, "b must be"),
        ({"states": torch.zeros(2, 2, 3, 1, 4)}, "states must be"),
        ({"dtype": "float8"}, "not a dtype"),
    ],
)
def test_validation(change, match, make_inputs):
    Wx, R, b, s0 = make_inputs("lstm", B=2, T=3, NH=1, DH=4)
    args = {"Wx": Wx, "R": R, "b": b, "states": s0, "function": "lstm", "backend": "vanilla"} | change
    with pytest.raises(ValueError, match=match):
        rnn.flashrnn(**args)
