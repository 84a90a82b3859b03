"""Lesson 5's benchmark (gpulab.rnn.fused.measure.benchmark) on the declarative harness: a tiny CPU run and the records'
layout."""

import json

import pytest
import torch

from gpulab import bench, runtime
from gpulab.rnn.fused.measure import benchmark as rb


@pytest.fixture(autouse=True)
def _cpu_only():
    if runtime.on_gpu():
        pytest.skip("the GPU benchmark is `python -m gpulab bench 06`")


def test_problems_cover_the_sweeps_once():
    cases = rb.problems({"B": 2, "T": 4, "NH": 2, "DH": 16}, batches=(1, 2, 3), head_dims=(16, 32), hidden=32)
    assert [(c["sweep"], c["B"], c["NH"], c["DH"]) for c in cases] == [
        ("main", 2, 2, 16), ("same_flops", 2, 1, 32), ("batch", 1, 2, 16), ("batch", 3, 2, 16), ("head_dim", 2, 1, 32)
    ]  # fmt: skip


def test_recurrence_and_dense_records_keep_the_readers_layout(capsys):
    main = {"sweep": "main", "B": 1, "T": 2, "NH": 1, "DH": 16}
    benchmarks = rb.recurrence_benchmarks([main], torch.float32)
    benchmarks += rb.dense_benchmarks(1, 2, 16, (torch.float32,), 1)
    results = bench.run(benchmarks)
    rb._annotate(results)
    by = {(r.provider, r.params["pass"]): r for r in results}
    fused = by["gpulab fused", "fwd"]
    assert fused.case == "gpulab fused" and fused.params["backend"] == "fused" and fused.params["mode"] == "eager"
    assert fused.params["check"] == "ok" and fused.params["sweep"] == "main" and fused.shape == [1, 2, 1, 16]
    assert fused.params["ns_per_step"] > 0 and fused.params["interpreter"] and fused.params["vs_vanilla"] > 0
    assert by["gpulab fused", "fwd+bwd"].flops == 3 * fused.flops
    graph = by["gpulab alternating (graph)", "fwd"]
    assert graph.case == "gpulab alternating" and graph.params["mode"] == "graph" and graph.ms != graph.ms
    assert ("gpulab alternating (graph)", "fwd+bwd") not in by
    dense = by["cuDNN nn.LSTM (dense)", "fwd"]
    assert dense.params["sweep"] == "dense" and dense.params["includes_input_projection"] and dense.params["NH"] == 1
    assert by["cuDNN nn.LSTM (dense)", "fwd+bwd"].params["check"] == "ok"
    assert dense.flops > rb._cost(1, 2, 1, 16, torch.float32, False)[0]  # the input product counted
    for r in results:
        json.dumps(r.to_dict())
    assert "gpulab fused" in rb.summary_table(results) and "unavailable: CUDA graphs need a GPU" in rb.summary_table(
        results
    )
    assert any("target fused forward" in line for line in rb.targets(results))
    assert rb.plot_results(results).axes


def test_fused_that_does_not_fit_says_why():
    split = {"sweep": "same_flops", "B": 1, "T": 2, "NH": 1, "DH": 1024}  # past one SM: split over several
    assert rb._skip_ours("gpulab fused", **split, dtype=torch.float32, training=True) is None
    big = {**split, "sweep": "head_dim", "DH": 4096}  # past every split too
    why = rb._skip_ours("gpulab fused", **big, dtype=torch.float32, training=False)
    assert why.startswith("does not fit") and "alternating" in why
    assert rb._skip_ours("gpulab vanilla", **{**big, "sweep": "batch"}, dtype=torch.float32, training=True)


def test_states_check_allows_rounding_drift_not_wrong_elements():
    torch.manual_seed(0)
    ref = torch.randn(4, 1000, dtype=torch.float64)
    drift = ref.clone()
    drift[0, :3] += 2.5 * rb.check.tolerance(torch.bfloat16) * (ref[0, :3].abs() + 1.0)  # a few ulps off, rare
    assert rb.check_states(drift.to(torch.bfloat16), ref)["rel_err"] < rb.check.tolerance(torch.bfloat16)
    wrong = drift.clone()
    wrong[1, 7] = 5.0  # one misplaced element
    with pytest.raises(AssertionError, match="differ"):
        rb.check_states(wrong.to(torch.bfloat16), ref)
    nan = drift.clone()
    nan[2, 9] = float("nan")  # one unwritten (poisoned) element
    with pytest.raises(AssertionError, match="NaN"):
        rb.check_states((nan.to(torch.bfloat16), None), ref)


def test_fused_records_report_the_kernel_the_chooser_runs():
    from gpulab.rnn.fused.backward import fused_backward_kernel
    from gpulab.rnn.fused.forward import fused_forward_kernel
    from gpulab.rnn.fused.split import split_forward_kernel
    from gpulab.rnn.fused.split_backward import split_backward_kernel

    small = {"sweep": "main", "B": 2, "T": 4, "NH": 2, "DH": 16, "dtype": torch.float32}
    assert rb.fused_kernel(**small, training=False) is fused_forward_kernel
    assert rb.fused_kernel(**small, training=True) is fused_backward_kernel
    one_head = {**small, "NH": 1, "DH": 768, "dtype": torch.bfloat16}  # past one SM: the split kernels
    assert rb.fused_kernel(**one_head, training=False) is split_forward_kernel
    assert rb.fused_kernel(**one_head, training=True) is split_backward_kernel
    fp32_head = {**small, "NH": 1, "DH": 1024}  # no split backward fits: it trains through alternating
    assert rb.fused_kernel(**fp32_head, training=True) is None
