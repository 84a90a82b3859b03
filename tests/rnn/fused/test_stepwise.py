"""The stepwise kernels (gpulab.rnn.fused.stepwise: one launch per step, the step's GEMM with the cell as its
epilogue) against float64, and where the plan routes a large batch to them.

On a CPU the kernels run in Triton's interpreter at small sizes (outputs poisoned: an element never written
fails); the GPU tests run the module at the drop-in grid's large batches against nn.LSTM.
"""

import pytest
import torch
from torch import nn

from gpulab import check, rnn, runtime
from gpulab.rnn.backends import alternating
from gpulab.rnn.backends.autograd import TritonRNN
from gpulab.rnn.fused import plan, stepwise
from gpulab.rnn.fused.config import FusedConfig
from gpulab.rnn.module import LSTM

GRAD_NAMES = ["states", "last", "dWx", "dR", "db", "dstates"]


def _counting(run, launched, name):
    def counted(*a, **k):
        launched[name] = launched.get(name, 0) + 1
        return run(*a, **k)

    return counted


def _loops(tiles):
    def forward(*a, **k):
        return stepwise.step_rnn_forward(*a, tiles=tiles, **k)

    def gradients(*a, **k):
        return stepwise.step_rnn_gradients(*a, tiles=tiles, **k)

    return forward, gradients


@pytest.mark.parametrize(
    "B, T, NH, DH, tiles, last",
    [
        (1, 1, 1, 16, None, True),
        (3, 5, 1, 16, None, False),
        (17, 4, 2, 20, None, True),  # a head dim no tile divides, rows past one tile
        (33, 3, 1, 48, stepwise.StepTiles(16, 16, 16), True),  # three row tiles, three unit tiles, three K chunks
        (17, 3, 2, 20, stepwise.StepTiles(16, 16, 16), True),  # two heads, a unit tile past the head's end
        (9, 2, 1, 48, stepwise.StepTiles(16, 16, 32), False),  # a K chunk past the head's end
    ],
)
def test_matches_float64(B, T, NH, DH, tiles, last, make_inputs):
    """Forward and every gradient (through ``TritonRNN``, as the plan runs the loops) against the float64 vanilla
    backend, with and without a gradient of the last states."""
    inputs = [t.requires_grad_() for t in make_inputs("lstm", B, T, NH, DH, device=runtime.device, seed=B + T)]
    with runtime.poisoning(True):
        out = TritonRNN.apply(*inputs, "lstm", *_loops(tiles))
    g = torch.Generator().manual_seed(7)
    w = [torch.randn(o.shape, generator=g, dtype=torch.float64) for o in out]
    loss = (out[0].double() * w[0]).sum() + ((out[1].double() * w[1]).sum() if last else 0)
    with runtime.poisoning(True):
        grads = torch.autograd.grad(loss, inputs)
    ref_in = [t.detach().double().requires_grad_() for t in inputs]
    ref = rnn.flashrnn(*ref_in, function="lstm", backend="vanilla")
    ref_loss = (ref[0] * w[0]).sum() + ((ref[1] * w[1]).sum() if last else 0)
    ref_grads = torch.autograd.grad(ref_loss, ref_in)
    for got, want, name in zip(tuple(out) + grads, tuple(ref) + ref_grads, GRAD_NAMES):
        assert got.shape == want.shape, name
        check.assert_close(got, want, dtype=torch.float32, name=name, context=f"B={B} T={T} NH={NH} DH={DH}")


def test_float16(make_inputs):
    """16-bit inputs: the products on 16-bit tiles, the cell and c in fp32."""
    inputs = [t.requires_grad_() for t in make_inputs("lstm", 5, 3, 1, 32, dtype=torch.float16, seed=3)]
    with runtime.poisoning(True):
        out, last = TritonRNN.apply(*inputs, "lstm", *_loops(stepwise.StepTiles(16, 16, 16)))
        grads = torch.autograd.grad(out.float().sum(), inputs)
    ref_in = [t.detach().double().requires_grad_() for t in inputs]
    ref, _ = rnn.flashrnn(*ref_in, function="lstm", backend="vanilla")
    ref_grads = torch.autograd.grad(ref.sum(), ref_in)
    for got, want, name in zip((out, *grads), (ref, *ref_grads), ("states", "dWx", "dR", "db", "dstates")):
        err = check.relative_error(got, want)
        assert err <= check.tolerance(torch.float16), f"{name}: relative error {err:.3g}"


def test_no_grad_saves_nothing(make_inputs):
    Wx, R, b, s0 = make_inputs("lstm", 2, 3, 1, 16, seed=1)
    out, last, gates = stepwise.step_rnn_forward(Wx, R, b, s0, save_gates=False)
    assert gates is None and torch.equal(last, out[:, :, -1:])


def test_refuses_other_functions(make_inputs):
    Wx, R, b, s0 = make_inputs("gru", 2, 3, 1, 16)
    with pytest.raises(ValueError, match="function='gru'.*alternating"):
        stepwise.step_rnn_forward(Wx, R, b, s0, function="gru")


def test_tiles():
    """64 rows from 64 on (Hopper's warpgroup MMA), the gates as one product, 32 units where that still makes half as
    many programs as SMs."""
    assert stepwise.step_tiles(256, 768, 1, 132) == stepwise.StepTiles(64, 32, 64, 8)  # 4 x 24 programs
    assert stepwise.step_tiles(256, 1024, 1, 132) == stepwise.StepTiles(64, 32, 64, 8)  # 4 x 32
    assert stepwise.step_tiles(64, 1536, 1, 132) == stepwise.StepTiles(64, 16, 64)  # 48 < 66: 1 x 96
    assert stepwise.step_tiles(3, 20, 1, 132) == stepwise.StepTiles(16, 16, 32)
    for bad in ((0, 16), (16, -1)):
        with pytest.raises(ValueError):
            stepwise.step_tiles(*bad)


def test_the_largest_steps_take_cublas():
    """One head of 1536 at B 256 (4.8 GFLOP a step): the alternating loops, a cuBLAS product per step."""
    from gpulab.rnn.backends.alternating import alternating_rnn_forward, alternating_rnn_gradients

    plan.clear_cache()
    loops = plan._loops(256, 1, 1536, "lstm", torch.float16, torch.device("cpu"), True, plan.current_config())
    assert loops == (alternating_rnn_forward, alternating_rnn_gradients)
    fwd, _ = plan._loops(
        256, 1, 1536, "lstm", torch.float16, torch.device("cpu"), True, FusedConfig(cublas_from_gflop=9)
    )
    assert fwd.func is stepwise.step_rnn_forward
    with pytest.raises(ValueError, match="cublas_from_gflop"):
        FusedConfig(cublas_from_gflop=0)
    plan.clear_cache()


@pytest.mark.parametrize("B, DH", [(256, 768), (256, 1024), (64, 1536)])
def test_the_plan_runs_the_grids_large_batches_stepwise(B, DH):
    """The grid's large batches (no split of R takes them in one launch each way) take the stepwise kernels, the
    whole batch at once, forward and backward; with ``large_batch='launches'`` they do not."""
    plan.clear_cache()
    assert (
        plan.steps_apply(B, 1, DH, "lstm", torch.float16, True)
        and plan.plan_kind(B, 1, DH, "lstm", torch.float16, True) == "steps"
    )
    fwd, bwd = plan._loops(B, 1, DH, "lstm", torch.float16, torch.device("cpu"), True, plan.current_config())
    assert fwd.func is stepwise.step_rnn_forward and bwd.func is stepwise.step_rnn_gradients
    with plan.config_as(FusedConfig(large_batch="launches")):
        assert not plan.steps_apply(B, 1, DH, "lstm", torch.float16, True)
        assert plan.plan_kind(B, 1, DH, "lstm", torch.float16, True) != "steps"
    plan.clear_cache()


def test_small_batches_and_other_functions_stay_on_chip():
    assert not plan.steps_apply(16, 1, 1536, "lstm", torch.float16, True)  # one launch each way of the units kernels
    assert not plan.steps_apply(256, 1, 1024, "gru", torch.float16, True)
    assert not plan.steps_apply(256, 1, 256, "lstm", torch.float16, True)  # one SM per head takes it
    assert not plan.steps_apply(64, 1, 1024, "lstm", torch.float16, True)  # the split forward takes the batch
    with pytest.raises(ValueError, match="batch"):
        plan.steps_apply(0, 1, 768)


@pytest.mark.parametrize("cublas_from_gflop", [3.0, 1e-9], ids=["stepwise", "cublas"])
def test_module_through_the_large_batch_loops(monkeypatch, cublas_from_gflop):
    """``gpulab.rnn.LSTM`` (two layers, its layer op) on a large batch's loops (the stepwise kernels, or the
    alternating loops past ``cublas_from_gflop``), forced by a plan whose on-chip kernels take nothing, against
    ``nn.LSTM`` in float64: outputs, final states and every gradient."""

    def no_launch_fits(*a, **k):
        raise ValueError("forced by the test: no on-chip launch fits")

    plan.clear_cache()
    monkeypatch.setattr(plan, "choose", no_launch_fits)
    torch.manual_seed(0)
    ours = LSTM(12, 20, 2, batch_first=True, backend="fused")
    ref = nn.LSTM(12, 20, 2, batch_first=True).double()
    ref.load_state_dict({k: v.double() for k, v in ours.state_dict().items()})
    with plan.config_as(FusedConfig(steps_min_batch=1, cublas_from_gflop=cublas_from_gflop)):
        assert plan.plan_kind(5, 1, 20, "lstm", torch.float32, True) == "steps"
        assert plan.steps_on_cublas(5, 1, 20) == (cublas_from_gflop < 1)
        launched = {}
        for name, fn in (("step", stepwise.step_forward_kernel), ("alternating", alternating.pointwise_forward_kernel)):
            monkeypatch.setattr(fn, "run", _counting(fn.run, launched, name))
        x = torch.randn(5, 7, 12, requires_grad=True)
        with runtime.poisoning(True):
            y, (h, c) = ours(x)
            (y.sum() + h.sum() + 2 * c.sum()).backward()
    assert set(launched) == {"alternating" if cublas_from_gflop < 1 else "step"}, launched
    xr = x.detach().double().requires_grad_()
    yr, (hr, cr) = ref(xr)
    (yr.sum() + hr.sum() + 2 * cr.sum()).backward()
    plan.clear_cache()
    for got, want, name in ((y, yr, "output"), (h, hr, "h_n"), (c, cr, "c_n"), (x.grad, xr.grad, "dx")):
        check.assert_close(got, want, dtype=torch.float32, name=name)
    mine = dict(ours.named_parameters())
    for name, p in ref.named_parameters():
        check.assert_close(mine[name].grad, p.grad, dtype=torch.float32, name=f"d{name}")


# ---------------------------------------------------------------------------------------------------------------
# GPU: the module at the grid's large batches, as the plan routes them, against nn.LSTM in float32.


@pytest.mark.gpu
@pytest.mark.parametrize("H, B, dtype", [(768, 256, torch.float16), (1024, 129, torch.bfloat16),
                                         (1536, 64, torch.float16), (1536, 256, torch.bfloat16)])  # fmt: skip
# (H1536 B256 runs the alternating loops: cublas_from_gflop)
def test_gpu_module_at_large_batches(H, B, dtype):
    from gpulab.rnn.fused.measure.lstm_grid import check_against_torch

    plan.clear_cache()
    assert plan.plan_kind(B, 1, H, "lstm", dtype, True) == "steps"
    torch.manual_seed(0)
    m = LSTM(H, H, batch_first=True, backend="fused").to("cuda", dtype)
    x = torch.randn(B, 48, H, device="cuda", dtype=dtype)
    with runtime.poisoning(True):
        assert check_against_torch(m, x, f"stepwise H{H} B{B}", every_weight=True) == "ok"
