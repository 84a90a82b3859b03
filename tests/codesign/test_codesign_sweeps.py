"""Lesson 2's sweeps (gpulab.codesign.sweeps) at tiny sizes on CPU: predictions attached, outputs checked before
timing, the model's pair agreement by hand, and the registered benchmark. Bad input: test_codesign_bad_input.py."""

import math

import matplotlib.figure
import pytest
import torch

from gpulab import bench, codesign, lessons
from gpulab.bench import Result
from gpulab.bench import report as bench_report


def test_sweeps_attach_predictions_and_check_results(h100):
    rs = codesign.sweep_k(ks=[15, 16, 17], m=9, n=10)
    rs += codesign.sweep_head_dim(head_dims=(3, 8), batch_heads=2, seq=5)
    rs += codesign.sweep_waves(ns=[16, 33], m=17, k=9)
    assert [r.params["sweep"] for r in rs] == ["K"] * 3 + ["head dim"] * 2 + ["N (waves)"] * 4
    for r in rs:
        assert r.lesson == "02" and r.ms > 0 and r.flops > 0 and r.bytes > 0
        assert r.params["predicted_ms"] > 0 and r.params["model_gpu"] == h100.name
        assert r.mode == "interpreter"
    k16 = rs[1]
    assert k16.shape == [9, 10, 16] and k16.flops == 2 * 9 * 10 * 16
    impls = {r.params["impl"] for r in rs if r.params["sweep"] == "N (waves)"}
    assert impls == {"torch.matmul (CPU)", "fixed-tile Triton 16x32 (interpreter)"}
    triton_r = [r for r in rs if "Triton" in r.params["impl"]]
    assert all(r.params["predicted_tile"] == [16, 32] for r in triton_r)
    with pytest.raises(ValueError, match="impls"):
        codesign.sweep_waves(ns=[16], m=4, k=4, impls=("cublas",))


def test_pair_agreement_by_hand(sweep_result):
    rs = [
        sweep_result("K", "t", 1, 1.0, 1.0),
        sweep_result("K", "t", 2, 1.05, 1.2),  # within 10% of x=1: not counted, though the model says 20% slower
        sweep_result("K", "t", 3, 4.6, 4.0),  # slower than 1 and 2 by > 10%: the model agrees with both
        sweep_result("K", "t", 4, 2.0, 0.5),  # slower than 1, 2 but predicted faster: 2 misses; faster than 3: agrees
        sweep_result("N", "t", 1, 1.0, 2.0),  # another sweep: compared only with its own
        sweep_result("N", "t", 2, 3.0, 2.0),  # predicted tie: a miss, counted as a tie
        sweep_result("N", "u", 1, 1.0, 1.0),  # same sweep, other implementation: its own group, one result, no pairs
        Result(lesson="02", case="no prediction", ms=9.0, params=dict(sweep="K", x=5)),
    ]
    a = codesign.pair_agreement(rs)
    assert (a["agree"], a["pairs"], a["ties"]) == (3, 6, 1)
    assert a["fraction"] == pytest.approx(0.5)
    assert a["by_sweep"]["K | t"] == {"agree": 3, "pairs": 5, "fraction": pytest.approx(0.6)}
    assert a["by_sweep"]["N | t"]["pairs"] == 1 and math.isnan(a["by_sweep"]["N | u"]["fraction"])
    assert len(a["misses"]) == 3
    text = codesign.format_agreement(a)
    assert "3 of 6 pairs" in text and "MISSES the 90% target" in text and "1 pairs predicted as ties" in text


def test_pair_agreement_threshold_edge_and_empty(sweep_result):
    rs = [sweep_result("K", "t", 1, 1.0, 1.0), sweep_result("K", "t", 2, 1.1, 2.0)]  # exactly 10%: not "more than 10%"
    assert codesign.pair_agreement(rs)["pairs"] == 0
    assert math.isnan(codesign.pair_agreement([])["fraction"])
    assert codesign.pair_agreement(rs, threshold=0.05)["agree"] == 1
    with pytest.raises(ValueError, match="threshold"):
        codesign.pair_agreement(rs, threshold=-0.1)


def test_benchmark_on_cpu(capsys):
    results, fig = codesign.benchmark()
    assert isinstance(fig, matplotlib.figure.Figure)
    sweeps = {r.params["sweep"] for r in results}
    assert sweeps == {"K", "head dim", "N (waves)"}
    assert all(r.dtype == "float32" and r.mode == "interpreter" for r in results)
    out = capsys.readouterr().out
    assert "pairs correctly" in out and "not meaningful" in out


def test_sweeps_check_before_timing(monkeypatch):
    def misses_last_column(a, b, out, **cfg):
        out[:, :-1] = (a @ b)[:, :-1]  # the last column is never written: it keeps the sweep's NaN poison
        return out

    monkeypatch.setattr(codesign.sweeps, "matmul_fixed_tile", misses_last_column)
    with pytest.raises(AssertionError, match="NaN"):
        codesign.sweep_waves(ns=[16], m=8, k=8, impls=("triton",))


def test_sizes_given_are_used_not_replaced_by_defaults():
    rs = codesign.sweep_k(ks=[1], m=1, n=1, check=True)
    assert [r.shape for r in rs] == [[1, 1, 1]]
    rs = codesign.sweep_head_dim(head_dims=[1], batch_heads=1, seq=1)
    assert [r.shape for r in rs] == [[1, 1, 1, 1]]


def test_lesson_02_benchmark_is_registered():
    assert lessons.benchmark("02") is codesign.benchmark and callable(lessons.benchmark("02"))


# ----------------------------------------------------------------------------------------------------------------
# on the harness: every provider checked before anything is timed, the records the readers use


@pytest.fixture
def no_timing(monkeypatch):
    """The harness's clock replaced by one that fails the test: a run that reaches it timed something."""

    def clock(*args, **kwargs):
        raise AssertionError("the harness timed a provider")

    monkeypatch.setattr(bench_report, "time_callable", clock)


def test_a_wrong_triton_kernel_is_caught_beside_torch_before_timing(monkeypatch, no_timing):
    """Torch and Triton are two providers of each N, each with its own output: the Triton kernel's unwritten column
    is caught though torch's product of the same N is right, and nothing is timed."""

    def misses_last_column(a, b, out, **cfg):
        out[:, :-1] = (a @ b)[:, :-1]
        return out

    monkeypatch.setattr(codesign.sweeps, "matmul_fixed_tile", misses_last_column)
    with pytest.raises(bench.CheckFailed, match=r"fixed-tile Triton .*nothing was timed"):
        codesign.sweep_waves(ns=[16, 32], m=8, k=8)


def test_a_wrong_head_is_caught(monkeypatch, no_timing):
    bmm = torch.bmm

    def last_head_wrong(q, kt, out):
        bmm(q, kt, out=out)
        out[-1] *= 2
        return out

    monkeypatch.setattr(codesign.sweeps.torch, "bmm", last_head_wrong)
    with pytest.raises(bench.CheckFailed, match="head dim sweep"):
        codesign.sweep_head_dim(head_dims=[4], batch_heads=3, seq=5)


def test_records_keep_the_readers_fields():
    rs = codesign.sweep_waves(ns=[16, 33], m=17, k=9)
    assert [r.provider for r in rs] == [r.params["impl"] for r in rs]
    assert [r.case for r in rs] == [f"wave sweep, {r.params['impl']}" for r in rs]
    assert [r.params["x"] for r in rs] == [16, 16, 33, 33]
    for r in rs:
        assert r.status == "ok" and r.params["check"] == "ok" and r.wall_ms == r.ms
        assert r.params["sweep"] == "N (waves)" and r.params["x_name"] == "N (output columns)"
        assert {"predicted_ms", "predicted_tflops", "predicted_bound", "model_gpu"} <= set(r.params)
    assert codesign.pair_agreement(rs)["by_sweep"].keys() == {f"N (waves) | {r.params['impl']}" for r in rs}
    (r,) = codesign.sweep_k(ks=[8], m=4, n=4, check=False)
    assert r.params["check"] == "not checked" and r.case == "K sweep, torch.matmul (CPU)" and r.params["x"] == 8
