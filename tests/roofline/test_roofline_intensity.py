"""Lesson 1's counting and model (gpulab.roofline.intensity): intensity formulas against hand counts on tiny sizes,
the roofline model by hand, and hypothesis properties of the FLOP and byte helpers. (Bad input: in
test_roofline_bad_input.py.)"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulab import bench, roofline

# ----------------------------------------------------------------------------------------------------------------
# counting: hand counts on tiny sizes


def test_vector_add_by_hand():
    r = roofline.vector_add(1000, torch.float32)
    assert (r.flops, r.bytes) == (1000, 12000)  # one add per element; read x, y and write z, 4 bytes each
    assert r.intensity == pytest.approx(1 / 12)
    assert r.compute == "fp32" and r.dtype == "float32"
    assert roofline.vector_add(7, "fp16").bytes == 7 * 3 * 2


def test_softmax_by_hand():
    r = roofline.softmax(3, 5, "float16")
    assert r.flops == 5 * 15  # max, subtract, exp, sum, divide per element
    assert r.bytes == 2 * 15 * 2  # read once, write once, 2 bytes
    assert r.compute == "fp32"  # reductions and exp run on the FP32 units, not the tensor cores


@pytest.mark.parametrize(
    ("dtype", "itemsize", "compute"),
    [("bfloat16", 2, "bf16"), (torch.float16, 2, "fp16"), ("fp32", 4, "fp32"), ("tf32", 4, "tf32")],
)
def test_gemm_by_hand(dtype, itemsize, compute):
    r = roofline.gemm(2, 3, 4, dtype)
    assert r.flops == 2 * 2 * 3 * 4  # 24 multiply-adds
    assert r.bytes == (2 * 4 + 4 * 3 + 2 * 3) * itemsize  # A, B read; C written
    assert r.compute == compute


def test_gemm_intensity_grows_with_size():
    # Square GEMM: 2n^3 / (3 n^2 s) = 2n / (3s)
    assert roofline.gemm(8192, 8192, 8192, "bf16").intensity == pytest.approx(2 * 8192 / 6)
    # A skinny GEMM (m = 16) reads all of B for only 16 rows: intensity about 2m/s = 16
    assert roofline.gemm(16, 4096, 4096, "bf16").intensity == pytest.approx(16, rel=0.01)


def test_attention_by_hand():
    naive = roofline.attention_naive(1, 1, 2, 3, 4, "fp16")
    assert naive.flops == 4 * 2 * 3 * 4  # QK^T and PV, 2 FLOPs per multiply-add
    # Q, O: 2x4 each; K, V: 3x4 each = 40 elements; S written + read, P written + read: 4 x (2x3) = 24
    assert naive.bytes == (40 + 24) * 2
    tiled = roofline.attention_tiled(1, 1, 2, 3, 4, "fp16")
    assert tiled.flops == naive.flops and tiled.bytes == 40 * 2
    causal = roofline.attention_naive(1, 1, 2, 3, 4, "fp16", causal=True)
    assert causal.flops == naive.flops / 2 and causal.bytes == naive.bytes  # naive still stores full matrices
    assert roofline.attention_tiled(1, 1, 2, 3, 4, "fp16", causal=True).flops == naive.flops / 2
    # batch and heads scale everything; the flops follow the course convention in gpulab.bench
    big = roofline.attention_naive(2, 3, 2, 3, 4, "fp16")
    assert (big.flops, big.bytes) == (6 * naive.flops, 6 * naive.bytes)
    assert big.flops == bench.attention_flops(2, 3, 2, 3, 4)
    assert naive.compute == "fp16" and roofline.attention_tiled(1, 1, 2, 3, 4, "tf32").compute == "tf32"


def test_attention_tiled_is_far_more_intense_at_long_sequences():
    n, d = 4096, 128
    naive = roofline.attention_naive(1, 1, n, n, d, "bf16")
    tiled = roofline.attention_tiled(1, 1, n, n, d, "bf16")
    assert tiled.intensity == pytest.approx(4 * n * n * d / (4 * n * d * 2))  # = N / 2 for bf16
    assert naive.intensity < d / 2  # the N^2 score traffic caps it below D / itemsize FLOP/byte


def test_lstm_step_by_hand():
    r = roofline.lstm_step(2, 3, 5, "float32")
    assert r.flops == 2 * 2 * (4 * 5) * (3 + 5)  # [B, I+H] x [I+H, 4H]
    # x_t 2x3, h and c in 2x5 each, W 20x3, U 20x5, bias 20, h and c out 2x5 each
    assert r.bytes == (6 + 20 + 60 + 100 + 20 + 20) * 4
    # small batch: the weights dominate and the intensity is about 2B / itemsize
    assert roofline.lstm_step(1, 4096, 4096, "bf16").intensity == pytest.approx(1.0, rel=0.01)
    assert roofline.lstm_step(16, 4096, 4096, "bf16").intensity == pytest.approx(16.0, rel=0.02)


def test_lstm_sequence_by_hand():
    step = roofline.lstm_step(2, 3, 5, "float32")
    per_step = roofline.lstm_sequence(2, 7, 3, 5, "float32", weights_on_chip=False)
    assert per_step.flops == 7 * step.flops and per_step.bytes == 7 * step.bytes
    on_chip = roofline.lstm_sequence(2, 7, 3, 5, "float32", weights_on_chip=True)
    assert on_chip.flops == per_step.flops
    # x: 7x2x3 = 42 read, h_t: 7x2x5 = 70 written, h0 + c0 read and c_T written: 3x2x5 = 30, W + U + bias: 180
    assert on_chip.bytes == (42 + 70 + 30 + 180) * 4
    assert "weights on chip" in on_chip.name and "weights every step" in per_step.name


def test_lstm_sequence_layers_by_hand():
    two = roofline.lstm_sequence(2, 7, 3, 5, "float32", layers=2, weights_on_chip=False)
    first, second = roofline.lstm_step(2, 3, 5, "float32"), roofline.lstm_step(2, 5, 5, "float32")
    assert two.flops == 7 * (first.flops + second.flops)  # layer 2's input is layer 1's hidden state
    assert two.bytes == 7 * (first.bytes + second.bytes)
    fused = roofline.lstm_sequence(2, 7, 3, 5, "float32", layers=2, weights_on_chip=True)
    layer2 = 7 * 2 * (5 + 5) + 30 + (20 * 10 + 20)  # reads layer 1's outputs from HBM
    assert fused.bytes == ((42 + 70 + 30 + 180) + layer2) * 4


def test_course_operations_table():
    ops = roofline.course_operations()
    assert len(ops) == 9 and all(isinstance(o, roofline.Intensity) for o in ops)
    text = roofline.intensity_table(ops, roofline.Ceilings.from_spec("H100"))
    assert text.splitlines()[0].startswith("operation")
    row = next(line for line in text.splitlines() if line.startswith("vector add"))
    assert "0.0833" in row and row.endswith("memory")
    assert next(line for line in text.splitlines() if line.startswith("GEMM 8192")).endswith("compute")


# ----------------------------------------------------------------------------------------------------------------
# the model


def test_attainable_ridge_and_bound_by_hand():
    # H100 spec: 989.4 TFLOP/s bf16, 3350 GB/s
    assert roofline.ridge_point(989.4, 3350) == pytest.approx(295.34, rel=1e-4)
    assert roofline.attainable(1 / 12, 989.4, 3350) == pytest.approx(3350 / 12 / 1000)
    assert roofline.attainable(1000, 989.4, 3350) == 989.4
    assert roofline.attainable(0, 989.4, 3350) == 0
    assert roofline.bound(10, 989.4, 3350) == "memory"
    assert roofline.bound(400, 989.4, 3350) == "compute"
    assert roofline.bound(roofline.ridge_point(100, 1000), 100, 1000) == "compute"  # at the ridge: compute


# ----------------------------------------------------------------------------------------------------------------
# properties (hypothesis): the counts follow their formulas at any size, and the model's inequalities hold

PROPERTY = settings(deadline=None, max_examples=30, derandomize=True)
size = st.integers(min_value=1, max_value=1 << 20)
small = st.integers(min_value=1, max_value=4096)
itemsizes = st.sampled_from([("float32", 4), ("float16", 2), ("bfloat16", 2), ("tf32", 4)])
rate = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


@PROPERTY
@given(m=size, n=size, k=size, dtype=itemsizes)
def test_gemm_counts_follow_the_formula(m, n, k, dtype):
    name, s = dtype
    r = roofline.gemm(m, n, k, name)
    assert r.flops == 2 * m * n * k and r.bytes == (m * k + k * n + m * n) * s
    assert r.intensity > 0 and r.compute == {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(name, name)
    # doubling every side doubles the intensity: 8x the FLOPs over 4x the bytes
    assert roofline.gemm(2 * m, 2 * n, 2 * k, name).intensity == pytest.approx(2 * r.intensity, rel=1e-12)


@PROPERTY
@given(b=small, h=st.integers(1, 64), nq=small, nk=small, d=st.integers(1, 256), causal=st.booleans())
def test_tiled_attention_never_moves_more_than_naive(b, h, nq, nk, d, causal):
    naive = roofline.attention_naive(b, h, nq, nk, d, "fp16", causal=causal)
    tiled = roofline.attention_tiled(b, h, nq, nk, d, "fp16", causal=causal)
    assert naive.flops == tiled.flops == bench.attention_flops(b, h, nq, nk, d, causal=causal)
    assert naive.bytes - tiled.bytes == 4 * b * h * nq * nk * 2  # exactly the score matrices, written and read
    full = roofline.attention_tiled(b, h, nq, nk, d, "fp16")
    assert tiled.flops == (full.flops / 2 if causal else full.flops)


@PROPERTY
@given(b=small, t=st.integers(1, 512), i=small, h=small, layers=st.integers(1, 4), dtype=itemsizes)
def test_lstm_sequence_is_steps_or_weights_on_chip(b, t, i, h, layers, dtype):
    name, s = dtype
    per_step = roofline.lstm_sequence(b, t, i, h, name, layers=layers, weights_on_chip=False)
    on_chip = roofline.lstm_sequence(b, t, i, h, name, layers=layers, weights_on_chip=True)
    steps = [roofline.lstm_step(b, i if layer == 0 else h, h, name) for layer in range(layers)]
    assert per_step.flops == on_chip.flops == pytest.approx(t * sum(one.flops for one in steps), rel=1e-12)
    assert per_step.bytes == pytest.approx(t * sum(one.bytes for one in steps), rel=1e-12)
    assert on_chip.bytes <= per_step.bytes  # keeping the weights on chip never costs bytes
    assert per_step.bytes % s == 0 and on_chip.bytes % s == 0  # whole elements


@PROPERTY
@given(n=size, rows=small, cols=small, dtype=st.sampled_from([("float32", 4), ("float16", 2), ("bfloat16", 2)]))
def test_pointwise_counts_follow_the_formula(n, rows, cols, dtype):
    name, s = dtype
    add, sm = roofline.vector_add(n, name), roofline.softmax(rows, cols, name)
    assert (add.flops, add.bytes, add.compute) == (n, 3 * n * s, "fp32")
    assert (sm.flops, sm.bytes, sm.compute) == (5 * rows * cols, 2 * rows * cols * s, "fp32")
    assert add.intensity == pytest.approx(1 / (3 * s))  # independent of n: a vector add never leaves the memory roof


@PROPERTY
@given(i=st.floats(0, 1e6, allow_nan=False), j=st.floats(0, 1e6, allow_nan=False), peak=rate, bw=rate)
def test_attainable_is_the_lower_of_the_two_roofs_and_monotone(i, j, peak, bw):
    a = roofline.attainable(i, peak, bw)
    assert a <= peak and a <= i * bw / 1e3 * (1 + 1e-12)
    assert a == pytest.approx(min(peak, i * bw / 1e3), rel=1e-12)
    lo, hi = sorted((i, j))
    assert roofline.attainable(lo, peak, bw) <= roofline.attainable(hi, peak, bw)
    ridge = roofline.ridge_point(peak, bw)
    assert roofline.bound(i, peak, bw) == ("compute" if i >= ridge else "memory")


@PROPERTY
@given(value=st.one_of(st.integers(max_value=0), st.floats(allow_nan=True).filter(lambda v: not float(v).is_integer())))
def test_sizes_that_are_not_positive_integers_are_refused(value):
    with pytest.raises(ValueError, match="^k must be a positive integer"):
        roofline.gemm(4, 4, value)
    with pytest.raises(ValueError, match="^seq must be a positive integer"):
        roofline.lstm_sequence(2, value, 3, 5)
