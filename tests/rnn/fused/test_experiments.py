"""gpulab.rnn.fused.experiments and config: every off-by-default path is one frozen config away from what ships, the
plan binds it only for the duration, and the switches reach the loops the plan chooses (CPU, interpreter)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gpulab import runtime
from gpulab.rnn.fused import config, experiments, plan


def test_what_ships_is_every_default():
    shipped = config.FusedConfig()
    assert shipped == config.DEFAULT == plan.current_config()
    assert (shipped.split_version, shipped.split_exchange, shipped.backward_exchange) == ("v6", None, "barrier")
    assert shipped.backward == config.BackwardConfig("by head dim", "batch", (0.125,), 64)
    assert (shipped.gluon.barrier, shipped.gluon.poll, shipped.gluon.exchange) == ("group", "atomic", "counter")
    with pytest.raises(dataclasses.FrozenInstanceError):
        shipped.split_version = "v5"  # frozen: an experiment makes a new config


@pytest.mark.parametrize("name", sorted(experiments.EXPERIMENTS))
def test_each_experiment_is_bound_for_the_duration_only(name):
    what, cfg = experiments.EXPERIMENTS[name]
    assert what and cfg != config.DEFAULT
    with experiments.trying(name) as bound:
        assert plan.current_config() is bound is cfg
    assert plan.current_config() is config.DEFAULT


def test_the_helpers_change_one_part_and_nest():
    with experiments.split_version_as("v5"), experiments.backward_as(cuts=()):
        now = plan.current_config()
        assert now.split_version == "v5" and now.backward.cuts == () and now.backward.dg_layout == "batch"
        with experiments.gluon_as(barrier="grid"):
            assert plan.current_config().gluon.barrier == "grid" and plan.current_config().split_version == "v5"
        assert plan.current_config().gluon.barrier == "group"
    assert plan.current_config() is config.DEFAULT
    assert experiments.BACKWARD_EXCHANGE == {"barrier": "barrier", "tagged": "barrier", "flags": "flags",
                                             "hinted": "barrier"}  # fmt: skip


def test_the_plan_binds_its_loops_to_the_config(monkeypatch):
    """The one-SM backward the plan chooses receives the config in force: the loops are chosen again under another."""
    seen = []
    real = plan.fused_rnn_gradients
    monkeypatch.setattr(plan, "fused_rnn_gradients", lambda *a, **k: seen.append(k["config"]) or real(*a, **k))
    plan.clear_cache()
    shapes = ((2, 3, 4, 1, 16), (4, 1, 16, 16), (4, 1, 16), (2, 2, 1, 1, 16))  # Wx, R, b, states: one SM
    x = [torch.randn(*s, device=runtime.device, requires_grad=True) for s in shapes]
    for cfg in (config.DEFAULT, experiments.EXPERIMENTS["backward time-major dG"][1]):
        with plan.config_as(cfg):
            out, _ = plan.fused_forward(*x)
            out.sum().backward()
    assert seen == [config.DEFAULT.backward, config.BackwardConfig(dg_layout="time")]
