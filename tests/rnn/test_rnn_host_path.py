"""The fused backend's host path (issue 16): checks and tiles chosen once per input signature, launches kept per
problem, one stream for a sequence too short to cut. What it must not change: the results, and the errors for bad
input (a bad call after good ones with another signature is still refused)."""

import pytest
import torch

from gpulab import check, launch, rnn, runtime
from gpulab.rnn import api
from gpulab.rnn.fused import experiments, plan, tiling


def test_tiles_and_checks_are_chosen_once_per_signature(monkeypatch, make_inputs):
    calls = {"tiling": 0, "checks": 0}
    real_tiling, real_checks = tiling.fused_tiling, api.check_inputs

    def counting_tiling(*args, **kwargs):
        calls["tiling"] += 1
        return real_tiling(*args, **kwargs)

    def counting_checks(*args, **kwargs):
        calls["checks"] += 1
        return real_checks(*args, **kwargs)

    monkeypatch.setattr(tiling, "fused_tiling", counting_tiling)
    monkeypatch.setattr(api, "check_inputs", counting_checks)
    plan.clear_cache()
    api._CHECKED.clear()
    Wx, R, b, s = (t.to(runtime.device) for t in make_inputs("lstm", 2, 3, 1, 16))
    first = rnn.flashrnn(Wx, R, b, s, backend="fused")
    again = rnn.flashrnn(Wx, R, b, s, backend="fused")
    assert calls == {"tiling": 1, "checks": 1}, calls  # inference: the forward's tiles only, once
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    rnn.flashrnn(Wx, R, b, backend="fused")  # no initial states: another signature, checked once more
    assert calls["checks"] == 2


def test_a_bad_call_after_good_ones_is_still_refused(make_inputs):
    Wx, R, b, s = (t.to(runtime.device) for t in make_inputs("lstm", 2, 3, 1, 16))
    rnn.flashrnn(Wx, R, b, s, backend="fused")
    with pytest.raises(ValueError, match="R must be"):
        rnn.flashrnn(Wx, R[:, :, :8], b, s, backend="fused")
    with pytest.raises(ValueError, match="states"):
        rnn.flashrnn(Wx, R, b, s[:1], backend="fused")
    with pytest.raises(ValueError, match="backend"):
        rnn.flashrnn(Wx, R, b, s, backend=["fused"])  # unhashable: no cache key, the checks say what is wrong
    with pytest.raises(TypeError, match="R must be a torch.Tensor"):
        rnn.flashrnn(Wx, R.tolist(), b, s, backend="fused")


def test_launches_are_kept_per_problem(make_inputs):
    launch._LAUNCHES.clear()
    inputs = [t.to(runtime.device).requires_grad_() for t in make_inputs("gru", 3, 2, 2, 16)]
    for _ in range(2):
        out, last = rnn.flashrnn(*inputs, function="gru", backend="fused")
        torch.autograd.grad(out.sum() + last.sum(), inputs)
    kernels = sorted(k[0].__name__ if hasattr(k[0], "__name__") else str(k[0]) for k in launch._LAUNCHES)
    # the forward kernel, the backward kernel and the parameter gradients (few rows: one launch), one Launch each
    assert kernels == ["fused_backward_kernel", "fused_forward_kernel", "parameter_grads_kernel"], kernels


def test_aligned():
    x = torch.zeros(8, dtype=torch.float32)
    assert launch.aligned(x) and not launch.aligned(x[1:]) and not launch.aligned(x, x[1:])


def test_a_training_loop_takes_dwx_without_a_copy(monkeypatch, make_inputs):
    """With dG written in Wx's layout (``BackwardConfig.dg_layout`` 'batch', what ships), ``loss.backward()`` with
    ``Wx.grad = None`` keeps the kernel's dWx as the gradient (autograd copies a gradient whose strides differ from its
    input's: all of dG, every step); the values still match the float64 reference."""
    seen = {}
    real_loops = plan._loops

    def recording_loops(*args):
        run_forward, run_backward = real_loops(*args)

        def run_backward_recorded(*a, **k):
            grads = run_backward(*a, **k)
            seen["dWx"] = grads[0].data_ptr()
            return grads

        return run_forward, run_backward_recorded

    monkeypatch.setattr(plan, "_loops", recording_loops)
    inputs = [t.to(runtime.device).requires_grad_() for t in make_inputs("lstm", 2, 3, 1, 16)]
    with experiments.backward_as("batch"):
        out, _ = rnn.flashrnn(*inputs, backend="fused")
        out.sum().backward()
    Wx = inputs[0]
    assert Wx.grad.stride() == Wx.stride() and Wx.grad.data_ptr() == seen["dWx"]
    ref_in = [t.detach().double().requires_grad_() for t in inputs]
    rnn.flashrnn(*ref_in, backend="vanilla")[0].sum().backward()
    for t, r in zip(inputs, ref_in):
        check.assert_close(t.grad, r.grad, name="gradient")


@pytest.mark.gpu
@pytest.mark.parametrize("T", [4, 300])  # one piece; two pieces on two streams
def test_gpu_the_step_captured_by_make_graphed_callables_equals_eager(T, make_inputs):
    """The optional capture of a repeated shape (``torch.cuda.make_graphed_callables``, forward and backward as two
    CUDA graphs inside an autograd Function) gives the eager step's gradients, bit for bit."""
    x = [t.to(runtime.device, torch.bfloat16).requires_grad_() for t in make_inputs("lstm", 2, T, 2, 64)]

    def forward(*inputs):
        return rnn.flashrnn(*inputs, backend="fused")[0]

    forward(*x).sum().backward()
    eager = [t.grad.clone() for t in x]
    graphed = torch.cuda.make_graphed_callables(forward, tuple(x))
    for _ in range(2):  # replayed twice: the second step must not see the first one's state
        for t in x:
            t.grad = None
        graphed(*x).sum().backward()
    for t, e in zip(x, eager):
        assert torch.equal(t.grad, e)
