"""Dropout between layers as nn.LSTM's: training only, on each layer's output but the last, the zeroed fraction p;
one layer with dropout > 0 warns with nn.LSTM's words."""

import math
import warnings

import pytest
import torch
from torch import nn

from gpulab import check, rnn


def _record_dropout(monkeypatch):
    """Patch torch.nn.functional.dropout to record (input, output) of every call."""
    calls, original = [], nn.functional.dropout

    def recording(x, p=0.5, training=True, inplace=False):
        y = original(x, p, training, inplace)
        calls.append((x.detach().clone(), y.detach().clone(), p, training))
        return y

    monkeypatch.setattr(nn.functional, "dropout", recording)
    return calls


def test_eval_equals_nn_lstm_and_train_drops_between_layers_only(monkeypatch):
    torch.manual_seed(0)
    p, L, B, T, H = 0.3, 3, 64, 16, 32
    ref = nn.LSTM(4, H, L, dropout=p, bidirectional=True).double()
    ours = rnn.LSTM.from_torch(ref, backend="vanilla")
    x = torch.randn(T, B, 4, dtype=torch.float64)
    ours.eval(), ref.eval()
    check.assert_close(ours(x)[0], ref(x)[0], dtype=torch.float64, name="y, eval")
    calls = _record_dropout(monkeypatch)
    ours.eval()(x)
    assert not calls, "no dropout in eval mode"
    ours.train()
    y_train, (h_n, _) = ours(x)
    assert len(calls) == L - 1, "between layers: after each layer but the last"
    for inp, out, prob, training in calls:
        assert prob == p and training and inp.shape == (B, T, 2 * H)
        zeroed = (out == 0) & (inp != 0)
        n = inp.numel()
        frac = zeroed.sum().item() / n
        bound = 5 * math.sqrt(p * (1 - p) / n)  # five standard deviations of a binomial fraction
        assert abs(frac - p) < bound, f"zeroed fraction {frac:.4f}, expected {p} +- {bound:.4f}"
        kept = ~zeroed
        check.assert_close(out[kept], inp[kept] / (1 - p), dtype=torch.float64, name="kept elements scaled 1/(1-p)")
    # the same function as nn.LSTM's layers with those masks between them
    inp = x
    for layer in range(L):
        one = nn.LSTM(4 if layer == 0 else 2 * H, H, bidirectional=True).double()
        one.load_state_dict(
            {k.replace(f"_l{layer}", "_l0"): v for k, v in ref.state_dict().items() if f"_l{layer}" in k}
        )
        inp, _ = one(inp)
        if layer < L - 1:
            a, b = calls[layer][0], calls[layer][1]
            mask = torch.where(a != 0, b / a, torch.zeros_like(a)).transpose(0, 1)
            inp = inp * mask
    check.assert_close(y_train, inp, dtype=torch.float64, name="y, train, nn.LSTM layers with the same masks")


def test_one_layer_with_dropout_warns_as_nn_lstm():
    with pytest.warns(UserWarning) as theirs:
        nn.LSTM(3, 8, dropout=0.5)
    with pytest.warns(UserWarning) as ours:
        rnn.LSTM(3, 8, dropout=0.5, backend="vanilla")
    assert [str(w.message) for w in ours] == [str(w.message) for w in theirs]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rnn.LSTM(3, 8, num_layers=2, dropout=0.5, backend="vanilla")
        rnn.LSTM(3, 8, dropout=0.0, backend="vanilla")
