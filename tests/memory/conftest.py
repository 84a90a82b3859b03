"""Shared builders for lesson 0's tests (gpulab.memory)."""

import matplotlib
import matplotlib.pyplot as plt
import pytest

from gpulab import memory

matplotlib.use("Agg")  # headless: every figure here is drawn off-screen


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture
def guarded_sweep_data():
    """A builder: ``guarded_sweep_data(n)`` -> sweep data of ``n`` elements followed by 50 guard elements of 1e6,
    which a sweep over the first ``n`` must never read (one read shows as a sum off by 1e6)."""

    def build(n, guard=50):
        x = memory.sweep_data(n + guard)
        x[n:] = 1e6
        return x

    return build
