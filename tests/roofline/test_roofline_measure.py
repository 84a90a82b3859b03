"""Lesson 1's measurements (gpulab.roofline.measure) on CPU, labelled as interpreter numbers: the harness checks
every provider before timing any, and the records keep the fields the readers use; the benchmark through the command
line; the package face (light names eager, kernels lazy) and the benchmark registry."""

import dataclasses
import importlib
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gpulab.__main__ as cli
from gpulab import bench, lessons, memory, roofline
from gpulab.bench import report
from gpulab.roofline import measure

# ----------------------------------------------------------------------------------------------------------------
# measuring on CPU (interpreter numbers, labelled as such)


def test_measure_ceilings_on_cpu():
    c = roofline.measure_ceilings()
    assert c.mode == "interpreter" and "interpreter" in c.source and "not hardware ceilings" in c.source
    assert all(c.value(k) and c.value(k) > 0 for k in roofline.MEMORY_LEVELS + roofline.COMPUTE_ROOFS)
    cases = [r.case for r in c.records]
    assert "HBM: copy kernel (gpulab)" in cases and "HBM: torch copy_ (peer)" in cases
    assert any(r.params.get("peer_of") == "bf16" for r in c.records)
    assert {r.params.get("ceiling") for r in c.records} >= set(roofline.MEMORY_LEVELS + roofline.COMPUTE_ROOFS)
    assert all(r.lesson == "01" and r.mode == "interpreter" for r in c.records)
    assert [what for what, *_ in roofline.targets(c)] == [
        "HBM ceiling / HBM: torch copy_ (peer)",
        "bf16 ceiling / torch.matmul bf16 96x80x112 (peer)",  # on a GPU: 8192x8192x8192
    ]
    assert not any("vs_spec" in r.params for r in c.records)  # interpreter numbers are not compared with a spec
    assert "interpreter" in c.summary()


def test_measure_matmul_restores_the_tf32_setting():
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        for setting in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = setting
            (r,) = roofline.measure_matmul("tf32", shapes=[(17, 33, 9)])
            assert torch.backends.cuda.matmul.allow_tf32 is setting
            assert r.params["ceiling"] == "tf32" and r.dtype == "tf32" and r.flops == 2 * 17 * 33 * 9
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    (peer,) = roofline.measure_matmul("fp32", shapes=[(8, 8, 8)])
    assert peer.params == {**peer.params, "peer_of": "fp32"} and "ceiling" not in peer.params
    with pytest.raises(ValueError, match="roof='fp64'"):
        roofline.measure_matmul("fp64")


def test_measure_cache_and_hbm_records():
    (l2,) = roofline.measure_cache("L2", sizes=[16 << 10])
    assert l2.params["ceiling"] == "L2" and l2.params["working_set_bytes"] == 16 << 10 and l2.flops == l2.bytes / 4
    copy, peer = roofline.measure_hbm(n=1000)
    assert copy.bytes == peer.bytes == 8000 and copy.params["ceiling"] == "HBM" and peer.params["peer_of"] == "HBM"
    with pytest.raises(ValueError, match="level='HBM'"):
        roofline.measure_cache("HBM")
    with pytest.raises(ValueError, match="n must be"):
        roofline.measure_hbm(n=0)


# ----------------------------------------------------------------------------------------------------------------
# on the harness: every provider checked before anything is timed; the records keep what the readers use


def _by_name(name):
    return next(b for b in measure.benchmarks() if b.name == name)


def _count_timings(monkeypatch):
    timed = []
    real = report.time_callable
    monkeypatch.setattr(report, "time_callable", lambda fn, **kw: timed.append(fn) or real(fn, **kw))
    return timed


def test_every_ceiling_is_a_harness_benchmark_of_its_providers():
    found = {b.name: list(b.providers) for b in measure.benchmarks()}
    assert all(isinstance(b, bench.Benchmark) for b in measure.benchmarks())
    assert found["HBM"] == ["HBM: copy kernel (gpulab)", "HBM: torch copy_ (peer)"]  # timed in the same case
    assert {"L2: sweep kernel (.cg loads)", "L1: sweep kernel", "FP32 FMA kernel"} <= set(found)
    assert {"torch.matmul bf16", "torch.matmul fp16", "torch.matmul tf32", "torch.matmul fp32"} <= set(found)


@pytest.mark.parametrize(
    ("name", "provider", "wrong"),
    [
        ("HBM", "HBM: copy kernel (gpulab)", lambda src, mine, _: mine.copy_(src.flip(0))),
        ("HBM", "HBM: torch copy_ (peer)", lambda src, _, theirs: theirs),  # never written: the poison shows
        (
            "L1: sweep kernel",
            "L1: sweep kernel",
            lambda x, n, programs, iters, block: memory.working_set_sweep(x, n, programs, iters - 1, block),
        ),
        (
            "FP32 FMA kernel",
            "FP32 FMA kernel",
            lambda x, iters, block, num_warps: roofline.fma_chain(x, iters - 1, block=block, num_warps=num_warps),
        ),
        ("torch.matmul bf16", "torch.matmul bf16", lambda *sets: sets[0][0] @ sets[0][1] * 1.1),
    ],
    ids=["copy kernel", "torch copy_", "sweep, one trip short", "fma, one trip short", "matmul, 10% off"],
)
def test_a_wrong_provider_is_caught_before_anything_is_timed(monkeypatch, name, provider, wrong):
    b = _by_name(name)
    broken = dataclasses.replace(b, providers={**b.providers, provider: wrong})
    timed = _count_timings(monkeypatch)
    with pytest.raises(
        bench.CheckFailed, match=rf"provider {re.escape(repr(provider))} does not match.*nothing was timed"
    ):
        bench.run([b, broken])  # the good benchmark first: still nothing of it is timed
    assert timed == []
    recorded = bench.run(dataclasses.replace(broken, on_mismatch="record"))  # a long run records it instead
    checks = {r.provider: r.params["check"] for r in recorded}
    assert checks.pop(provider).startswith("FAILED") and set(checks.values()) <= {"ok"}


def test_measure_functions_check_with_the_harness_then_time_on_both_clocks(monkeypatch):
    timed = _count_timings(monkeypatch)
    records = roofline.measure_hbm(n=1000) + roofline.measure_fma(configs=[(32, 2, None)])
    assert len(timed) == 3 and [r.params["check"] for r in records] == ["ok"] * 3
    assert all(r.status == "ok" and r.mode == "interpreter" and math.isfinite(r.wall_ms) for r in records)
    assert all({"wall_ms_q25", "wall_ms_q75", "wall_calls"} <= set(r.params) for r in records)
    fma = records[-1]
    assert fma.case == "FP32 FMA kernel, block 32, 2 warps" and fma.provider == "FP32 FMA kernel"
    assert fma.params["block"] == 32 and fma.params["num_warps"] == 2 and fma.params["per_sm"] is None


READ = {"ceiling", "peer_of", "level", "roof", "working_set_bytes"}  # what Ceilings, plot and the tables read
# Only in GPU runs: the best records' annotations; before the harness, the compiled kernel's shared memory and warps
# (no reader uses them; the harness records registers and spills, and the FMA cases carry num_warps as an x value).
STORED_ONLY = {"best", "vs_spec", "vs_peer", "shared_bytes", "num_warps"}


def test_records_keep_the_stored_records_fields_and_names():
    live = roofline.measure_ceilings().records
    assert len(live) == 11 and all(r.status == "ok" and r.params["check"] == "ok" for r in live)
    stored = bench.load("01", path=bench.newest(bench.results_dir() / "01_roofline"))
    for old in stored:  # the same kind of measurement (shapes and launches differ on CPU): same names and fields
        kind = re.split(r" \d+x|, block", old.case)[0]
        new = [r for r in live if r.case.startswith(kind) and ("(peer)" in r.case) == ("(peer)" in old.case)]
        assert new, f"no live record like {old.case!r}"
        for r in new:
            assert set(old.params) - STORED_ONLY <= set(r.params), (old.case, set(old.params) - set(r.params))
            assert all(r.params[k] == old.params[k] for k in READ - {"working_set_bytes"} if k in old.params)
            assert (r.lesson, r.dtype, r.provider is not None) == (old.lesson, old.dtype, True)
    cases = {r.case for r in live}
    assert cases >= {"HBM: copy kernel (gpulab)", "HBM: torch copy_ (peer)", "L1: sweep kernel"}
    assert cases >= {"L2: sweep kernel (.cg loads)", "FP32 FMA kernel, block 64, 4 warps"}


# ----------------------------------------------------------------------------------------------------------------
# the benchmark, through the command line


def test_bench_01_on_cpu(tmp_path, capsys):
    assert cli.main(["bench", "01", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "source: Triton interpreter on CPU" in out and "(interpreter: not a hardware figure)" in out
    folder = tmp_path / "01_roofline"
    (jsonl,) = folder.glob("*.jsonl")
    assert jsonl.name.startswith("cpu-triton-interpreter-") and jsonl.with_suffix(".png").exists()
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert all(r["lesson"] == "01" and math.isfinite(r["ms"]) for r in rows)
    assert roofline.Ceilings.from_results(bench.load("01", path=jsonl)).mode == "interpreter"
    assert roofline.ceilings("h100", root=tmp_path).mode == "spec"  # a CPU run never stands in for a GPU's ceilings


@pytest.mark.gpu
@pytest.mark.parametrize("roof", ["bf16", "fp16", "tf32", "fp32"])
def test_measure_matmul_full_size(roof):
    (r,) = roofline.measure_matmul(roof, shapes=[(4096, 4096, 4096)])
    assert r.mode == "cuda" and r.tflops > 0
    assert torch.backends.cuda.matmul.allow_tf32 is False  # restored


# ----------------------------------------------------------------------------------------------------------------
# the package face: light names load with it, kernels and measurements on first use; the benchmark registry

ROOT = Path(__file__).resolve().parents[2]

_LIGHT_IMPORT = """
import sys
from gpulab import roofline
c = roofline.ceilings("h100")
roofline.intensity_table(roofline.course_operations(), c)  # plot() imports no gpulab module beyond the face's
heavy = ("gpulab.roofline.kernels", "gpulab.roofline.measure", "gpulab.memory.kernels", "gpulab.memory.measure")
loaded = [m for m in heavy if m in sys.modules]
assert not loaded, f"importing the face and drawing the roofline loaded {loaded}"
assert roofline.fma_chain is sys.modules["gpulab.roofline.kernels"].fma_chain
assert "gpulab.roofline.measure" not in sys.modules
print("light")
"""


def test_ceilings_and_plot_do_not_load_the_measurement_kernels():
    proc = subprocess.run([sys.executable, "-c", _LIGHT_IMPORT], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "light", proc.stderr[-2000:]


@pytest.mark.parametrize("package", [roofline, memory], ids=lambda p: p.__name__)
def test_every_public_name_of_the_face_resolves(package):
    assert set(package._LAZY) <= set(package.__all__) and set(package._LAZY) <= set(dir(package))
    for name in package.__all__:
        assert getattr(package, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'fma_chian'"):
        package.fma_chian  # noqa: B018 - a misspelt name is an AttributeError, not a lazy import


@pytest.mark.parametrize(("lesson", "module"), [("00", "gpulab.memory.measure"), ("01", "gpulab.roofline.measure")])
def test_lessons_name_their_benchmark_module(lesson, module):
    assert lessons.benchmark(lesson) is importlib.import_module(module).benchmark
