"""Shared builders for lesson 2's tests (gpulab.codesign): hand-made sweep results and the H100's spec."""

import matplotlib
import matplotlib.pyplot as plt
import pytest

from gpulab import hardware
from gpulab.bench import Result

matplotlib.use("Agg")  # headless: every figure here is drawn off-screen


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture
def h100():
    """The H100's spec (132 SMs, 989.4 bf16 TFLOP/s, 3.35 TB/s): the GPU the model defaults to."""
    return hardware.spec("H100")


def _sweep_result(sweep, impl, x, ms, predicted):
    return Result(
        lesson="02", case=f"{sweep}, {impl}", ms=ms, params=dict(sweep=sweep, impl=impl, x=x, predicted_ms=predicted)
    )


@pytest.fixture
def sweep_result():
    """A builder: ``sweep_result(sweep, impl, x, ms, predicted)`` -> a lesson-2 Result measured at ``ms`` with the
    model's ``predicted`` ms, as the sweeps record them."""
    return _sweep_result
