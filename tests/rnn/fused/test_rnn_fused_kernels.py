"""The fused backend's kernels: one launch, gates saved only for training, the backward's initial carry, its pieces
in time (on two streams on a GPU), and R re-read every step."""

import dataclasses

import pytest
import torch

from gpulab import check, rnn, runtime
from gpulab.rnn.fused import backward as fused_backward
from gpulab.rnn.fused import forward as fused_forward
from gpulab.rnn.fused import plan, tiling
from gpulab.rnn.fused.config import BackwardConfig, FusedConfig


def test_fused_forward_is_one_launch_and_saves_gates_only_for_training(monkeypatch, make_inputs):
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
        # evaluation of a trained model: its parameters require grad, but no_grad means no backward will run
        # (autograd still sets ctx.needs_input_grad inside a Function's forward)
        rnn.flashrnn(Wx, R.requires_grad_(), b, s0, backend="fused")
    rnn.flashrnn(Wx, R, b, s0, backend="fused")
    assert launches == [False, False, True], "one launch for all 6 steps; gates saved only when a gradient is needed"


def test_fused_refuses_bfloat16_in_the_interpreter(make_inputs):
    """(What no split holds is refused in test_rnn_split.py.)"""
    if not runtime.INTERPRET:
        pytest.skip("bfloat16 is fine on a GPU")
    Wx, R, b, s0 = make_inputs("lstm", 1, 1, 1, 16, device=runtime.device)
    with pytest.raises(ValueError, match="bfloat16"):
        rnn.flashrnn(Wx.bfloat16(), R.bfloat16(), b.bfloat16(), backend="fused")


@pytest.mark.parametrize("function", ["lstm", "gru"])
def test_fused_backward_takes_the_last_states_gradient_as_its_initial_carry(function, make_inputs):
    """d_last passed to the kernel (no copy of d_out) == d_last added into d_out at the last step (the old way)."""
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


@pytest.mark.parametrize("layout", fused_backward.DG_LAYOUTS)
@pytest.mark.parametrize("function", ["lstm", "gru", "elman"])
def test_backward_in_time_pieces_equals_one_launch(function, layout, monkeypatch, run_case):
    """The overlapped backward (the kernel run piece by piece in time, last piece first, each starting from the
    previous piece's carry; dR and db summed per piece) gives the gradients of the float64 reference, with dG in
    either layout (the GRU's dWx is three of its four gates: a strided view of dG)."""
    config = FusedConfig(backward=BackwardConfig(dg_layout=layout, cuts=(0.3, 0.6), min_piece_steps=1))
    with plan.config_as(config):
        assert fused_backward.pieces(7, config.backward) == [(0, 2), (2, 4), (4, 7)]
        run_case("fused", function, 2, 7, 2, 16)  # pieces of 2, 2 and 3 steps


@pytest.mark.gpu
@pytest.mark.parametrize("layout", fused_backward.DG_LAYOUTS)
@pytest.mark.parametrize("function", ["lstm", "gru"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_gpu_backward_pieces_on_two_streams(function, dtype, layout, monkeypatch, run_case):
    """At a length where the overlapped backward cuts the sequence (here into 3 pieces: 100, 100, 101 steps), its
    products on the second stream give the float64 reference's gradients (outputs poisoned first)."""
    config = FusedConfig(backward=BackwardConfig(dg_layout=layout, cuts=(1 / 3, 2 / 3), min_piece_steps=64))
    with plan.config_as(config), runtime.poisoning(True):
        assert fused_backward.pieces(301, config.backward) == [(0, 100), (100, 201), (201, 301)]
        run_case("fused", function, 5, 301, 3, 32, dtype=dtype)


@pytest.mark.parametrize("function", ["lstm", "gru"])
def test_fused_kernels_rereading_r_every_step_agree(function, make_inputs):
    """The tiling's other option, R re-read at every step instead of kept on chip, computes the same states and
    gate gradients (it is never chosen on the GPUs in the spec table, but it must stay correct)."""
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


@pytest.mark.parametrize("function, B, T, NH, DH", [("lstm", 9, 4, 2, 17), ("gru", 3, 5, 1, 16), ("lstm", 1, 3, 1, 1)])
def test_backward_per_gate_product_is_the_reference(function, B, T, NH, DH, monkeypatch, run_case):
    """dh_{t-1} as G products of one gate each (``BackwardConfig.product`` 'per gate', chosen at head dims >= 128)
    gives the float64 reference's gradients, at odd sizes; and per_gate says which product each case runs."""
    with plan.config_as(FusedConfig(backward=BackwardConfig(product="per gate"))):
        run_case("fused", function, B, T, NH, DH)


def test_per_gate_product_by_head_dim():
    lstm, elman = rnn.functions.get_function("lstm"), rnn.functions.get_function("elman")
    at = {d: tiling.fused_tiling(16, 1, d, "lstm", torch.bfloat16, gpu="H100", direction="backward") for d in (64, 128)}
    assert BackwardConfig().product == "by head dim"
    assert not fused_backward.per_gate(lstm, at[64]) and fused_backward.per_gate(lstm, at[128])
    assert fused_backward.per_gate(lstm, at[64], "per gate") and not fused_backward.per_gate(lstm, at[128], "all gates")
    assert not fused_backward.per_gate(elman, at[128])  # one gate: nothing to take apart
    assert not fused_backward.per_gate(lstm, dataclasses.replace(at[128], r_on_chip=False))
