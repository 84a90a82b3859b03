"""Lesson 2 (gpulab.codesign): the GEMM time model, the config checker, the fixed-tile Triton matmul in the CPU
interpreter, the sweeps at tiny sizes, pair agreement and the plots."""

import dataclasses
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.axes  # noqa: E402
import matplotlib.figure  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from gpulab import check, codesign, hardware  # noqa: E402
from gpulab.bench import Result  # noqa: E402
from gpulab.codesign import LSTMConfig, TransformerConfig  # noqa: E402

H100 = hardware.spec("H100")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ----------------------------------------------------------------------------------------------------------------
# the model


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
        # ~4.6x slower: the 145 vs 675 TFLOP/s
        assert slow.ms / aligned.ms == pytest.approx(codesign.MISALIGNED_PENALTY, rel=0.02)
        assert slow.tflops == pytest.approx(145, rel=0.03)
    assert aligned.tflops == pytest.approx(675, rel=0.01)
    assert codesign.MISALIGNED_PENALTY == pytest.approx(675 / 145)


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


def test_other_dtypes_and_gpus():
    fp32 = codesign.gemm_time(4096, 4096, 4096, dtype=torch.float32)
    tf32 = codesign.gemm_time(4096, 4096, 4096, dtype="tf32")
    half = codesign.gemm_time(4096, 4096, 4096, dtype="fp16")
    assert fp32.peak_tflops == H100.fp32_tflops and tf32.peak_tflops == 494.7 and half.peak_tflops == 989.4
    assert fp32.ms > tf32.ms > half.ms
    assert codesign.gemm_time(4096, 4096, 4096, gpu=hardware.spec("T4"), dtype="float16").sm_count == 40


def test_explain_and_params():
    p = codesign.gemm_time(8192, 8192, 4095, tile=None)
    text = p.explain()
    assert "misaligned K" in text and "compute-bound" in text and "132 SMs" in text
    params = p.params()
    assert params["predicted_ms"] == p.ms and params["predicted_tile"] == [128, 256]
    assert params["model_gpu"] == H100.name


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        (dict(m=-1), "m"),
        (dict(n=0), "n"),
        (dict(k=2.5), "k"),
        (dict(k=True), "k"),
        (dict(batch=-3), "batch"),
        (dict(dtype="float17"), "dtype"),
        (dict(dtype="float64"), "dtype"),
        (dict(dtype="bfloat16", gpu="T4"), "dtype"),
        (dict(gpu="H1000"), "gpu"),
        (dict(tile=(128,)), "tile"),
        (dict(tile=(128, -1)), "tile"),
    ],
)
def test_gemm_time_rejects_bad_arguments(kwargs, word):
    args = dict(m=64, n=64, k=64) | kwargs
    with pytest.raises(ValueError) as e:
        codesign.gemm_time(**args)
    assert str(e.value).startswith(word) or f"{word}=" in str(e.value) or f"{word} " in str(e.value)


def test_a_gpu_without_rates_is_refused():
    unknown = dataclasses.replace(H100, name="mystery GPU", fp32_tflops=0.0, tensor_tflops={})
    with pytest.raises(ValueError, match="gpu='mystery GPU'"):
        codesign.gemm_time(64, 64, 64, dtype="float32", gpu=unknown)


def test_quantization_helpers_reject_bad_arguments():
    with pytest.raises(ValueError, match="sm_count"):
        codesign.wave_quantization(10, 0)
    with pytest.raises(ValueError, match="tiles"):
        codesign.wave_quantization(-1, 132)
    with pytest.raises(ValueError, match="^m must"):
        codesign.tile_quantization(-5, 10, (16, 16))
    with pytest.raises(ValueError, match="^k must"):
        codesign.alignment_efficiency(0, 16)


# ----------------------------------------------------------------------------------------------------------------
# the config checker


def _by_rule(checks):
    return {c.rule: c for c in checks}


def test_gpt2_small_fails_only_the_vocabulary():
    checks = _by_rule(codesign.check_config(codesign.KNOWN_CONFIGS["GPT-2 small"]))
    failed = [r for r, c in checks.items() if not c.passed]
    assert failed == ["vocab divisible by 64"]
    assert checks["vocab divisible by 64"].nearest == ({"vocab": 50304},)
    assert checks["h/a divisible by 64"].value == 64


def test_pythia_2_8b_head_dimension_80():
    cfg = codesign.KNOWN_CONFIGS["Pythia-2.8B"]
    assert (cfg.vocab, cfg.hidden, cfg.heads) == (50304, 2560, 32)
    checks = _by_rule(codesign.check_config(cfg))
    assert [r for r, c in checks.items() if not c.passed] == ["h/a divisible by 64"]
    ha = checks["h/a divisible by 64"]
    assert ha.value == 80 and "16 x 5" in ha.why
    assert ha.nearest == ({"heads": 40}, {"heads": 20}, {"hidden": 2048})


def test_gpt_neox_20b_head_dimension_96():
    cfg = codesign.KNOWN_CONFIGS["GPT-NeoX-20B"]
    assert (cfg.vocab, cfg.hidden, cfg.heads, cfg.tensor_parallel) == (50432, 6144, 64, 2)
    checks = _by_rule(codesign.check_config(cfg))
    assert [r for r, c in checks.items() if not c.passed] == ["h/a divisible by 64"]
    assert checks["h/a divisible by 64"].nearest[0] == {"heads": 48}
    assert checks["h/t divisible by 64"].value == 3072 and checks["(b*a)/t integer"].value == 128


def test_multi_head_lstm_example():
    cfg = codesign.KNOWN_CONFIGS["multi-head LSTM (example)"]
    checks = _by_rule(codesign.check_config(cfg))
    failed = {r for r, c in checks.items() if not c.passed}
    assert failed == {
        "vocab divisible by 64",
        "b*s divisible by 64",
        "batch divisible by 16",
        "recurrent step fills the SMs",
        "batch as large as memory allows",
    }
    assert checks["head dim h/heads divisible by 64"].value == 192
    fill = checks["recurrent step fills the SMs"]
    assert fill.value == 4 * 12  # 4 heads x ceil(4 * 192 / 64) column tiles, one 16-row block
    assert fill.nearest == ({"batch": 48},)  # 3 row blocks: 144 tiles >= 132 SMs


def test_checker_edge_cases():
    # h not divisible by a: the head dimension is fractional, the rule fails with integer alternatives
    checks = _by_rule(codesign.check_config(TransformerConfig("odd", vocab=512, hidden=1000, heads=12, microbatch=8)))
    assert not checks["h/a divisible by 64"].passed and checks["h/a divisible by 64"].value == pytest.approx(83.333)
    assert not checks["h/t divisible by 64"].passed
    # (b*a)/t not an integer
    cfg = TransformerConfig("tp", vocab=512, hidden=4096, heads=6, microbatch=1, seq=2048, tensor_parallel=4)
    checks = _by_rule(codesign.check_config(cfg))
    assert not checks["(b*a)/t integer"].passed and checks["(b*a)/t integer"].nearest[0] == {"microbatch": 2}
    # b*s: 3 x 1000 is not a multiple of 64; nearest microbatch is 8 (8 * 1000 = 125 * 64), or seq 1024
    checks = _by_rule(
        codesign.check_config(TransformerConfig("bs", vocab=512, hidden=1024, heads=16, seq=1000, microbatch=3))
    )
    assert checks["b*s divisible by 64"].nearest[0] == {"microbatch": 8}
    assert {"seq": 1024} in checks["b*s divisible by 64"].nearest
    # a tiny microbatch of short sequences: doubling it pays, the microbatch rule fails
    small = TransformerConfig("small", vocab=512, hidden=512, heads=8, seq=128, microbatch=1)
    rule = _by_rule(codesign.check_config(small))["microbatch as large as memory allows"]
    assert not rule.passed and rule.nearest[0]["microbatch"] > 1


@pytest.mark.parametrize("name", list(codesign.KNOWN_CONFIGS))
def test_fix_config_passes_every_rule(name):
    cfg = codesign.KNOWN_CONFIGS[name]
    fixed = codesign.fix_config(cfg)
    assert all(c.passed for c in codesign.check_config(fixed)), codesign.format_checks(codesign.check_config(fixed))
    assert fixed.seq == cfg.seq and fixed.tensor_parallel == cfg.tensor_parallel
    assert fixed.vocab >= cfg.vocab and fixed.name.endswith("(fixed)")


def test_fix_config_on_awkward_configs():
    for cfg in (
        TransformerConfig("a", vocab=30001, hidden=1000, heads=12, seq=1000, microbatch=3, tensor_parallel=2),
        TransformerConfig("b", vocab=50257, hidden=2560, heads=32, seq=2048, microbatch=1, tensor_parallel=4),
        LSTMConfig("c", hidden=1000, heads=3, batch=5, seq=999, vocab=100, tensor_parallel=2),
    ):
        fixed = codesign.fix_config(cfg)
        assert all(c.passed for c in codesign.check_config(fixed)), (cfg, fixed)


def test_format_checks_and_model_gemms():
    text = codesign.format_checks(codesign.check_config(codesign.KNOWN_CONFIGS["Pythia-2.8B"]), title="Pythia")
    assert text.startswith("Pythia") and "FAIL  h/a divisible by 64" in text and "heads=40" in text
    gemms = {g["name"]: g for g in codesign.model_gemms(codesign.KNOWN_CONFIGS["GPT-2 small"])}
    assert (gemms["QKV projection"]["m"], gemms["QKV projection"]["n"], gemms["QKV projection"]["k"]) == (
        8192,
        2304,
        768,
    )
    assert gemms["attention scores Q K^T"]["batch"] == 96 and gemms["attention scores Q K^T"]["k"] == 64
    total, parts = codesign.layer_time(codesign.KNOWN_CONFIGS["GPT-2 small"])
    assert total == pytest.approx(sum(p.ms for _, p in parts)) and len(parts) == 6
    lstm = codesign.model_gemms(codesign.KNOWN_CONFIGS["multi-head LSTM (example)"])
    assert lstm[1]["count"] == 1000 and (lstm[1]["m"], lstm[1]["n"], lstm[1]["k"], lstm[1]["batch"]) == (
        12,
        768,
        192,
        4,
    )


def test_fixing_pythia_heads_is_predicted_faster():
    cfg = codesign.KNOWN_CONFIGS["Pythia-2.8B"]
    time = {a: codesign.layer_time(dataclasses.replace(cfg, heads=a))[0] for a in (20, 32, 40)}
    # unfused attention writes b*a*s^2 scores: fewer, wider heads move fewer bytes; the nearest fix (40) is slower
    assert time[20] < time[32] < time[40]
    fixed = codesign.fix_config(cfg)
    assert fixed.heads == 20 and codesign.layer_time(fixed)[0] == pytest.approx(time[20])


@pytest.mark.parametrize(
    ("change", "word"),
    [
        (dict(hidden=-768), "config.hidden"),
        (dict(vocab=0), "config.vocab"),
        (dict(microbatch=1.5), "config.microbatch"),
        (dict(tensor_parallel=0), "config.tensor_parallel"),
    ],
)
def test_check_config_rejects_bad_configs(change, word):
    cfg = dataclasses.replace(codesign.KNOWN_CONFIGS["GPT-2 small"], **change)
    with pytest.raises(ValueError, match=word):
        codesign.check_config(cfg)
    with pytest.raises(ValueError, match=word):
        codesign.fix_config(cfg)


def test_check_config_rejects_other_objects_and_bad_gpu():
    with pytest.raises(TypeError, match="config must be"):
        codesign.check_config({"vocab": 50257})
    with pytest.raises(ValueError, match="gpu="):
        codesign.check_config(codesign.KNOWN_CONFIGS["GPT-2 small"], gpu="no such GPU")
    with pytest.raises(ValueError, match="dtype"):
        codesign.check_config(codesign.KNOWN_CONFIGS["GPT-2 small"], dtype="int4")


# ----------------------------------------------------------------------------------------------------------------
# the fixed-tile Triton matmul, in the interpreter


@pytest.mark.parametrize(("m", "n", "k"), [(1, 1, 1), (17, 17, 17), (33, 20, 19), (5, 40, 3), (64, 32, 48)])
@pytest.mark.parametrize("blocks", [(16, 16, 16), (32, 16, 32)])
def test_matmul_fixed_tile_matches_float64(m, n, k, blocks):
    a, b = check.random_tensor(m, k), check.random_tensor(k, n)
    out = check.poisoned(m, n)
    got = codesign.matmul_fixed_tile(a, b, out, block_m=blocks[0], block_n=blocks[1], block_k=blocks[2])
    assert got is out
    check.assert_close(out, codesign.matmul_reference(a, b), name="C", context=f"{m}x{n}x{k}, blocks {blocks}")


def test_matmul_fixed_tile_fp16_transposed_views_and_nothing_past_the_edge():
    a = check.random_tensor(21, 30, dtype=torch.float16)
    b = check.random_tensor(19, 30, dtype=torch.float16).t()  # a transposed view: strides (1, 30)
    guard = check.poisoned(24, 40, dtype=torch.float16)
    out = guard[:21, :19]  # row stride 40: the kernel must honour it and write nothing outside
    codesign.matmul_fixed_tile(a, b, out, block_m=16, block_n=16, block_k=16)
    check.assert_close(out, codesign.matmul_reference(a, b), dtype=torch.float16)
    outside = guard.clone()
    outside[:21, :19] = float("nan")
    assert torch.isnan(outside).all(), "the kernel wrote outside the output view"


def test_matmul_fixed_tile_small_blocks_are_raised_to_16_and_allocates():
    a, b = check.random_tensor(9, 7), check.random_tensor(7, 5)
    out = codesign.matmul_fixed_tile(a, b, block_m=1, block_n=2, block_k=4)
    assert out.shape == (9, 5) and out.dtype == torch.float32
    check.assert_close(out, codesign.matmul_reference(a, b))


def test_matmul_fixed_tile_empty():
    out = codesign.matmul_fixed_tile(torch.empty(0, 4), torch.empty(4, 3))
    assert out.shape == (0, 3)


def test_matmul_fixed_tile_nan_never_passes():
    a, b = check.random_tensor(8, 8), check.random_tensor(8, 8)
    a[3, 2] = float("nan")
    out = codesign.matmul_fixed_tile(a, b)
    with pytest.raises(AssertionError, match="NaN"):
        check.assert_close(out, codesign.matmul_reference(check.random_tensor(8, 8), b))


@pytest.mark.parametrize(
    ("make", "error", "word"),
    [
        (lambda: ([[1.0]], check.random_tensor(1, 1)), TypeError, "a must be"),
        (lambda: (check.random_tensor(3), check.random_tensor(3, 2)), ValueError, "a must be 2-dimensional"),
        (lambda: (check.random_tensor(3, 4), check.random_tensor(5, 2)), ValueError, "inner sizes"),
        (
            lambda: (check.random_tensor(3, 4), check.random_tensor(4, 2, dtype=torch.float16)),
            ValueError,
            "b has dtype",
        ),
        (lambda: (check.random_tensor(3, 4, dtype=torch.bfloat16), check.random_tensor(4, 2)), ValueError, "bfloat16"),
        (lambda: (check.random_tensor(3, 4, dtype=torch.float64), check.random_tensor(4, 2)), ValueError, "^a has"),
    ],
)
def test_matmul_fixed_tile_rejects_bad_inputs(make, error, word):
    a, b = make()
    with pytest.raises(error, match=word):
        codesign.matmul_fixed_tile(a, b)


def test_matmul_fixed_tile_rejects_bad_out_and_blocks():
    a, b = check.random_tensor(3, 4), check.random_tensor(4, 2)
    with pytest.raises(ValueError, match="^out must be"):
        codesign.matmul_fixed_tile(a, b, torch.empty(2, 3))
    with pytest.raises(ValueError, match="block_m must be a power of two"):
        codesign.matmul_fixed_tile(a, b, block_m=24)
    with pytest.raises(ValueError, match="block_k must be a positive"):
        codesign.matmul_fixed_tile(a, b, block_k=0)


# ----------------------------------------------------------------------------------------------------------------
# sweeps at tiny sizes (CPU), pair agreement, plots


def test_sweeps_attach_predictions_and_check_results():
    rs = codesign.sweep_k(ks=[15, 16, 17], m=9, n=10)
    rs += codesign.sweep_head_dim(head_dims=(3, 8), batch_heads=2, seq=5)
    rs += codesign.sweep_waves(ns=[16, 33], m=17, k=9)
    assert [r.params["sweep"] for r in rs] == ["K"] * 3 + ["head dim"] * 2 + ["N (waves)"] * 4
    for r in rs:
        assert r.lesson == "02" and r.ms > 0 and r.flops > 0 and r.bytes > 0
        assert r.params["predicted_ms"] > 0 and r.params["model_gpu"] == H100.name
        assert r.mode == "interpreter"
    k16 = rs[1]
    assert k16.shape == [9, 10, 16] and k16.flops == 2 * 9 * 10 * 16
    impls = {r.params["impl"] for r in rs if r.params["sweep"] == "N (waves)"}
    assert impls == {"torch.matmul (CPU)", "fixed-tile Triton 16x32 (interpreter)"}
    triton_r = [r for r in rs if "Triton" in r.params["impl"]]
    assert all(r.params["predicted_tile"] == [16, 32] for r in triton_r)
    with pytest.raises(ValueError, match="impls"):
        codesign.sweep_waves(ns=[16], m=4, k=4, impls=("cublas",))


def _r(sweep, impl, x, ms, predicted):
    return Result(
        lesson="02", case=f"{sweep}, {impl}", ms=ms, params=dict(sweep=sweep, impl=impl, x=x, predicted_ms=predicted)
    )


def test_pair_agreement_by_hand():
    rs = [
        _r("K", "t", 1, 1.0, 1.0),
        _r("K", "t", 2, 1.05, 1.2),  # within 10% of x=1: not counted, though the model says 20% slower
        _r("K", "t", 3, 4.6, 4.0),  # slower than 1 and 2 by > 10%: the model agrees with both
        _r("K", "t", 4, 2.0, 0.5),  # slower than 1 and 2 but predicted faster: 2 misses; faster than 3: agrees
        _r("N", "t", 1, 1.0, 2.0),  # another sweep: compared only with its own
        _r("N", "t", 2, 3.0, 2.0),  # predicted tie: a miss, counted as a tie
        _r("N", "u", 1, 1.0, 1.0),  # same sweep, other implementation: its own group, one result, no pairs
        Result(lesson="02", case="no prediction", ms=9.0, params=dict(sweep="K", x=5)),
    ]
    a = codesign.pair_agreement(rs)
    assert (a["agree"], a["pairs"], a["ties"]) == (3, 6, 1)
    assert a["fraction"] == pytest.approx(0.5)
    assert a["by_sweep"]["K | t"] == {"agree": 3, "pairs": 5, "fraction": pytest.approx(0.6)}
    assert a["by_sweep"]["N | t"]["pairs"] == 1 and math.isnan(a["by_sweep"]["N | u"]["fraction"])
    assert len(a["misses"]) == 3
    text = codesign.format_agreement(a)
    assert "3 of 6 pairs" in text and "MISSES the 90% target" in text and "1 pairs predicted as ties" in text


def test_pair_agreement_threshold_edge_and_empty():
    rs = [_r("K", "t", 1, 1.0, 1.0), _r("K", "t", 2, 1.1, 2.0)]  # exactly 10%: not "more than 10%"
    assert codesign.pair_agreement(rs)["pairs"] == 0
    assert math.isnan(codesign.pair_agreement([])["fraction"])
    assert codesign.pair_agreement(rs, threshold=0.05)["agree"] == 1
    with pytest.raises(ValueError, match="threshold"):
        codesign.pair_agreement(rs, threshold=-0.1)


def test_plots_headless():
    rs = [_r("K", "a", x, 1.0 + x, 1.0 + 2 * x) for x in range(4)] + [_r("N (waves)", "b", 1, 1.0, 1.0)]
    for r in rs:
        r.flops, r.params["predicted_tflops"], r.params["x_name"] = 1e9, 1.0, "x"
    ax = codesign.plot_sweep(rs, "K")
    assert isinstance(ax, matplotlib.axes.Axes) and len(ax.lines) == 2
    assert isinstance(codesign.plot_sweep(rs, "K", metric="relative"), matplotlib.axes.Axes)
    assert isinstance(codesign.plot_sweep(rs, "K", metric="ms"), matplotlib.axes.Axes)
    with pytest.raises(ValueError, match="sweep must name"):
        codesign.plot_sweep(rs)
    with pytest.raises(ValueError, match="sweep='Q'"):
        codesign.plot_sweep(rs, "Q")
    with pytest.raises(ValueError, match="metric"):
        codesign.plot_sweep(rs, "K", metric="gbps")
    fig = codesign.plot_benchmark(rs)
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) == 2
    with pytest.raises(ValueError, match="no sweep"):
        codesign.plot_benchmark([Result(lesson="02", case="x", ms=1.0)])
    assert isinstance(codesign.plot_tiles(1536, 1472, (128, 128), gpu="H100"), matplotlib.axes.Axes)
    assert isinstance(codesign.plot_tiles(200, 300, (128, 128)), matplotlib.axes.Axes)
    ax = codesign.plot_wave_staircase(1536, 4096, range(1024, 4097, 128), tile=(128, 256), metric="ms")
    assert len(ax.lines) == 1 + 1  # the model line and one wave boundary (2816 -> 2944)
    with pytest.raises(ValueError, match="metric"):
        codesign.plot_prediction([1], [codesign.gemm_time(8, 8, 8)], metric="speed")


def test_benchmark_on_cpu(capsys):
    results, fig = codesign.benchmark()
    assert isinstance(fig, matplotlib.figure.Figure)
    sweeps = {r.params["sweep"] for r in results}
    assert sweeps == {"K", "head dim", "N (waves)"}
    assert all(r.dtype == "float32" and r.mode == "interpreter" for r in results)
    out = capsys.readouterr().out
    assert "pairs correctly" in out and "not meaningful" in out


# ----------------------------------------------------------------------------------------------------------------
# graders: pass the reference, fail stubs and typical mistakes


def _quantization(m, n, tile, sm_count, batch=1):
    tiles, e_tile = codesign.tile_quantization(m, n, tile, batch)
    waves, e_wave = codesign.wave_quantization(tiles, sm_count)
    return tiles, waves, e_tile, e_wave


def _stub(*args, **kwargs):
    raise NotImplementedError()


def test_graders_pass_the_reference_and_fail_stubs(capsys):
    from gpulab.course import grading_codesign as g

    g.grade_quantization(_quantization)
    g.grade_predict_ms(lambda m, n, k, d, gpu, tile, batch=1: codesign.gemm_time(m, n, k, d, gpu, batch, tile).ms)
    g.grade_rank(
        lambda shapes, gpu: sorted(
            range(len(shapes)), key=lambda i: -codesign.gemm_time(*shapes[i], gpu=gpu, tile=None).tflops
        )
    )
    g.grade_fix_config(codesign.fix_config)
    assert capsys.readouterr().out.count("PASSED") == 4
    for grade in (g.grade_quantization, g.grade_predict_ms, g.grade_rank, g.grade_fix_config):
        with pytest.raises(AssertionError, match="not implemented yet"):
            grade(_stub)


def test_graders_catch_typical_mistakes():
    from gpulab.course import grading_codesign as g

    def floor_waves(m, n, tile, sm_count, batch=1):
        tiles, waves, e_tile, _ = _quantization(m, n, tile, sm_count, batch)
        waves = max(1, tiles // sm_count)  # floor instead of ceil
        return tiles, waves, e_tile, tiles / (waves * sm_count)

    with pytest.raises(AssertionError, match="ceil"):
        g.grade_quantization(floor_waves)

    def no_alignment(m, n, k, dtype, gpu, tile, batch=1):
        p = codesign.gemm_time(m, n, k, dtype, gpu, batch, tile)
        return max(p.compute_ms * p.alignment_efficiency, p.memory_ms)

    with pytest.raises(AssertionError, match="misaligned"):
        g.grade_predict_ms(no_alignment)

    def by_time(shapes, gpu):
        return sorted(range(len(shapes)), key=lambda i: codesign.gemm_time(*shapes[i], gpu=gpu, tile=None).ms)

    with pytest.raises(AssertionError, match="ranked after"):
        g.grade_rank(by_time, cases=200)

    def vocab_only(cfg):
        return dataclasses.replace(cfg, vocab=-(-cfg.vocab // 64) * 64)

    with pytest.raises(AssertionError, match="still fails"):
        g.grade_fix_config(vocab_only, cases=50)

    def too_big(cfg):
        fixed = codesign.fix_config(cfg)
        return dataclasses.replace(fixed, vocab=fixed.vocab + 64 * cfg.tensor_parallel)

    with pytest.raises(AssertionError, match="changes too much"):
        g.grade_fix_config(too_big)


def test_sweeps_check_before_timing(monkeypatch):
    def misses_last_column(a, b, out, **cfg):
        out[:, :-1] = (a @ b)[:, :-1]  # the last column is never written: it keeps the sweep's NaN poison
        return out

    monkeypatch.setattr(codesign, "matmul_fixed_tile", misses_last_column)
    with pytest.raises(AssertionError, match="NaN"):
        codesign.sweep_waves(ns=[16], m=8, k=8, impls=("triton",))
