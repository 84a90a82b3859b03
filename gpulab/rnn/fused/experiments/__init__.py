"""Lesson 6's off-by-default paths, each one :class:`gpulab.rnn.fused.config.FusedConfig` away from what ships.

The fused family's kernels carry their alternatives as compile-time branches (the Triton split kernels' tagged,
flag and hinted exchanges; the one-SM backward's per-gate product and time-major dG; the Gluon kernels' grid-wide
barrier, polled loads, tagged exchange, late or early inputs, 32-row tiles); which branch a launch takes is
configuration, passed down by :mod:`gpulab.rnn.fused.plan`. This package names those configurations and runs code
under one of them; nothing on the package's path imports it. Why each stays off: ``notes/rnn-fused.md`` and
``notes/rnn-split.md``.

- :data:`EXPERIMENTS`: name -> (what it changes, its config);
- :func:`trying`: the plan's loops bound to one of them (a name or a config) for the duration;
- :func:`split_version_as`, :func:`exchange_as`, :func:`backward_as`, :func:`gluon_as`: the config in force with one
  part changed, for the duration.
"""

from __future__ import annotations

import dataclasses

from gpulab import runtime
from gpulab.rnn.fused import plan
from gpulab.rnn.fused.config import (
    DEFAULT,
    DG_LAYOUTS,
    SPLIT_EXCHANGES,
    SPLIT_VERSIONS,
    BackwardConfig,
    FusedConfig,
    GluonConfig,
)

__all__ = ["EXPERIMENTS", "BACKWARD_EXCHANGE", "trying", "split_version_as", "exchange_as", "backward_as", "gluon_as"]


def _gluon(**changes) -> FusedConfig:
    return dataclasses.replace(DEFAULT, gluon=GluonConfig(**changes))


def _backward(**changes) -> FusedConfig:
    return dataclasses.replace(DEFAULT, backward=BackwardConfig(**changes))


EXPERIMENTS = {
    "split v5": ("the Triton split kernels for every split head", dataclasses.replace(DEFAULT, split_version="v5")),
    "split v6+b3": (
        "the Gluon split forward with the Triton split backward",
        dataclasses.replace(DEFAULT, split_version="v6+b3"),
    ),  # fmt: skip
    "split tagged": (
        "the Triton split forward hands h over in tagged words",
        dataclasses.replace(DEFAULT, split_exchange="tagged"),
    ),  # fmt: skip
    "split flags": (
        "the Triton split kernels meet at a flag per program",
        dataclasses.replace(DEFAULT, split_exchange="flags"),
    ),  # fmt: skip
    "split hinted": (
        "the Triton split kernels read h in tagged words after a fence-free counter",
        dataclasses.replace(DEFAULT, split_exchange="hinted"),
    ),  # fmt: skip
    "backward per gate": ("the one-SM backward's product per gate at every head dim", _backward(product="per gate")),
    "backward all gates": (
        "the one-SM backward's product over all gates at every head dim",
        _backward(product="all gates"),
    ),  # fmt: skip
    "backward time-major dG": ("the one-SM backward stores dG time-major", _backward(dg_layout="time")),
    "backward one piece": ("the one-SM backward uncut: kernel, then products, one stream", _backward(cuts=())),
    "gluon grid barrier": ("the Gluon kernels wait for every program of the launch", _gluon(barrier="grid")),
    "gluon polled loads": ("the Gluon barrier polls with an acquire load in every thread", _gluon(poll="load")),
    "gluon tagged": ("the Gluon forward hands h over in tagged words", _gluon(exchange="tagged")),
    "gluon late arrival": (
        "both Gluon kernels arrive after every store",
        _gluon(early_arrive=False, backward_early_arrive=False),
    ),  # fmt: skip
    "gluon late inputs": (
        "the Gluon forward issues its next inputs after the arrival at every tile",
        _gluon(late_inputs=True),
    ),  # fmt: skip
    "gluon inputs after the wait": ("the Gluon backward loads a step's inputs after the wait", _gluon(prefetch=False)),
    "gluon db after": ("db from a reduction over dG after the Gluon backward", _gluon(sum_db=False)),
    "gluon wide": ("the Gluon kernels in 32-row tiles past 16 rows", _gluon(wide=True)),
    "gluon tiles": (
        "batches past version 6's SMs in one launch each way, several batch tiles per program",
        _gluon(tiles=True),
    ),  # fmt: skip
}
"""Every off-by-default path by name: (what it changes, the config that takes it, all else as shipped)."""

BACKWARD_EXCHANGE = {e: FusedConfig(split_exchange=e).backward_exchange for e in SPLIT_EXCHANGES}
"""The Triton split backward's exchange beside each forward exchange (the backward has no tagged words)."""


def trying(experiment):
    """:func:`gpulab.rnn.fused.plan.config_as` for ``experiment``: a name of :data:`EXPERIMENTS` or a
    :class:`gpulab.rnn.fused.config.FusedConfig`."""
    if isinstance(experiment, FusedConfig):
        return plan.config_as(experiment)
    return plan.config_as(EXPERIMENTS[runtime.one_of("experiment", experiment, tuple(EXPERIMENTS))][1])


def split_version_as(name: str):
    """The config in force with ``split_version`` ``name`` (one of :data:`~gpulab.rnn.fused.config.SPLIT_VERSIONS`)
    for the duration."""
    runtime.one_of("name", name, SPLIT_VERSIONS)
    return plan.config_as(dataclasses.replace(plan.current_config(), split_version=name))


def exchange_as(name: str):
    """The config in force with the Triton split kernels' exchange ``name`` (one of
    :data:`~gpulab.rnn.fused.config.SPLIT_EXCHANGES`; the backward takes :data:`BACKWARD_EXCHANGE`'s) for the
    duration."""
    runtime.one_of("name", name, SPLIT_EXCHANGES)
    return plan.config_as(dataclasses.replace(plan.current_config(), split_exchange=name))


def backward_as(layout: str | None = None, cuts: tuple | None = None):
    """The config in force with the one-SM backward's dG layout (one of
    :data:`~gpulab.rnn.fused.config.DG_LAYOUTS`) and its time cuts (fractions of T strictly between 0 and 1, ``()``:
    one piece) for the duration; None leaves one as it is."""
    if layout is not None:
        runtime.one_of("layout", layout, DG_LAYOUTS)
    config = plan.current_config()
    changes = {k: v for k, v in (("dg_layout", layout), ("cuts", cuts)) if v is not None}
    return plan.config_as(dataclasses.replace(config, backward=dataclasses.replace(config.backward, **changes)))


def gluon_as(**switches):
    """The config in force with the Gluon kernels' ``switches`` (fields of
    :class:`~gpulab.rnn.fused.config.GluonConfig`) for the duration."""
    config = plan.current_config()
    unknown = sorted(set(switches) - {f.name for f in dataclasses.fields(GluonConfig)})
    if unknown:
        raise TypeError(f"gluon_as takes GluonConfig's fields, got {unknown}: see gpulab.rnn.fused.config.GluonConfig.")
    return plan.config_as(dataclasses.replace(config, gluon=dataclasses.replace(config.gluon, **switches)))
