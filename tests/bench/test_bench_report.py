"""gpulab.bench.report: the declarative harness on CPU with tiny torch functions."""

import matplotlib.axes
import pytest
import torch

from gpulab import bench


def _softmax_benchmark(calls=None, **overrides):
    """Row softmax over a tiny grid: a correct provider, a peer, and a reference; ``calls`` logs each call."""
    log = calls if calls is not None else []

    def provider(name, fn):
        def run(x):
            log.append((name, tuple(x.shape)))
            return fn(x)

        return run

    fields = dict(
        lesson="04",
        name="softmax",
        cases=[{"rows": 3, "cols": 17}, {"rows": 1, "cols": 5}],
        inputs=lambda rows, cols: (torch.randn(rows, cols),),
        providers={
            "mine": provider(
                "mine",
                lambda x: (
                    (x - x.amax(-1, keepdim=True)).exp() / (x - x.amax(-1, keepdim=True)).exp().sum(-1, keepdim=True)
                ),
            ),
            "torch": provider("torch", lambda x: torch.softmax(x, -1)),
        },
        reference=lambda x: torch.softmax(x.double(), -1),
        flops=lambda rows, cols: 5.0 * rows * cols,
        bytes=lambda rows, cols: 8.0 * rows * cols,
    )
    fields.update(overrides)
    return bench.Benchmark(**fields)


def test_every_case_is_checked_before_any_is_timed():
    calls = []
    results = bench.run(_softmax_benchmark(calls))
    check_phase = calls[:4]
    assert sorted(check_phase) == sorted([("mine", (3, 17)), ("torch", (3, 17)), ("mine", (1, 5)), ("torch", (1, 5))])
    assert len(calls) > 4  # then timed
    assert [(r.case, r.provider) for r in results] == [
        ("softmax rows=3 cols=17", "mine"),
        ("softmax rows=3 cols=17", "torch"),
        ("softmax rows=1 cols=5", "mine"),
        ("softmax rows=1 cols=5", "torch"),
    ]


def test_records_carry_both_clocks_and_the_case():
    results = bench.run(_softmax_benchmark())
    for r in results:
        assert r.status == "ok" and r.lesson == "04" and r.interpreter
        assert r.ms > 0 and r.wall_ms > 0 and r.reps >= 3
        assert r.params["benchmark"] == "softmax" and {"rows", "cols"} <= set(r.params)
        assert r.flops == 5.0 * r.params["rows"] * r.params["cols"]
        assert r.tflops is not None and r.wall_gbps is not None
        assert r.dtype == "float32" and r.shape == [r.params["rows"], r.params["cols"]] and r.device and r.date


def test_a_failing_check_stops_before_timing_and_names_the_case():
    calls = []
    wrong = lambda x: torch.softmax(x, -1) * (1.5 if x.shape[0] == 1 else 1.0)  # noqa: E731 - wrong on one case
    b = _softmax_benchmark(calls)
    b.providers = {**b.providers, "wrong": wrong}
    with pytest.raises(bench.CheckFailed) as e:
        bench.run(b)
    msg = str(e.value)
    assert "softmax rows=1 cols=5" in msg and "'wrong'" in msg and "nothing was timed" in msg
    assert isinstance(e.value, AssertionError)
    assert len(calls) == 4  # each good provider ran once per case, for its check; none was timed


def test_unavailable_and_failing_providers_are_recorded_not_fatal():
    def broken(x):
        raise RuntimeError("no kernel for this shape")

    def needs_package(x):
        raise ImportError("No module named 'flash_attn'")

    b = _softmax_benchmark(cases=[{"rows": 2, "cols": 3}])
    b.providers = {**b.providers, "fa2": bench.unavailable("flash_attn is not installed"), "broken": broken,
                   "pkg": needs_package}  # fmt: skip
    by = {r.provider: r for r in bench.run(b)}
    assert by["fa2"].status == "unavailable: flash_attn is not installed"
    assert by["pkg"].status == "unavailable: No module named 'flash_attn'"
    assert by["broken"].status == "failed: RuntimeError: no kernel for this shape"
    for p in ("fa2", "pkg", "broken"):
        assert by[p].wall_ms is None and by[p].tflops is None
    assert by["mine"].status == "ok" and by["mine"].wall_ms > 0


def test_reference_may_be_a_provider():
    b = _softmax_benchmark(reference="torch")
    assert {r.status for r in bench.run(b, timed=False)} == {"checked, not timed"}
    b.providers = {**b.providers, "off": lambda x: torch.softmax(x, -1) + 1e-3}
    with pytest.raises(bench.CheckFailed, match="'off'"):
        bench.run(b, timed=False)


def test_a_custom_check_and_per_case_params():
    seen = []
    b = _softmax_benchmark(
        check=lambda out, ref: seen.append(out.shape), params=lambda rows, cols: {"area": rows * cols}
    )
    results = bench.run(b, timed=False)
    assert len(seen) == 4 and results[0].params["area"] == 51


def test_progress_wraps_both_phases():
    phases = []
    bench.run(_softmax_benchmark(), progress=lambda it: phases.append(len(it)) or it, timed=False)
    assert phases == [2, 2]


def _fake(provider, case, ms, wall_ms, status="ok", mode="cuda", **params):
    return bench.Result(lesson="04", case=case, ms=ms, wall_ms=wall_ms, flops=2e9, provider=provider, status=status,
                        mode=mode, params=params)  # fmt: skip


RESULTS = [
    _fake("gpulab", "N=128", 0.01, 0.10, N=128),
    _fake("sdpa", "N=128", 0.02, 0.04, N=128),
    _fake("gpulab", "N=1024", 0.5, 0.6, N=1024),
    _fake("sdpa", "N=1024", 1.0, 1.2, N=1024),
    _fake("fa2", "N=1024", None, None, status="unavailable: no flash_attn", N=1024),
]


def test_speedup_per_case_on_a_named_clock():
    assert bench.speedup(RESULTS, "gpulab", over="sdpa", clock="device") == {"N=128": 2.0, "N=1024": 2.0}
    wall = bench.speedup(RESULTS, "gpulab", over="sdpa", clock="wall")
    assert wall["N=128"] == pytest.approx(0.4) and wall["N=1024"] == pytest.approx(2.0)
    assert bench.speedup(RESULTS, "fa2", over="sdpa")["N=1024"] is None


def test_summary_names_the_clock_in_every_row():
    lines = bench.summary(RESULTS, clock="wall", baseline="sdpa", title="attention").splitlines()
    assert lines[0] == "attention"
    assert lines[1].split() == ["case", "provider", "clock", "ms", "TFLOP/s", "GB/s", "x", "vs", "sdpa", "status"]
    assert lines[3].split() == ["N=128", "gpulab", "wall", "0.1", "20", "-", "0.4", "ok"]
    assert lines[7].split()[:4] == ["N=1024", "fa2", "wall", "-"] and "unavailable:" in lines[7]
    interp = bench.summary([_fake("gpulab", "N=1", 1.0, 1.0, mode="interpreter")], clock="device").splitlines()
    assert "device (interpreter)" in interp[2]


def test_plot_draws_one_line_per_available_provider():
    ax = bench.plot(RESULTS, x="N", clock="wall", metric="tflops")
    assert isinstance(ax, matplotlib.axes.Axes)
    assert sorted(line.get_label() for line in ax.get_lines()) == ["gpulab", "sdpa"]
    assert "wall clock" in ax.get_ylabel()


def test_interpreter_summary_counts_checked_and_failed_cases():
    from gpulab.bench import interpreter_summary, record

    ok = record(lesson="00", case="copy", ms=1.0)
    bad = record(lesson="00", case="sweep", ms=1.0)
    bad.params["check"] = "FAILED: mismatch"
    line = interpreter_summary([ok, bad], "a float64 reference")
    assert line.startswith(
        "checked in Triton's CPU interpreter: 1 of 2 cases matched a float64 reference; failed: sweep"
    )
    assert "not a GPU" in line


def test_check_inputs_check_fields_and_provider_params():
    """A reference too big for the timed size runs on smaller check inputs; the check's fields and each provider's
    fields land in its records, with ``params['check']``; dtypes among the x values are stored by name."""
    sizes = []

    def inputs(rows, dtype):
        sizes.append(rows)
        return (torch.randn(rows, 8, dtype=dtype),)

    b = _softmax_benchmark(
        cases=[{"rows": 64, "dtype": torch.float32}],
        inputs=inputs,
        check_inputs=lambda rows, dtype: (torch.randn(2, 8, dtype=dtype),),
        check=lambda out, ref: {"rel_err": float((out - ref).abs().max())},
        reference="torch",
        provider_params={"mine": {"impl": "ours", "mode": "eager"}},
        flops=None,
        bytes=None,
    )
    by = {r.provider: r for r in bench.run(b, timed=False)}
    assert sizes == [64]  # the check used check_inputs; only the record (and timing) phase made the timed inputs
    assert by["mine"].params["check"] == "ok" and by["mine"].params["rel_err"] < 1e-6
    assert by["mine"].params["impl"] == "ours" and "impl" not in by["torch"].params
    assert by["torch"].params["check"] == "reference" and by["mine"].params["dtype"] == "float32"
    assert by["mine"].shape == [64, 8]


def test_on_mismatch_record_times_the_wrong_provider_and_marks_it():
    b = _softmax_benchmark(on_mismatch="record")
    b.providers = {**b.providers, "wrong": lambda x: torch.softmax(x, -1) * 1.5}
    results = bench.run(b)
    wrong = [r for r in results if r.provider == "wrong"]
    assert len(wrong) == 2 and all(r.params["check"].startswith("FAILED: ") and r.ms > 0 for r in wrong)
    assert all(r.params["check"] == "ok" for r in results if r.provider != "wrong")
    line = bench.interpreter_summary(results)
    assert "4 of 6 cases matched" in line and "softmax rows=1 cols=5 (wrong)" in line


def test_graphed_providers_are_unavailable_on_cpu():
    from gpulab import runtime

    if runtime.on_gpu():
        pytest.skip("on a GPU the graphed provider is captured and replayed (tests marked gpu)")
    b = _softmax_benchmark(reference="torch")
    b.providers = {**b.providers, "torch (graph)": bench.graphed(b.providers["torch"])}
    by = {r.provider: r for r in bench.run(b, timed=False)}
    graph = by["torch (graph)"]
    assert graph.status == "unavailable: CUDA graphs need a GPU" and "check" not in graph.params
    line = bench.interpreter_summary(list(by.values()))
    assert "2 of 2 cases matched" in line and "1 not run here (e.g. CUDA graphs need a GPU)" in line


def test_skip_names_why_a_provider_does_not_run_on_a_case():
    calls = []
    b = _softmax_benchmark(
        calls, skip=lambda provider, rows, cols: "too wide" if provider == "mine" and cols > 8 else None
    )
    by = {(r.params["cols"], r.provider): r for r in bench.run(b, timed=False)}
    assert by[17, "mine"].status == "unavailable: too wide" and by[5, "mine"].status == "checked, not timed"
    assert ("mine", (3, 17)) not in calls and ("mine", (1, 5)) in calls
    with pytest.raises(TypeError, match="skip must return"):
        bench.run(_softmax_benchmark(skip=lambda provider, rows, cols: 3), timed=False)


def test_kernels_name_one_kernel_or_pick_one_per_case():
    import triton

    @triton.jit
    def small_kernel(x_ptr):
        pass

    @triton.jit
    def large_kernel(x_ptr):
        pass

    fixed = _softmax_benchmark(kernels={"mine": small_kernel})
    assert fixed.kernel("mine", {"rows": 3, "cols": 17}) is small_kernel  # a kernel is not called as a picker
    assert fixed.kernel("torch", {"rows": 3, "cols": 17}) is None
    picked = _softmax_benchmark(kernels={"mine": lambda rows, cols: large_kernel if cols > 8 else small_kernel})
    assert picked.kernel("mine", {"rows": 3, "cols": 17}) is large_kernel
    assert picked.kernel("mine", {"rows": 1, "cols": 5}) is small_kernel
    assert all(r.status == "ok" for r in bench.run(picked))
