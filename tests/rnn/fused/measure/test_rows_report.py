"""gpulab.rnn.fused.measure.rows_report: lesson 5's records of 8 rows per program, and the choices they back (CPU
only)."""

import pytest
import torch

from gpulab.rnn.fused import backward, tiling
from gpulab.rnn.fused.measure import rows_report


def test_the_rows_records_back_the_chooser():
    """Where the tile chooser takes 8 rows, the newest rows record has 8 rows ahead of 16 on both clocks, for the
    forward and for forward and backward as a loop calls them; and every problem's check passed."""
    rec = rows_report.load("rows")
    assert all(r.status == "ok" for r in rec)
    problems = {(r.params["B"], r.params["NH"], r.params["DH"]) for r in rec if r.params.get("part")}
    assert (16, 12, 64) in problems
    for B, NH, DH in problems:
        for direction in ("forward", "backward"):
            assert tiling.fused_tiling(B, NH, DH, "lstm", torch.bfloat16, gpu="H100", direction=direction).block_b == 8
        for part in ("forward", "fwd+bwd as called"):
            r8, r16 = (rows_report.pick(rec, part, B, NH, DH, bb) for bb in (8, 16))
            assert r8.ms < r16.ms and r8.wall_ms < r16.wall_ms, (B, NH, DH, part)
    text = rows_report.rows_table(rec)
    assert "B16  12 x 64" in text and "cuDNN fp16 dense 768" in text


def test_the_product_record_backs_per_gate_from_128():
    rec = rows_report.load("product")
    for dh, per_gate_wins in ((64, False), (128, True)):
        a, p = (rows_report.pick(rec, "backward", 16, 768 // dh, dh, 8, prod) for prod in ("all gates", "per gate"))
        assert (p.ms < a.ms) == per_gate_wins
        assert (dh >= backward.PER_GATE_FROM) == per_gate_wins
    assert "per gate" in rows_report.product_table(rec)


def test_sass_and_split_tables():
    sass = rows_report.load("sass")
    by = {(r["kernel"], r["dh"], r["rows"], r.get("product")): r for r in sass}
    assert by["forward saving gates", 64, 8, None]["mufu"] * 2 == by["forward saving gates", 64, 16, None]["mufu"]
    assert by["backward", 128, 8, "per gate"]["hmma_chain"] * 4 == by["backward", 128, 8, "all gates"]["hmma_chain"]
    assert "chain" in rows_report.sass_table(sass)
    assert "split forward" in rows_report.split_table(rows_report.load("rows_split"))


def test_missing_records_name_the_script(tmp_path):
    with pytest.raises(FileNotFoundError, match="bench05_rows.py"):
        rows_report.load("rows", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="sass05_rows.py"):
        rows_report.load("sass", root=tmp_path)
