"""Lesson 2's configurations and rules (gpulab.codesign.configs): the paper's rules on published models, their
edge cases, the fixer, and the GEMMs of one layer. Bad input: test_codesign_bad_input.py."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulab import codesign
from gpulab.codesign import LSTMConfig, TransformerConfig


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


# ----------------------------------------------------------------------------------------------------------------
# properties (hypothesis): the option helper and the layer's GEMMs at any size


@settings(deadline=None, max_examples=30, derandomize=True)
@given(
    hidden=st.integers(1, 1 << 15),
    heads=st.integers(1, 256),
    t=st.sampled_from([1, 2, 4, 8]),
    multiple=st.sampled_from([1, 8, 64]),
)
def test_heads_options_are_exactly_the_compliant_head_counts(hidden, heads, t, multiple):
    opts = codesign.heads_options(hidden, heads, t, multiple)
    expected = {a for a in range(1, hidden + 1) if hidden % a == 0 and (hidden // a) % multiple == 0 and a % t == 0}
    assert set(opts) == expected and len(opts) == len(expected)
    assert [abs(a - heads) for a in opts] == sorted(abs(a - heads) for a in opts)  # nearest first


@settings(deadline=None, max_examples=30, derandomize=True)
@given(
    hidden=st.integers(1, 8192),
    heads=st.integers(1, 64),
    seq=st.integers(1, 4096),
    microbatch=st.integers(1, 64),
    t=st.sampled_from([1, 2, 4]),
)
def test_layer_gemms_have_positive_sizes_and_time(hidden, heads, seq, microbatch, t):
    cfg = TransformerConfig("p", vocab=50257, hidden=hidden, heads=heads, seq=seq, microbatch=microbatch,
                            tensor_parallel=t)  # fmt: skip
    gemms = codesign.model_gemms(cfg)
    assert all(isinstance(g[d], int) and g[d] >= 1 for g in gemms for d in ("m", "n", "k", "batch", "count"))
    total, parts = codesign.layer_time(cfg)
    assert total > 0 and total == pytest.approx(sum(g["count"] * p.ms for g, p in parts))
