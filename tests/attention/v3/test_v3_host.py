"""Version 3's host side on any machine: when it may be chosen, and clear errors where it may not."""

import pytest
import torch

from gpulab import gluon_compat
from gpulab.attention.v3 import backward
from gpulab.attention.v3 import forward as v3


def test_supported_says_why_not_on_cpu():
    q = torch.zeros(1, 1, 8, 64, dtype=torch.float16)
    ok, why = v3.supported(q, q, q, False)
    assert not ok and why
    if gluon_compat.untested("version 3") is None:
        assert "CUDA" in why
    else:
        assert v3.triton.__version__ in why


def test_supported_rejects_non_tensors_and_bad_causal():
    assert v3.supported(None, None, None)[0] is False
    with pytest.raises(TypeError):
        v3.supported(torch.zeros(1, 1, 8, 64), torch.zeros(1, 1, 8, 64), torch.zeros(1, 1, 8, 64), causal=1)


def test_forward_refuses_what_it_does_not_support():
    q = torch.zeros(1, 1, 8, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="version 3 cannot run"):
        v3.attention_forward(q, q, q)


@pytest.mark.parametrize(
    "kwargs",
    [dict(step=4), dict(block_n=96), dict(stages=1), dict(consumers=4), dict(consumer_regs=244), dict(producer_regs=8)],
)
def test_config_bad_values(kwargs):
    with pytest.raises(ValueError):
        v3.V3Config(**kwargs)


def test_config_register_cap_shares_the_sm():
    for cfg in (v3.V3Config(), v3.V3Config(consumers=3, consumer_regs=160, producer_regs=32)):
        threads = 128 * (cfg.consumers + 1)
        assert cfg.maxnreg * threads <= 65536
        assert cfg.consumers * cfg.consumer_regs + cfg.producer_regs <= cfg.maxnreg * (cfg.consumers + 1)


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_measured_configs_are_valid(d, causal):
    cfg = v3.v3_config(d, causal)
    assert isinstance(cfg, v3.V3Config)
    assert v3.v3_config(d, causal, step=1).step == 1
    with pytest.raises(ValueError):
        v3.v3_config(96, causal)


@pytest.mark.parametrize("scale", [0.0, -0.125, float("nan"), "0.1", True])
def test_supported_refuses_a_scale_that_is_not_positive(scale):
    q = torch.zeros(1, 1, 8, 64, dtype=torch.float16)
    ok, why = v3.supported(q, q, q, False, scale)
    assert not ok and "positive scale" in why
    with pytest.raises(ValueError, match="positive scale"):
        v3.attention_forward(q, q, q, scale=scale)


def test_config_refuses_register_budgets_over_the_cap():
    with pytest.raises(ValueError, match="over the kernel's cap"):
        v3.V3Config(consumer_regs=104, producer_regs=24)  # (208 + 24) / 3 rounds down to 72 < 77.3
    v3.V3Config(consumer_regs=104, producer_regs=32)  # 240 = 80 x 3


SMEM_LIMIT = 227 * 1024  # the H100's and H200's largest shared-memory allocation per block


@pytest.mark.parametrize("causal", [False, True])
def test_d256_tiles_fit_shared_memory_and_registers(causal):
    """Head dim 256 at every length, on the step ladder and with windows (step 1 for every window; steps 2-3 spill
    there on one Triton or another): 64 keys per stage, two stages, two consumers, one Q buffer, Q from shared
    memory: Q 64 KB + K, V 128 KB (at 128 keys or a third stage or a second Q buffer the buffers pass 227 KB; the
    compile table is in tests/attention/v3/test_v3_compile.py)."""
    cfgs = [v3.v3_config(256, causal, seq=seq) for seq in (None, 1, 1024, 4096, 16384)]
    cfgs += [v3.v3_config(256, causal, step=s) for s in (1, 2, 3)]
    if not causal:
        cfgs += [v3.window_config(256, False, w, seq=seq) for w in ((3, 7), (-1, 0), (8, -1)) for seq in (None, 17)]
    for cfg in cfgs:
        assert (cfg.block_n, cfg.stages, cfg.consumers, cfg.q_buffers, cfg.q_regs) == (64, 2, 2, 1, False), cfg
        assert 2 * 256 * (64 * cfg.consumers * cfg.q_buffers + 2 * cfg.stages * cfg.block_n) <= SMEM_LIMIT
    assert v3.v3_config(256, causal).persistent and v3.v3_config(256, causal).pairs == causal
    assert v3.short_n(256, causal) >= 1
    if not causal:
        assert [v3.window_config(256, False, w).step for w in ((3, 7), (8, -1), (-1, 0))] == [1, 1, 1]  # no spills


def test_backward_refuses_head_dim_256_and_says_so():
    q = torch.zeros(1, 1, 8, 256, dtype=torch.float16)
    ok, why = backward.backward_supported(q, q, q, False)
    assert not ok and "256" in why and "version 1" in why
    with pytest.raises(ValueError, match="head_dim"):
        backward.backward_config(256)
