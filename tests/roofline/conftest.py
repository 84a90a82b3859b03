"""Shared builders for lesson 1's tests (gpulab.roofline): H100-like measurement records and made-up ceilings."""

import matplotlib
import matplotlib.pyplot as plt
import pytest

from gpulab import roofline
from gpulab.bench import Result

matplotlib.use("Agg")  # headless: every figure here is drawn off-screen


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _h100_records(date="2026-01-02", device="NVIDIA H100 80GB HBM3", mode="cuda", hbm_ms=0.72):
    common = dict(lesson="01", device=device, date=date, mode=mode)
    n = 1 << 28
    f = 2.0 * 8192**3
    return [
        Result(
            case="HBM: copy kernel (gpulab)", ms=hbm_ms, bytes=2 * n * 4, flops=0, params={"ceiling": "HBM"}, **common
        ),
        Result(case="HBM: torch copy_ (peer)", ms=0.714, bytes=2 * n * 4, flops=0, params={"peer_of": "HBM"}, **common),
        Result(case="L2 a", ms=1.0, bytes=8e9, flops=2e9, params={"ceiling": "L2", "level": "L2"}, **common),
        Result(case="L2 b", ms=1.0, bytes=9e9, flops=2e9, params={"ceiling": "L2", "level": "L2"}, **common),
        Result(case="L1", ms=1.0, bytes=25e9, flops=6e9, params={"ceiling": "L1", "level": "L1"}, **common),
        Result(case="bf16", ms=f / 780e9, flops=f, bytes=3 * 8192**2 * 2, params={"ceiling": "bf16"}, **common),
        Result(case="bf16 peer", ms=f / 760e9, flops=f, bytes=3 * 8192**2 * 2, params={"peer_of": "bf16"}, **common),
        Result(case="fma", ms=10.0, flops=6e11, bytes=1e6, params={"ceiling": "fp32"}, **common),
    ]


@pytest.fixture
def h100_records():
    """A builder: ``h100_records(date=..., device=..., mode=..., hbm_ms=...)`` -> a lesson-1 run's records, with
    the copy kernel at ``hbm_ms`` against torch's copy at 0.714 ms and bf16 at 780 against a 760 TFLOP/s peer."""
    return _h100_records


@pytest.fixture
def fake_ceilings():
    """Round numbers for a made-up GPU with every roof known."""
    return roofline.Ceilings(
        device="test GPU", source="made up for a test", hbm_gbps=1000.0, l2_gbps=4000.0, l1_gbps=10000.0,
        fp32_tflops=50.0, tf32_tflops=200.0, fp16_tflops=400.0, bf16_tflops=400.0, mode="cuda",
    )  # fmt: skip
