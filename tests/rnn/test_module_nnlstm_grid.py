"""gpulab.rnn.LSTM against torch.nn.LSTM in float64, over nn.LSTM's configurations: layers, bidirectional,
proj_size, batch_first, packed (sorted, unsorted, a length-1 sequence), initial states, unbatched input, odd sizes.

Weights come from the nn.LSTM (``from_torch`` or ``load_state_dict``); outputs, h_n, c_n and the gradient of every
parameter, of x and of (h0, c0) are compared by relative error. The vanilla backend runs the whole grid in float64;
the Triton backends (Triton's interpreter on CPU) run a few tiny configurations in float32 against the float64 peer.
"""

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from gpulab import check, rnn, runtime

I_SIZE = 5

# (num_layers, bidirectional, proj_size, batch_first, input kind, with hx, B, T, hidden)
GRID = [
    (1, False, 0, False, "padded", False, 3, 7, 17),
    (2, False, 0, True, "padded", True, 1, 7, 17),
    (3, False, 0, False, "padded", True, 3, 1, 17),
    (1, True, 0, False, "padded", True, 3, 7, 17),
    (2, True, 0, True, "padded", False, 3, 7, 17),
    (1, False, 4, False, "padded", True, 3, 7, 17),
    (2, True, 4, True, "padded", True, 3, 7, 17),
    (3, True, 3, False, "padded", False, 1, 7, 17),
    (1, False, 0, False, "packed-sorted", False, 3, 7, 17),
    (2, True, 0, False, "packed-unsorted", True, 3, 7, 17),
    (2, True, 0, True, "packed-unsorted", False, 3, 7, 17),
    (2, True, 4, False, "packed-unsorted", True, 3, 7, 17),
    (1, True, 0, False, "packed-sorted", True, 1, 7, 17),
    (2, False, 0, False, "unbatched", False, 1, 7, 17),
    (2, True, 3, False, "unbatched", True, 1, 7, 17),
    (1, True, 0, False, "unbatched", True, 1, 7, 17),
]


def _ids(c):
    L, bi, P, bf, kind, hx, B, T, H = c
    return f"L{L}-{'bi' if bi else 'uni'}-P{P}-{'bf' if bf else 'tf'}-{kind}-{'hx' if hx else 'nohx'}-B{B}-T{T}-H{H}"


def _lengths(kind, B, T, g):
    """Lengths with T and 1 among them (a length-1 sequence), descending for 'packed-sorted'."""
    base = [min(T, max(1, n)) for n in (T, 1, T - 3, 2, T - 1)][:B] if B > 1 else [T]
    if kind == "packed-unsorted" and B > 1:
        base = [base[i] for i in torch.randperm(B, generator=g).tolist()]
        if base == sorted(base, reverse=True):
            base = base[::-1]
    return sorted(base, reverse=True) if kind == "packed-sorted" else base


def _make_input(kind, B, T, batch_first, dtype, g):
    """(leaf tensor to differentiate, what the module takes)."""
    if kind == "unbatched":
        x = torch.randn(T, I_SIZE, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
        return x, x
    shape = (B, T, I_SIZE) if batch_first or kind.startswith("packed") else (T, B, I_SIZE)
    x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    if kind == "padded":
        return x, x
    lengths = _lengths(kind, B, T, g)
    return x, pack_padded_sequence(x, torch.tensor(lengths), batch_first=True, enforce_sorted=kind == "packed-sorted")


def _make_hx(L, bi, P, H, B, unbatched, dtype, g):
    LD, batch = L * (2 if bi else 1), () if unbatched else (B,)
    h0 = torch.randn(LD, *batch, P or H, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    c0 = torch.randn(LD, *batch, H, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    return h0, c0


def _loss(out, h_n, c_n, g):
    y = out.data if isinstance(out, PackedSequence) else out
    ws = [torch.randn(t.shape, generator=g, dtype=torch.float64) for t in (y, h_n, c_n)]
    return sum((t.double() * w).sum() for t, w in zip((y, h_n, c_n), ws)), y


def _run(module, x_in, hx, seed):
    out, (h_n, c_n) = module(x_in, hx)
    loss, y = _loss(out, h_n, c_n, torch.Generator().manual_seed(seed))
    return loss, y, h_n, c_n


def _compare(case, backend, dtype, via):
    L, bi, P, bf, kind, with_hx, B, T, H = case
    torch.manual_seed(0)
    ref = nn.LSTM(I_SIZE, H, L, batch_first=bf, bidirectional=bi, proj_size=P).double()
    if via == "from_torch":
        ours = rnn.LSTM.from_torch(ref, backend=backend, dtype=dtype, device="cpu")
    else:
        ours = rnn.LSTM(I_SIZE, H, L, True, bf, 0.0, bi, P, backend=backend, dtype=dtype)
        ours.load_state_dict(ref.state_dict())
    assert [(k, v.shape) for k, v in ours.state_dict().items()] == [(k, v.shape) for k, v in ref.state_dict().items()]
    g = torch.Generator().manual_seed(1)
    x, x_in = _make_input(kind, B, T, bf, dtype, g)
    hx = _make_hx(L, bi, P, H, B, kind == "unbatched", dtype, g) if with_hx else None
    xr, xr_in = _make_input(kind, B, T, bf, torch.float64, torch.Generator().manual_seed(1))
    with torch.no_grad():
        xr.copy_(x)
    hxr = None if hx is None else tuple(t.detach().double().requires_grad_() for t in hx)
    loss, y, h_n, c_n = _run(ours, x_in, hx, seed=2)
    loss_r, y_r, h_r, c_r = _run(ref, xr_in, hxr, seed=2)
    assert y.shape == y_r.shape and h_n.shape == h_r.shape and c_n.shape == c_r.shape
    for name, a, r in (("output", y, y_r), ("h_n", h_n, h_r), ("c_n", c_n, c_r)):
        check.assert_close(a, r, dtype=dtype, name=f"{name} [{backend}]")
    loss.backward()
    loss_r.backward()
    theirs = dict(ref.named_parameters())
    for name, p in ours.named_parameters():
        check.assert_close(p.grad, theirs[name].grad, dtype=dtype, name=f"d{name} [{backend}]")
    check.assert_close(x.grad, xr.grad, dtype=dtype, name=f"dx [{backend}]")
    if hx is not None:
        for name, a, r in zip(("dh0", "dc0"), hx, hxr):
            check.assert_close(a.grad, r.grad, dtype=dtype, name=f"{name} [{backend}]")


@pytest.mark.parametrize("index", range(len(GRID)), ids=[_ids(c) for c in GRID])
def test_vanilla_equals_nn_lstm_float64(index):
    _compare(GRID[index], "vanilla", torch.float64, via=("from_torch", "load_state_dict")[index % 2])


@pytest.mark.parametrize("via", ["from_torch", "load_state_dict"])
def test_both_ways_of_copying_weights_agree(via):
    _compare(GRID[11], "vanilla", torch.float64, via=via)


TRITON_GRID = [
    (2, True, 0, False, "packed-unsorted", True, 3, 4, 16),
    (1, False, 0, True, "padded", True, 1, 3, 16),
    (1, True, 3, False, "unbatched", False, 1, 3, 16),
]


@pytest.mark.parametrize("backend", ["alternating", "fused"])
@pytest.mark.parametrize("case", TRITON_GRID, ids=[_ids(c) for c in TRITON_GRID])
def test_triton_backends_equal_nn_lstm(case, backend):
    if runtime.device.type != "cpu":
        pytest.skip("compares on CPU, against a float64 nn.LSTM on CPU")
    _compare(case, backend, torch.float32, via="from_torch")


def test_configurations_drawn_at_random_equal_nn_lstm():
    """Beyond the grid: configurations drawn from a fresh seed (in the failure message), vanilla, float64."""
    seed = int(torch.randint(0, 2**31 - 1, ()).item())
    g = torch.Generator().manual_seed(seed)
    pick = lambda *choices: choices[int(torch.randint(len(choices), (), generator=g))]  # noqa: E731
    for _ in range(3):
        H = pick(1, 2, 9, 17)
        kind = pick("padded", "packed-sorted", "packed-unsorted", "unbatched")
        B = 1 if kind == "unbatched" else pick(1, 2, 4)
        case = (pick(1, 2, 3), pick(False, True), pick(0, *range(1, H)), pick(False, True), kind, pick(False, True),
                B, pick(1, 2, 6), H)  # fmt: skip
        try:
            _compare(case, "vanilla", torch.float64, via=pick("from_torch", "load_state_dict"))
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, case {_ids(case)}: {exc}") from exc
