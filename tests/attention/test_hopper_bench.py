"""Lesson 4's named benchmark parts (gpulab.attention.measure.hopper_bench: `bench 05 hopper|cs336|fused`) at their CPU
size: each runs, checks every provider before timing, and writes records gpulab.attention.measure.report reads back."""

import dataclasses

import pytest
import torch

from gpulab import bench
from gpulab.attention.configs import PREFERRED_V2, HopperConfig
from gpulab.attention.measure import hopper_bench as hb
from gpulab.attention.measure import report as ar


def _by_kind(results):
    out = {}
    for r in results:
        out.setdefault(r.params.get("kind"), []).append(r)
    return out


def test_hopper_part_records_what_the_report_reads(tmp_path):
    before = dict(PREFERRED_V2)
    results = hb.hopper(problems=[dict(dtype=torch.float16, batch=1, heads=2, seq=21, head_dim=16, causal=True)])
    assert PREFERRED_V2 == before  # the sweep's choice is used for the grid only
    kinds = _by_kind(results)
    assert set(kinds) == {"sweep", "choice", "throughput", "tiny"}
    ran = [r for r in kinds["sweep"] if r.status == "ok"]
    assert ran and all(r.params["check"] == "ok" and r.params["rel_err"] < hb.SWEEP_TOLERANCE for r in ran)
    assert all(set(r.params["config"]) >= {"block_m", "block_n", "warp_specialize"} for r in kinds["sweep"])
    assert {(r.params["head_dim"], r.params["causal"]) for r in kinds["choice"]} == {(16, False), (16, True)}
    assert all(HopperConfig(**r.params["chosen"]) for r in kinds["choice"])
    thr = {(r.params["impl"], r.params["direction"]): r for r in kinds["throughput"]}
    assert set(thr) == {(i, d) for i in ar.IMPLS for d in ("forward", "forward+backward")} | {
        (ar.SHIPPED, "forward+backward")
    }
    for (impl, direction), r in thr.items():
        if r.status == "ok":
            assert r.params["check"] == "ok" and r.params["rel_err"] <= 1e-2 and r.wall_ms > 0, (impl, direction)
            assert {"seq", "head_dim", "causal", "batch", "heads"} <= set(r.params) and r.dtype == "float16"
    assert thr["SDPA FlashAttention-2", "forward"].status.startswith("unavailable")
    chosen = {r.params["causal"]: r.params["chosen"] for r in kinds["choice"]}
    assert thr["gpulab v2", "forward"].params["config"] == chosen[True]  # the grid ran the sweep's choice
    assert thr[ar.SHIPPED, "forward+backward"].params["backward"] == "two kernels"
    assert thr["gpulab v1", "forward+backward"].params["backward"] == "two kernels"
    assert {r.params["seq"] for r in kinds["tiny"]} == {16, 32}
    path = bench.save(results, "04", path=tmp_path / "cpu-triton-interpreter-2026-01-01.jsonl")
    stored = ar.stored(tmp_path)
    key = lambda r: (r.case, r.provider, r.status, r.params.get("kind"), r.params.get("check"))  # noqa: E731
    assert [key(r) for r in stored] == [key(r) for r in results]
    assert all(r.params["source"] == path.name for r in ar.stored_sweep(tmp_path))
    assert isinstance(ar.sweep_summary(ar.stored_sweep(tmp_path)), list)


def test_cs336_and_fused_parts_record_what_the_report_reads(tmp_path):
    cs = hb.cs336()
    assert {r.params["impl"] for r in cs} == {*ar.IMPLS, ar.SHIPPED}
    ran = [r for r in cs if r.status == "ok"]
    assert len(ran) == 4 and all(r.params["do_bench_ms"] > 0 and r.params["check"] == "ok" for r in ran)
    lines = ar.cs336_lines(ran)
    assert len(lines) == 5 and lines[-1].startswith("target:") and ar.SHIPPED in lines[-1]

    fused = hb.fused()
    kinds = _by_kind(fused)
    assert set(kinds) == {"two kernels", "fused sweep", "fused choice"}
    assert all(r.params["check"] == "ok" and r.params["vs_two_kernels"] > 0 for r in kinds["fused sweep"])
    (choice,) = kinds["fused choice"]
    assert choice.params["head_dim"] == 16 and tuple(choice.params["chosen"]) in {(16, 16, 4, 1), (32, 16, 4, 1)}
    bench.save(fused, "04", path=tmp_path / "fused" / "cpu-triton-interpreter-2026-01-01.jsonl")
    (line,) = ar.fused_summary(ar.stored_fused(tmp_path))
    assert line.startswith(f"d16, tiles (block_m, block_n, warps, stages) = {tuple(choice.params['chosen'])}")


def test_a_sweep_config_that_is_wrong_is_recorded_and_never_chosen(monkeypatch):
    good, wrong = HopperConfig(16, 16, 4, 2), HopperConfig(32, 16, 4, 2)
    real = hb._v2_config
    monkeypatch.setattr(hb, "_v2_config", lambda cfg: real(cfg) if cfg == good else (lambda q, k, v, c: q * 0))
    results = hb.sweep(shapes=((16, 2),), seqs=(16,), candidates=[good, wrong])
    kinds = _by_kind(results)
    assert len(kinds["sweep"]) == 4
    for r in kinds["sweep"]:
        ok = r.params["config"] == dataclasses.asdict(good)
        assert r.params["check"] == "ok" if ok else r.params["check"].startswith("FAILED: relative error"), r
    assert [r.params["chosen"] for r in kinds["choice"]] == [dataclasses.asdict(good)] * 2
    with pytest.raises(TypeError, match="run_sweep"):
        hb.hopper(run_sweep="no")
