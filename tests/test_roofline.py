"""Lesson 1 (gpulab.roofline) on CPU: intensity formulas against hand counts, the roofline model, ceilings from
stored results vs the spec table, the FMA and L2 kernels in the interpreter, the plot headless, and the graders."""

import json
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.axes  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import gpulab.__main__ as cli  # noqa: E402
from gpulab import bench, check, hardware, memory, roofline  # noqa: E402
from gpulab.bench import Result  # noqa: E402
from gpulab.course import grading_roofline as grading  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


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


@pytest.mark.parametrize(
    ("call", "word"),
    [
        (lambda: roofline.vector_add(0), "n must be a positive integer"),
        (lambda: roofline.vector_add(-4), "n must be a positive integer"),
        (lambda: roofline.vector_add(2.5), "n must be a positive integer"),
        (lambda: roofline.vector_add(True), "n must be a positive integer"),
        (lambda: roofline.softmax(3, 0), "cols"),
        (lambda: roofline.gemm(1, -2, 3), "n must be"),
        (lambda: roofline.gemm(1, 2, 0), "k must be"),
        (lambda: roofline.attention_naive(1, 1, 4, -4, 8), "seq_k"),
        (lambda: roofline.attention_tiled(1, 0, 4, 4, 8), "heads"),
        (lambda: roofline.attention_tiled(1, 1, 4, 4, 8, causal="yes"), "causal"),
        (lambda: roofline.lstm_step(0, 3, 5), "batch"),
        (lambda: roofline.lstm_sequence(2, 0, 3, 5), "seq"),
        (lambda: roofline.lstm_sequence(2, 3, 3, 5, layers=-1), "layers"),
        (lambda: roofline.lstm_sequence(2, 3, 3, 5, weights_on_chip="no"), "weights_on_chip"),
        (lambda: roofline.gemm(2, 2, 2, "int8"), "dtype='int8'"),
        (lambda: roofline.gemm(2, 2, 2, torch.int32), "dtype=torch.int32"),
        (lambda: roofline.gemm(2, 2, 2, "float64"), "dtype='float64'"),
        (lambda: roofline.vector_add(8, "tf32"), "dtype='tf32'"),  # tf32 is a matmul precision only
    ],
)
def test_counting_rejects_bad_arguments(call, word):
    with pytest.raises(ValueError) as e:
        call()
    assert word in str(e.value)


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


@pytest.mark.parametrize(
    ("args", "word"),
    [
        ((-1, 10, 10), "intensity"),
        ((float("nan"), 10, 10), "intensity"),
        ((1, 0, 10), "peak_tflops"),
        ((1, 10, -5), "bandwidth_gbps"),
        ((1, 10, float("inf")), "bandwidth_gbps"),
        (("1", 10, 10), "intensity"),
    ],
)
def test_model_rejects_bad_numbers(args, word):
    with pytest.raises(ValueError, match=word):
        roofline.attainable(*args)
    with pytest.raises(ValueError, match=word):
        roofline.bound(*args)


# ----------------------------------------------------------------------------------------------------------------
# ceilings


def _h100_records(date="2026-01-02", device="NVIDIA H100 80GB HBM3", mode="cuda", hbm_ms=0.72):
    common = dict(lesson="01", device=device, date=date, mode=mode)
    n = 1 << 28
    f = 2.0 * 8192**3
    return [
        Result(
            case="HBM: copy kernel (gpulab)", ms=hbm_ms, bytes=2 * n * 4, flops=0, params={"ceiling": "HBM"}, **common
        ),
        Result(case="HBM: torch copy_ (peer)", ms=0.714, bytes=2 * n * 4, flops=0, params={"peer_of": "HBM"}, **common),
        Result(case="L2 a", ms=1.0, bytes=8e9, flops=2e9, params={"ceiling": "L2", "level": "L2"}, **common),
        Result(case="L2 b", ms=1.0, bytes=9e9, flops=2e9, params={"ceiling": "L2", "level": "L2"}, **common),
        Result(case="L1", ms=1.0, bytes=25e9, flops=6e9, params={"ceiling": "L1", "level": "L1"}, **common),
        Result(case="bf16", ms=f / 780e9, flops=f, bytes=3 * 8192**2 * 2, params={"ceiling": "bf16"}, **common),
        Result(case="bf16 peer", ms=f / 760e9, flops=f, bytes=3 * 8192**2 * 2, params={"peer_of": "bf16"}, **common),
        Result(case="fma", ms=10.0, flops=6e11, bytes=1e6, params={"ceiling": "fp32"}, **common),
    ]


def test_ceilings_from_spec():
    c = roofline.Ceilings.from_spec("H100")
    assert (c.hbm_gbps, c.bf16_tflops, c.fp16_tflops, c.tf32_tflops, c.fp32_tflops) == (3350, 989.4, 989.4, 494.7, 66.9)
    assert c.l2_gbps is None and c.l1_gbps is None  # spec sheets give no cache bandwidths
    assert c.mode == "spec" and c.source.startswith("spec table")
    assert c.ridge("bf16") == pytest.approx(295.34, rel=1e-4)
    assert c.attainable(1, "fp32") == pytest.approx(3.35)
    assert c.attainable(1, "fp32", "L2") is None
    t4 = roofline.Ceilings.from_spec("T4")
    assert t4.bf16_tflops is None and t4.tf32_tflops is None and t4.fp16_tflops == 65.0


def test_ceilings_accessors_reject_unknown_keys():
    c = roofline.Ceilings.from_spec("H100")
    with pytest.raises(ValueError, match="level='L3'"):
        c.bandwidth("L3")
    with pytest.raises(ValueError, match="roof='fp64'"):
        c.compute("fp64")


def test_ceilings_from_results_takes_the_best_candidate():
    recs = _h100_records()
    c = roofline.Ceilings.from_results(recs)
    assert c.hbm_gbps == pytest.approx(2 * 2**28 * 4 / 0.72e-3 / 1e9)  # the copy kernel, not the peer
    assert c.l2_gbps == pytest.approx(9000)  # the best of two candidates
    assert c.l1_gbps == pytest.approx(25000)
    assert c.bf16_tflops == pytest.approx(780) and c.fp32_tflops == pytest.approx(60)
    assert c.fp16_tflops is None and c.tf32_tflops is None
    assert c.mode == "cuda" and c.source == "measured on NVIDIA H100 80GB HBM3, 2026-01-02"
    assert list(c.records) == recs
    assert c.to_results() == recs
    (hbm, bf16) = roofline.targets(c)
    assert hbm[0] == "HBM ceiling / HBM: torch copy_ (peer)" and hbm[1] == pytest.approx(0.714 / 0.72) and hbm[3]
    assert bf16[1] == pytest.approx(780 / 760) and bf16[3]
    text = c.summary()
    assert "measured on NVIDIA H100 80GB HBM3" in text and "89%" in text  # 2,983 of the 3,350 GB/s spec
    assert "0.99x HBM: torch copy_ (peer)" in text


def test_ceilings_targets_can_fail():
    c = roofline.Ceilings.from_results(_h100_records(hbm_ms=0.80))  # copy kernel 10% slower than torch
    (hbm, _) = roofline.targets(c)
    assert hbm[1] < 0.97 and not hbm[3]


def test_spec_ceilings_round_trip_through_results():
    c = roofline.Ceilings.from_spec("A100")
    recs = c.to_results()
    assert {r.params["ceiling"] for r in recs} == {"HBM", "fp32", "tf32", "fp16", "bf16"}
    assert all(r.params["synthetic"] for r in recs)
    back = roofline.Ceilings.from_results(recs)
    for key in roofline.MEMORY_LEVELS + roofline.COMPUTE_ROOFS:
        assert back.value(key) == pytest.approx(c.value(key)) if c.value(key) else back.value(key) is None
    assert back.source == c.source and back.mode == "spec"


def test_from_results_needs_an_hbm_ceiling_and_known_keys():
    with pytest.raises(ValueError, match="no HBM ceiling"):
        roofline.Ceilings.from_results(_h100_records()[2:])
    bad = Result(lesson="01", case="x", ms=1.0, bytes=1.0, params={"ceiling": "L3"})
    with pytest.raises(ValueError, match="'L3'"):
        roofline.Ceilings.from_results(_h100_records() + [bad])


def test_ceilings_falls_back_to_the_spec_table(tmp_path):
    c = roofline.ceilings("h100", root=tmp_path)
    assert c.mode == "spec" and c.source.startswith("spec table: NVIDIA H100 SXM5 80GB")
    assert roofline.ceilings(root=tmp_path).device == "NVIDIA H100 SXM5 80GB"  # no GPU here: the H100
    assert roofline.ceilings("T4", root=tmp_path).hbm_gbps == 320
    assert roofline.ceilings(hardware.spec("L4"), root=tmp_path).device == "NVIDIA L4"


def test_ceilings_reads_the_newest_stored_measurement(tmp_path, monkeypatch):
    bench.save(_h100_records(date="2026-01-02", hbm_ms=0.80), "01", root=tmp_path)
    bench.save(_h100_records(date="2026-02-03"), "01", root=tmp_path)
    bench.save(_h100_records(date="2026-03-04", device="NVIDIA A100-SXM4-80GB"), "01", root=tmp_path)
    bench.save(
        _h100_records(date="2026-04-05", device="CPU (Triton interpreter)", mode="interpreter"), "01", root=tmp_path
    )
    c = roofline.ceilings("h100", root=tmp_path)
    assert c.mode == "cuda" and c.date == "2026-02-03"  # newest H100 file; the A100 and CPU runs are not H100s
    assert c.source == (
        "stored measurement: NVIDIA H100 80GB HBM3, 2026-02-03 (01_roofline/nvidia-h100-80gb-hbm3-2026-02-03.jsonl)"
    )
    assert c.hbm_gbps == pytest.approx(2 * 2**28 * 4 / 0.72e-3 / 1e9)
    assert roofline.ceilings("A100", root=tmp_path).date == "2026-03-04"
    assert roofline.ceilings("H100 PCIe", root=tmp_path).mode == "spec"  # a different table entry
    monkeypatch.setenv("GPULAB_BENCHMARKS", str(tmp_path))
    assert roofline.ceilings().date == "2026-02-03"  # no GPU here: the H100's, found through the env var


def test_ceilings_rejects_unknown_gpu(tmp_path):
    with pytest.raises(ValueError, match="gpu='B9000'"):
        roofline.ceilings("B9000", root=tmp_path)


def test_stored_lesson_1_results_if_present():
    """Once the H100 benchmark is committed, it must be readable, measured, and meet the lesson's targets."""
    try:
        recs = bench.load("01", gpu="h100")
    except FileNotFoundError:
        pytest.skip("no stored lesson-1 results yet (python -m gpulab bench 01 on the H100)")
    c = roofline.ceilings("h100")
    assert c.mode == "cuda" and recs[0].device in c.source
    assert all(c.value(k) for k in roofline.MEMORY_LEVELS + roofline.COMPUTE_ROOFS)
    assert [met for _, _, _, met in roofline.targets(c)] == [True, True]


# ----------------------------------------------------------------------------------------------------------------
# kernels in the interpreter


@pytest.mark.parametrize(("n", "block"), [(1, 16), (17, 16), (64, 64), (131, 64), (200, 128)])
@pytest.mark.parametrize("iters", [1, 3])
def test_fma_chain_matches_float64(n, block, iters):
    x = check.random_tensor(roofline.FMA_CHAINS, n, distribution="uniform", scale=2.0)
    out = roofline.fma_chain(x, iters, block=block)
    assert out.shape == (n,) and not torch.isnan(out).any()  # poisoned before the launch: every lane stored
    steps = iters * roofline.FMA_UNROLL
    check.assert_close(out, roofline.fma_reference(x, steps), name="fma_chain", context=f"n={n}, {steps} steps")


def test_fma_chain_other_constants():
    x = check.random_tensor(roofline.FMA_CHAINS, 33)
    out = roofline.fma_chain(x, 2, b=-0.5, c=1.25, block=16)
    check.assert_close(out, roofline.fma_reference(x, 2 * roofline.FMA_UNROLL, b=-0.5, c=1.25))


def test_fma_reference_by_hand_and_closed_form():
    x = torch.tensor([[2.0], [0.0], [1.0], [-2.0]])
    # one step of a*0.75 + 0.25 on each chain: 1.75, 0.25, 1.0, -1.25 -> sum 1.75
    assert roofline.fma_reference(x, 1).tolist() == [1.75]
    x = check.random_tensor(roofline.FMA_CHAINS, 9)
    for steps in (0, 1, 5, 40):
        ref = roofline.fma_reference(x, steps, b=0.9, c=0.3)
        assert torch.allclose(roofline.fma_closed_form(x, steps, b=0.9, c=0.3), ref, rtol=1e-12, atol=1e-12)
    # long chains converge to the fixed point c / (1 - b) on every chain
    assert roofline.fma_closed_form(x, 10_000).tolist() == pytest.approx([4.0] * 9)


@pytest.mark.parametrize(
    ("make", "kwargs", "word"),
    [
        (lambda: check.random_tensor(3, 8), {}, "shape [4, n >= 1]"),
        (lambda: check.random_tensor(4, 8, dtype=torch.float16), {}, "float32"),
        (lambda: check.random_tensor(8, 4).t(), {}, "contiguous"),
        (lambda: check.random_tensor(4, 8), {"iters": 0}, "iters must be a positive integer"),
        (lambda: check.random_tensor(4, 8), {"b": float("nan")}, "b must be a finite number"),
        (lambda: check.random_tensor(4, 8), {"c": "1"}, "c must be a finite number"),
    ],
)
def test_fma_chain_rejects_bad_input(make, kwargs, word):
    args = {"iters": 1, **kwargs}
    with pytest.raises(ValueError) as e:
        roofline.fma_chain(make(), **args)
    assert word in str(e.value)


@pytest.mark.parametrize(("n", "block", "programs"), [(1, 4096, 3), (4097, 4096, 3), (17, 16, 3), (1000, 64, 4)])
def test_l2_sweep_matches_reference_and_lesson_0(n, block, programs):
    x = memory.sweep_data(n + 50)
    x[n:] = 1e6  # past the working set: must never be read
    plan = memory.sweep_plan(n, 3 * n * 4, block, programs)
    out = roofline.l2_sweep(x, n, plan["programs"], plan["iters"], block)
    assert out.shape == (plan["programs"],) and not torch.isnan(out).any()
    ref = memory.sweep_reference(x, n, plan["programs"], plan["iters"], block)
    check.assert_close(out, ref, name="l2_sweep")
    # the same schedule as lesson 0's kernel: only the cache modifier differs
    check.assert_close(out, memory.working_set_sweep(x, n, plan["programs"], plan["iters"], block), rtol=1e-6)


def test_l2_sweep_rejects_bad_input():
    x = check.random_tensor(256)
    with pytest.raises(ValueError, match="programs=2"):
        roofline.l2_sweep(x, 256, programs=2, iters=4, block=64)
    with pytest.raises(ValueError, match="n must be between 1 and x.numel"):
        roofline.l2_sweep(x, 0, 3, 1, 16)
    with pytest.raises(ValueError, match="x must be float32"):
        roofline.l2_sweep(x.half(), 64, 3, 1, 16)
    with pytest.raises(ValueError, match="iters"):
        roofline.l2_sweep(x, 64, 3, 0, 16)


# ----------------------------------------------------------------------------------------------------------------
# measuring on CPU (interpreter numbers, labelled as such)


def test_measure_ceilings_on_cpu():
    c = roofline.measure_ceilings()
    assert c.mode == "interpreter" and "interpreter" in c.source and "not hardware ceilings" in c.source
    assert all(c.value(k) and c.value(k) > 0 for k in roofline.MEMORY_LEVELS + roofline.COMPUTE_ROOFS)
    cases = [r.case for r in c.records]
    assert "HBM: copy kernel (gpulab)" in cases and "HBM: torch copy_ (peer)" in cases
    assert any(r.params.get("peer_of") == "bf16" for r in c.records)
    assert {r.params.get("ceiling") for r in c.records} >= set(roofline.MEMORY_LEVELS + roofline.COMPUTE_ROOFS)
    assert all(r.lesson == "01" and r.mode == "interpreter" for r in c.records)
    assert [what for what, *_ in roofline.targets(c)] == [
        "HBM ceiling / HBM: torch copy_ (peer)",
        "bf16 ceiling / torch.matmul bf16 96x80x112 (peer)",  # on a GPU: 8192x8192x8192
    ]
    assert not any("vs_spec" in r.params for r in c.records)  # interpreter numbers are not compared with a spec
    assert "interpreter" in c.summary()


def test_measure_matmul_restores_the_tf32_setting():
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        for setting in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = setting
            (r,) = roofline.measure_matmul("tf32", shapes=[(17, 33, 9)])
            assert torch.backends.cuda.matmul.allow_tf32 is setting
            assert r.params["ceiling"] == "tf32" and r.dtype == "tf32" and r.flops == 2 * 17 * 33 * 9
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    (peer,) = roofline.measure_matmul("fp32", shapes=[(8, 8, 8)])
    assert peer.params == {**peer.params, "peer_of": "fp32"} and "ceiling" not in peer.params
    with pytest.raises(ValueError, match="roof='fp64'"):
        roofline.measure_matmul("fp64")


def test_measure_cache_and_hbm_records():
    (l2,) = roofline.measure_cache("L2", sizes=[16 << 10])
    assert l2.params["ceiling"] == "L2" and l2.params["working_set_bytes"] == 16 << 10 and l2.flops == l2.bytes / 4
    copy, peer = roofline.measure_hbm(n=1000)
    assert copy.bytes == peer.bytes == 8000 and copy.params["ceiling"] == "HBM" and peer.params["peer_of"] == "HBM"
    with pytest.raises(ValueError, match="level='HBM'"):
        roofline.measure_cache("HBM")
    with pytest.raises(ValueError, match="n must be"):
        roofline.measure_hbm(n=0)


# ----------------------------------------------------------------------------------------------------------------
# placing and plotting


def _fake_ceilings():
    return roofline.Ceilings(
        device="test GPU", source="made up for a test", hbm_gbps=1000.0, l2_gbps=4000.0, l1_gbps=10000.0,
        fp32_tflops=50.0, tf32_tflops=200.0, fp16_tflops=400.0, bf16_tflops=400.0, mode="cuda",
    )  # fmt: skip


def test_placement_by_hand():
    c = _fake_ceilings()
    recs = [
        Result(lesson="x", case="half the HBM roof", ms=1.0, flops=1e9, bytes=2e9, dtype="float32"),  # I = 0.5
        Result(lesson="x", case="bf16 at the roof", ms=1.0, flops=4e11, bytes=1e6, dtype="bfloat16"),
        Result(lesson="x", case="from L2", ms=1.0, flops=1e9, bytes=2e9, params={"level": "L2"}),
        Result(lesson="x", case="copy", ms=1.0, flops=0, bytes=5e8),
        Result(lesson="x", case="no counts", ms=1.0),
    ]
    p = roofline.placement(recs + [roofline.gemm(16, 4096, 4096, "fp16")], c)
    assert p[0].intensity == 0.5 and p[0].roof_tflops == pytest.approx(0.5) and p[0].achieved_tflops == 1.0
    assert p[0].fraction == pytest.approx(2.0) and p[0].bound == "memory"  # above its roof: served by a cache
    assert p[1].compute == "bf16" and p[1].fraction == pytest.approx(1.0) and p[1].bound == "compute"
    assert p[2].level == "L2" and p[2].roof_tflops == pytest.approx(2.0) and p[2].fraction == pytest.approx(0.5)
    assert p[3].intensity == 0 and p[3].fraction == pytest.approx(0.5) and p[3].bound == "memory"  # 500 of 1000 GB/s
    assert p[4].intensity is None and p[4].fraction is None
    assert p[5].achieved_tflops is None and p[5].roof_tflops == pytest.approx(2 * 16 * 4096 / (2 * (16 + 4096 + 16)))
    table = roofline.placement_table(recs, c)
    assert "half the HBM roof" in table and "200%" in table
    sweep = Result(lesson="00", case="sweep", ms=1.0, flops=1e9, bytes=4e9, params={"working_set_bytes": 16384})
    assert "sweep, W = 16 KB" in roofline.placement_table([sweep], c)
    with pytest.raises(ValueError, match="results must hold"):
        roofline.placement([1.0], c)
    with pytest.raises(ValueError, match="ceilings must be"):
        roofline.placement(recs, ceilings="H100")


def test_plot_headless_with_every_roof():
    c = _fake_ceilings()
    recs = _h100_records()[2:] + [Result(lesson="x", case="copy", ms=1.0, flops=0, bytes=1e9)]
    ax = roofline.plot(recs + roofline.course_operations(), c)
    assert isinstance(ax, matplotlib.axes.Axes)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "made up for a test" in ax.get_title()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sum("roof" in lab and "GB/s" in lab for lab in labels) == 3  # HBM, L2, L1
    assert "fp16 / bf16 tensor cores roof, 400 TFLOP/s" in labels  # equal roofs share one line
    assert any(lab.startswith("L2 a:") and "of its roof" in lab for lab in labels)
    assert any(lab.startswith("vector add") and "memory-bound" in lab for lab in labels)
    assert not any(lab.startswith("copy") for lab in labels)  # no FLOPs: no place on a FLOP/s axis


def test_plot_says_the_source_and_uses_the_default_ceilings(tmp_path, monkeypatch):
    lesson0 = bench.load("00", gpu="h100")  # the stored H100 sweep of lesson 0
    monkeypatch.setenv("GPULAB_BENCHMARKS", str(tmp_path))  # no lesson-1 results there: the spec table
    ax = roofline.plot(lesson0)
    assert "spec table" in ax.get_title()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sum("GB/s" in lab for lab in labels) == 1  # only HBM: the spec table has no cache bandwidths
    # the sweep ran at three levels: one entry each; only the HBM-level points have a roof to compare with
    sweep = [lab for lab in labels if lab.startswith("working-set sweep")]
    assert sweep[:2] == ["working-set sweep (L1)", "working-set sweep (L2)"] and len(sweep) == 3
    assert sweep[2].startswith("working-set sweep (HBM): ") and sweep[2].endswith(" of its roof")
    fig, ax2 = plt.subplots()
    assert roofline.plot([], roofline.Ceilings.from_spec("T4"), ax=ax2) is ax2


# ----------------------------------------------------------------------------------------------------------------
# the benchmark, through the command line


def test_bench_01_on_cpu(tmp_path, capsys):
    assert cli.main(["bench", "01", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "source: Triton interpreter on CPU" in out and "(interpreter: not a hardware figure)" in out
    folder = tmp_path / "01_roofline"
    (jsonl,) = folder.glob("*.jsonl")
    assert jsonl.name.startswith("cpu-triton-interpreter-") and jsonl.with_suffix(".png").exists()
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert all(r["lesson"] == "01" and math.isfinite(r["ms"]) for r in rows)
    assert roofline.Ceilings.from_results(bench.load("01", path=jsonl)).mode == "interpreter"
    assert roofline.ceilings("h100", root=tmp_path).mode == "spec"  # a CPU run never stands in for a GPU's ceilings


# ----------------------------------------------------------------------------------------------------------------
# graders


def _gemm_cost(m, n, k, s):
    return 2 * m * n * k, (m * k + k * n + m * n) * s


def _softmax_cost(r, c, s):
    return 5 * r * c, 2 * r * c * s


def _lstm_step_cost(b, i, h, s):
    return 2 * b * 4 * h * (i + h), s * (b * i + 4 * b * h + 4 * h * (i + h) + 4 * h)


def _bound(flops, nbytes, peak, bw):
    return "compute" if flops / nbytes >= peak * 1e3 / bw else "memory"


def _batch_by_search(i, h, s, peak, bw):
    ridge = peak * 1e3 / bw
    limit = 8 * h * (i + h) / (s * (i + 4 * h))
    if limit <= ridge:
        return None
    b = 1
    while _lstm_step_cost(b, i, h, s)[0] / _lstm_step_cost(b, i, h, s)[1] < ridge:
        b += 1
    return b


@pytest.mark.parametrize(
    ("grade", "fn", "title"),
    [
        (grading.grade_attainable, lambda i, p, bw: min(p, i * bw / 1000), "roofline formula"),
        (grading.grade_gemm_cost, _gemm_cost, "GEMM cost"),
        (grading.grade_softmax_cost, _softmax_cost, "softmax cost"),
        (grading.grade_lstm_step_cost, _lstm_step_cost, "LSTM step cost"),
        (grading.grade_bound, _bound, "memory- or compute-bound"),
        (grading.grade_compute_bound_batch, _batch_by_search, "smallest compute-bound batch"),
        (grading.grade_compute_bound_batch, grading.smallest_compute_bound_batch, "smallest compute-bound batch"),
    ],
)
def test_graders_pass_correct_answers(grade, fn, title, capsys):
    grade(fn)
    out = capsys.readouterr().out
    assert out.startswith(f"PASSED {title}") and out.count("\n") == 1


def _lstm_one_gate(b, i, h, s):
    return 2 * b * h * (i + h), _lstm_step_cost(b, i, h, s)[1]


def _lstm_no_bias(b, i, h, s):
    flops, nbytes = _lstm_step_cost(b, i, h, s)
    return flops, nbytes - 4 * h * s


def _batch_one_too_many(i, h, s, p, bw):
    b = _batch_by_search(i, h, s, p, bw)
    return None if b is None else b + 1


def _batch_as_float(i, h, s, p, bw):
    b = _batch_by_search(i, h, s, p, bw)
    return None if b is None else float(b)


@pytest.mark.parametrize(
    ("grade", "wrong", "words"),
    [
        (grading.grade_attainable, lambda i, p, bw: min(p, i * bw), "divide by 1000"),
        (grading.grade_attainable, lambda i, p, bw: i * bw / 1000, "smaller of the two"),
        (grading.grade_gemm_cost, lambda m, n, k, s: (m * n * k, _gemm_cost(m, n, k, s)[1]), "2 FLOPs"),
        (grading.grade_gemm_cost, lambda m, n, k, s: (2 * m * n * k, (m * k + k * n) * s), "write of C"),
        (grading.grade_gemm_cost, lambda m, n, k, s: 2 * m * n * k, "return a pair"),
        (grading.grade_softmax_cost, lambda r, c, s: (5 * r * c, r * c * s), "written as well"),
        (grading.grade_softmax_cost, lambda r, c, s: (4 * r * c, 2 * r * c * s), "5 FLOPs per element"),
        (grading.grade_lstm_step_cost, _lstm_one_gate, "4 gates"),
        (grading.grade_lstm_step_cost, _lstm_no_bias, "bias"),
        (grading.grade_bound, lambda f, b, p, bw: "compute" if f / b >= p / bw else "memory", "expected"),
        (grading.grade_bound, lambda f, b, p, bw: "Memory", "return 'memory' or 'compute'"),
        (grading.grade_compute_bound_batch, lambda i, h, s, p, bw: 361, "expected"),
        (grading.grade_compute_bound_batch, _batch_one_too_many, "expected"),
        (grading.grade_compute_bound_batch, _batch_as_float, "an int"),
    ],
)
def test_graders_catch_wrong_answers(grade, wrong, words):
    with pytest.raises(AssertionError) as e:
        grade(wrong)
    assert words in str(e.value)


def _not_implemented(*args):
    # YOUR CODE HERE
    raise NotImplementedError()


@pytest.mark.parametrize(
    "grade",
    [
        grading.grade_attainable,
        grading.grade_gemm_cost,
        grading.grade_softmax_cost,
        grading.grade_lstm_step_cost,
        grading.grade_bound,
        grading.grade_compute_bound_batch,
    ],
)
def test_graders_report_not_implemented(grade):
    with pytest.raises(AssertionError, match="not implemented yet"):
        grade(_not_implemented)


# ----------------------------------------------------------------------------------------------------------------
# GPU self-test (`pytest -m gpu` on the H100; skipped without CUDA)


@pytest.mark.gpu
def test_fma_kernel_full_size():
    n = hardware.spec().sm_count * 4 * 1024 + 17  # a full wave plus a ragged block
    x = check.random_tensor(roofline.FMA_CHAINS, n, distribution="uniform", scale=2.0)
    for iters in (1, 5):
        out = roofline.fma_chain(x, iters)
        check.assert_close(out, roofline.fma_reference(x, iters * roofline.FMA_UNROLL), name="fma_chain")
    out = roofline.fma_chain(x, 4096)  # a long chain: compare with the closed form
    check.assert_close(out, roofline.fma_closed_form(x, 4096 * roofline.FMA_UNROLL), name="fma_chain (long)")


@pytest.mark.gpu
@pytest.mark.parametrize("working_set", [(1 << 20) + 4 * 17, 8 << 20])
def test_l2_sweep_full_size(working_set):
    n = working_set // 4
    x = memory.sweep_data(n)
    plan = memory.sweep_plan(n, 4 * working_set, 4096, 4 * hardware.spec().sm_count)
    out = roofline.l2_sweep(x, n, plan["programs"], plan["iters"], 4096)
    check.assert_close(out, memory.sweep_reference(x, n, plan["programs"], plan["iters"], 4096), rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("roof", ["bf16", "fp16", "tf32", "fp32"])
def test_measure_matmul_full_size(roof):
    (r,) = roofline.measure_matmul(roof, shapes=[(4096, 4096, 4096)])
    assert r.mode == "cuda" and r.tflops > 0
    assert torch.backends.cuda.matmul.allow_tf32 is False  # restored
