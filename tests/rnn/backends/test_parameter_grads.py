"""The parameter gradients from dG (issue 16's lean host path): the one-launch kernel against float64 and against
the PyTorch products it replaces, both layouts, every function, odd sizes; poisoned outputs show unwritten
elements. The chooser takes the kernel only up to SMALL_ROWS rows."""

import pytest
import torch

from gpulab import runtime
from gpulab.check import poisoned
from gpulab.rnn.backends import parameter_grads as pg
from gpulab.rnn.functions import get_function


def _problem(function, B, T, NH, DH, dtype, time_major, seed):
    g = torch.Generator().manual_seed(seed)
    fn = get_function(function)
    dG = torch.randn(*((T, B) if time_major else (B, T)), fn.gates_b, NH, DH, generator=g).to(dtype)
    out = torch.randn(fn.states, B, T, NH, DH, generator=g).to(dtype)
    states = torch.randn(fn.states, B, 1, NH, DH, generator=g).to(dtype)
    return fn, dG, out, states


def _float64_reference(fn, dG, out, states, time_major):
    """dR[g, n, j, m] = sum_{b,t} dG[b, t, g, n, j] h_{t-1}[b, n, m], db = sum_{b,t} dG, in float64."""
    d = (dG.transpose(0, 1) if time_major else dG).double()  # [B, T, G_b, NH, DH]
    h_prev = torch.cat((states[0], out[0, :, :-1]), dim=1).double()  # [B, T, NH, DH]
    dR = torch.einsum("btgnj,btnm->gnjm", d[:, :, fn.r_gates], h_prev)
    return dR, d.sum((0, 1))


def _rel(a, b):
    return ((a.double() - b).norm() / b.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize(
    "function, B, T, NH, DH, dtype, time_major",
    [
        ("lstm", 1, 1, 1, 16, torch.float32, True),  # one row
        ("lstm", 3, 17, 2, 24, torch.float32, True),  # ragged dims, rows past one block
        ("gru", 2, 5, 3, 20, torch.float32, False),  # G_r = 3 of G_b = 4; batch-major
        ("elman", 5, 3, 1, 33, torch.float32, True),  # one gate, DH past a 32 block
        ("lstm", 4, 9, 2, 32, "half", False),  # bf16 on a GPU; fp16 in the interpreter (its bf16 dot is wrong)
    ],
)
def test_one_launch_matches_float64_and_the_products(function, B, T, NH, DH, dtype, time_major):
    if dtype == "half":
        dtype = torch.bfloat16 if runtime.on_gpu() else torch.float16
    fn, dG, out, states = _problem(function, B, T, NH, DH, dtype, time_major, seed=B * 100 + T)
    dev = runtime.device
    dG, out, states = dG.to(dev), out.to(dev), states.to(dev)
    dWx, dR, db = pg.small_parameter_grads(dG, out, states, function, time_major=time_major)
    ref_R, ref_b = _float64_reference(fn, dG.cpu(), out.cpu(), states.cpu(), time_major)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert dR.shape == ref_R.shape and db.shape == ref_b.shape and dR.dtype == dtype
    assert torch.isfinite(dR).all() and torch.isfinite(db).all()  # poisoned buffers: every element written
    assert _rel(dR.cpu(), ref_R) < tol and _rel(db.cpu(), ref_b) < tol, (_rel(dR.cpu(), ref_R), _rel(db.cpu(), ref_b))
    torch_dWx, torch_dR, torch_db = pg.parameter_grads(dG, out, states, function, time_major=time_major)
    assert torch.equal(dWx, torch_dWx)  # a view of dG's input gates either way
    torch.testing.assert_close(dR, torch_dR, rtol=tol, atol=tol)
    torch.testing.assert_close(db, torch_db, rtol=tol, atol=tol)


def test_a_wrong_h_index_would_show():
    """The reference sees which h each row multiplies: shifting h_{t-1} to h_t changes dR (a test that could not fail
    with the shift would prove nothing)."""
    fn, dG, out, states = _problem("lstm", 2, 6, 1, 16, torch.float32, True, seed=7)
    _, dR, _ = pg.small_parameter_grads(dG, out, states, "lstm", time_major=True)
    shifted = torch.einsum("tbgj,btm->gjm", dG[:, :, fn.r_gates, 0], out[0, :, :, 0].double().float())
    assert _rel(dR[:, 0], shifted.double()) > 0.1


def test_the_chooser_takes_the_kernel_for_few_rows(monkeypatch):
    calls = []
    monkeypatch.setattr(pg, "small_parameter_grads", lambda *a, **k: calls.append("small") or "small")
    monkeypatch.setattr(pg, "parameter_grads", lambda *a, **k: calls.append("torch") or "torch")
    _, dG, out, states = _problem("elman", 1, 4, 1, 16, torch.float32, False, seed=1)
    assert pg.gate_gradients_to_parameters(dG, out, states, "elman") == "small"
    assert pg.gate_gradients_to_parameters(dG, out, states, "elman", small_rows=3) == "torch"
    assert calls == ["small", "torch"]


def test_poisoned_is_what_new_output_gives_in_tests():
    assert runtime.POISON and torch.isnan(poisoned(4, dtype=torch.float32)).all()


@pytest.mark.gpu
@pytest.mark.parametrize(
    "function, B, T, NH, DH, time_major",
    [
        ("lstm", 1, 4, 2, 64, True),
        ("gru", 16, 64, 12, 64, True),
        ("lstm", 64, 32, 4, 128, False),
        ("elman", 7, 9, 1, 256, True),
    ],
)
def test_one_launch_bf16_on_gpu(function, B, T, NH, DH, time_major):
    fn, dG, out, states = _problem(function, B, T, NH, DH, torch.bfloat16, time_major, seed=B + T)
    with runtime.poisoning(True):
        _, dR, db = pg.small_parameter_grads(dG.cuda(), out.cuda(), states.cuda(), function, time_major=time_major)
    ref_R, ref_b = _float64_reference(fn, dG, out, states, time_major)
    assert torch.isfinite(dR).all() and torch.isfinite(db).all()
    assert _rel(dR.cpu(), ref_R) < 1e-2 and _rel(db.cpu(), ref_b) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("B, T, NH, DH", [(16, 256, 1, 768), (16, 256, 1, 256), (15, 273, 3, 64)])
def test_the_host_bound_route_is_one_launch_and_matches_float64_on_gpu(B, T, NH, DH):
    """Past SMALL_ROWS rows, 16-bit products of a head up to 768 take the one launch (the chooser's route, as the
    module's backward calls it), against float64."""
    fn, dG, out, states = _problem("lstm", B, T, NH, DH, torch.float16, False, seed=B * T + DH)
    dG, out, states = dG.cuda(), out.cuda(), states.cuda()
    assert B * T > pg.SMALL_ROWS and pg.one_launch(out)
    with runtime.poisoning(True):
        _, dR, db = pg.gate_gradients_to_parameters(dG, out, states, "lstm")
    ref_R, ref_b = _float64_reference(fn, dG.cpu(), out.cpu(), states.cpu(), False)
    assert torch.isfinite(dR).all() and torch.isfinite(db).all()
    assert _rel(dR.cpu(), ref_R) < 1e-2 and _rel(db.cpu(), ref_b) < 1e-2, (_rel(dR.cpu(), ref_R), _rel(db.cpu(), ref_b))


def _steps_reference(fn, dG, out, states, time_major, t0, t1):
    """dR and db over the rows of steps [t0, t1) only, in float64."""
    d = (dG.transpose(0, 1) if time_major else dG).double()[:, t0:t1]
    h_prev = torch.cat((states[0], out[0, :, :-1]), dim=1).double()[:, t0:t1]
    return torch.einsum("btgnj,btnm->gnjm", d[:, :, fn.r_gates], h_prev), d.sum((0, 1))


@pytest.mark.parametrize("time_major", [False, True], ids=["batch-major", "time-major"])
@pytest.mark.parametrize(
    "function, B, T, NH, DH, t0, t1, rows_per_split",
    [
        ("lstm", 3, 11, 2, 16, 4, 11, 8),  # a later piece, 21 rows in 3 splits (the last one short)
        ("lstm", 2, 9, 1, 24, 0, 3, 64),  # the first piece (h_{-1} from the initial state), one split
        ("gru", 5, 7, 2, 20, 2, 5, 4),  # G_r = 3 of G_b = 4; ragged units; 15 rows in 4 splits
        ("elman", 1, 17, 1, 33, 16, 17, 64),  # one step, one row; DH past a 32 block
    ],
)
def test_step_products_sum_the_rows_of_their_steps(function, B, T, NH, DH, t0, t1, rows_per_split, time_major):
    """The piece products of the fused backward: the fp32 sums of each row split, added up, are dR and db over the
    rows of steps [t0, t1) alone, read in place from dG in either layout (outputs poisoned: every split written)."""
    fn, dG, out, states = _problem(function, B, T, NH, DH, torch.float32, time_major, seed=B * T + t0)
    dev = runtime.device
    n = pg.step_splits(B, t1 - t0, rows_per_split)
    assert n == -(-(B * (t1 - t0)) // rows_per_split)
    dR = poisoned(n, fn.gates_r, NH, DH, DH, dtype=torch.float32, device=dev)
    db = poisoned(n, fn.gates_b, NH, DH, dtype=torch.float32, device=dev)
    pg.step_products(dG.to(dev), out.to(dev), states.to(dev), function, t0, t1, dR, db, time_major, rows_per_split)
    assert torch.isfinite(dR).all() and torch.isfinite(db).all()
    ref_R, ref_b = _steps_reference(fn, dG, out, states, time_major, t0, t1)
    assert _rel(dR.sum(0).cpu(), ref_R) < 1e-5 and _rel(db.sum(0).cpu(), ref_b) < 1e-5
    whole_R, _ = _float64_reference(fn, dG, out, states, time_major)
    if (t0, t1) != (0, T):  # the steps' sums are not the whole sequence's: a kernel ignoring [t0, t1) would show
        assert _rel(dR.sum(0).cpu(), whole_R) > 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("time_major", [False, True], ids=["batch-major", "time-major"])
def test_step_products_bf16_at_the_main_problem_on_gpu(time_major):
    """The later 7/8 of the lesson's main problem (B 16, T 1024, 12 heads of 64) in bf16, as the fused backward
    launches it on its second stream, against float64."""
    fn, dG, out, states = _problem("lstm", 16, 1024, 12, 64, torch.bfloat16, time_major, seed=3)
    n = pg.step_splits(16, 896)
    with runtime.poisoning(True):
        dR = poisoned(n, 4, 12, 64, 64, dtype=torch.float32, device="cuda")
        db = poisoned(n, 4, 12, 64, dtype=torch.float32, device="cuda")
        pg.step_products(dG.cuda(), out.cuda(), states.cuda(), "lstm", 128, 1024, dR, db, time_major=time_major)
    ref_R, ref_b = _steps_reference(fn, dG, out, states, time_major, 128, 1024)
    assert _rel(dR.sum(0).cpu(), ref_R) < 1e-2 and _rel(db.sum(0).cpu(), ref_b) < 1e-2


@pytest.mark.parametrize(
    "function, B, T, NH, DH, time_major",
    [
        ("lstm", 1, 1, 1, 16, False),  # one row: only the initial h
        ("lstm", 3, 17, 1, 24, False),  # every t = 0 row but the first paired wrongly by the shift, then fixed
        ("gru", 5, 2, 1, 20, False),
        ("lstm", 3, 7, 2, 24, False),  # several heads: h_{t-1} copied
        ("elman", 4, 1, 1, 8, False),  # T = 1: every row is a t = 0 row
        ("lstm", 3, 5, 2, 12, True),  # time-major: h_{t-1} copied
    ],
)
def test_products_pair_every_row_with_h_before_it(function, B, T, NH, DH, time_major):
    """parameter_grads in the layout the split kernels write (batch-major, one head: the outputs' rows read shifted by
    one, the t = 0 rows fixed by a product of B rows; several heads or time-major: h_{t-1} copied) against float64."""
    fn, dG, out, states = _problem(function, B, T, NH, DH, torch.float32, time_major, seed=B * 10 + T)
    dWx, dR, db = pg.parameter_grads(dG, out, states, function, time_major=time_major)
    ref_R, ref_b = _float64_reference(fn, dG, out, states, time_major)
    assert dR.shape == ref_R.shape and dR.dtype == torch.float32 and dR.is_contiguous()
    assert _rel(dR, ref_R) < 1e-5 and _rel(db, ref_b) < 1e-5, (_rel(dR, ref_R), _rel(db, ref_b))
    assert dWx.data_ptr() == (dG.transpose(0, 1) if time_major else dG)[:, :, fn.w_gates].data_ptr()


def test_products_in_bf16_stay_within_its_rounding():
    fn, dG, out, states = _problem("lstm", 4, 33, 1, 64, torch.bfloat16, False, seed=3)
    _, dR, db = pg.parameter_grads(dG, out, states, "lstm")
    ref_R, ref_b = _float64_reference(fn, dG, out, states, False)
    assert dR.dtype == torch.bfloat16 and _rel(dR, ref_R) < 1e-2 and _rel(db, ref_b) < 1e-2


def test_the_chooser_passes_a_given_db_through():
    """A db summed where dG was made (b4's sum_db) is returned as given past the one-launch rows."""
    fn, dG, out, states = _problem("lstm", 3, 5, 1, 16, torch.float32, False, seed=9)
    db = torch.full((fn.gates_b, 1, 16), 7.0)
    assert not pg.one_launch(torch.empty(2, 100, 100, 1, 1)) and pg.one_launch(out)
    assert pg.gate_gradients_to_parameters(dG, out, states, "lstm", db=db)[2] is not db  # one launch: its own db
    assert pg.parameter_grads(dG, out, states, "lstm", db=db)[2] is db


def test_the_one_launch_also_takes_the_host_bound_16_bit_products():
    """Past SMALL_ROWS rows the one launch is taken for 16-bit outputs up to HOST_BOUND_ROWS rows and a head of 768
    (NH * DH^2 <= HOST_BOUND_WORK); not for fp32, a row more, a larger head, or where small_rows is given."""

    def out(B, T, NH, DH, dtype=torch.float16):
        return torch.empty(2, B, T, NH, DH, dtype=dtype, device="meta")

    assert pg.one_launch(out(16, 256, 1, 768)) and pg.one_launch(out(16, 256, 12, 64))
    assert pg.one_launch(out(16, 256, 1, 256, torch.bfloat16))
    assert not pg.one_launch(out(16, 256, 1, 1024)) and not pg.one_launch(out(16, 256, 2, 768))
    assert not pg.one_launch(out(17, 256, 1, 256)) and not pg.one_launch(out(16, 256, 1, 256, torch.float32))
    assert pg.one_launch(out(8, 256, 1, 64, torch.float32))  # SMALL_ROWS: any dtype
    assert not pg.one_launch(out(16, 256, 1, 256), small_rows=2048) and pg.one_launch(out(4, 4, 1, 4096), 16)
