"""Large batches of a split head: where no split backward takes the whole batch, an LSTM in 16 bits trains through
b4 in launches of fewer rows (plan.b4_rows), not through the alternating backward (a few kernels per step).

On a CPU: what the chooser picks at the grid's losing points (H200, fp16, training), and the launches' arithmetic:
b4 replaced by its float64 schedule (split_gluon_backward.schedule_reference), the batch cut into launches as the
plan cuts it, the parameter gradients of the whole batch against autograd through float64's LSTM.
"""

import dataclasses
import functools

import pytest
import torch

from gpulab import check, rnn
from gpulab.rnn.fused import plan
from gpulab.rnn.fused import split_gluon_backward as b4
from gpulab.rnn.fused.config import FusedConfig


@pytest.mark.parametrize("B, DH, launches, rows, tile", [
    (64, 1024, 2, 32, (16, 16, 8)), (128, 768, 4, 32, (32, 8, 16)), (85, 768, 3, 29, (32, 8, 16))])  # fmt: skip
def test_the_plan_trains_through_b4_in_launches_of_fewer_rows(B, DH, launches, rows, tile):
    """H1024 B64 (the forward split in one launch, no split backward of 64 rows): b4 in 2 launches of 32 rows (16
    units x 16 rows, 128 programs each on the H200's 132 SMs); a head of 768 at 128 rows in 4 launches of 32 rows of
    the 32-unit tile (24 programs per 8 rows: 5 batch tiles resident)."""
    p = plan.choose(B, 1, DH, "lstm", torch.float16, gpu="h200", training=True)
    assert p.kind == "split" and p.backward is None
    cfg, got = p.b4
    assert (got, -(-B // got), (cfg.block_u, cfg.block_b, cfg.warps)) == (rows, launches, tile)
    assert cfg.programs(got, 1, DH) <= 132 and "alternating" not in p.why and "b4 runs in" in p.why


@pytest.mark.parametrize("B, DH", [(256, 768), (256, 1024), (64, 1024)])
def test_the_grids_losing_points_run_no_alternating_backward(B, DH):
    """H768 B256 and H1024 B256 (the forward in launches of fewer rows: plan.batch_rows) and H1024 B64: every launch's
    plan trains through b4, none through the alternating backward."""
    rows = plan.batch_rows(B, 1, DH, "lstm", torch.float16, True)
    assert rows is not None
    for r in {rows, B - (B // rows - 1) * rows if B % rows else rows}:
        p = plan.choose(r, 1, DH, "lstm", torch.float16, gpu="h200", training=True)
        assert p.kind == "split" and (p.backward is not None or p.b4 is not None), p.why


def test_b4_rows_refuses_what_no_tile_takes():
    """No b4 tile holds a head of 1536 (R^T's rows alone past the register budget), and 1 SM holds no launch."""
    assert plan.b4_rows(16, 1, 1536, 132) is None
    assert plan.b4_rows(16, 1, 1024, 1) is None
    assert plan.b4_rows(16, 1, 1024, 132)[1] == 16  # the whole batch in one launch where it fits


def test_b4_only_where_the_split_backward_does_not_fit_and_only_for_the_lstm():
    """Where version 5's split backward takes the whole batch (H1024 B17) the plan keeps it; b4 is an LSTM kernel in
    16 bits: a GRU's plan names no b4 launches."""
    p = plan.choose(17, 1, 1024, "lstm", torch.float16, gpu="h200", training=True)
    assert p.backward is not None and p.b4 is None
    p = plan.choose(64, 1, 1024, "gru", torch.float16, gpu="h200", training=True)
    assert p.backward is None and p.b4 is None and "alternating" in p.why


def test_the_loops_bind_b4_with_the_plans_rows(monkeypatch):
    """Where the Gluon kernels run (forced here) and large batches run in launches (``large_batch='launches'``; by
    default they take the stepwise kernels), the backward loop of H1024 B64 is b4 in launches of 32 rows."""
    monkeypatch.setattr(plan, "_gluon_runs", lambda *a: True)
    monkeypatch.setattr(plan, "v6_applies", lambda *a: False)  # the forward stays version 5's one launch
    plan.clear_cache()
    launches = FusedConfig(large_batch="launches")
    try:
        _, backward = plan._loops(64, 1, 1024, "lstm", torch.float16, torch.device("cpu"), True, launches)
    finally:
        plan.clear_cache()
    assert isinstance(backward, functools.partial) and backward.func is plan._b4_gradients
    assert backward.keywords["rows"] == 32 and backward.keywords["cfg"].block_b == 16


def _fake_b4(launched):
    """b4 as its float64 schedule, recording each launch's rows."""

    def run(d_out, gates, out, states, R, d_last=None, *, cfg, sum_db, config):
        launched.append(out.shape[1])
        dG, ds0 = b4.schedule_reference(d_out, gates, out, states, R, d_last, cfg=cfg)
        return (dG, ds0, dG.sum((0, 1))) if sum_db else (dG, ds0)

    return run


@pytest.mark.parametrize("B, rows, small_rows", [(17, 5, None), (17, 5, 1), (9, 9, 1), (33, 16, None)])
def test_b4_in_launches_of_fewer_rows_gives_every_gradient(B, rows, small_rows, make_inputs, monkeypatch):
    """The launches' dG, d_states and (summed in the kernel, small_rows=1) db, joined, and the parameter gradients of
    the whole batch equal autograd through float64's LSTM: odd batches, a last launch of fewer rows, 2 heads."""
    launched = []
    monkeypatch.setattr(b4, "split_backward_b4", _fake_b4(launched))
    NH, DH, T = 2, 64, 3
    inputs = [x.double() for x in make_inputs("lstm", B, T, NH, DH, dtype=torch.float32, seed=B + rows)]
    leaves = [x.clone().requires_grad_() for x in inputs]
    out, last = rnn.flashrnn(*leaves, function="lstm", backend="vanilla")
    d_out, d_last = torch.randn_like(out), torch.randn_like(last)
    want = torch.autograd.grad((out * d_out).sum() + (last * d_last).sum(), leaves)
    Wx, R, b, s0 = inputs
    prev = torch.cat((s0[0], out[0].detach()[:, :-1]), dim=1)
    gates = Wx + torch.einsum("gnjk,btnk->btgnj", R, prev) + b[None, None]
    config = dataclasses.replace(plan.current_config(), small_rows=small_rows)
    got = plan._b4_gradients(d_out, gates, out.detach(), s0, R, "lstm", d_last, cfg=b4.b4_config(DH, 16, 16, 4),
                             config=config, rows=rows)  # fmt: skip
    assert launched == [min(rows, B - i) for i in range(0, B, rows)]
    for name, g, w in zip(("dWx", "dR", "db", "d_states"), got, want):  # (dR, db by the parameter products)
        check.assert_close(g, w, rtol=1e-10 if name in ("dWx", "d_states") else 1e-5, name=name)


def test_a_launch_left_out_is_caught(make_inputs, monkeypatch):
    """The comparison can fail: launches that skip the last rows leave their gradients wrong."""
    launched = []
    monkeypatch.setattr(b4, "split_backward_b4", _fake_b4(launched))
    inputs = [x.double() for x in make_inputs("lstm", 7, 2, 1, 64, dtype=torch.float32, seed=3)]
    leaves = [x.clone().requires_grad_() for x in inputs]
    out, last = rnn.flashrnn(*leaves, function="lstm", backend="vanilla")
    d_out = torch.randn_like(out)
    want = torch.autograd.grad((out * d_out).sum(), leaves)[3]
    Wx, R, b, s0 = inputs
    prev = torch.cat((s0[0], out[0].detach()[:, :-1]), dim=1)
    gates = Wx + torch.einsum("gnjk,btnk->btgnj", R, prev) + b[None, None]
    d_out[:, 6:] = 0  # as if the last launch (row 6) never ran: its gradient differs from autograd's
    got = plan._b4_gradients(d_out, gates, out.detach(), s0, R, "lstm", cfg=b4.b4_config(64, 16, 16, 4),
                             config=plan.current_config(), rows=3)  # fmt: skip
    with pytest.raises(AssertionError):
        check.assert_close(got[3], want, rtol=1e-6, name="d_states")
