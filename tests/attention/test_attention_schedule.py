"""Lesson 4: the forward kernel's block schedule (gpulab.attention.schedule) against the masks it stands for."""

import pytest

from gpulab import attention as A
from gpulab.attention import schedule


@pytest.mark.parametrize(
    "nq, nk, bm, bn, causal",
    [(100, 100, 32, 16, True), (17, 50, 16, 16, True), (33, 70, 16, 32, False), (64, 17, 16, 16, True)],
)
def test_block_schedule_is_exact(nq, nk, bm, bn, causal):
    sched = A.block_schedule(nq, nk, bm, bn, causal)
    assert len(sched) == -(-nq // bm) and all(len(row) == -(-nk // bn) for row in sched)
    for qi, row in enumerate(sched):
        for ki, kind in enumerate(row):
            pairs = [(i, j) for i in range(qi * bm, (qi + 1) * bm) for j in range(ki * bn, (ki + 1) * bn)]
            seen = [i < nq and j < nk and (not causal or j <= i) for i, j in pairs]
            if kind == schedule.FULL:  # no mask applied: every pair must be a real, visible one
                assert all(j < nk and (not causal or j <= i) for i, j in pairs if i < nq), (qi, ki)
            elif kind == schedule.SKIPPED:  # never loaded: nothing in it may be visible
                assert not any(seen), (qi, ki)
            else:
                assert kind == schedule.MASKED
