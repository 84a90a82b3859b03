"""The two-piece split kernels (a program's units as two powers of two: one head of 1536 in 128 programs of 12).

On a CPU: their schedules (each program's pieces, chunks and shares in float64) against float64's LSTM and autograd
through it, and their compiled form for sm_90 (registers, spills). The GPU tests run the kernels and the plan's
route through them.
"""

import json

import pytest
import torch

from gpulab import check, hardware, rnn, runtime
from gpulab.rnn.fused import gluon_tiles, plan
from gpulab.rnn.fused import split_gluon_backward_units as ub
from gpulab.rnn.fused import split_gluon_units as uf
from gpulab.rnn.fused.gluon_tiles import UnitsConfig
from gpulab.rnn.fused.measure import sass


def _float64(inputs):
    return rnn.flashrnn(*(t.double() for t in inputs), function="lstm", backend="vanilla")


def _forward(inputs):
    """(states_all, pre-activations) in float64: what the backward reads."""
    Wx, R, b, s0 = (t.double() for t in inputs)
    out, _ = rnn.flashrnn(Wx, R, b, s0, function="lstm", backend="vanilla")
    prev = torch.cat((s0[0], out[0][:, :-1]), dim=1)
    return out, Wx + torch.einsum("gnjk,btnk->btgnj", R, prev) + b[None, None]


def _autograd(inputs, d_out, d_last):
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    out, last = rnn.flashrnn(*leaves, function="lstm", backend="vanilla")
    loss = (out * d_out.double()).sum() + (0 if d_last is None else (last * d_last.double()).sum())
    d_wx, _, _, d_states = torch.autograd.grad(loss, leaves)
    return d_wx, d_states


@pytest.mark.parametrize("bu,want", [(12, (8, 4)), (24, (16, 8)), (20, (16, 4)), (6, None), (16, None), (7, None)])
def test_unit_pieces(bu, want):
    assert gluon_tiles.unit_pieces(bu) == want


def test_config_refuses_a_power_of_two_and_a_bad_head():
    with pytest.raises(ValueError, match="two powers of two"):
        UnitsConfig(16)
    with pytest.raises(ValueError, match="multiple of block_u"):
        uf.units_config(1000)
    with pytest.raises(ValueError, match="registers per thread"):
        uf.units_config(1536, warps=4)
    assert UnitsConfig().programs(16, 1, 1536) == 128 and UnitsConfig().programs(17, 1, 1536) == 256


@pytest.mark.parametrize("B,NH,DH,kw", [(1, 1, 96, dict(block_u=12, warps=2)), (17, 2, 48, dict(block_u=24, warps=1)),
                                        (5, 1, 1536, {}), (3, 1, 1536, dict(block_b=8))])  # fmt: skip
def test_forward_schedule_matches_float64(B, NH, DH, kw, make_inputs):
    """Every program's two unit pieces, chunked products summed and put through the cell, are the LSTM (96 / 2 =
    32 + 16 of K, two heads of 48 in programs of 16 + 8 units, one head of 1536 in 128 programs of 8 + 4, 192 =
    128 + 64 of K per warp)."""
    inputs = make_inputs("lstm", B, 3, NH, DH, dtype=torch.float32, seed=B + DH)
    out, last, gates = uf.schedule_reference(*inputs, cfg=uf.units_config(DH, **kw))
    ref = _float64(inputs)
    check.assert_close(out, ref[0], rtol=1e-12, name="states_all")
    check.assert_close(last, ref[1], rtol=1e-12, name="states_last")
    check.assert_close(gates, _forward(inputs)[1], rtol=1e-12, name="gates")


def test_forward_schedule_sees_a_unit_from_the_wrong_piece(make_inputs):
    """The comparison can fail: R's unit rows one off (a piece reading its neighbour's units) gives other states."""
    inputs = make_inputs("lstm", 2, 3, 1, 96, dtype=torch.float32, seed=5)
    Wx, R, b, s0 = inputs
    out, _, _ = uf.schedule_reference(Wx, torch.roll(R, 1, dims=2), b, s0, cfg=uf.units_config(96, warps=2))
    with pytest.raises(AssertionError):
        check.assert_close(out, _float64(inputs)[0], rtol=1e-6, name="states_all")


@pytest.mark.parametrize("B,NH,DH,kw,last", [(1, 1, 96, dict(block_u=12, warps=2), False),
                                             (17, 2, 48, dict(block_u=24, warps=1), True),
                                             (4, 1, 1536, {}, True)])  # fmt: skip
def test_backward_schedule_matches_autograd(B, NH, DH, kw, last, make_inputs):
    """dG equals dL/dWx and d_states dL/d(initial states) (96 = 64 + 32 rows of R^T, 1536 = 1024 + 512; the share
    of each program from both unit pieces)."""
    inputs = make_inputs("lstm", B, 3, NH, DH, dtype=torch.float32, seed=B * DH)
    out, gates = _forward(inputs)
    d_out = torch.randn(2, B, 3, NH, DH, dtype=torch.float64)
    d_last = torch.randn(2, B, 1, NH, DH, dtype=torch.float64) if last else None
    dG, ds0 = ub.schedule_reference(d_out, gates, out, inputs[3].double(), inputs[1].double(), d_last,
                                    cfg=ub.units_backward_config(DH, **kw))  # fmt: skip
    d_wx, d_states = _autograd(inputs, d_out, d_last)
    check.assert_close(dG, d_wx, rtol=1e-10, name="dG")
    check.assert_close(ds0, d_states, rtol=1e-10, name="d_states")


def test_backward_schedule_sees_a_wrong_gate(make_inputs):
    inputs = make_inputs("lstm", 2, 3, 1, 96, dtype=torch.float32, seed=4)
    out, gates = _forward(inputs)
    d_out = torch.randn(2, 2, 3, 1, 96, dtype=torch.float64)
    R2 = inputs[1].double() * torch.tensor([2.0, 1.0, 1.0, 1.0], dtype=torch.float64)[:, None, None, None]
    dG, _ = ub.schedule_reference(d_out, gates, out, inputs[3].double(), R2, cfg=ub.units_backward_config(96, warps=2))
    with pytest.raises(AssertionError):
        check.assert_close(dG, _autograd(inputs, d_out, None)[0], rtol=1e-6, name="dG")


@pytest.mark.parametrize("which,bb,spills", [("units", 8, 0), ("units", 16, 16), ("units-b", 16, 4)])
def test_compiles_for_sm90_at_1536(which, bb, spills):
    """Compiled for the H100 at one head of 1536, 12 units, 8 warps: the forward with piece a's R in registers and
    piece b's in shared memory (8 rows: no spills; 16 rows: a few, bounded here), the backward with R^T in registers
    (2 spilled beside the gather's change of layout, bounded here); the tensor-core count per warp and step is the
    decomposition's."""
    argv = [which, "--dh", "1536", "--warps", "8", "--dtype", "fp16", "--set", f"BLOCK_B={bb}"]
    done = sass.run_offline(argv, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    # forward: (4 x 12 rows / 16) x (bb / 8) x (192 K / 16); backward: (1536 / 8 / 16) x (bb / 8) x (48 / 16)
    assert row["mma"] == 3 * (bb // 8) * 12
    assert row["spills"] <= spills and 0 < row["registers"] <= 255


def test_the_plan_routes_1536_to_the_two_piece_kernels():
    """On an H200, one head of 1536 in 16 bits (training and inference) up to 16 rows is a 'units' plan of 128
    programs each way; 8 rows or fewer take 8-row tiles (no spills); B64 runs in 16-row launches; B256 stays on the
    alternating backend (16 launches would cost more than its batched products)."""
    h200 = hardware.spec("h200")
    for B, bb in ((1, 8), (16, 16), (8, 8), (13, 16)):
        for training in (False, True):
            p = plan.choose(B, 1, 1536, "lstm", torch.float16, h200, training=training)
            assert p.kind == "units" and p.tiling.block_b == bb and p.tiling.programs(B, 1, 1536) == 128
            assert (p.backward is not None) == training
    for B in (17, 64):
        with pytest.raises(ValueError):
            plan.choose(B, 1, 1536, "lstm", torch.float16, h200, training=True)
    # without a GPU the chooser's SMs are the H100's 132, as the H200's
    assert plan.batch_rows(64, 1, 1536, "lstm", torch.float16, True) == 16
    assert plan.batch_rows(17, 1, 1536, "lstm", torch.bfloat16, False) == 9  # two launches, the rows spread evenly
    assert plan.batch_rows(256, 1, 1536, "lstm", torch.float16, True) is None
    with pytest.raises(ValueError):  # fp32, and GPUs other than Hopper, keep what they had
        plan.choose(16, 1, 1536, "lstm", torch.float32, h200, training=True)
    with pytest.raises(ValueError):
        plan.choose(16, 1, 1536, "lstm", torch.float16, hardware.spec("l4"), training=True)
    assert "units" in plan.explain(16, 1, 1536, "lstm", torch.float16, "h200")


@pytest.mark.gpu
@pytest.mark.parametrize("B,T", [(1, 1), (16, 5), (17, 5), (16, 64), (1, 64), (5, 64)])
def test_units_kernels_on_gpu(B, T, make_inputs):
    """The two-piece forward and backward at one head of 1536 (fp16) against float64's LSTM and autograd, outputs
    poisoned (NaN: an element a kernel does not write shows); a launch takes at most 16 rows (128 programs), so B17
    runs as 16 + 1 rows (the second in 8-row tiles); the backward gives the same bits twice."""
    inputs = make_inputs("lstm", B, T, 1, 1536, dtype=torch.float16, device=runtime.device, seed=B + T)
    parts = [(i, min(B, i + 16)) for i in range(0, B, 16)]
    for lo, hi in parts:
        sub = (inputs[0][lo:hi], inputs[1], inputs[2], inputs[3][:, lo:hi])
        cfg = uf.units_config(1536, block_b=8 if hi - lo <= 8 else 16)
        out, last, gates = uf.split_forward_units(*sub, cfg=cfg)
        assert not any(torch.isnan(x).any() for x in (out, last, gates)), "an element was not written"
        ref = _float64(sub)
        assert check.relative_error(out, ref[0]) <= check.tolerance(torch.float16)
        assert check.relative_error(last, ref[1]) <= check.tolerance(torch.float16)
        d_out = torch.randn_like(out)
        d_last = torch.randn_like(last)
        bcfg = ub.units_backward_config(1536, block_b=cfg.block_b)
        dG, ds0 = ub.split_backward_units(d_out, gates, out, sub[3], sub[1], d_last, cfg=bcfg)
        assert not torch.isnan(dG).any() and not torch.isnan(ds0).any()
        d_wx, d_states = _autograd(sub, d_out, d_last)
        assert check.relative_error(dG, d_wx) <= check.tolerance(torch.float16)
        assert check.relative_error(ds0, d_states) <= check.tolerance(torch.float16)
        again = ub.split_backward_units(d_out, gates, out, sub[3], sub[1], d_last, cfg=bcfg)
        assert torch.equal(again[0], dG) and torch.equal(again[1], ds0)


@pytest.mark.gpu
@pytest.mark.parametrize("B", [1, 16, 17, 64])
def test_flashrnn_runs_1536_through_the_two_piece_kernels(B, run_case, monkeypatch):
    """flashrnn's fused backend at one head of 1536 (fp16, T 64): every output and gradient against float64, and the
    kernels that ran are the two-piece ones (B17 and B64 in launches of the plan's rows)."""
    ran = []
    for module, name in ((uf, "split_forward_units"), (ub, "split_backward_units")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k: ran.append(_name) or _real(*a, **k))
    plan.clear_cache()
    # dR and db sum B * T products of fp16 gate gradients: on the H200 a few of 9.4M dR elements miss the elementwise
    # 5e-3 there, as many for the alternating backend's (cuBLAS) as for these kernels (22 and 25 at B 16), so those two
    # are checked norm-wise (as bf16's are); everything else elementwise.
    run_case("fused", "lstm", B, 64, 1, 1536, dtype=torch.float16, normwise=("dR", "db"))
    assert "split_forward_units" in ran and "split_backward_units" in ran, ran
