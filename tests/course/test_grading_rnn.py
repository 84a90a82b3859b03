"""Exercise 5's graders (gpulab.course.grading_rnn): they pass correct answers and name the usual mistakes."""

import pytest
import torch
import triton
import triton.language as tl

from gpulab import check
from gpulab.course import grading_rnn as grading
from gpulab.rnn import cells
from gpulab.rnn.cells import lstm_cell


@triton.jit
def gru_right(g, r, z, n, h):
    r = tl.sigmoid(r)
    z = tl.sigmoid(z)
    n = 2.0 * tl.sigmoid(2.0 * (n + r * g)) - 1.0
    return z * h + (1.0 - z) * n


@triton.jit
def gru_swapped(g, r, z, n, h):
    r = tl.sigmoid(r)
    z = tl.sigmoid(z)
    n = 2.0 * tl.sigmoid(2.0 * (n + r * g)) - 1.0
    return (1.0 - z) * h + z * n


@triton.jit
def gru_calls_course(g, r, z, n, h):
    return cells.gru_cell(g, r, z, n, h)


def test_a_mistake_is_recognised_where_its_result_cancels_to_near_zero():
    """A one-element block whose h' cancels to ~5e-4 from terms of size ~1 (the draw that once failed in CI): the
    kernel's fp32 value is the mistaken formula's up to rounding, and the hint's test says so; a different value
    is not."""
    h = torch.tensor([1.7], dtype=torch.float64)
    wrong = torch.tensor([-4.68e-4], dtype=torch.float64)
    fp32 = (wrong + 3e-7).float()  # the rounding of terms of size ~1 and |h|, relative to h' itself 6e-4
    assert check.relative_error(fp32, wrong) > 1e-4  # the relative test that missed it
    assert grading._same_up_to_rounding(fp32, wrong, h)
    assert not grading._same_up_to_rounding(torch.tensor([1.77]), wrong, h)


def test_gru_grader(capsys):
    grading.grade_gru_cell(gru_right)
    assert capsys.readouterr().out.startswith("PASSED GRU cell")
    with pytest.raises(AssertionError, match="keeps the OLD state"):
        grading.grade_gru_cell(gru_swapped)
    with pytest.raises(AssertionError, match="write the math yourself"):
        grading.grade_gru_cell(gru_calls_course)
    with pytest.raises(TypeError, match="decorate it with @triton.jit"):
        grading.grade_gru_cell(lambda g, r, z, n, h: h)


@triton.jit
def _prologue_and_loop(wx_ptr, r_ptr, b_ptr, s0_ptr, out_ptr, last_ptr, B, T, NH, DH: tl.constexpr,
                       BLOCK_B: tl.constexpr, BIAS: tl.constexpr, CARRY: tl.constexpr):  # fmt: skip
    n = tl.program_id(0)
    rows = tl.arange(0, BLOCK_B)
    cols = tl.arange(0, DH)
    mask = (rows < B)[:, None] & (cols < DH)[None, :]
    HD = NH * DH
    state_stride = B * T * HD
    r_tile = r_ptr + n * DH * DH + cols[:, None] + cols[None, :] * DH
    rt_i = tl.load(r_tile)
    rt_f = tl.load(r_tile + 1 * NH * DH * DH)
    rt_z = tl.load(r_tile + 2 * NH * DH * DH)
    rt_o = tl.load(r_tile + 3 * NH * DH * DH)
    b_row = b_ptr + n * DH + cols[None, :]
    b_i = tl.load(b_row) * BIAS
    b_f = tl.load(b_row + 1 * HD) * BIAS
    b_z = tl.load(b_row + 2 * HD) * BIAS
    b_o = tl.load(b_row + 3 * HD) * BIAS
    s_off = rows[:, None] * HD + n * DH + cols[None, :]
    h = tl.load(s0_ptr + s_off, mask=mask, other=0.0)
    c = tl.load(s0_ptr + B * HD + s_off, mask=mask, other=0.0)
    wx_rows = wx_ptr + rows[:, None] * T * 4 * HD + n * DH + cols[None, :]
    out_rows = out_ptr + rows[:, None] * T * HD + n * DH + cols[None, :]
    for t in range(T):
        wx = wx_rows + t * 4 * HD
        i = tl.load(wx, mask=mask, other=0.0) + tl.dot(h, rt_i, input_precision="ieee") + b_i
        f = tl.load(wx + 1 * HD, mask=mask, other=0.0) + tl.dot(h, rt_f, input_precision="ieee") + b_f
        z = tl.load(wx + 2 * HD, mask=mask, other=0.0) + tl.dot(h, rt_z, input_precision="ieee") + b_z
        o = tl.load(wx + 3 * HD, mask=mask, other=0.0) + tl.dot(h, rt_o, input_precision="ieee") + b_o
        h_new, c_new = lstm_cell(i, f, z, o, c)
        if CARRY:
            h, c = h_new, c_new
        tl.store(out_rows + t * HD, h_new, mask=mask)
        tl.store(out_rows + state_stride + t * HD, c_new, mask=mask)
    tl.store(last_ptr + s_off, h, mask=mask)
    tl.store(last_ptr + B * HD + s_off, c, mask=mask)


class _Variant:
    """The kernel above with BIAS/CARRY fixed, launched like the exercise's kernel."""

    def __init__(self, bias, carry):
        self.bias, self.carry = bias, carry

    def __getitem__(self, grid):
        return lambda *a, **kw: _prologue_and_loop[grid](*a, BIAS=self.bias, CARRY=self.carry, **kw)


def test_loop_grader(capsys):
    grading.grade_lstm_loop(_Variant(1.0, True), cases=3)
    assert capsys.readouterr().out.startswith("PASSED fused LSTM forward time loop")
    with pytest.raises(AssertionError, match="no bias"):
        grading.grade_lstm_loop(_Variant(0.0, True), cases=2)
    with pytest.raises(AssertionError, match="must carry over|keep the loop.s states"):
        grading.grade_lstm_loop(_Variant(1.0, False), cases=3)


def _lstm_step(i, f, z, o, c_prev, dh, dc, R, mistake=None):
    t = torch.tanh(f * c_prev + i * z)
    dc_total = dc + dh * o * (1 - t * t)
    if mistake == "no tanh'":
        dc_total = dc + dh * o
    if mistake == "no carry":
        dc_total = dh * o * (1 - t * t)
    sig = (lambda a: a) if mistake == "sigmoid'" else (lambda a: a * (1 - a))
    dG = torch.stack(
        [dc_total * z * sig(i), dc_total * c_prev * sig(f), dc_total * i * (1 - z * z), dh * t * sig(o)], 1
    )
    r = R.transpose(1, 2) if mistake == "R transposed" else R
    return dG, torch.einsum("bgj,gjk->bk", dG, r), dc_total * f


def test_lstm_backward_step_grader(capsys):
    grading.grade_lstm_backward_step(_lstm_step)
    assert capsys.readouterr().out.startswith("PASSED LSTM backward step")


@pytest.mark.parametrize(
    "mistake, message",
    [
        ("no tanh'", "derivative too"),
        ("no carry", "carried dc"),
        ("sigmoid'", "s \\(1 - s\\)"),
        ("R transposed", "untransposed"),
    ],
)
def test_lstm_backward_step_mistakes_are_named(mistake, message):
    with pytest.raises(AssertionError, match=message):
        grading.grade_lstm_backward_step(lambda *a: _lstm_step(*a, mistake=mistake))


def _shared_bytes(head_dim, function, dtype_bytes, block_b, mistake=None):
    from gpulab import runtime
    from gpulab.rnn.fused import tiling

    g, d = tiling.slots(function), runtime.dot_block(head_dim)
    if mistake == "no padding":
        d = head_dim
    if mistake == "gate count":
        g = {"lstm": 4, "gru": 3, "elman": 1}[function]
    buffer = 0 if mistake == "no buffer" else g * block_b * d * dtype_bytes
    return g * d * d * dtype_bytes + buffer


def test_shared_bytes_grader(capsys):
    tiling = pytest.importorskip("gpulab.rnn.fused.tiling")
    c = tiling.candidates(16, 12, 64, "lstm", torch.bfloat16, gpu="H100")[0]
    assert _shared_bytes(64, "lstm", 2, c.block_b) == c.shared_bytes  # the exercise counts what the tiling counts
    grading.grade_shared_bytes(_shared_bytes)
    assert capsys.readouterr().out.startswith("PASSED does a head fit on chip")


@pytest.mark.parametrize(
    "mistake, message", [("no padding", "pad the head dim"), ("no buffer", "buffer"), ("gate count", "slots")]
)
def test_shared_bytes_mistakes_are_named(mistake, message):
    with pytest.raises(AssertionError, match=message):
        grading.grade_shared_bytes(lambda *a: _shared_bytes(*a, mistake=mistake))


@triton.jit
def _rt_all(r_ptr, n, NH, DH: tl.constexpr, TRANSPOSED: tl.constexpr):
    """R^T of all four gates of head n as one [DH, 4 * DH] tile (TRANSPOSED: R itself, the common mistake)."""
    k = tl.arange(0, DH)[:, None]
    c = tl.arange(0, 4 * DH)[None, :]
    g, j = c // DH, c % DH
    if TRANSPOSED:
        return tl.load(r_ptr + g * NH * DH * DH + n * DH * DH + k * DH + j)
    else:
        return tl.load(r_ptr + g * NH * DH * DH + n * DH * DH + j * DH + k)


@triton.jit
def _split4(acc, BLOCK_B: tl.constexpr, DH: tl.constexpr):
    x = tl.permute(tl.reshape(acc, [BLOCK_B, 2, 2, DH]), (0, 3, 1, 2))
    x02, x13 = tl.split(x)
    x0, x2 = tl.split(x02)
    x1, x3 = tl.split(x13)
    return x0, x1, x2, x3


@triton.jit
def all_gates_right(h, r_ptr, n, NH, BLOCK_B: tl.constexpr, DH: tl.constexpr):
    acc = tl.dot(h, _rt_all(r_ptr, n, NH, DH, False), input_precision="ieee")
    return _split4(acc, BLOCK_B, DH)


@triton.jit
def all_gates_transposed(h, r_ptr, n, NH, BLOCK_B: tl.constexpr, DH: tl.constexpr):
    acc = tl.dot(h, _rt_all(r_ptr, n, NH, DH, True), input_precision="ieee")
    return _split4(acc, BLOCK_B, DH)


@triton.jit
def all_gates_wrong_order(h, r_ptr, n, NH, BLOCK_B: tl.constexpr, DH: tl.constexpr):
    acc = tl.dot(h, _rt_all(r_ptr, n, NH, DH, False), input_precision="ieee")
    x = tl.permute(tl.reshape(acc, [BLOCK_B, 2, 2, DH]), (0, 3, 1, 2))
    x02, x13 = tl.split(x)
    x0, x2 = tl.split(x02)
    x1, x3 = tl.split(x13)
    return x0, x2, x1, x3  # split's halves read as consecutive gates


@triton.jit
def all_gates_per_gate(h, r_ptr, n, NH, BLOCK_B: tl.constexpr, DH: tl.constexpr):
    k = tl.arange(0, DH)[:, None]
    j = tl.arange(0, DH)[None, :]
    rt = r_ptr + n * DH * DH + j * DH + k
    i = tl.dot(h, tl.load(rt), input_precision="ieee")
    f = tl.dot(h, tl.load(rt + NH * DH * DH), input_precision="ieee")
    z = tl.dot(h, tl.load(rt + 2 * NH * DH * DH), input_precision="ieee")
    o = tl.dot(h, tl.load(rt + 3 * NH * DH * DH), input_precision="ieee")
    return i, f, z, o


@triton.jit
def all_gates_sums(h, r_ptr, n, NH, BLOCK_B: tl.constexpr, DH: tl.constexpr):
    k = tl.arange(0, DH)[None, :]
    j = tl.arange(0, DH)[:, None]
    rt = r_ptr + n * DH * DH + j * DH + k  # [j, k]: R[g, n, j, k]
    i = tl.sum(h[:, None, :] * tl.load(rt)[None], 2)
    f = tl.sum(h[:, None, :] * tl.load(rt + NH * DH * DH)[None], 2)
    z = tl.sum(h[:, None, :] * tl.load(rt + 2 * NH * DH * DH)[None], 2)
    o = tl.sum(h[:, None, :] * tl.load(rt + 3 * NH * DH * DH)[None], 2)
    return i, f, z, o


@triton.jit
def all_gates_looped(h, r_ptr, n, NH, BLOCK_B: tl.constexpr, DH: tl.constexpr):
    # one [BLOCK_B, DH] product per gate in a loop: one tt.dot in the text, four at run time (refused for its
    # method before its numbers are looked at)
    k = tl.arange(0, DH)[:, None]
    j = tl.arange(0, DH)[None, :]
    acc = tl.zeros([BLOCK_B, DH], dtype=tl.float32)
    for g in range(4):
        acc += tl.dot(h, tl.load(r_ptr + g * NH * DH * DH + n * DH * DH + j * DH + k), input_precision="ieee")
    return acc, acc, acc, acc


@triton.jit
def all_gates_stub(h, r_ptr, n, NH, BLOCK_B: tl.constexpr, DH: tl.constexpr):
    raise NotImplementedError()


def test_all_gates_grader(capsys):
    grading.grade_all_gates(all_gates_right, cases=3)
    assert capsys.readouterr().out.startswith("PASSED all gates in one product")


@pytest.mark.parametrize(
    "fn,message",
    [
        (all_gates_transposed, "without the transpose"),
        (all_gates_wrong_order, "your f is gate z, your z is gate f"),
        (all_gates_per_gate, "compiles to 4 tt.dot ops"),
        (all_gates_sums, "compiles to no tt.dot"),
        (all_gates_looped, "inside a loop"),
        (all_gates_stub, "not implemented yet"),
    ],
)
def test_all_gates_mistakes_are_named(fn, message):
    with pytest.raises(AssertionError, match=message):
        grading.grade_all_gates(fn, cases=2)


def _r_bytes(T, NH, DH, itemsize, fused, mistake=None):
    once = 4 * NH * DH * DH * itemsize
    if mistake == "one gate":
        once //= 4
    if mistake == "elements":
        once //= itemsize
    if mistake == "swapped":
        fused = not fused
    return once if fused else T * once


def test_r_bytes_grader(capsys):
    grading.grade_r_bytes(_r_bytes)
    assert capsys.readouterr().out.startswith("PASSED bytes of R per forward")


@pytest.mark.parametrize(
    "mistake,message",
    [("one gate", "four gates"), ("elements", "bytes per element"), ("swapped", "reads R once for the whole sequence")],
)
def test_r_bytes_mistakes_are_named(mistake, message):
    with pytest.raises(AssertionError, match=message):
        grading.grade_r_bytes(lambda *a: _r_bytes(*a, mistake=mistake))
