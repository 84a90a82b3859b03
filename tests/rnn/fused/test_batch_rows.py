"""A batch too large for one launch of the fused backend runs in launches of fewer rows; a head too large for the
GPU at any batch runs on the alternating backend with a warning. Against the float64 vanilla backend, forward and
every gradient (conftest's run_case), on CPU through the interpreter: the chooser is narrowed to make the sizes
small (the real limits bite at sizes the interpreter cannot run)."""

import pytest
import torch

from gpulab import gluon_compat
from gpulab.rnn.fused import plan


@pytest.fixture
def narrowed(monkeypatch):
    """plan.choose refusing more than ``limit[0]`` rows (``limit[0] = 0``: refusing every batch)."""
    limit, real = [3], plan.choose

    def choose(batch, *args, **kwargs):
        if batch > limit[0]:
            raise ValueError(f"batch {batch} > {limit[0]} (narrowed for the test)")
        return real(batch, *args, **kwargs)

    plan.clear_cache()
    monkeypatch.setattr(plan, "choose", choose)
    yield limit
    plan.clear_cache()


@pytest.mark.parametrize("B, limit, rows", [(7, 3, 3), (4, 3, 2), (3, 3, 3), (17, 5, 5), (9, 8, 5), (1, 1, 1)])
def test_batch_rows_spreads_the_batch_over_the_fewest_launches(narrowed, B, limit, rows):
    narrowed[0] = limit
    assert plan.batch_rows(B, 2, 8, "lstm", torch.float32, True) == rows


def test_batch_rows_is_none_where_not_one_row_fits(narrowed):
    narrowed[0] = 0
    assert plan.batch_rows(5, 1, 8, "lstm", torch.float32, False) is None


def test_batch_rows_takes_the_whole_batch_where_it_fits():
    assert plan.batch_rows(5, 2, 16, "lstm", torch.float32, True) == 5


@pytest.mark.parametrize("function", ["lstm", "gru"])
def test_a_batch_over_the_limit_runs_in_launches_of_fewer_rows(narrowed, run_case, function):
    narrowed[0] = 3
    run_case("fused", function, 7, 3, 2, 8, seed=4)  # launches of 3, 3 and 1 rows


def test_a_head_too_large_at_any_batch_runs_alternating_with_one_warning(narrowed, run_case):
    narrowed[0] = 0
    gluon_compat._WARNED.discard(("rnn fused", 2, 8, "lstm", torch.float32, True))
    with pytest.warns(RuntimeWarning, match="backend='fused' cannot run 2 head\\(s\\) of 8.*alternating"):
        run_case("fused", "lstm", 3, 2, 2, 8, seed=5)
