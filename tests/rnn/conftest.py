"""Shared builders of the rnn tests: flashrnn inputs in the package's layouts, and one forward+backward check of a
backend against the float64 vanilla reference."""

import pytest
import torch

from gpulab import check, rnn, runtime

COUNTS = {"lstm": (4, 4, 4, 2), "gru": (3, 3, 4, 1), "elman": (1, 1, 1, 1)}  # G_w, G_r, G_b, S (flashrnn's)
GRAD_NAMES = ["states", "last", "dWx", "dR", "db", "dstates"]


def _make_inputs(function, B, T, NH, DH, dtype=torch.float32, device="cpu", seed=0, scale=0.5):
    gw, gr, gb, s = COUNTS[function]
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape, sc=1.0: (torch.randn(*shape, generator=g, dtype=torch.float64) * sc).to(device, dtype)
    return r(B, T, gw, NH, DH), r(gr, NH, DH, DH, sc=scale / DH**0.5), r(gb, NH, DH), r(s, B, 1, NH, DH)


def _run_case(backend, function, B, T, NH, DH, dtype=torch.float32, scale=0.5, seed=0, rtol=None, normwise=()):
    """Forward + backward of ``backend`` vs the vanilla backend in float64 on the same inputs and loss weights."""
    dev = runtime.device
    inputs = [t.requires_grad_() for t in _make_inputs(function, B, T, NH, DH, dtype, dev, seed=seed, scale=scale)]
    before = [t.detach().clone() for t in inputs]
    out = rnn.flashrnn(*inputs, function=function, backend=backend)
    g = torch.Generator().manual_seed(seed + 1)
    w_all, w_last = (torch.randn(o.shape, generator=g, dtype=torch.float64).to(dev) for o in out)
    grads = torch.autograd.grad((out[0].double() * w_all).sum() + (out[1].double() * w_last).sum(), inputs)
    ref_in = [t.detach().double().requires_grad_() for t in inputs]
    ref = rnn.flashrnn(*ref_in, function=function, backend="vanilla")
    ref_grads = torch.autograd.grad((ref[0] * w_all).sum() + (ref[1] * w_last).sum(), ref_in)
    context = f"{backend} {function} B={B} T={T} NH={NH} DH={DH} {dtype}"
    for got, want, name in zip(tuple(out) + grads, tuple(ref) + ref_grads, GRAD_NAMES):
        assert got.shape == want.shape, f"{name}: {tuple(got.shape)} != {tuple(want.shape)} ({context})"
        if (dtype == torch.bfloat16 and name.startswith("d")) or name in normwise:
            # bf16 gradients are sums over B*T products of bf16-rounded dG and h: a few elements that cancel to
            # near zero miss an elementwise 3e-2, so they are checked norm-wise (and must be finite).
            err = check.relative_error(got, want)
            assert err <= check.tolerance(dtype), f"{name} ({context}): relative error {err:.3g}"
            continue
        check.assert_close(got, want, dtype=dtype, rtol=rtol, name=name, context=context)
    for t, b in zip(inputs, before):
        assert torch.equal(t.detach(), b), f"{context}: an input was modified in place"


@pytest.fixture
def make_inputs():
    """``make_inputs(function, B, T, NH, DH, dtype=float32, device="cpu", seed=0, scale=0.5) -> (Wx, R, b, states)``
    in flashrnn's layouts, R scaled by ``scale / sqrt(DH)``."""
    return _make_inputs


@pytest.fixture
def run_case():
    """``run_case(backend, function, B, T, NH, DH, dtype=float32, ...)``: forward and every gradient of ``backend``
    against the float64 vanilla backend (and no input modified in place)."""
    return _run_case


@pytest.fixture
def gate_counts():
    """function -> (G_w, G_r, G_b, S), as the flashrnn package counts them."""
    return COUNTS


def _gluon_loop_sass(which, dump, *args):
    from gpulab.rnn.fused.measure import sass

    argv = [which, "--dh", "768", "--warps", "8", "--set", "BLOCK_U=16", "BLOCK_B=8", *args, "--dump", str(dump)]
    done = sass.run_offline(argv, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = dump.glob(f"{which}_*.loop.sass")
    return path.read_text().splitlines()


@pytest.fixture
def gluon_loop_sass():
    """``gluon_loop_sass(which, dump_dir, *sass_args)``: the step loop's SASS of version 6 (``'v6'``) or b4 (``'b4'``)
    compiled for sm_90 at one head of 768 in the plan's 8-row tile (16 units, 8 warps), one instruction a line."""
    return _gluon_loop_sass
