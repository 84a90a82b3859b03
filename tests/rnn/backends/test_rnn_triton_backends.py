"""The Triton backends of gpulab.rnn.flashrnn ('fused', 'alternating'): forward and every gradient against float64."""

import itertools

import pytest
import torch

from gpulab import rnn, runtime

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
def test_matches_float64_reference(backend, function, B, T, NH, DH, run_case):
    run_case(backend, function, B, T, NH, DH)


@pytest.mark.parametrize("backend", ["fused", "alternating"])
def test_float16(backend, run_case):
    run_case(backend, "lstm", 2, 3, 1, 16, dtype=torch.float16)


@pytest.mark.parametrize(
    ("function", "T", "DH"),
    [("gru", 1, 16), ("elman", 2, 24), ("lstm", 4, 17)],
    ids=["gru-T1", "elman-T2", "lstm-DH17"],
)
def test_float16_fused_paths(function, T, DH, run_case):
    """16-bit inputs travel as 32-bit pairs in the fused kernels when DH is even, element by element when odd; the
    forward's loop is unrolled by two, so even and odd T take different paths."""
    run_case("fused", function, 3, T, 2, DH, dtype=torch.float16)


@pytest.mark.parametrize("backend", ["fused", "alternating"])
@pytest.mark.parametrize("function", ["lstm", "gru", "elman"])
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_saturating_gates_give_no_nan(backend, function, make_inputs):
    Wx, R, b, s0 = make_inputs(function, 2, 4, 1, 16, device=runtime.device)
    inputs = [(Wx * 1e4).requires_grad_(), (R * 1e3).requires_grad_(), (b * 1e4).requires_grad_(), s0]
    out, last = rnn.flashrnn(*inputs, function=function, backend=backend)
    grads = torch.autograd.grad(out.sum() + last.sum(), inputs[:3])
    for t in (out, last, *grads):
        assert torch.isfinite(t).all()
    assert out.abs().max() <= 1e4  # h is bounded by 1; the LSTM's c by t + |c_0|


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
def test_gpu_grid(B, T, DH, NH, function, backend, dtype, make_inputs, run_case):
    # A head whose R does not fit one SM (fp32 at head dim 128) runs on the fused backend's multi-program kernel
    # (gpulab.rnn.fused.split_tiling, issue 17) rather than being refused: checked like every other case.
    with runtime.poisoning(True):  # every output NaN-filled first: an element never written fails
        run_case(backend, function, B, T, NH, DH, dtype=dtype)
