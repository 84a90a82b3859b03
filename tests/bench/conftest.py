"""Shared builders for the gpulab.bench tests."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402 - after choosing the headless backend
import pytest  # noqa: E402

from gpulab.bench import Result  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _result(case="c", device="NVIDIA H100 80GB HBM3", date="2025-03-04", **kw):
    fields = dict(
        lesson="00",
        case=case,
        ms=2.0,
        ms_q25=1.5,
        ms_q75=2.5,
        reps=7,
        flops=1e9,
        bytes=4e6,
        dtype="float32",
        shape=[1000],
        device=device,
        sm_count=132,
        torch="2.11.0",
        triton="3.6.0",
        mode="cuda",
        date=date,
        registers=32,
        spills=0,
        params={"block": 1024},
    )
    fields.update(kw)
    return Result(**fields)


@pytest.fixture
def make_result():
    """``make_result(case="c", **fields)``: a complete H100 Result with plausible values, fields overridable."""
    return _result
