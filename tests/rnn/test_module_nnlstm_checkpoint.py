"""Checkpoints both ways: one head's state_dict is nn.LSTM's (either loads the other's, same outputs), the earlier
one-head layout still loads with a warning, several heads keep their own layout."""

import pytest
import torch
from torch import nn

from gpulab import check, rnn


def _x(T=6, B=3, I=5, seed=0):
    return torch.randn(T, B, I, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize(
    "kw",
    [{}, {"num_layers": 2, "bidirectional": True}, {"num_layers": 2, "proj_size": 3, "bidirectional": True},
     {"num_layers": 2, "bias": False, "dropout": 0.25}],
    ids=["plain", "bi-2", "bi-proj-2", "nobias-dropout"],
)  # fmt: skip
def test_state_dict_is_nn_lstms_both_ways(kw):
    torch.manual_seed(0)
    ours = rnn.LSTM(5, 7, **kw, backend="vanilla").double().eval()
    ref = nn.LSTM(5, 7, **kw).double().eval()
    sd = ours.state_dict()
    assert [(k, v.shape) for k, v in sd.items()] == [(k, v.shape) for k, v in ref.state_dict().items()]
    ref.load_state_dict(sd)  # ours -> nn.LSTM
    x = _x()
    for a, r, name in zip(ours(x)[0:1] + ours(x)[1], ref(x)[0:1] + ref(x)[1], ("y", "h_n", "c_n")):
        check.assert_close(a, r, dtype=torch.float64, name=name)
    torch.manual_seed(1)
    ref2 = nn.LSTM(5, 7, **kw).double().eval()
    ours.load_state_dict(ref2.state_dict())  # nn.LSTM -> ours
    check.assert_close(ours(x)[0], ref2(x)[0], dtype=torch.float64, name="y after loading nn.LSTM's")
    assert not torch.allclose(ours(x)[0], ref(x)[0]), "the load replaced the weights"


def _legacy_state_dict(ref: nn.LSTM, prefix=""):
    """nn.LSTM's weights in gpulab's earlier one-head layout: recurrent_l* [4, 1, H, H], bias_l* = b_ih + b_hh."""
    H, out = ref.hidden_size, {}
    for layer in range(ref.num_layers):
        out[f"{prefix}weight_ih_l{layer}"] = ref.get_parameter(f"weight_ih_l{layer}").detach().clone()
        out[f"{prefix}recurrent_l{layer}"] = ref.get_parameter(f"weight_hh_l{layer}").detach().view(4, 1, H, H).clone()
        b = ref.get_parameter(f"bias_ih_l{layer}") + ref.get_parameter(f"bias_hh_l{layer}")
        out[f"{prefix}bias_l{layer}"] = b.detach().view(4, 1, H).clone()
    return out


def test_checkpoint_in_the_earlier_layout_loads_with_a_warning():
    torch.manual_seed(0)
    ref = nn.LSTM(5, 7, num_layers=2).double()
    ours = rnn.LSTM(5, 7, num_layers=2, backend="vanilla").double()
    with pytest.warns(UserWarning, match=r"earlier one-head layout \(recurrent_l0, bias_l0, recurrent_l1, bias_l1\)"):
        ours.load_state_dict(_legacy_state_dict(ref))
    x = _x()
    check.assert_close(ours(x)[0], ref(x)[0], dtype=torch.float64, name="y, legacy checkpoint")
    assert set(ours.state_dict()) == set(ref.state_dict()), "it saves in nn.LSTM's layout again"
    parent = nn.Sequential(rnn.LSTM(5, 7, num_layers=2, backend="vanilla").double())  # under a prefix
    with pytest.warns(UserWarning, match="earlier one-head layout"):
        parent.load_state_dict(_legacy_state_dict(ref, prefix="0."))
    check.assert_close(parent[0](x)[0], ref(x)[0], dtype=torch.float64, name="y, legacy checkpoint under a prefix")


def test_several_heads_keep_their_own_layout():
    torch.manual_seed(0)
    m = rnn.LSTM(5, 8, num_layers=2, bidirectional=True, num_heads=2, backend="vanilla").double()
    keys = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    assert keys["recurrent_l0"] == keys["recurrent_l1_reverse"] == (4, 2, 4, 4)
    assert keys["bias_l0_reverse"] == (4, 2, 4) and keys["weight_ih_l1"] == (32, 16)
    assert not any(k.startswith(("weight_hh", "bias_ih")) for k in keys)
    other = rnn.LSTM(5, 8, num_layers=2, bidirectional=True, num_heads=2, backend="vanilla").double()
    other.load_state_dict(m.state_dict())
    x = _x(B=2, I=5)
    check.assert_close(other(x)[0], m(x)[0], dtype=torch.float64, name="y, several heads reloaded")
    with pytest.raises(RuntimeError, match="recurrent_l0"):
        nn.LSTM(5, 8, num_layers=2, bidirectional=True).double().load_state_dict(m.state_dict())


def test_from_torch_takes_every_configuration_and_its_mode():
    ref = nn.LSTM(5, 7, 3, False, True, 0.5, True, 4).double().train()  # bias=False, batch_first, dropout, bi, proj
    ours = rnn.LSTM.from_torch(ref, backend="vanilla")
    assert (ours.num_layers, ours.bias, ours.batch_first, ours.dropout, ours.bidirectional, ours.proj_size) == (
        3, False, True, 0.5, True, 4)  # fmt: skip
    assert ours.training and "dropout=0.5" in repr(ours) and "proj_size=4" in repr(ours)
    x = torch.randn(2, 4, 5, dtype=torch.float64)
    ours.eval(), ref.eval()
    check.assert_close(ours(x)[0], ref(x)[0], dtype=torch.float64, name="y, eval")
    assert ours.weight_hr_l2_reverse.data_ptr() != ref.weight_hr_l2_reverse.data_ptr(), "a copy, not shared"
    f32 = rnn.LSTM.from_torch(ref, backend="vanilla", dtype=torch.float32)
    assert f32.weight_ih_l0.dtype == torch.float32


@pytest.mark.parametrize("heads", [1, 2])
def test_both_directions_in_one_recurrence_equal_one_each(heads):
    """join_directions (the reverse direction's heads beside the forward's, one recurrence per layer) computes what
    one recurrence per direction computes, packed and with initial states, outputs and gradients."""
    torch.manual_seed(0)
    m = rnn.LSTM(5, 8, num_layers=2, bidirectional=True, num_heads=heads, backend="vanilla").double()
    x = torch.randn(3, 6, 5, dtype=torch.float64)
    packed = nn.utils.rnn.pack_padded_sequence(x, torch.tensor([2, 6, 1]), batch_first=True, enforce_sorted=False)
    hx = tuple(torch.randn(4, 3, 8, dtype=torch.float64) for _ in range(2))
    results = []
    for join in (True, False):
        m.join_directions = join
        m.zero_grad(set_to_none=True)
        y, (h, c) = m(packed, hx)
        (y.data.sum() + (h * c).sum()).backward()
        results.append([y.data, h, c, *(p.grad for p in m.parameters())])
    for a, b in zip(*results):
        check.assert_close(a, b, dtype=torch.float64, name="joined vs one recurrence per direction")


def test_join_directions_by_default_joins_unless_the_joined_heads_would_split(monkeypatch):
    """join_directions None: both directions in one recurrence where the fused backend runs the joined heads one
    per SM, one recurrence per direction where it would split them (or no launch fits); True/False force either;
    backends other than fused always join."""
    from gpulab.rnn.fused import plan

    m = rnn.LSTM(4, 8, bidirectional=True, num_heads=2, backend="fused")
    assert m.join_directions is None
    kinds = {}
    monkeypatch.setattr(plan, "plan_kind", lambda B, NH, DH, *a: kinds.setdefault((B, NH, DH), "single"))
    assert m._joins(5, torch.float32) and (5, 4, 4) in kinds  # 2 directions x 2 heads of 4
    for kind, joins in (("split", False), (None, False), ("single", True)):
        kinds[(5, 4, 4)] = kind
        assert m._joins(5, torch.float32) is joins
        m.join_directions = not joins
        assert m._joins(5, torch.float32) is (not joins)
        m.join_directions = None
    m.backend = "alternating"
    kinds[(5, 4, 4)] = "split"
    assert m._joins(5, torch.float32)


@pytest.mark.parametrize("backend", ["fused", "alternating"])
def test_float64_runs_like_nn_lstm_on_the_triton_backends(backend):
    """A drop-in module turned float64 (``.double()``, as gradcheck wants) runs: through the PyTorch loop, warned
    once, with nn.LSTM's outputs and gradients; float32 goes back to the kernels."""
    torch.manual_seed(0)
    ref = nn.LSTM(5, 7, num_layers=2, bidirectional=True).double()
    ours = rnn.LSTM(5, 7, num_layers=2, bidirectional=True, backend=backend).double()
    ours.load_state_dict(ref.state_dict())
    x = _x(T=4, B=2).requires_grad_(True)
    from gpulab.rnn import module

    module._WARNED.discard((str(torch.float64), backend))
    with pytest.warns(UserWarning, match="torch.float64 runs through backend='vanilla'"):
        y, (h, c) = ours(x)
    y_ref, (h_ref, c_ref) = ref(x)
    for a, r, name in ((y, y_ref, "y"), (h, h_ref, "h_n"), (c, c_ref, "c_n")):
        check.assert_close(a, r, dtype=torch.float64, name=name)
    (g,) = torch.autograd.grad(y.sum() + c.sum(), x)
    (g_ref,) = torch.autograd.grad(y_ref.sum() + c_ref.sum(), x)
    check.assert_close(g, g_ref, dtype=torch.float64, name="dx")
    assert ours.backend == backend, "the module's backend is left as set"
    small = rnn.LSTM(3, 4, backend=backend).double()
    assert torch.autograd.gradcheck(lambda t: small(t)[0], torch.randn(3, 2, 3, dtype=torch.float64,
                                                                       requires_grad=True))  # fmt: skip


@pytest.mark.parametrize("backend", ["fused", "vanilla"])
def test_all_weights_and_an_empty_batch_as_nn_lstm(backend):
    """nn.LSTM's ``all_weights`` (the same parameters, per layer and direction) and a batch of 0 sequences
    (bidirectional, two layers): empty outputs of nn.LSTM's shapes, zero gradients."""
    torch.manual_seed(0)
    ref = nn.LSTM(5, 7, num_layers=2, bidirectional=True, proj_size=0)
    ours = rnn.LSTM(5, 7, num_layers=2, bidirectional=True, backend=backend)
    ours.load_state_dict(ref.state_dict())
    assert [[tuple(w.shape) for w in ws] for ws in ours.all_weights] == [[tuple(w.shape) for w in ws]
                                                                         for ws in ref.all_weights]  # fmt: skip
    pairs = [(a, n) for ws, names in zip(ours.all_weights, ref._all_weights) for a, n in zip(ws, names)]
    assert all(a is getattr(ours, n) for a, n in pairs)
    x = torch.randn(6, 0, 5, requires_grad=True)
    (y, (h, c)), (y_ref, (h_ref, c_ref)) = ours(x), ref(x)
    assert (y.shape, h.shape, c.shape) == (y_ref.shape, h_ref.shape, c_ref.shape)
    y.sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in ours.parameters())


@pytest.mark.parametrize(
    "kw",
    [{"num_layers": 2}, {"num_layers": 2, "bidirectional": True, "proj_size": 2}, {"bias": False}],
    ids=["two-layers", "bi-proj-2", "nobias"],
)
def test_weight_names_as_nn_lstm_and_its_forget_gate_recipe(kw):
    """nn.LSTM's ``_all_weights``, ``_flat_weights_names`` and ``_flat_weights`` (read by code written for it): the
    same names, the module's own parameters; the usual forget-gate initialisation through them (``.data``) gives
    nn.LSTM's outputs on the fused backend (one that kept a bias sum would miss it)."""
    torch.manual_seed(0)
    ref = nn.LSTM(3, 4, **kw)
    ours = rnn.LSTM.from_torch(ref, backend="fused")
    assert ours._all_weights == ref._all_weights and ours._flat_weights_names == ref._flat_weights_names
    assert all(p is getattr(ours, n) for p, n in zip(ours._flat_weights, ours._flat_weights_names, strict=True))
    x = torch.randn(3, 1, 3)
    ours(x)
    for m in (ref, ours):
        for names in m._all_weights:
            for name in filter(lambda n: "bias" in n, names):
                getattr(m, name).data[4:8].fill_(1.0)
    check.assert_close(ours(x)[0], ref(x)[0].detach().double(), name="after the forget-gate recipe")
