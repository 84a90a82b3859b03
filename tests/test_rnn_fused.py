"""The Triton backends of gpulab.rnn.flashrnn ('fused', 'alternating'): forward and every gradient against float64."""

import itertools

import pytest
import torch
from test_rnn_flashrnn import make_inputs

from gpulab import check, rnn, runtime
from gpulab.rnn import api, fused_forward

NAMES = ["states", "last", "dWx", "dR", "db", "dstates"]


def run_case(backend, function, B, T, NH, DH, dtype=torch.float32, scale=0.5, seed=0, rtol=None):
    """Forward + backward of ``backend`` vs the vanilla backend in float64 on the same inputs and loss weights."""
    dev = runtime.device
    inputs = [t.requires_grad_() for t in make_inputs(function, B, T, NH, DH, dtype, dev, seed=seed, scale=scale)]
    before = [t.detach().clone() for t in inputs]
    out = rnn.flashrnn(*inputs, function=function, backend=backend)
    g = torch.Generator().manual_seed(seed + 1)
    w_all, w_last = (torch.randn(o.shape, generator=g, dtype=torch.float64).to(dev) for o in out)
    grads = torch.autograd.grad((out[0].double() * w_all).sum() + (out[1].double() * w_last).sum(), inputs)
    ref_in = [t.detach().double().requires_grad_() for t in inputs]
    ref = rnn.flashrnn(*ref_in, function=function, backend="vanilla")
    ref_grads = torch.autograd.grad((ref[0] * w_all).sum() + (ref[1] * w_last).sum(), ref_in)
    context = f"{backend} {function} B={B} T={T} NH={NH} DH={DH} {dtype}"
    for got, want, name in zip(tuple(out) + grads, tuple(ref) + ref_grads, NAMES):
        assert got.shape == want.shape, f"{name}: {tuple(got.shape)} != {tuple(want.shape)} ({context})"
        if dtype == torch.bfloat16 and name.startswith("d"):
            # bf16 gradients are sums over B*T products of bf16-rounded dG and h: a few elements that cancel to
            # near zero miss an elementwise 3e-2, so they are checked norm-wise (and must be finite).
            err = check.relative_error(got, want)
            assert err <= check.tolerance(dtype), f"{name} ({context}): relative error {err:.3g}"
            continue
        check.assert_close(got, want, dtype=dtype, rtol=rtol, name=name, context=context)
    for t, b in zip(inputs, before):
        assert torch.equal(t.detach(), b), f"{context}: an input was modified in place"


# CPU covering set: both backends x three functions; B 1/2/3, T 1..7, NH 1/3, DH 16 and a non-power-of-two 20.
CPU_CASES = [
    ("lstm", 3, 7, 3, 16),
    ("lstm", 1, 2, 1, 20),
    ("lstm", 2, 1, 1, 16),
    ("gru", 3, 5, 1, 16),
    ("gru", 1, 3, 3, 20),
    ("elman", 2, 7, 3, 16),
    ("elman", 3, 2, 1, 20),
]


@pytest.mark.parametrize("backend", ["fused", "alternating"])
@pytest.mark.parametrize("function, B, T, NH, DH", CPU_CASES)
def test_matches_float64_reference(backend, function, B, T, NH, DH):
    run_case(backend, function, B, T, NH, DH)


@pytest.mark.parametrize("backend", ["fused", "alternating"])
def test_float16(backend):
    run_case(backend, "lstm", 2, 3, 1, 16, dtype=torch.float16)


@pytest.mark.parametrize(
    ("function", "T", "DH"),
    [("gru", 1, 16), ("elman", 2, 24), ("lstm", 4, 17)],
    ids=["gru-T1", "elman-T2", "lstm-DH17"],
)
def test_float16_fused_paths(function, T, DH):
    """16-bit inputs travel as 32-bit pairs in the fused kernels when DH is even, element by element when odd; the
    forward's loop is unrolled by two, so even and odd T take different paths."""
    run_case("fused", function, 3, T, 2, DH, dtype=torch.float16)


@pytest.mark.parametrize("backend", ["fused", "alternating"])
@pytest.mark.parametrize("function", ["lstm", "gru", "elman"])
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_saturating_gates_give_no_nan(backend, function):
    Wx, R, b, s0 = make_inputs(function, 2, 4, 1, 16, device=runtime.device)
    inputs = [(Wx * 1e4).requires_grad_(), (R * 1e3).requires_grad_(), (b * 1e4).requires_grad_(), s0]
    out, last = rnn.flashrnn(*inputs, function=function, backend=backend)
    grads = torch.autograd.grad(out.sum() + last.sum(), inputs[:3])
    for t in (out, last, *grads):
        assert torch.isfinite(t).all()
    assert out.abs().max() <= 1e4  # h is bounded by 1; the LSTM's c by t + |c_0|


def test_fused_lstm_module_equals_nn_lstm():
    torch.manual_seed(0)
    ref = torch.nn.LSTM(6, 16, num_layers=2).to(runtime.device)
    ours = rnn.LSTM.from_torch(ref, backend="fused")
    x = torch.randn(5, 3, 6, device=runtime.device)
    y, (h, c) = ours(x)
    y_r, (h_r, c_r) = ref.double()(x.double())
    for a, r, name in ((y, y_r, "y"), (h, h_r, "h_n"), (c, c_r, "c_n")):
        check.assert_close(a, r, dtype=torch.float32, name=name)


def test_fused_forward_is_one_launch_and_saves_gates_only_for_training(monkeypatch):
    launches = []
    kernel = fused_forward.fused_forward_kernel

    class Counting:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launches.append(kwargs["SAVE_GATES"])
                return kernel[grid](*args, **kwargs)

            return launch

    monkeypatch.setattr(fused_forward, "fused_forward_kernel", Counting())
    Wx, R, b, s0 = make_inputs("lstm", 2, 6, 1, 16, device=runtime.device)
    with torch.no_grad():
        rnn.flashrnn(Wx, R, b, s0, backend="fused")
    rnn.flashrnn(Wx, R.requires_grad_(), b, s0, backend="fused")
    assert launches == [False, True], "one launch for all 6 steps; gates saved only when a gradient is needed"


def test_fused_refuses_what_does_not_fit():
    Wx, R, b, s0 = make_inputs("lstm", 1, 1, 1, 16, device=runtime.device)
    big = torch.zeros(1, 1, 4, 1, 768, device=runtime.device)
    with pytest.raises(ValueError, match="use backend='alternating'"):
        rnn.flashrnn(
            big,
            torch.zeros(4, 1, 768, 768, device=runtime.device),
            torch.zeros(4, 1, 768, device=runtime.device),
            backend="fused",
        )
    with pytest.raises(ValueError, match="bfloat16"):
        if runtime.INTERPRET:
            rnn.flashrnn(Wx.bfloat16(), R.bfloat16(), b.bfloat16(), backend="fused")
        else:
            raise ValueError("bfloat16 is fine on a GPU")


# ---------------------------------------------------------------------------------------------------------------
# GPU: the full grid (covering B x T completely, DH and NH cycling), fp32 and bf16, both backends.

GRID = [
    (B, T, (16, 32, 64, 128)[i % 4], (1, 3, 12)[i % 3])
    for i, (B, T) in enumerate(itertools.product((1, 2, 3, 16, 33), (1, 2, 7, 64)))
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("backend", ["fused", "alternating"])
@pytest.mark.parametrize("function", ["lstm", "gru", "elman"])
@pytest.mark.parametrize("B, T, DH, NH", GRID)
def test_gpu_grid(B, T, DH, NH, function, backend, dtype, monkeypatch):
    monkeypatch.setattr(api, "POISON", True)
    if backend == "fused" and not rnn.tiling.fits(B, NH, DH, function, dtype):
        with pytest.raises(ValueError, match="alternating"):
            rnn.flashrnn(*make_inputs(function, B, T, NH, DH, dtype, runtime.device), function, backend)
        return
    run_case(backend, function, B, T, NH, DH, dtype=dtype)


@pytest.mark.parametrize("function", ["lstm", "gru"])
def test_fused_backward_takes_the_last_states_gradient_as_its_initial_carry(function):
    """d_last passed to the kernel (no copy of d_out) == d_last added into d_out at the last step (the old way)."""
    from gpulab.rnn import fused_backward

    Wx, R, b, s0 = make_inputs(function, 3, 5, 2, 16, device=runtime.device)
    out, _, gates = fused_forward.fused_rnn_forward(Wx, R, b, s0, function, save_gates=True)
    d_out, d_last = check.random_tensor(*out.shape, seed=3), check.random_tensor(*s0.shape, seed=4)
    d_out, d_last = d_out.to(out), d_last.to(out)
    added = d_out.clone()
    added[:, :, -1:] += d_last
    dg_a, ds_a = fused_backward.fused_rnn_backward(d_out, gates, out, s0, R, function, d_last=d_last)
    dg_b, ds_b = fused_backward.fused_rnn_backward(added, gates, out, s0, R, function)
    check.assert_close(dg_a, dg_b.double(), name="dG")
    check.assert_close(ds_a, ds_b.double(), name="d_states")


@pytest.mark.parametrize("function", ["lstm", "gru", "elman"])
def test_backward_in_time_pieces_equals_one_launch(function, monkeypatch):
    """The overlapped backward (the kernel run piece by piece in time, last piece first, each starting from the
    previous piece's carry; dR and db summed per piece) gives the gradients of the float64 reference."""
    from gpulab.rnn import fused_backward

    monkeypatch.setattr(fused_backward, "CUTS", (0.3, 0.6))
    monkeypatch.setattr(fused_backward, "MIN_PIECE_STEPS", 1)
    assert fused_backward.pieces(7) == [(0, 2), (2, 4), (4, 7)]
    run_case("fused", function, 2, 7, 2, 16)  # pieces of 2, 2 and 3 steps


@pytest.mark.gpu
@pytest.mark.parametrize("function", ["lstm", "gru"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_gpu_backward_pieces_on_two_streams(function, dtype, monkeypatch):
    """At a length where the overlapped backward cuts the sequence (here into 3 pieces: 100, 100, 101 steps), its
    products on the second stream give the float64 reference's gradients (outputs poisoned first)."""
    from gpulab.rnn import fused_backward

    monkeypatch.setattr(api, "POISON", True)
    monkeypatch.setattr(fused_backward, "CUTS", (1 / 3, 2 / 3))
    monkeypatch.setattr(fused_backward, "MIN_PIECE_STEPS", 64)
    assert fused_backward.pieces(301) == [(0, 100), (100, 201), (201, 301)]
    run_case("fused", function, 5, 301, 3, 32, dtype=dtype)


@pytest.mark.parametrize("function", ["lstm", "gru"])
def test_fused_kernels_rereading_r_every_step_agree(function):
    """The tiling's other option, R re-read at every step instead of kept on chip, computes the same states and
    gate gradients (it is never chosen on the GPUs in the spec table, but it must stay correct)."""
    import dataclasses

    from gpulab.rnn import fused_backward, tiling

    Wx, R, b, s0 = make_inputs(function, 3, 4, 2, 16, device=runtime.device)
    fwd = tiling.fused_tiling(3, 2, 16, function, Wx.dtype, direction="forward")
    bwd = tiling.fused_tiling(3, 2, 16, function, Wx.dtype, direction="backward")
    runs = []
    for on_chip in (True, False):
        f = dataclasses.replace(fwd, r_on_chip=on_chip)
        out, last, gates = fused_forward.fused_rnn_forward(Wx, R, b, s0, function, tiling=f)
        d_out = check.random_tensor(*out.shape, seed=5).to(out)
        dG, ds0 = fused_backward.fused_rnn_backward(
            d_out, gates, out, s0, R, function, tiling=dataclasses.replace(bwd, r_on_chip=on_chip)
        )
        runs.append((out, last, dG, ds0))
    for name, a, r in zip(("states", "last", "dG", "d_states"), runs[1], runs[0]):
        check.assert_close(a, r.double(), name=name)
