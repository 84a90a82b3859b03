"""The attention plan's choice of version (gpulab.attention.plan): version 3 (Gluon) where it is asked for or where
the records put it ahead of version 2, version 2 or 1 elsewhere; each refusal a ValueError naming why."""

import pytest
import torch

from gpulab.attention import plan
from gpulab.attention.v3 import forward as v3_forward


def _qkv(d, n=8):
    return (torch.randn(1, 2, n, d) for _ in range(3))


@pytest.fixture(autouse=True)
def _fresh_plans():
    plan.clear_plan_cache()
    yield
    plan.clear_plan_cache()


@pytest.mark.parametrize("d", [128, 64, 32])
def test_auto_takes_version_3_only_at_the_measured_head_dims(monkeypatch, d):
    # a Hopper GPU where version 2 would run and version 3 can: the choice left is the head dim's
    monkeypatch.setattr(plan, "check_version", lambda *a, **k: 2)
    monkeypatch.setattr(v3_forward, "supported", lambda q, k, v, c, scale=None, **kw: (True, ""))
    monkeypatch.delenv("GPULAB_ATTENTION_VERSION", raising=False)
    q, k, v = _qkv(d)
    assert plan.forward_plan(q, k, v).version == (3 if d in plan.V3_HEAD_DIMS else 2)
    assert (d in plan.V3_HEAD_DIMS) == (d in (64, 128))  # run i: faster than version 2 on every problem at both


def test_auto_keeps_version_2_where_version_3_cannot_run_or_is_forced_off(monkeypatch):
    monkeypatch.setattr(plan, "check_version", lambda *a, **k: 2)
    monkeypatch.setattr(v3_forward, "supported", lambda q, k, v, c, scale=None, **kw: (False, "not Hopper"))
    assert plan.forward_plan(*_qkv(128)).version == 2
    plan.clear_plan_cache()
    monkeypatch.setattr(v3_forward, "supported", lambda q, k, v, c, scale=None, **kw: (True, ""))
    monkeypatch.setenv("GPULAB_ATTENTION_VERSION", "2")
    assert plan.forward_plan(*_qkv(128)).version == 2


@pytest.mark.parametrize("hopper", [True, False], ids=["hopper", "elsewhere"])
def test_head_dim_256_takes_version_3_only_where_the_gate_lists_it(monkeypatch, hopper):
    """Version 2 stops at d=128, so d=256's automatic choice is version 1; it takes version 3 when V3_HEAD_DIMS lists
    256 and version 2 would run there at d=128 (a Hopper GPU, not a tiny problem), never when forced to version 2's
    family off (``GPULAB_ATTENTION_VERSION=2``); ``version=3`` takes it wherever version 3 can run."""
    monkeypatch.setattr(plan, "check_version", lambda version, *a, **k: 3 if version == 3 else 1)
    monkeypatch.setattr(plan, "auto_version", lambda *a, **k: 2 if hopper else 1)
    monkeypatch.setattr(v3_forward, "supported", lambda q, k, v, c, scale=None, **kw: (True, ""))
    monkeypatch.delenv("GPULAB_ATTENTION_VERSION", raising=False)
    q, k, v = _qkv(256)
    assert plan.forward_plan(q, k, v).version == (3 if hopper and 256 in plan.V3_HEAD_DIMS else 1)
    assert plan.forward_plan(q, k, v, version=3).version == 3
    plan.clear_plan_cache()
    monkeypatch.setenv("GPULAB_ATTENTION_VERSION", "2")
    assert plan.forward_plan(q, k, v).version == 1


def _gqa_window_problems():
    q = torch.randn(1, 4, 8, 128)
    kv = torch.randn(1, 2, 8, 128)
    return {"gqa": ((q, kv, kv), dict(enable_gqa=True)), "window": ((q, q, q), dict(window_size=(5, 0))),
            "gqa+window": ((q, kv, kv), dict(enable_gqa=True, window_size=(-1, 4)))}  # fmt: skip


@pytest.mark.parametrize("name", ["gqa", "window", "gqa+window"])
def test_grouped_heads_and_windows_take_version_3_where_the_plain_problem_would(monkeypatch, name):
    """Same gate as the plain problem (version 2 chosen, a measured head dim, version 3 can run): version 3, told
    the group and the window; where version 3 cannot, grouped heads keep version 2 and windows take version 1."""
    (q, k, v), kwargs = _gqa_window_problems()[name]
    asked = []
    monkeypatch.setattr(plan, "check_version", lambda *a, **k: 2)
    monkeypatch.delenv("GPULAB_ATTENTION_VERSION", raising=False)
    monkeypatch.setattr(v3_forward, "supported", lambda q, k, v, c, scale=None, **kw: asked.append(kw) or (True, ""))
    p = plan.forward_plan(q, k, v, **kwargs)
    assert p.version == 3 and not p.plain
    assert asked == [dict(enable_gqa="gqa" in name, window_size=kwargs.get("window_size", (-1, -1)))]
    plan.clear_plan_cache()
    monkeypatch.setattr(v3_forward, "supported", lambda q, k, v, c, scale=None, **kw: (False, "not Hopper"))
    assert plan.forward_plan(q, k, v, **kwargs).version == (1 if "window" in name else 2)
    plan.clear_plan_cache()
    monkeypatch.setattr(v3_forward, "supported", lambda q, k, v, c, scale=None, **kw: (True, ""))
    monkeypatch.setenv("GPULAB_ATTENTION_VERSION", "2")  # version 3 forced off: windows still need version 1
    assert plan.forward_plan(q, k, v, **kwargs).version == (1 if "window" in name else 2)


@pytest.mark.parametrize("name", ["gqa", "window", "gqa+window"])
def test_version_3_asked_with_grouped_heads_or_a_window_runs_where_it_can(monkeypatch, name):
    (q, k, v), kwargs = _gqa_window_problems()[name]
    monkeypatch.setattr(v3_forward, "supported", lambda q, k, v, c, scale=None, **kw: (True, ""))
    assert plan.forward_plan(q, k, v, version=3, **kwargs).version == 3
    assert plan.forward_plan(q, k, v, config=v3_forward.V3Config(), **kwargs).version == 3


def test_on_cpu_the_automatic_choice_is_version_1():
    assert plan.forward_plan(*_qkv(128)).version == 1


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (dict(version=3), "version=3 cannot run this input: version 3 "),  # no GPU here (or an untested Triton)
        (dict(version=4), "version must be None (automatic), 1"),
        (dict(version=1, config=v3_forward.V3Config()), "config is a V3Config"),
        (dict(version=3, scale=-0.5), "version=3 takes scales >= 0"),
        (dict(version=3, config=plan.HopperConfig()), "is not version 3's; pass a V3Config"),
    ],
    ids=["v3-on-cpu", "v4", "v3-config-v1", "v3-negative-scale", "v3-hopper-config"],
)
def test_version_3_refusals_name_the_reason(kwargs, words):
    with pytest.raises(ValueError) as e:
        plan.forward_plan(*_qkv(128), **kwargs)
    assert words in str(e.value)


def test_a_v3_config_asks_for_version_3():
    assert plan.check_version(None, v3_forward.V3Config(), torch.bfloat16, 128, torch.device("cpu")) == 3
