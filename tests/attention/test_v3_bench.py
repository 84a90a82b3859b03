"""Lesson 4's version-3 parts (gpulab.attention.measure.v3_bench: `bench 05 v3|v3-check|v3-race|v3-tune`) on CPU:
version 3 needs an sm_90 GPU, so its providers are recorded unavailable, the rest of the bench part runs in the
interpreter, and the check, race and tune wiring is driven by a stand-in for the kernel."""

import pytest
import torch

from gpulab import bench, lessons
from gpulab.attention.measure import report as ar
from gpulab.attention.measure import v3_bench as vb

NEEDS = "unavailable: version 3 (Gluon) needs an sm_90 GPU"


def test_bench_part_records_what_the_report_reads(tmp_path):
    results = vb.bench_v3(problems=[dict(dtype=torch.float16, batch=1, heads=2, seq=21, head_dim=16, causal=True)])
    impls = {ar.V3_TUNED, ar.V3_TRITON_LAUNCH, *ar.V3_STEPS, *ar.V3_PEERS}
    assert {(r.params["impl"], r.params["round"]) for r in results} == {(i, k) for i in impls for k in (0, 1)}
    for r in results:
        p = r.params
        assert r.case == r.provider == p["impl"] and p["kind"] == "throughput" and p["direction"] == "forward"
        assert (p["head_dim"], p["causal"], p["seq"], p["batch"], p["heads"]) == (16, True, 21, 1, 2)
        if p["impl"].startswith("gpulab v3"):
            assert r.status.startswith(NEEDS), r.status
    v2 = [r for r in results if r.params["impl"] == "gpulab v2"]
    assert all(r.status == "ok" and r.params["check"] == "ok" and r.params["rel_err"] <= 1e-2 for r in v2)
    # the report reads the bench file back, never the check/race/tune files beside it (even newer ones)
    bench.save(results, "04", path=tmp_path / "cpu-triton-interpreter-2026-01-01-v3.jsonl")
    other = bench.record(lesson="04", case="v3 check", kind="check")
    for part in ("v3-check", "v3-race", "v3-tune", "v3-headline"):
        assert lessons.part_folder("05", part) == lessons.part_folder("05", "v3") == "v3"
        bench.save([other], "04", path=tmp_path / f"cpu-triton-interpreter-2026-01-02-{part}.jsonl")
    stored = ar.stored_v3(tmp_path)
    assert [(r.case, r.status, r.params["round"]) for r in stored] == [
        (r.case, r.status, r.params["round"]) for r in results
    ]
    (row,) = ar.v3_best(stored).values()
    assert set(row) == {"gpulab v2"} and row["gpulab v2"].ms == min(r.ms for r in v2)


def _exact(q, k, v, causal, cfg=None):
    """A stand-in for version 3: SDPA's fp32 math (O in q's dtype) and the LSE."""
    o, lse = vb._reference(q, k, v, causal)
    return o.to(q.dtype), lse


def test_check_part_records_each_configuration_and_catches_a_wrong_one(monkeypatch):
    shapes = ((1, 2, 5, 7),)
    unavailable = vb.check_v3(shapes=shapes)  # on CPU: every configuration recorded, none run
    assert len(unavailable) == 2 * sum(len(vb.variants(d, c)) for d in (64, 128) for c in (False, True))
    assert all(r.status.startswith(NEEDS) and r.params["kind"] == "check" for r in unavailable)

    monkeypatch.setattr(vb, "_needs_hopper", lambda *a: None)
    monkeypatch.setattr(vb.v3, "attention_forward", _exact)
    ok = vb.check_v3(shapes=shapes)
    assert all(r.status == "checked, not timed" and r.params["check"] == "ok" for r in ok)
    assert all(r.params["rel_err_o"] <= 1e-2 and r.params["rel_err_lse"] <= vb.LSE_TOLERANCE for r in ok)

    def unwritten_row(q, k, v, causal, cfg=None):
        o, lse = _exact(q, k, v, causal)
        o[..., -1, :] = float("nan")  # the last query row never written
        return o, lse

    monkeypatch.setattr(vb.v3, "attention_forward", unwritten_row)
    bad = vb.check_v3(shapes=shapes)
    assert all(r.params["check"].startswith("FAILED: rel_err(O) inf") for r in bad)


def test_race_and_tune_parts_record_differing_runs_and_choose_only_race_free_configs(monkeypatch):
    calls = []

    def racy_at_two_stages(q, k, v, causal, cfg=None):
        calls.append(cfg)
        # the race input (N 2000) only compares runs: a cheap output there; the exact one where it is checked
        o, lse = (q.clone(), q.float().sum(-1)) if q.shape[2] == 2000 else _exact(q, k, v, causal)
        if cfg.stages == 2 and len(calls) % 2:
            o = o.clone()
            o.view(-1)[0] += 1  # every other run differs in one element
        return o, lse

    cfgs = [vb.v3.V3Config(step=3, stages=3), vb.v3.V3Config(step=3, stages=2)]
    assert all(r.status.startswith(NEEDS) for r in vb.race_v3(runs=3, configs={(64, True): cfgs}))
    monkeypatch.setattr(vb, "_needs_hopper", lambda *a: None)
    monkeypatch.setattr(vb.v3, "attention_forward", racy_at_two_stages)
    raced = {r.params["cfg"]["stages"]: r for r in vb.race_v3(runs=4, configs={(64, True): cfgs})}
    assert raced[3].params["check"] == "ok" and raced[3].params["differing"] == 0
    assert raced[2].params["check"].startswith("FAILED: 2/4 runs differ")

    fields = [dict(step=3, stages=3), dict(step=3, stages=2)]
    tuned = vb.tune_v3(candidates={64: fields}, seqs=(32, 64), runs=2, tokens=64, short_n=lambda d, causal: 32)
    kinds = {}
    for r in tuned:
        kinds.setdefault(r.params["kind"], []).append(r)
    assert len(kinds["tune"]) == 2 * 2 * 2  # 2 candidates x 2 lengths x causal and not
    assert all(r.status == "ok" and r.params["check"] == "ok" for r in kinds["tune"] if r.params["stages"] == 3)
    assert {r.params["stages"]: r.params["race_differing"] for r in kinds["tune"]} == {3: 0, 2: None}
    assert [(r.params["causal"], r.params["group"], r.params["seqs"], r.params["chosen"]) for r in kinds["choice"]] == [
        (causal, group, seqs, fields[0])
        for causal in (False, True)
        for group, seqs in (("all", [32, 64]), ("short", [32]), ("long", [64]))
    ]
    with pytest.raises(TypeError, match="candidates"):
        vb.tune_v3(candidates=[dict(step=3, stages=3)])


def test_the_parts_are_lesson_5s():
    parts = (("v3", vb.bench_v3), ("v3-check", vb.check_v3), ("v3-race", vb.race_v3), ("v3-tune", vb.tune_v3),
             ("v3-headline", vb.headline_v3))  # fmt: skip
    for part, fn in parts:
        assert lessons.benchmark("05", part) is fn


def test_tune_ratios_read_the_newest_tune_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="v3-tune"):
        ar.stored_v3_tune(tmp_path)
    x = dict(dtype="bfloat16", head_dim=64, causal=True, seq=1024, kind="tune")
    rows = [("ours", 2.0, "ok", "ok"), ("peer", 3.0, "ok", "ok"), ("ours", 1.0, "ok", "FAILED: rel_err 1"),
            ("other", 9.0, "ok", "ok")]  # fmt: skip
    recs = [bench.Result(lesson="04", case=p, provider=p, ms=ms, status=st, dtype="bfloat16", params={**x, "check": c})
            for p, ms, st, c in rows]  # fmt: skip
    bench.save(recs[:3], "04", path=tmp_path / "gpu-2026-01-01-a-tune.jsonl")
    bench.save(recs[1:], "04", path=tmp_path / "gpu-2026-01-01-b-tune.jsonl")
    newest = ar.stored_v3_tune(tmp_path)
    assert {r.provider for r in newest} == {"peer", "ours", "other"}
    assert ar.v3_tune_ratios(newest, "ours", "peer") == {}  # run b's "ours" failed its check
    assert ar.v3_tune_ratios(ar.bench.load("04", path=tmp_path / "gpu-2026-01-01-a-tune.jsonl"), "ours", "peer") == {
        ("bfloat16", 64, True, 1024): 1.5
    }


def test_stored_v3_run_names_the_newest_bench_run_not_its_parts(tmp_path):
    with pytest.raises(FileNotFoundError, match="bench 05 v3"):
        ar.stored_v3_run(tmp_path)
    rec = bench.Result(lesson="04", case="c", provider="c", ms=1.0, status="ok", dtype="bfloat16", params={})
    bench.save([rec], "04", path=tmp_path / "gpu-2026-01-01.jsonl")
    assert ar.stored_v3_run(tmp_path) == ""
    parts = ("c-tune", "d-race", "e-headline", "f-spills-ab", "g-spills-check")
    for name in ("gpu-2026-01-01-b.jsonl", *(f"gpu-2026-01-01-{p}.jsonl" for p in parts)):
        bench.save([rec], "04", path=tmp_path / name)
    assert ar.stored_v3_run(tmp_path) == "b"  # the -tune and -race files are parts, not bench runs


def test_headline_part_alternates_rounds_and_the_report_takes_each_ones_median(tmp_path):
    problem = dict(dtype=torch.float16, batch=1, heads=2, seq=19, head_dim=16, causal=False)
    results = vb.headline_v3(problems=[problem], rounds=3)
    n = len(vb.HEADLINE_IMPLS)  # round 0 of every implementation, then round 1, ...: alternating
    assert [r.params["round"] for r in results] == [k for k in range(3) for _ in range(n)]
    assert all({r.params["impl"] for r in results[k * n : k * n + n]} == set(vb.HEADLINE_IMPLS) for k in range(3))
    assert all(r.params["kind"] == "headline" for r in results)
    v2 = [r for r in results if r.params["impl"] == "gpulab v2"]
    assert all(r.status == "ok" and r.params["check"] == "ok" for r in v2)
    bench.save(results, "04", path=tmp_path / "cpu-2026-01-01-a-headline.jsonl")
    with pytest.raises(FileNotFoundError, match="v3-headline"):
        ar.stored_v3_headline(tmp_path / "none")
    head = ar.v3_headline(ar.stored_v3_headline(tmp_path))
    assert set(head) == {"gpulab v2"}  # the others need a GPU (recorded unavailable)
    times = sorted(r.ms for r in v2)
    assert head["gpulab v2"]["ms"] == times[1] and head["gpulab v2"]["rounds"] == 3
    assert head["gpulab v2"]["tflops"] == pytest.approx(v2[0].flops / times[1] / 1e9)
    assert head["gpulab v2"]["tflops_rounds"] == [r.tflops for r in v2]
    # a headline file is a part of its run, not a bench run of its own
    with pytest.raises(FileNotFoundError, match="bench 05 v3"):
        ar.stored_v3(tmp_path)
    at = dict(kind="headline", impl="c", round=0, head_dim=64, causal=True, seq=8)
    other = [bench.Result(lesson="04", case="c", provider="c", ms=1.0, status="ok", dtype="bfloat16", params=at)]
    with pytest.raises(ValueError, match="one problem"):
        ar.v3_headline(results + other)


def test_headline_gpu_state_reads_the_busy_samples_of_the_smi_trace(tmp_path):
    with pytest.raises(FileNotFoundError, match="headline-smi"):
        ar.headline_gpu_state(tmp_path)
    head = "timestamp, clocks.current.sm [MHz], clocks.max.sm [MHz], temperature.gpu, power.draw [W], reasons\n"
    rows = ["t, 345 MHz, 1980 MHz, 34, 71.1 W, 0x0000000000000001",  # idle: not counted
            "t, 1500 MHz, 1980 MHz, 55, 699.0 W, 0x0000000000000004",
            "t, 1800 MHz, 1980 MHz, 57, 690.0 W, 0x0000000000000004",
            "t, 1980 MHz, 1980 MHz, 50, 450.0 W, 0x0000000000000000"]  # fmt: skip
    (tmp_path / "gpu-2026-01-01-a-headline-smi.csv").write_text(head + "\n".join(rows) + "\n")
    (tmp_path / "gpu-2026-01-01-b-headline-smi.csv").write_text(head + "\n".join(rows[:3]) + "\n")
    state = ar.headline_gpu_state(tmp_path)  # run b, the newer
    assert state == dict(samples=2, power_capped=1.0, clock_min=1500.0, clock_max=1800.0, watts_max=699.0,
                         temp_max=57.0)  # fmt: skip
    assert ar.headline_gpu_state(tmp_path, busy_watts=100.0)["samples"] == 2
    with pytest.raises(ValueError, match="no sample above"):
        ar.headline_gpu_state(tmp_path, busy_watts=800.0)
    with pytest.raises(ValueError, match="busy_watts"):
        ar.headline_gpu_state(tmp_path, busy_watts=0.0)
