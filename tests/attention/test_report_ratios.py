"""The ratios lesson 4's claims read (gpulab.attention.measure.report.sweep_ratios, ratios): same run, same problem, the
right way round."""

import pytest

from gpulab import bench
from gpulab.attention.measure import report


def _sweep(ms, check="ok", source="a.jsonl", block_m=64, warps=4, **variant):
    config = {"block_m": block_m, "block_n": 64, "num_warps": warps, "num_stages": 2, "persistent": False,
              "warp_specialize": False, **variant}  # fmt: skip
    return bench.record(lesson="04", case="sweep", ms=ms, kind="sweep", head_dim=64, causal=False, seq=4096,
                        config=config, check=check, source=source)  # fmt: skip


def test_sweep_ratios_pair_each_variant_with_the_plain_loop_of_its_run():
    records = [
        _sweep(1.0), _sweep(2.0, persistent=True), _sweep(0.5, overlap=True),
        _sweep(0.8, block_m=128, warps=8),  # the fastest plain loop of the problem (other tiles)
        _sweep(1.6, warp_specialize=True), _sweep(0.1, warp_specialize=True, check="failed: wrong result"),
        _sweep(4.0, source="b.jsonl", persistent=True),  # another run's: no plain partner there, never paired
    ]  # fmt: skip
    found = report.sweep_ratios(records)
    assert found["persistent"] == [pytest.approx(0.5)]  # below 1: the persistent schedule is slower
    assert found["overlap"] == [pytest.approx(2.0)]
    assert found["ws"] == [pytest.approx(0.5)]  # against the fastest plain loop; the failed run is not timed


def test_ratios_bad_clock_is_refused():
    with pytest.raises(ValueError, match="clock"):
        report.ratios([], "forward", "SDPA default", clock="cpu")
