"""Lesson 2's GEMM time model (gpulab.codesign.gemm_model): the formula by hand, the measured penalties, tile and
wave quantization, and hypothesis properties (positive, monotone in size, never faster than the unquantized roofs).
Bad input: test_codesign_bad_input.py."""

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulab import codesign, hardware

# ----------------------------------------------------------------------------------------------------------------
# the model by hand


def test_flops_bytes_and_roofs_by_hand():
    p = codesign.gemm_time(4096, 2048, 1024, dtype="bfloat16", gpu="H100", tile=(128, 128))
    assert p.flops == 2 * 4096 * 2048 * 1024
    assert p.bytes == 2 * (4096 * 1024 + 1024 * 2048 + 4096 * 2048)
    # 32 x 16 = 512 tiles on 132 SMs: 4 waves, 512 / 528 of the slots busy
    assert (p.tiles, p.waves) == (512, 4)
    assert p.wave_efficiency == pytest.approx(512 / 528)
    assert p.tile_efficiency == 1.0 and p.alignment_efficiency == 1.0 and p.misaligned == ()
    rate = 989.4e12 * codesign.PEAK_FRACTION * 512 / 528
    assert p.compute_ms == pytest.approx(p.flops / rate * 1e3)
    assert p.memory_ms == pytest.approx(p.bytes / (3350e9 * codesign.MEMORY_FRACTION) * 1e3)
    assert p.ms == max(p.compute_ms, p.memory_ms) and p.bound == "compute"
    assert p.tflops == pytest.approx(p.flops / p.ms / 1e9)


def test_misaligned_k_costs_the_measured_penalty():
    aligned = codesign.gemm_time(8192, 8192, 4096, tile=None)
    for k in (4095, 4097):
        slow = codesign.gemm_time(8192, 8192, k, tile=None)
        assert slow.misaligned == ("K",)
        assert slow.alignment_efficiency < 1 / codesign.MISALIGNED_PENALTY + 1e-9
        # the penalty (read from the stored K sweep: test_codesign_constants.py), times the extra K and K-step
        assert slow.ms / aligned.ms == pytest.approx(codesign.MISALIGNED_PENALTY, rel=0.02)


@pytest.mark.parametrize(
    ("k", "n", "dtype", "penalty"),
    [
        (4096, 8192, "bf16", 1.0),
        (4104, 8192, "bf16", 1.0),  # 8208 bytes: a multiple of 16
        (4092, 8192, "bf16", "partial"),  # 8184 bytes: 8-byte aligned
        (4094, 8192, "bf16", "partial"),  # 4-byte aligned
        (4095, 8192, "bf16", "full"),  # 2-byte aligned
        (4096, 8191, "bf16", "full"),  # N decides as well
        (4094, 8195, "fp16", "full"),  # the worse of the two
        (4094, 8192, "float32", "partial"),  # 16376 bytes: 8-byte aligned
        (4093, 8192, "float32", "partial"),  # fp32 rows are always 4-byte aligned
    ],
)
def test_alignment_penalty_by_row_alignment(k, n, dtype, penalty):
    named = {"partial": codesign.PARTIALLY_ALIGNED_PENALTY, "full": codesign.MISALIGNED_PENALTY}
    expected = named.get(penalty, penalty)
    assert codesign.alignment_penalty(k, n, dtype) == pytest.approx(expected)
    assert 1 < codesign.PARTIALLY_ALIGNED_PENALTY < codesign.MISALIGNED_PENALTY


def test_alignment_is_16_bytes_of_k_and_n_not_m():
    assert codesign.gemm_time(8192, 8192, 4092).misaligned == ("K",)  # 8 bytes: still misaligned for bf16
    assert codesign.gemm_time(8192, 8188, 4096).misaligned == ("N",)
    assert codesign.gemm_time(8191, 8192, 4096).misaligned == ()  # M is never a row length in row-major A @ B
    assert codesign.gemm_time(8192, 8195, 4095).misaligned == ("K", "N")
    # fp32: 16 bytes are 4 elements
    assert codesign.gemm_time(8192, 8192, 4092, dtype="float32").misaligned == ()
    assert codesign.gemm_time(8192, 8192, 4094, dtype="float32").misaligned == ("K",)


def test_multiple_of_8_but_not_64_pays_a_partial_k_step():
    eff, misaligned, fill = codesign.alignment_efficiency(4104, 8192, "bfloat16")
    assert misaligned == () and fill == pytest.approx(4104 / 4160) and eff == fill
    eff, _, fill = codesign.alignment_efficiency(72, 2048, torch.float16)  # two K-steps of 64 for 72
    assert fill == pytest.approx(72 / 128)
    eff, _, fill = codesign.alignment_efficiency(72, 2048, "float32")  # fp32 K-steps are 32 elements
    assert fill == pytest.approx(72 / 96)
    eff, misaligned, fill = codesign.alignment_efficiency(100, 2048, "bf16")  # 200-byte rows: 8-byte aligned
    assert misaligned == ("K",) and eff == pytest.approx(100 / 128 / codesign.PARTIALLY_ALIGNED_PENALTY)
    # the penalty is smaller than misalignment's: 4104 runs between 4096 and 4095
    t = {k: codesign.gemm_time(8192, 8192, k).ms for k in (4095, 4096, 4104)}
    assert t[4096] < t[4104] < t[4095]


def test_exact_waves_vs_one_extra_tile():
    exact = codesign.gemm_time(128 * 12, 128 * 11, 4096, tile=(128, 128))
    assert (exact.tiles, exact.waves, exact.wave_efficiency) == (132, 1, 1.0)
    extra = codesign.gemm_time(128 * 12, 128 * 11 + 8, 4096, tile=(128, 128))
    assert (extra.tiles, extra.waves) == (144, 2)
    assert extra.wave_efficiency == pytest.approx(144 / 264)
    assert extra.tile_efficiency == pytest.approx((128 * 11 + 8) / (128 * 12))
    # eight more columns, almost twice the time
    assert extra.ms / exact.ms == pytest.approx(2.0, rel=1e-9)
    # the A100 has 108 SMs: the same shape there is 2 waves already
    assert codesign.gemm_time(128 * 12, 128 * 11, 4096, gpu="A100", tile=(128, 128)).waves == 2


def test_tile_quantization_by_hand():
    tiles, eff = codesign.tile_quantization(200, 300, (128, 128))
    assert tiles == 6 and eff == pytest.approx(200 * 300 / (256 * 384))
    tiles, eff = codesign.tile_quantization(256, 384, (128, 128), batch=5)
    assert tiles == 30 and eff == 1.0
    assert codesign.wave_quantization(30, 132) == (1, pytest.approx(30 / 132))
    assert codesign.wave_quantization(265, 132) == (3, pytest.approx(265 / 396))


def test_batch_multiplies_tiles_and_work():
    one = codesign.gemm_time(256, 256, 64, tile=(128, 128))
    many = codesign.gemm_time(256, 256, 64, batch=100, tile=(128, 128))
    assert many.tiles == 100 * one.tiles and many.flops == 100 * one.flops and many.bytes == 100 * one.bytes


def test_library_tile_choice_and_ties():
    p = codesign.gemm_time(8192, 8192, 4096, tile=None)
    assert p.tile == (128, 256)  # ties keep the first (largest) library tile
    p = codesign.gemm_time(1536, 1408, 4096, tile=None)
    assert p.tile == (128, 128) and p.waves == 1 and p.wave_efficiency == 1.0  # 12 x 11 = 132 tiles exactly
    for m, n in ((1000, 3000), (1536, 2944), (333, 777)):
        best = codesign.gemm_time(m, n, 512, tile=None)
        for t in codesign.LIBRARY_TILES:
            assert best.efficiency >= codesign.gemm_time(m, n, 512, tile=t).efficiency - 1e-12


def test_memory_bound_shapes():
    p = codesign.gemm_time(2048, 2048, 64, batch=256, tile=None)  # attention scores: the S write dominates
    assert p.bound == "memory" and p.ms == p.memory_ms
    assert codesign.relative_throughput(2048, 2048, 64, batch=256, tile=None) < 0.5


def test_relative_throughput():
    ideal = codesign.relative_throughput(128 * 132, 1024, 8192, tile=(128, 1024))
    assert ideal == pytest.approx(1.0)
    r = codesign.relative_throughput(8192, 8192, 4095, tile=None)
    assert 0 < r < 0.25
    p = codesign.gemm_time(8192, 8192, 4095, tile=None)
    assert r == pytest.approx(p.tflops / (989.4 * codesign.PEAK_FRACTION))


def test_other_dtypes_and_gpus(h100):
    fp32 = codesign.gemm_time(4096, 4096, 4096, dtype=torch.float32)
    tf32 = codesign.gemm_time(4096, 4096, 4096, dtype="tf32")
    half = codesign.gemm_time(4096, 4096, 4096, dtype="fp16")
    assert fp32.peak_tflops == h100.fp32_tflops and tf32.peak_tflops == 494.7 and half.peak_tflops == 989.4
    assert fp32.ms > tf32.ms > half.ms
    assert codesign.gemm_time(4096, 4096, 4096, gpu=hardware.spec("T4"), dtype="float16").sm_count == 40


def test_explain_and_params(h100):
    p = codesign.gemm_time(8192, 8192, 4095, tile=None)
    text = p.explain()
    assert "misaligned K" in text and "compute-bound" in text and "132 SMs" in text
    params = p.params()
    assert params["predicted_ms"] == p.ms and params["predicted_tile"] == [128, 256]
    assert params["model_gpu"] == h100.name


def test_a_gpu_without_rates_is_refused(h100):
    unknown = dataclasses.replace(h100, name="mystery GPU", fp32_tflops=0.0, tensor_tflops={})
    with pytest.raises(ValueError, match="gpu='mystery GPU'"):
        codesign.gemm_time(64, 64, 64, dtype="float32", gpu=unknown)


# ----------------------------------------------------------------------------------------------------------------
# properties (hypothesis): at any size the model is positive, monotone where it should be, and never beats the roofs

PROPERTY = settings(deadline=None, max_examples=30, derandomize=True)
size = st.integers(min_value=1, max_value=1 << 16)
batches = st.integers(min_value=1, max_value=512)
tiles = st.sampled_from([None, (128, 128), (128, 256), (256, 128), (64, 64), (16, 64)])
gpus = st.sampled_from(["H100", "A100", "L4", "T4"])
model_dtypes = st.sampled_from(["float32", "float16", "tf32"])  # bf16 is missing on the T4: tested on its own


def _unquantized_ms(p) -> float:
    """The two roofs with every shape effect at 1: the fastest this GEMM could run by the model."""
    spec = hardware.spec(p.gpu)
    compute = p.flops / (p.peak_tflops * 1e12 * codesign.PEAK_FRACTION) * 1e3
    memory = p.bytes / (spec.hbm_gbps * 1e9 * codesign.MEMORY_FRACTION) * 1e3
    return max(compute, memory)


@PROPERTY
@given(m=size, n=size, k=size, batch=batches, tile=tiles, gpu=gpus, dtype=model_dtypes)
def test_time_is_positive_and_counts_follow_the_formula(m, n, k, batch, tile, gpu, dtype):
    p = codesign.gemm_time(m, n, k, dtype=dtype, gpu=gpu, batch=batch, tile=tile)
    s = 2 if dtype == "float16" else 4
    assert p.flops == 2 * batch * m * n * k and p.bytes == s * batch * (m * k + k * n + m * n)
    assert math.isfinite(p.ms) and p.ms > 0 and p.tflops > 0
    assert 0 < p.tile_efficiency <= 1 and 0 < p.wave_efficiency <= 1 and 0 < p.alignment_efficiency <= 1
    assert p.waves * p.sm_count >= p.tiles > (p.waves - 1) * p.sm_count


@PROPERTY
@given(m=size, n=size, k=size, batch=batches, tile=tiles, gpu=gpus, dtype=model_dtypes)
def test_quantization_never_beats_the_unquantized_roofs(m, n, k, batch, tile, gpu, dtype):
    p = codesign.gemm_time(m, n, k, dtype=dtype, gpu=gpu, batch=batch, tile=tile)
    assert p.ms >= _unquantized_ms(p) * (1 - 1e-12)
    assert 0 < codesign.relative_throughput(m, n, k, dtype=dtype, gpu=gpu, batch=batch, tile=tile) <= 1 + 1e-12


@PROPERTY
@given(m=size, extra=st.integers(min_value=1, max_value=1 << 14), n=size, k=size, batch=batches, tile=tiles, gpu=gpus)
def test_time_is_monotone_in_m_and_batch(m, extra, n, k, batch, tile, gpu):
    """More rows or more batches never take less time (M is no row length, so alignment cannot change)."""
    t = codesign.gemm_time(m, n, k, gpu=gpu, dtype="float16", batch=batch, tile=tile).ms
    assert codesign.gemm_time(m + extra, n, k, gpu=gpu, dtype="float16", batch=batch, tile=tile).ms >= t
    assert codesign.gemm_time(m, n, k, gpu=gpu, dtype="float16", batch=batch + extra, tile=tile).ms >= t


@PROPERTY
@given(
    m=size,
    n8=st.integers(min_value=1, max_value=1 << 12),
    k8=st.integers(min_value=1, max_value=1 << 12),
    dn=st.integers(min_value=0, max_value=1 << 10),
    dk=st.integers(min_value=0, max_value=1 << 10),
    tile=tiles,
)
def test_time_is_monotone_in_aligned_n_and_k(m, n8, k8, dn, dk, tile):
    """Among 16-byte-aligned sizes (multiples of 8 in bf16) a larger N or K never takes less time."""
    n, k = 8 * n8, 8 * k8
    t = codesign.gemm_time(m, n, k, tile=tile).ms
    assert codesign.gemm_time(m, n + 8 * dn, k, tile=tile).ms >= t * (1 - 1e-12)
    assert codesign.gemm_time(m, n, k + 8 * dk, tile=tile).ms >= t * (1 - 1e-12)


@PROPERTY
@given(m=size, n=size, tm=st.integers(1, 512), tn=st.integers(1, 512), batch=batches, sms=st.integers(1, 200))
def test_tile_and_wave_quantization_count_every_tile_once(m, n, tm, tn, batch, sms):
    tiles, e_tile = codesign.tile_quantization(m, n, (tm, tn), batch)
    assert tiles == batch * math.ceil(m / tm) * math.ceil(n / tn)
    assert e_tile * tiles * tm * tn == pytest.approx(batch * m * n)
    waves, e_wave = codesign.wave_quantization(tiles, sms)
    assert waves == math.ceil(tiles / sms) and e_wave == pytest.approx(tiles / (waves * sms))
