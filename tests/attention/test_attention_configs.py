"""Lesson 4, step 6: tile configs per GPU and opt-in autotuning (gpulab.attention.configs)."""

import pytest
import torch

from gpulab import attention as A
from gpulab import hardware, runtime
from gpulab.attention import configs


def test_configs_fit_every_gpu_and_are_small_in_the_interpreter():
    for spec in hardware.SPECS.values():
        for kind in ("forward", "dkdv", "dq"):
            for d in (16, 24, 64, 80, 96, 128):
                for dtype in (torch.float16, torch.float32):
                    c = A.attention_config(kind, d, dtype, gpu=spec, interpreter=False)
                    assert c.block_d == runtime.dot_block(d) and c.block_m >= 16 and c.block_n >= 16
                    smem = A.smem_estimate(
                        kind, c.block_m, c.block_n, c.block_d, 4 if dtype == torch.float32 else 2, c.num_stages
                    )
                    assert smem <= spec.smem_per_block, (spec.name, kind, d, dtype, c)
    c = A.attention_config("forward", 80, torch.float16, seq_q=17, seq_k=1000, gpu="H100", interpreter=False)
    assert c.block_m == 32 and c.block_d == 128  # tiles no larger than the sequence needs
    assert A.attention_config("dq", 80, interpreter=True) == A.AttentionConfig(16, 16, 128, 4, 1)


def test_candidates_start_with_the_default_and_fit():
    for kind in ("forward", "dkdv", "dq"):
        for d in (64, 80, 128):
            cs = A.candidates(kind, d, torch.bfloat16, 4096, 4096, gpu="H100", interpreter=False)
            assert cs[0] == A.attention_config(kind, d, torch.bfloat16, 4096, 4096, gpu="H100", interpreter=False)
            assert len(cs) == len(set(cs)) >= 2
            for c in cs:
                smem = A.smem_estimate(kind, c.block_m, c.block_n, c.block_d, 2, c.num_stages)
                assert smem <= hardware.spec("H100").smem_per_block
    assert len(A.candidates("forward", 64, torch.float32, 17, 17, interpreter=True)) == 1


def test_autotune_keeps_the_fastest_skips_failures_and_remembers(monkeypatch):
    monkeypatch.setattr(configs, "_TUNED", {})
    cs = A.candidates("forward", 64, torch.float16, 1000, 1000, gpu="H100", interpreter=False)
    fake_ms = {c: 3.0 - i for i, c in enumerate(cs)}  # the last candidate is fastest
    calls = []

    def run(c):
        calls.append(c)
        if c == cs[0]:
            raise RuntimeError("out of resources")  # a candidate this GPU cannot run
        return fake_ms[c]

    key = configs.tuning_key("forward", 64, torch.float16, False, 1000, 1000)
    assert key == ("forward", 64, "float16", False, 1024, 1024)
    best = A.autotune(key, cs, run, timer=lambda fn: fn())
    assert best == cs[-1] and calls == cs
    assert A.autotune(key, cs, run, timer=lambda fn: fn()) == best and calls == cs  # remembered: not re-timed
    assert A.tuned()[key]["config"] == best and A.tuned()[key]["tried"] == len(cs) - 1
    with pytest.raises(RuntimeError, match="out of resources"):
        A.autotune(("other",), cs[:1], run, timer=lambda fn: fn())
