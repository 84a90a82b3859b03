"""Backward version b4 (Gluon: R's rows in registers), version 6's backward.

On a CPU: its schedule (each program's share of dh from its M pieces, the gather in program order) against autograd
through float64's LSTM, and its compiled form for sm_90. The GPU tests run the kernel itself.
"""

import json

import pytest
import torch
import triton
import triton.language as tl

from gpulab import check, rnn, runtime
from gpulab.rnn.fused import split_gluon_backward as b4
from gpulab.rnn.fused.measure import sass


def _autograd(inputs, d_out, d_last):
    """dL/dWx (= dG for the LSTM) and dL/d(initial states) in float64 through the vanilla backend."""
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    out, last = rnn.flashrnn(*leaves, function="lstm", backend="vanilla")
    loss = (out * d_out.double()).sum() + (0 if d_last is None else (last * d_last.double()).sum())
    d_wx, _, _, d_states = torch.autograd.grad(loss, leaves)
    return out.detach(), d_wx, d_states


def _forward(inputs):
    """(states_all, pre-activations) in float64: what the backward reads."""
    Wx, R, b, s0 = (t.double() for t in inputs)
    out, _ = rnn.flashrnn(Wx, R, b, s0, function="lstm", backend="vanilla")
    prev = torch.cat((s0[0], out[0][:, :-1]), dim=1)
    return out, Wx + torch.einsum("gnjk,btnk->btgnj", R, prev) + b[None, None]


WIDE = {"block_u": 32, "block_b": 8, "warps": 16}


@pytest.mark.parametrize("B,NH,DH,kw,last", [(1, 1, 96, {"block_u": 8, "warps": 2}, False),
                                             (17, 2, 48, {"block_u": 4, "warps": 1}, True),
                                             (3, 1, 64, {"block_u": 16, "warps": 4}, True),
                                             (9, 1, 768, WIDE, True)])  # fmt: skip
def test_schedule_matches_autograd(B, NH, DH, kw, last, make_inputs):
    """dG (in Wx's layout) equals dL/dWx and d_states dL/d(initial states), with and without a gradient of the last
    states (96 = 64 + 32 and 48 = 32 + 16 rows of R^T in two pieces; odd batch, two heads; the plan's wide tile of
    one head of 768: 24 programs of 32 units, two batch tiles of 8 rows, the last one partial)."""
    inputs = make_inputs("lstm", B, 4, NH, DH, dtype=torch.float32, seed=B * DH)
    out, gates = _forward(inputs)
    d_out = torch.randn(2, B, 4, NH, DH, dtype=torch.float64)
    d_last = torch.randn(2, B, 1, NH, DH, dtype=torch.float64) if last else None
    dG, ds0 = b4.schedule_reference(d_out, gates, out, inputs[3].double(), inputs[1].double(), d_last,
                                    cfg=b4.b4_config(DH, **kw))  # fmt: skip
    _, d_wx, d_states = _autograd(inputs, d_out, d_last)
    check.assert_close(dG, d_wx, rtol=1e-10, name="dG")
    check.assert_close(ds0, d_states, rtol=1e-10, name="d_states")


def test_schedule_sees_a_share_counted_twice(make_inputs):
    """The comparison can fail: a gate gradient doubled (as a share pushed twice would make it) is caught."""
    inputs = make_inputs("lstm", 2, 3, 1, 64, dtype=torch.float32, seed=4)
    out, gates = _forward(inputs)
    d_out = torch.randn(2, 2, 3, 1, 64, dtype=torch.float64)
    R2 = inputs[1].double() * torch.tensor([2.0, 1.0, 1.0, 1.0], dtype=torch.float64)[:, None, None, None]
    dG, _ = b4.schedule_reference(d_out, gates, out, inputs[3].double(), R2, cfg=b4.b4_config(64, 8, warps=4))
    _, d_wx, _ = _autograd(inputs, d_out, None)
    with pytest.raises(AssertionError):
        check.assert_close(dG, d_wx, rtol=1e-6, name="dG")


@pytest.mark.parametrize("kw", [{"block_u": 16, "warps": 8}])
def test_compiles_for_sm90_with_r_in_registers(kw):
    """Compiled for the H100: 48 tensor-core instructions per warp and step (768 = 512 + 256 rows over 8 warps, 16
    rows each, 2 x 8 batch columns, 4 K steps of 16: the 4 gates x 16 units), no spills, and the only ldmatrix
    reads are the gate gradients' 2 KB (b3's step reads R's rows through it too: 112 KB per program)."""
    argv = ["b4", "--dh", "768", "--warps", str(kw["warps"]), "--set", f"BLOCK_U={kw['block_u']}"]
    done = sass.run_offline(argv, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["mma"] == (768 // kw["warps"] // 16) * (row["block_b"] // 8) * (4 * kw["block_u"] // 16) == 48
    assert row["spills"] == 0 and 0 < row["registers"] <= 255
    assert row["ldsm_bytes"] * kw["warps"] == kw["warps"] * 4 * kw["block_u"] * row["block_b"] * 2


@triton.jit
def _gates_first(out_ptr, U: tl.constexpr, B: tl.constexpr, ORDER: tl.constexpr):
    """The kernel's stacking of the four gates (tl.join is gl.join): gate g's tile holds g * 1000 + u * B + j."""
    u = tl.arange(0, U)[:, None]
    j = tl.arange(0, B)[None, :]
    x = u * B + j
    both = tl.join(tl.join(x, x + 1000), tl.join(x + 2000, x + 3000))
    k = tl.arange(0, 4 * U)[:, None]
    tl.store(out_ptr + k * B + j, tl.reshape(tl.permute(both, ORDER), [4 * U, B]))


@pytest.mark.parametrize("U,B", [(2, 2), (16, 16)])
def test_gates_are_stacked_in_slot_order(U, B):
    """b4's B operand [4 U, B] must hold gate g's gradients in rows g U .. (g + 1) U, as R_p^T's columns are ordered
    (a swapped f and z gave 0.18 relative error on the H100 while the float64 schedule passed): the permutation the
    kernel uses, run on join in the interpreter (or the GPU)."""
    out = torch.full((4 * U, B), -1, dtype=torch.int32, device=runtime.device)
    _gates_first[(1,)](out, U, B, b4.GATES_FIRST.value)
    g, u, j = torch.meshgrid(torch.arange(4), torch.arange(U), torch.arange(B), indexing="ij")
    assert torch.equal(out.cpu(), (g * 1000 + u * B + j).reshape(4 * U, B).int())


def test_sizes_of_one_are_not_specialized():
    """B = 1 or T = 1 would become constants (``B.to`` fails on an int; T = 1 crashed the backward's compile)."""
    from gpulab.rnn.fused import split_gluon as v6

    for kernel in (b4.split_backward_b4_kernel, v6.split_forward_v6_kernel):
        names = [x if isinstance(x, str) else kernel.arg_names[x] for x in kernel.do_not_specialize]
        assert {"B", "T", "NH", "n_programs"} <= set(names), names


def test_host_passes_every_kernel_argument_by_name():
    from tests.rnn.fused.test_split_gluon import launch_names

    launch_names(b4.split_backward_b4, b4.split_backward_b4_kernel,
                 b4._constexprs(768, b4.b4_config(768), True, True))  # fmt: skip


def test_refuses_the_cpu(make_inputs):
    if not runtime.INTERPRET:
        pytest.skip("the CPU refusal")
    x = [torch.zeros(2, 1, 2, 1, 64, dtype=torch.float16), torch.zeros(1, 2, 4, 1, 64, dtype=torch.float16)]
    with pytest.raises(RuntimeError, match="schedule_reference"):
        b4.split_backward_b4(x[0], x[1], x[0], torch.zeros(2, 1, 1, 1, 64, dtype=torch.float16),
                             torch.zeros(4, 1, 64, 64, dtype=torch.float16))  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("B,DH,kw", [(16, 768, {}), (16, 768, {"block_u": 8, "warps": 4}), (17, 256, {"warps": 4}),
                                     (32, 768, {"block_b": 32}), (27, 768, {"block_b": 32}), (32, 768, {}),
                                     (21, 768, {}), (16, 768, {"block_b": 8}), (13, 768, {"block_b": 8})])  # fmt: skip
def test_b4_on_gpu(B, DH, kw, make_inputs):
    """The kernel at full width (T = 64, bf16) against version 5's backward (b3) on the same saved gates, and the
    gradients through the parameter products against float64; a second launch gives the same bits."""
    from gpulab.rnn.fused import split, split_backward

    inputs = make_inputs("lstm", B, 64, 1, DH, dtype=torch.bfloat16, device=runtime.device)
    out, _, gates = split.split_rnn_forward(*inputs, function="lstm", save_gates=True)
    d_out, d_last = torch.randn_like(out), torch.randn(2, B, 1, 1, DH, dtype=out.dtype, device=out.device)
    cfg = b4.b4_config(DH, **kw)
    dG, ds0 = b4.split_backward_b4(d_out, gates, out, inputs[3], inputs[1], d_last, cfg=cfg)
    frag = b4.split_backward_b4(d_out, gates, out, inputs[3], inputs[1], d_last, cfg=cfg, share_stores="fragments")
    assert torch.equal(frag[0], dG) and torch.equal(frag[1], ds0), "the two ways of storing the shares differ"
    dG3, ds03 = split_backward.split_rnn_backward(d_out, gates, out, inputs[3], inputs[1], "lstm", d_last=d_last)
    check.assert_close(dG, dG3.double(), dtype=torch.bfloat16, name="dG vs b3")
    check.assert_close(ds0, ds03.double(), dtype=torch.bfloat16, name="d_states vs b3")
    _, d_wx, d_states = _autograd(inputs, d_out, d_last)
    assert check.relative_error(dG, d_wx) <= check.tolerance(torch.bfloat16)
    assert check.relative_error(ds0, d_states) <= check.tolerance(torch.bfloat16)
    again = b4.split_backward_b4(d_out, gates, out, inputs[3], inputs[1], d_last, cfg=cfg)
    assert torch.equal(again[0], dG) and torch.equal(again[1], ds0)
    summed = b4.split_backward_b4(d_out, gates, out, inputs[3], inputs[1], d_last, cfg=cfg, sum_db=True)
    assert torch.equal(summed[0], dG) and torch.equal(summed[1], ds0), "summing db changed dG"
    db = dG.double().sum((0, 1))  # [4, 1, DH]: the reduction the kernel's sums replace
    assert summed[2].shape == db.shape and summed[2].dtype == dG.dtype
    check.assert_close(summed[2], db, dtype=torch.bfloat16, name="db summed in b4")


def test_plan_keeps_version_5_where_version_6_does_not_apply():
    """v6 needs an LSTM in 16 bits on a GPU with a valid tile: elsewhere (the interpreter, GRU, float32) the switch
    leaves the fused backend on version 5."""
    from gpulab.rnn.fused import plan

    assert not plan.v6_applies(16, 1, 768, "gru", torch.bfloat16)
    assert not plan.v6_applies(16, 1, 768, "lstm", torch.float32)
    assert not plan.v6_applies(16, 1, 100, "lstm", torch.bfloat16)
    if runtime.INTERPRET:
        assert not plan.v6_applies(16, 1, 768, "lstm", torch.bfloat16)
    from gpulab.rnn.fused import experiments

    default = plan.current_config().split_version
    with experiments.split_version_as("v5"):
        assert plan.current_config().split_version == "v5"
    assert plan.current_config().split_version == default == "v6"


def test_version_6_takes_32_rows_per_program_past_16():
    """Up to 16 rows the first tile pair of V6_TILES (no SM count here); beyond, with ``wide`` on, 32 rows of 16
    units in 8 warps (half the programs of two 16-row tiles), which fit one head of 768 in registers."""
    from gpulab.rnn.fused import plan

    assert plan.current_config().gluon.wide is False
    fwd, bwd = plan.v6_tiles(16, 768, wide=True)
    assert (fwd.block_b, fwd.block_u, fwd.warps, bwd.block_b, bwd.block_u, bwd.warps) == (8, 16, 8, 8, 16, 8)
    fwd, bwd = plan.v6_tiles(17, 768, wide=True)
    assert (fwd.block_b, fwd.block_u, fwd.warps) == (bwd.block_b, bwd.block_u, bwd.warps) == (32, 16, 8)
    assert fwd.programs(32, 1, 768) == 48 and fwd.programs(33, 1, 768) == 96


ROWS8, WIDE_B4 = ((16, 8, 8), (16, 8, 8)), ((16, 16, 8), (32, 8, 16))


@pytest.mark.parametrize("sms, B, NH, want, fits", [
    (132, 16, 1, ROWS8, True), (132, 9, 1, ROWS8, True), (132, 1, 1, ROWS8, True), (132, 17, 1, WIDE_B4, True),
    (132, 32, 1, WIDE_B4, True), (264, 32, 1, ROWS8, True), (132, 16, 2, WIDE_B4, True),
    (132, 33, 1, ((16, 16, 8), (16, 16, 8)), False), (0, 32, 1, ROWS8, False)])  # fmt: skip
def test_version_6_takes_the_first_tile_pair_that_fits(sms, B, NH, want, fits, monkeypatch):
    """With ``wide`` off (the default) the plan tries 8-row tiles (16 units, 8 warps), then at 768 the forward in
    16-row tiles beside b4 in 8-row tiles of 32 units and 16 warps, then 16 rows with the defaults (the forward's 8
    units make twice b4's programs), then 16 rows with the forward in b4's tile, and takes the first whose programs
    fit the GPU's SMs at once: 8 rows up to B = 16 at one head of 768 on an H100 (96 programs), the wide b4 at B = 32
    (96 programs each); none fits at B = 33 (144 > 132; v6_applies then refuses). Without a GPU (no SM count) the
    first pair."""
    from gpulab import hardware
    from gpulab.rnn.fused import plan

    monkeypatch.setattr(hardware, "live_properties", lambda: {"sm_count": sms} if sms else {})
    fwd, bwd = plan.v6_tiles(B, 768, NH)
    assert ((fwd.block_u, fwd.block_b, fwd.warps), (bwd.block_u, bwd.block_b, bwd.warps)) == want
    assert (max(t.programs(B, NH, 768) for t in (fwd, bwd)) <= sms) == fits


@pytest.mark.parametrize("DH", [512, 1024])
def test_the_wide_b4_pair_is_for_heads_of_768_only(DH, monkeypatch):
    """The pair with b4 in 32 units and 16 warps was measured at 768 only (at 1024 its R^T rows alone would take more
    than the 128 registers a thread of 16 warps has): other heads skip it."""
    from gpulab import hardware
    from gpulab.rnn.fused import plan

    monkeypatch.setattr(hardware, "live_properties", lambda: {"sm_count": 132})
    _, bwd = plan.v6_tiles(32, DH)
    assert bwd.warps == 8
    with pytest.raises(ValueError, match="at most 128"):
        b4.b4_config(1024, 32, 8, 16)
    assert b4.b4_config(768, 32, 8, 16).warps == 16


@pytest.mark.parametrize("DH, want", [(768, (16, 8, 8)), (512, (16, 8, 8)), (256, (8, 16, 4))])
def test_version_6_takes_8_row_tiles_from_heads_of_512(DH, want, monkeypatch):
    """The 8-row pair is for heads of 512 and more (at 256 it was the slower one on the H100): below, the plan
    starts from the 16-row defaults."""
    from gpulab import hardware
    from gpulab.rnn.fused import plan

    monkeypatch.setattr(hardware, "live_properties", lambda: {"sm_count": 132})
    fwd, bwd = plan.v6_tiles(16, DH)
    assert (fwd.block_u, fwd.block_b, fwd.warps) == want and bwd.block_b == want[1]


def test_version_6_tiles_skip_pairs_the_head_dim_does_not_fit(monkeypatch):
    """A head of 96 takes no 8-warp tile (96 is not a multiple of 16 * 8): the plan falls to a pair it fits, and a head
    no pair fits is a ValueError naming the head dim."""
    from gpulab import hardware
    from gpulab.rnn.fused import plan

    monkeypatch.setattr(hardware, "live_properties", lambda: {"sm_count": 132})
    two_warps = dict(forward=dict(block_u=8, block_b=16, warps=2), backward=dict(block_u=16, block_b=16, warps=2))
    pairs = (plan.V6_TILES[0], two_warps)
    fwd, bwd = plan.v6_tiles(4, 96, pairs=pairs)
    assert (fwd.block_u, fwd.block_b, fwd.warps, bwd.warps) == (8, 16, 2, 2)
    with pytest.raises(ValueError, match="head_dim=100"):
        plan.v6_tiles(4, 100, pairs=pairs)
    with pytest.raises(ValueError, match="head_dim=256 fits no version-6 tile pair.*min_head_dim"):
        plan.v6_tiles(4, 256, pairs=plan.V6_TILES[:1])  # only the 8-row pair, for heads of 512 and more


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["v6", "v6+b3"])
@pytest.mark.parametrize("B,DH", [(16, 768), (5, 512), (32, 768)])
def test_flashrnn_trains_through_version_6(B, DH, version, run_case):
    """With the plan's switch on v6 (or v6's forward with b3), flashrnn's fused backend runs them (the chooser
    splits these heads) and every output and gradient matches float64."""
    from gpulab.rnn.fused import plan

    assert plan.choose(B, 1, DH, "lstm", torch.bfloat16, training=True).kind == "split"
    assert plan.v6_applies(B, 1, DH, "lstm", torch.bfloat16)
    from gpulab.rnn.fused import experiments

    with experiments.split_version_as(version):
        run_case("fused", "lstm", B, 32, 1, DH, dtype=torch.bfloat16)


def test_the_next_steps_inputs_are_loaded_while_waiting(tmp_path, gluon_loop_sass):
    """With ``GluonConfig.prefetch`` (the default), b4's step loads the next step's inputs (4 saved gates, c_{t-1},
    dL/dh and dL/dc: plain loads) after its arrival at the barrier and before its first poll of the counter, so their
    trip to HBM overlaps the wait instead of following it."""
    lines = gluon_loop_sass("b4", tmp_path)
    arrive = next(i for i, op in enumerate(lines) if "REDG.E.ADD" in op)
    poll = next(i for i, op in enumerate(lines) if i > arrive and "LDG.E.64.STRONG" in op)
    inputs = [op for op in lines[arrive:poll] if "LDG.E.U16 " in op]
    assert len(inputs) >= 7, lines[arrive : poll + 1]


def test_register_budget_follows_the_warps():
    """A thread of 16 warps has at most 128 registers (65,536 over 512 threads); up to 8 warps the tile budget."""
    from gpulab.rnn.fused import gluon_tiles

    assert [gluon_tiles.register_budget(w) for w in (1, 8, 16)] == [gluon_tiles.REGISTER_BUDGET] * 2 + [128]
