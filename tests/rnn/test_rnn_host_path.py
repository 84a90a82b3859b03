"""The fused backend's host path (issue 16): checks and tiles chosen once per input signature, launches kept per
problem, one stream for a sequence too short to cut. What it must not change: the results, and the errors for bad
input (a bad call after good ones with another signature is still refused)."""

import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

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


class _AtenCounter(TorchDispatchMode):
    """The aten operators dispatched in the block, outside the package's kernel launches (Triton's interpreter
    dispatches its own inside them), and the launches."""

    def __init__(self, monkeypatch):
        super().__init__()
        self.ops, self.launches, self._inside = collections.Counter(), 0, 0
        real = launch.Launch.__call__

        def counted(launch_self, *args):
            self.launches += 1
            self._inside += 1
            try:
                return real(launch_self, *args)
            finally:
                self._inside -= 1

        monkeypatch.setattr(launch.Launch, "__call__", counted)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self._inside:
            self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


_SYNC_LIKE = {"item", "_local_scalar_dense", "nonzero", "is_nonzero", "equal", "masked_select", "unique", "_to_copy"}
_ALLOCATING = {"empty", "empty_strided", "new_empty", "zeros", "new_zeros", "zeros_like", "empty_like", "ones_like",
               "full", "new_full", "clone", "cat", "stack", "_to_copy", "copy_"}  # fmt: skip


@pytest.mark.parametrize("heads, allocations", [(2, 8), (1, 9)])
def test_a_repeated_module_step_dispatches_no_sync_and_few_allocations(heads, allocations, monkeypatch):
    """One training step of ``gpulab.rnn.LSTM`` (forward + ``sum().backward()``), repeated with one shape: no
    operator that reads a value back to the host (``.item()``, ``nonzero``, a copy to the CPU: on a GPU each
    waits for it), no conversion or copy, and at most ``allocations`` allocating operators: the kernels' seven
    outputs (h and c, the last states, the gates; dG, the carried gradient, dR, db) and the loss's gradient (one
    head: and b_ih's gradient, a copy of db, its own tensor since optimizers scale gradients in place). The
    fused backend's three launches (forward, backward, parameter products) and three products (the input
    projection and its two gradients). Counted without the outputs' NaN poisoning, as timed runs allocate."""
    torch.manual_seed(0)
    module = rnn.LSTM(32, 32, num_heads=heads, batch_first=True, backend="fused")
    x = torch.randn(1, 3, 32, requires_grad=True)
    leaves = [x, *module.parameters()]

    def step():
        for t in leaves:
            t.grad = None
        module(x)[0].sum().backward()

    counter = _AtenCounter(monkeypatch)
    with runtime.poisoning(False):
        step()  # the first call chooses and compiles
        counter.launches = 0
        with counter:
            step()
    ops = counter.ops
    assert not {k: n for k, n in ops.items() if k in _SYNC_LIKE}, f"sync-like operators in the step: {dict(ops)}"
    allocs = {k: n for k, n in ops.items() if k in _ALLOCATING}
    assert sum(allocs.values()) <= allocations, f"{allocs} allocating operators (at most {allocations}): {dict(ops)}"
    assert counter.launches == 3, counter.launches
    products = ops["mm"] + ops["addmm"]
    assert products == 3 and ops["sum"] == 1, dict(ops)  # (the loss; b_ih's gradient is the backend's db, no sum)


def test_zero_initial_states_are_made_once_for_the_triton_backends(make_inputs, monkeypatch):
    """flashrnn without states: the Triton backends read one zero tensor kept per shape (never written: the next
    call's states are still zeros); the vanilla loop gets new zeros every call."""
    Wx, R, b, _ = (t.to(runtime.device) for t in make_inputs("lstm", 2, 3, 1, 16))
    seen = []
    real = plan.fused_forward

    def recording(Wx, R, b, states, function):
        seen.append(states)
        return real(Wx, R, b, states, function)

    monkeypatch.setitem(api.BACKENDS, "fused", recording)
    first = rnn.flashrnn(Wx.requires_grad_(), R, b, backend="fused")
    first[0].sum().backward()
    again = rnn.flashrnn(Wx, R, b, backend="fused")
    assert seen[0] is seen[1] and not seen[0].any()
    assert torch.equal(first[0], again[0])
    assert rnn.flashrnn(Wx.double(), R.double(), b.double(), backend="vanilla")[0].shape == first[0].shape


TINY_STEP_OPERATORS = {2: 32, 1: 39}
"""Upper bounds on the aten operators of one repeated training step of the tiny call (B 1, T 4, two heads of 64),
and of one head of 64 with nn.LSTM's two biases, outside the kernels: on a host-bound GPU each costs
microseconds, so a change that adds one fails here (lower the bound when a change removes some)."""


@pytest.mark.parametrize("heads", [2, 1])
def test_the_tiny_step_dispatches_at_most_its_operators(heads, monkeypatch):
    """The tiny call's step (forward + ``sum().backward()``, x a leaf): at most :data:`TINY_STEP_OPERATORS`
    operators, three launches (forward, backward, parameter products), three GEMMs (the input projection, with
    b_ih as its addend where there is one, and its two gradients), one sum (the loss: the biases' gradients are the
    backward's db) and no elementwise arithmetic on the host's path (no bias add)."""
    torch.manual_seed(0)
    module = rnn.LSTM(64 * heads, 64 * heads, num_heads=heads, batch_first=True, backend="fused")
    x = torch.randn(1, 4, 64 * heads, requires_grad=True)
    leaves = [x, *module.parameters()]

    def step():
        for t in leaves:
            t.grad = None
        module(x)[0].sum().backward()

    counter = _AtenCounter(monkeypatch)
    with runtime.poisoning(False):
        step()
        counter.launches = 0
        with counter:
            step()
    ops = counter.ops
    assert sum(ops.values()) <= TINY_STEP_OPERATORS[heads], dict(ops)
    assert counter.launches == 3 and ops["mm"] == 3 - (heads == 1) and ops["addmm"] == (heads == 1), dict(ops)
    assert ops["sum"] == 1, dict(ops)
    assert not {k: n for k, n in ops.items() if k in {"add", "add_", "sub", "mul", "cat", "stack"}}, dict(ops)
    assert all(p.grad is not None for p in module.parameters()) and x.grad is not None


def test_a_packed_batch_run_again_builds_no_index(monkeypatch):
    """flat_index is kept per batch sizes and sort order: the second step over the same PackedSequence dispatches
    none of the index build's operators (and no read of a value to the host); a new sort order builds it again."""
    torch.manual_seed(0)
    module = rnn.LSTM(8, 8, backend="vanilla")
    seqs = [torch.randn(n, 8) for n in (3, 5, 2)]
    x = torch.nn.utils.rnn.pack_sequence(seqs, enforce_sorted=False)
    module(x)
    counter = _AtenCounter(monkeypatch)
    with counter:
        again = module(x)
    built = {"repeat_interleave", "cumsum", "_local_scalar_dense", "index_copy_", "arange"}
    assert not {k: n for k, n in counter.ops.items() if k in built}, dict(counter.ops)
    other = torch.nn.utils.rnn.pack_sequence([seqs[1], seqs[0], seqs[2]], enforce_sorted=False)
    counter = _AtenCounter(monkeypatch)
    with counter:
        module(other)
    assert counter.ops["repeat_interleave"] == 2, dict(counter.ops)
    ref = torch.nn.LSTM(8, 8)
    ref.load_state_dict(module.state_dict())
    assert torch.allclose(again[0].data, ref(x)[0].data, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("hidden, heads, B", [(128, 2, 1), (256, 1, 16), (512, 1, 16), (512, 1, 64)])
def test_gpu_the_layer_op_equals_nn_lstm(hidden, heads, B):
    """The module's layer op (the projection's GEMM inside it, b_ih its addend, the biases' gradients the
    backend's db) on the GPU's own paths: the tiny call's one-SM kernels, version 6 and b4 at one head, against an
    fp32 nn.LSTM (several heads: the vanilla backend) with the same weights, every parameter's gradient, twice, then
    once more after an optimizer step changed the biases."""
    from gpulab.rnn.fused.measure.lstm_grid import check_against_torch  # noqa: PLC0415

    torch.manual_seed(0)
    module = rnn.LSTM(hidden, hidden, num_heads=heads, batch_first=True).to(runtime.device, torch.float16)
    x = torch.randn(B, 64, hidden, device=runtime.device, dtype=torch.float16)
    for _ in range(2):
        assert check_against_torch(module, x, f"H{hidden} x{heads} B{B}", every_weight=True) == "ok"
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.01)
    assert check_against_torch(module, x, f"H{hidden} x{heads} B{B} after a step", every_weight=True) == "ok"


@pytest.mark.parametrize("backend", ["fused", "alternating"])
def test_the_biases_are_read_on_every_call_and_their_gradients_are_their_own(backend):
    """The layer op reads b_ih and b_hh on every call: after a change of either bias, in place (an optimizer step,
    ``load_state_dict``) or past its version counter (through ``.data``, the usual forget-gate initialisation, or
    ``.numpy()``), the output is nn.LSTM's with the new values; and b_ih's and b_hh's gradients are equal values in
    separate storage (an optimizer scaling one in place must not scale the other)."""
    torch.manual_seed(0)
    module = rnn.LSTM(5, 16, batch_first=True, backend=backend)
    ref = torch.nn.LSTM(5, 16, batch_first=True)
    x = torch.randn(3, 4, 5)
    changes = {
        "bias_ih_l0 add_": lambda m: m.bias_ih_l0.add_(torch.randn(64)),
        "bias_hh_l0 add_": lambda m: m.bias_hh_l0.add_(torch.randn(64)),
        "bias_ih_l0.data": lambda m: m.bias_ih_l0.data[16:32].fill_(1.0),
        "bias_hh_l0 numpy": lambda m: m.bias_hh_l0.detach().numpy().__setitem__(slice(0, 16), 0.5),
    }
    for change in (None, *changes):
        if change is not None:
            with torch.no_grad():
                changes[change](module)
        ref.load_state_dict(module.state_dict())
        module.zero_grad(set_to_none=True)
        y, (h, c) = module(x)
        y.sum().backward()
        y_r, (h_r, c_r) = ref(x)
        for a, r in ((y, y_r), (h, h_r), (c, c_r)):
            check.assert_close(a, r.detach().double(), name=f"{backend} after {change}")
        g_ih, g_hh = module.bias_ih_l0.grad, module.bias_hh_l0.grad
        assert torch.equal(g_ih, g_hh)
        assert g_ih.untyped_storage().data_ptr() != g_hh.untyped_storage().data_ptr()


def test_the_layer_op_chooses_its_loops_again_under_another_fused_config():
    """The layer op's per-problem loops follow :func:`plan.config_as`: a problem first seen under what ships is
    chosen again inside another config, and what ships is back after it (a cache keyed on the problem alone would
    keep the first config's loops for the rest of the process)."""
    from gpulab.rnn import layer
    from gpulab.rnn.fused.config import FusedConfig

    args = ("fused", 3, 2, 16, torch.float32, torch.device(runtime.device), True)
    shipped = layer.layer_loops(*args)
    assert shipped == plan.problem_loops(3, 2, 16, "lstm", torch.float32, args[5], True)
    with plan.config_as(FusedConfig(small_rows=7)):
        other = layer.layer_loops(*args)
        assert other == plan.problem_loops(3, 2, 16, "lstm", torch.float32, args[5], True)
    assert other != shipped
    assert layer.layer_loops(*args) == shipped
