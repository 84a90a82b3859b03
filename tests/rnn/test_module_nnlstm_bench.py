"""``bench 06 lstm-grid`` on CPU: registered, one case checked and timed end to end, the time budget honoured."""

import pytest
import torch

from gpulab import lessons, runtime
from gpulab.rnn.fused.measure import lstm_grid as measure_grid


def test_lstm_grid_is_lesson_5s_part_and_honours_its_budget():
    assert lessons.benchmark("06", "lstm-grid") is measure_grid.lstm_grid
    out = measure_grid.lstm_grid(budget_s=1e-9)  # nothing begins: every case says so
    kinds = {r.params["kind"] for r in out}
    assert kinds == {"grid", "bidirectional", "packed", "tiny", "compile"}
    assert all(r.status == "skipped: time budget" for r in out)


@pytest.mark.skipif(runtime.on_gpu(), reason="the tiny CPU case; on a GPU run `python -m gpulab bench 06 lstm-grid`")
def test_one_case_is_checked_then_timed_on_both_clocks():
    out = measure_grid._pair("grid", "grid tiny", 1, 2, 3, 16, 1, False, True, (torch.float16,))
    (r,) = out
    assert r.params["check"] == "ok" and r.provider == "gpulab fp16" and r.status == "ok"
    assert r.ms > 0 and r.wall_ms > 0 and r.flops > 0 and r.shape == [1, 2, 16]


def test_lstm_tiles_is_lesson_6s_part_checks_each_path_and_honours_its_budget():
    """``bench 06 lstm-tiles``: registered; on CPU its tiny case checks and times the shipped path and the 'gluon
    tiles' experiment (no Gluon here: the shipped loops), both clocks; nothing begins past the budget."""
    from gpulab.rnn.fused.measure import lstm_tiles

    assert lessons.benchmark("06", "lstm-tiles") is lstm_tiles.lstm_tiles
    out = lstm_tiles.lstm_tiles(budget_s=1e-9)
    assert [r.status for r in out] == ["skipped: time budget"] * len(out) and len(out) >= 1
    if runtime.on_gpu():
        return
    out = lstm_tiles.lstm_tiles()
    assert [r.provider for r in out] == ["gpulab fp16 shipped", "gpulab fp16 tiles"]
    for r in out:
        assert r.params["check"] == "ok" and r.status == "ok" and r.params["path"] == "shipped"
        assert r.ms > 0 and r.wall_ms > 0 and r.flops > 0


def test_lstm_large_is_lesson_6s_part_of_the_grids_large_points():
    """``bench 06 lstm-large``: registered; the grid's points of one head of 1536 and B256 at 768 and 1024 only (10
    pairs); nothing begins past the budget; on CPU its tiny grid checks and times gpulab."""
    from gpulab.rnn.fused.measure import lstm_grid

    assert lessons.benchmark("06", "lstm-large") is lstm_grid.lstm_large
    assert len(lstm_grid.LARGE) == 10 and {H for H, _, _ in lstm_grid.LARGE} == {768, 1024, 1536}
    out = lstm_grid.lstm_large(quick=False, budget_s=1e-9)
    assert [r.status for r in out] == ["skipped: time budget"] * 10
    assert {r.case for r in out} == {f"grid H{H} L{L} B{B}" for H, B, L in lstm_grid.LARGE}
    if runtime.on_gpu():
        return
    out = lstm_grid.lstm_large()
    assert [r.params["kind"] for r in out] == ["grid", "grid"] and all(r.params["check"] == "ok" for r in out)
