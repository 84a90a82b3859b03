"""The multi-tile backward (split_gluon_backward_tiles: b4 with several batch tiles per program) and the multi-tile
pair through the plan: on a CPU its float64 schedule against autograd through float64's LSTM (odd batches, groups of
tiles with the last one partial, 2 heads), its sm_90 compile at the tiles the chooser takes at the grid's losing
points (registers, no spills), the chooser; on a GPU the kernel against its schedule, and both multi-tile kernels
through the module against torch.nn.LSTM's float64 gradients."""

import json
import os
import subprocess
import sys

import pytest
import torch

from gpulab import check, rnn, runtime
from gpulab.rnn.fused import plan
from gpulab.rnn.fused import split_gluon_backward as b4
from gpulab.rnn.fused import split_gluon_backward_tiles as bt


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


@pytest.mark.parametrize("B, NH, DH, kw, last", [
    (17, 1, 64, dict(block_u=16, block_b=8, warps=4, tiles=2), True),   # 3 tiles: groups of 2, the second 1 row
    (33, 2, 48, dict(block_u=8, block_b=8, warps=1, tiles=4), False),   # 5 tiles: a group of 4, then 1 row; 2 heads
    (1, 1, 96, dict(block_u=16, block_b=16, warps=2, tiles=3), True),   # one row in a group of 3 tiles (2 empty)
])  # fmt: skip
def test_schedule_matches_autograd(B, NH, DH, kw, last, make_inputs):
    """dG (NaN-poisoned: every element written) equals dL/dWx and d_states dL/d(initial states)."""
    inputs = make_inputs("lstm", B, 4, NH, DH, dtype=torch.float32, seed=B * DH + NH)
    out, gates = _forward(inputs)
    d_out = torch.randn(2, B, 4, NH, DH, dtype=torch.float64)
    d_last = torch.randn(2, B, 1, NH, DH, dtype=torch.float64) if last else None
    cfg = bt.b4_tiles_config(DH, **kw)
    dG, ds0 = bt.schedule_reference(d_out, gates, out, inputs[3].double(), inputs[1].double(), d_last, cfg=cfg)
    d_wx, d_states = _autograd(inputs, d_out, d_last)
    check.assert_close(dG, d_wx, rtol=1e-10, name="dG")
    check.assert_close(ds0, d_states, rtol=1e-10, name="d_states")


def test_schedule_sees_a_tile_given_another_tiles_shares(make_inputs, monkeypatch):
    """The comparison can fail: a gate swapped in R (as a tile reading the wrong slab would mix) is caught."""
    inputs = make_inputs("lstm", 17, 3, 1, 64, dtype=torch.float32, seed=5)
    out, gates = _forward(inputs)
    d_out = torch.randn(2, 17, 3, 1, 64, dtype=torch.float64)
    R = inputs[1].double()[[0, 2, 1, 3]]
    dG, _ = bt.schedule_reference(d_out, gates, out, inputs[3].double(), R, cfg=bt.b4_tiles_config(64, 16, 8, 4, 2))
    d_wx, _ = _autograd(inputs, d_out, None)
    with pytest.raises(AssertionError):
        check.assert_close(dG, d_wx, rtol=1e-6, name="dG")


def test_gates_are_stacked_as_b4_stacks_them():
    assert bt.GATES_FIRST.value == b4.GATES_FIRST.value


@pytest.mark.parametrize("B, DH, fwd, bwd", [(256, 768, (8, 16), (8, 16)), (64, 1024, (8, 4), (8, 4)),
                                             (256, 1024, (8, 16), (8, 16)), (17, 1024, (8, 2), (8, 2))])  # fmt: skip
def test_the_chooser_fills_the_sms_with_groups_of_tiles(B, DH, fwd, bwd):
    """On the H200's 132 SMs, 16 units x 8 rows: 2 groups of 48 (768) or 64 (1024) programs, the batch tiles
    spread over them; a head of 1536 fits no tile (R^T past the register budget)."""
    f, b = plan.tiles_pair(B, 1, DH, 132)
    assert ((f.block_b, f.tiles), (b.block_b, b.tiles)) == (fwd, bwd)
    assert f.block_u == b.block_u == 16 and max(f.programs(B, 1, DH), b.programs(B, 1, DH)) <= 132
    assert plan.tiles_pair(256, 1, 1536, 132) is None and plan.tiles_pair(4096, 1, 1024, 132) is None


def test_the_plan_binds_the_tile_kernels_only_when_asked(monkeypatch):
    """With GluonConfig.tiles on (and the Gluon kernels runnable: forced here) a batch past version 6's SMs gets the
    multi-tile loops; what ships keeps its loops."""
    from gpulab.rnn.fused import experiments

    monkeypatch.setattr(plan, "_gluon_runs", lambda *a: True)
    monkeypatch.setattr(plan, "v6_applies", lambda *a: False)
    monkeypatch.setattr(plan.hardware, "live_properties", lambda: {"sm_count": 132})
    plan.clear_cache()
    try:
        with experiments.trying("gluon tiles"):
            fwd, bwd = plan._loops(64, 1, 1024, "lstm", torch.float16, torch.device("cpu"), True, plan.current_config())
        shipped = plan._loops(64, 1, 1024, "lstm", torch.float16, torch.device("cpu"), True)
    finally:
        plan.clear_cache()
    assert fwd.func is plan._tiles_forward and bwd.func is plan._tiles_gradients
    assert (fwd.keywords["cfg"].tiles, bwd.keywords["cfg"].tiles) == (4, 4)
    assert shipped[1].func is not plan._tiles_gradients and not plan.current_config().gluon.tiles


@pytest.mark.parametrize("spec", ["768,16,8,8,16", "1024,16,8,8,4", "1024,16,8,8,16"])
def test_compiles_for_sm90_without_spills(spec):
    """The chooser's tiles at H768 B256, H1024 B64 and H1024 B256 (fp16): both multi-tile kernels compile for sm_90
    within 255 registers and without spilling; the backward's innermost loop holds one tile's tensor-core steps per
    warp (DH / 8 warps / 16 rows x one 8-row N x 64 / 16 K steps: the loop over tiles is not unrolled)."""
    code = (
        "import torch; torch.cuda.is_available = lambda: True\n"
        "import json\nfrom gpulab.rnn.fused import split_gluon_tiles as st, split_gluon_backward_tiles as bt\n"
        "from gpulab.rnn.fused import split_gluon as v6\nfrom gpulab.rnn.fused.measure import sass\n"
        f"dh, bu, bb, w, tiles = {spec}\n"
        "rows = []\n"
        "for name, k in (('forward', st.compile_sm90(dh, v6.v6_config(dh, bu, bb, w, tiles=tiles), 'fp16')),\n"
        "                ('backward', bt.compile_sm90(dh, bt.b4_tiles_config(dh, bu, bb, w, tiles), 'fp16'))):\n"
        "    body, ops, regs = sass.loop_stats(k, 'tiles_' + name)\n"
        "    rows.append(dict(kernel=name, registers=regs, mma=sum(c for o, c in ops.items() if 'MMA' in o),\n"
        "                     spills=sum(c for o, c in ops.items() if o.startswith(('STL', 'LDL')))))\n"
        "print(json.dumps(rows))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "GPULAB_DEVICE")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    print(spec, rows)
    dh = int(spec.split(",")[0])
    for row in rows:
        assert row["spills"] == 0 and 0 < row["registers"] <= 255, row
    assert rows[1]["mma"] == dh // 8 // 16 * 1 * 4, rows[1]  # M rows per warp / 16 x N 8 / 8 x K 64 / 16


def test_refuses_the_cpu():
    if not runtime.INTERPRET:
        pytest.skip("the CPU refusal")
    x = torch.zeros(2, 1, 2, 1, 64, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="schedule_reference"):
        bt.split_backward_tiles(x, torch.zeros(1, 2, 4, 1, 64, dtype=torch.float16), x,
                                torch.zeros(2, 1, 1, 1, 64, dtype=torch.float16),
                                torch.zeros(4, 1, 64, 64, dtype=torch.float16),
                                cfg=bt.b4_tiles_config(64, 16, 8, 4, 1))  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("B, DH, tiles", [(256, 768, 16), (64, 1024, 4), (17, 768, 2), (17, 1024, 3)])
def test_backward_tiles_on_gpu(B, DH, tiles, make_inputs):
    """The kernel (T 32, fp16, with d_last) against its float64 schedule on the same saved states: dG, d_states and
    db summed in the kernel; a second launch gives the same bits."""
    from gpulab.rnn.fused import split_gluon as v6
    from gpulab.rnn.fused import split_gluon_tiles as st

    inputs = make_inputs("lstm", B, 32, 1, DH, dtype=torch.float16, device=runtime.device)
    out, _, gates = st.split_forward_tiles(*inputs, cfg=v6.v6_config(DH, 16, 8, 8, tiles=tiles))
    d_out, d_last = torch.randn_like(out), torch.randn(2, B, 1, 1, DH, dtype=out.dtype, device=out.device)
    cfg = bt.b4_tiles_config(DH, 16, 8, 8, tiles)
    dG, ds0, db = bt.split_backward_tiles(d_out, gates, out, inputs[3], inputs[1], d_last, cfg=cfg, sum_db=True)
    want, want_s = bt.schedule_reference(*(x.cpu() for x in (d_out, gates, out, inputs[3], inputs[1], d_last)),
                                         cfg=cfg)  # fmt: skip
    check.assert_close(dG.cpu(), want, dtype=torch.float16, name="dG")
    check.assert_close(ds0.cpu(), want_s, dtype=torch.float16, name="d_states")
    check.assert_close(db.cpu(), want.sum((0, 1)), dtype=torch.float16, name="db")
    again = bt.split_backward_tiles(d_out, gates, out, inputs[3], inputs[1], d_last, cfg=cfg)
    assert torch.equal(again[0], dG) and torch.equal(again[1], ds0)


@pytest.mark.gpu
@pytest.mark.parametrize("B, H", [(256, 768), (64, 1024), (17, 768)])
def test_both_tile_kernels_train_the_module_as_torch_does(B, H, monkeypatch):
    """gpulab.rnn.LSTM (fp16) under the 'gluon tiles' experiment against torch.nn.LSTM in float64: outputs and every
    gradient (T 32); at B17 the tiles path is forced by a pair of 2 tiles (version 6 takes 17 rows itself)."""
    from torch import nn

    from gpulab.rnn.fused import experiments
    from gpulab.rnn.module import LSTM

    torch.manual_seed(B + H)
    ours = LSTM(H, H, batch_first=True, backend="fused").to(runtime.device, torch.float16)
    ref = nn.LSTM(H, H, batch_first=True).double().to(runtime.device)
    ref.load_state_dict({k: v.double() for k, v in ours.state_dict().items()})
    x = torch.randn(B, 32, H, device=runtime.device, dtype=torch.float16)
    if B == 17:  # version 6 holds 17 rows in one launch: it steps aside for this test
        monkeypatch.setattr(plan, "v6_applies", lambda *a, **k: False)
    plan.clear_cache()
    try:
        with experiments.trying("gluon tiles"):
            xo = x.clone().requires_grad_()
            y, (h, c) = ours(xo)
            (y.float().sum() + h.float().sum()).backward()
            loops = plan._loops(B, 1, H, "lstm", torch.float16, xo.device, True, plan.current_config())
    finally:
        plan.clear_cache()
    assert loops[0].func is plan._tiles_forward and loops[1].func is plan._tiles_gradients
    xr = x.double().requires_grad_()
    y_r, (h_r, c_r) = ref(xr)
    (y_r.sum() + h_r.sum()).backward()
    check.assert_close_drifting(y, y_r, name="output")
    check.assert_close_drifting(xo.grad, xr.grad, name="dx")
    for name, p in ref.named_parameters():
        check.assert_close_drifting(dict(ours.named_parameters())[name].grad, p.grad, name=name)
