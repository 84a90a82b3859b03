"""Lesson 5's named benchmark parts for the split kernel (gpulab.rnn.fused.measure.split_bench: `bench 07 split|cross`)
at
their CPU size: every provider checked before timing, and records gpulab.rnn.fused.measure.split_report reads back."""

import json

import pytest

from gpulab import bench, lessons
from gpulab.rnn.fused.measure import split_bench as sb
from gpulab.rnn.fused.measure import split_report as sr


def _rows(results, tmp_path, tag):
    """The records as `bench 06 PART` stores them, read back through split_report."""
    path = tmp_path / "07_rnn_split" / "split" / f"nvidia-h100-80gb-hbm3-2026-01-01-{tag}.jsonl"
    bench.save(results, "07", path=path)
    assert sr.split_path("h100", root=tmp_path, record=tag) == path
    return sr.load_split("h100", root=tmp_path, record=tag)


def test_split_part_writes_what_the_split_tables_read(tmp_path):
    results = sb.split()
    *timed, stress = results
    assert all(r.status == "ok" and r.params["check"] == "ok" for r in timed), [r.status for r in timed]
    assert stress.params["kind"] == "stress" and stress.status.startswith("unavailable: the persistent kernel")
    rows = _rows(results, tmp_path, "split")
    assert rows[0]["kind"] == "env" and rows[0]["mode"] == "interpreter"
    time = {(r["case"], r["DH"]) for r in rows if r["kind"] == "time"}
    assert time == {
        (c, 16)
        for c in (
            "fused split (chosen)",
            "alternating",
            "fused split fwd+bwd",
            "alternating fwd+bwd",
            "cuDNN nn.LSTM float32",
            "cuDNN nn.LSTM float32 fwd+bwd",
        )
    }
    chosen = sr.time_row(rows, "fused split (chosen)", 16)
    assert chosen["ms"] > 0 and chosen["wall_ms"] > 0 and {"split", "block_u", "warps", "est_ms"} <= set(chosen)
    assert all(r.get("pass_") == "fwd+bwd" for r in rows if r["kind"] == "time" and "fwd+bwd" in r["case"])
    sweep = [r for r in rows if r["kind"] == "sweep"]
    assert len(sweep) == 2 and all(r["DH"] == 24 and r["no_barrier_ms"] > 0 and r["block_b"] == 16 for r in sweep)
    table = sr.split_table(rows)
    assert "CPU (Triton interpreter)" in table and len(table.splitlines()) == 4  # heading, columns, fwd, fwd+bwd
    assert "block_u" in sr.step_budget(rows, 24)


def test_cross_part_writes_what_the_crossover_table_reads(tmp_path):
    results = sb.cross()
    rows = _rows(results, tmp_path, "cross")
    cross = [r for r in rows if r["kind"] == "cross"]
    assert {(r["case"], r["B"]) for r in cross} == {(c, b) for c in ("split", "one-SM fused", "alternating")
                                                   for b in (1, 3)}  # fmt: skip
    assert all(r["DH"] == 16 and r["T"] == 4 and r["ms"] > 0 and r["check"] == "ok" for r in cross)
    assert sr.crossover_table(rows)


def test_rows_of_keeps_probe_rows_and_flattens_results():
    probe = [{"kind": "env", "device": "x"}, {"kind": "time", "case": "alternating", "DH": 8, "ms": 1.0}]
    assert sr.rows_of(probe) == probe
    r = bench.record(lesson="07", case="c", kind="time", DH=8)
    r.status = "failed: RuntimeError: boom"
    rows = sr.rows_of([json.loads(json.dumps(r.to_dict()))])
    assert rows[1] == {"kind": "time", "DH": 8, "error": "failed: RuntimeError: boom"}
    with pytest.raises(TypeError, match="records must be a list"):
        sr.rows_of("rows")


def test_lesson_5_parts_are_registered():
    assert lessons.benchmark("07", "split") is sb.split and lessons.benchmark("07", "cross") is sb.cross
    assert lessons.part_folder("07", "cross") == "split" == lessons.part_folder("07", "split")


def test_candidates_and_partials_parts_write_what_their_tables_read(tmp_path):
    rows = _rows(sb.candidates(), tmp_path, "candidates")
    cands = [r for r in rows if r["kind"] == "candidate"]
    assert {r["direction"] for r in cands} == {"forward", "backward"}
    for direction in ("forward", "backward"):
        mine = [r for r in cands if r["direction"] == direction]
        assert len(mine) >= 2 and sum(bool(r["chosen"]) for r in mine) == 1 and all(r["ms"] > 0 for r in mine)
        assert all(r["check"] == ("reference" if r["chosen"] else "ok") for r in mine)
    assert "forward" in sr.warps_table(rows) and "backward" in sr.warps_table(rows)

    rows = _rows(sb.partials(), tmp_path, "partials")
    part = [r for r in rows if r["kind"] == "candidate"]
    assert part and all(r["kernel"] == "partials" and r["ms"] > 0 for r in part)
    assert all(r["err_dG"] < 1e-5 and r["err_ds0"] < 1e-5 for r in part if not r["chosen"])
    assert set(sr.training_rows(rows)) == {"gpulab fused", "cuDNN nn.LSTM float32"}
    assert "partials, pick" in sr.backward_table(rows)


def test_versions_part_writes_what_the_versions_table_reads(tmp_path):
    from gpulab.rnn.fused.measure import versions_bench
    from gpulab.rnn.fused.measure import versions_report as vr

    results = versions_bench.versions()
    assert all(r.status == "ok" and r.params["check"] in ("ok", "reference") for r in results)
    by = {(r.params["version"], r.params.get("direction", "forward")): r for r in results}
    assert set(by) == {(v, "forward") for v in ("v1", "v2", "v3", "v4", "v5", "cuDNN")} | {
        (v, "forward+backward") for v in ("b1", "b2", "b3", "cuDNN")
    }
    assert all(r.params["error"] < 1e-5 for (v, _), r in by.items() if v != "cuDNN")
    assert by["v5", "forward"].params["NH"] == 1 and by["v1", "forward"].params["NH"] == 2
    path = tmp_path / "06_fused_rnn" / "versions" / "nvidia-h100-80gb-hbm3-2026-01-01-versions.jsonl"
    bench.save(results, "06", path=path)
    table = vr.versions_table(vr.load_versions("h100", root=tmp_path))
    assert len(table.splitlines()) == 2 + len(results) and "fwd+bwd" in table
