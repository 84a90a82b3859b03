"""gpulab.bench.timing: the device clock (time_callable) and the eager wall clock (wall_time), on CPU."""

import time

import pytest
import torch

from gpulab import bench


def test_time_callable_on_cpu():
    t = bench.time_callable(lambda: time.sleep(0.002), rep_ms=30)
    assert t.reps >= 3
    assert t.q25_ms <= t.median_ms <= t.q75_ms
    assert t.median_ms >= 2.0  # it timed the call
    assert t.median_ms < 200


def test_time_callable_takes_at_least_three_reps_even_with_a_tiny_budget():
    calls = []
    t = bench.time_callable(lambda: calls.append(1), rep_ms=1e-9)
    assert t.reps >= 3
    assert len(calls) == t.reps + 1  # one warm-up call, untimed
    assert t.q25_ms <= t.median_ms <= t.q75_ms


def test_rotate_cycles_through_argument_sets():
    seen = []
    sets = [(0, "a"), (1, "b"), [2, "c"]]
    t = bench.time_callable(lambda i, tag: seen.append((i, tag)), rotate=sets, rep_ms=5)
    assert len(seen) == t.reps + 1 >= 4
    assert seen == [(k % 3, "abc"[k % 3]) for k in range(len(seen))]
    counts = [sum(1 for i, _ in seen if i == k) for k in range(3)]
    assert max(counts) - min(counts) <= 1 and min(counts) >= 1


def test_rotate_wraps_single_arguments():
    x, y = torch.ones(3), torch.zeros(3)
    seen = []
    bench.time_callable(lambda a: seen.append(a), rotate=[x, y], rep_ms=1e-9)
    assert seen[0] is x and seen[1] is y and seen[2] is x


def test_empty_rotate_is_an_error():
    with pytest.raises(ValueError, match="rotate"):
        bench.time_callable(lambda: None, rotate=[])


def test_wall_time_counts_loops_of_back_to_back_calls():
    calls = []
    t = bench.wall_time(lambda: (calls.append(1), time.sleep(0.001)), warmup_ms=0, rep_ms=20, repeats=4)
    assert t.reps == 4 and t.calls >= 1
    assert len(calls) == 1 + t.reps * t.calls  # one warm-up call (warmup_ms=0), then the loops
    assert t.q25_ms <= t.median_ms <= t.q75_ms
    assert 1.0 <= t.median_ms < 100  # per call, not per loop


def test_wall_time_warms_up_for_its_budget_and_rotates():
    seen = []
    t = bench.wall_time(lambda i: seen.append(i), rotate=[0, 1], warmup_ms=2, rep_ms=2, repeats=2, max_calls=3)
    assert t.calls <= 3
    assert seen == [k % 2 for k in range(len(seen))]


def test_wall_time_reports_milliseconds_per_call_not_per_loop():
    t = bench.wall_time(lambda: time.sleep(0.002), warmup_ms=0, rep_ms=30, repeats=3)
    assert t.calls >= 2
    assert 2.0 <= t.median_ms < 2.0 * t.calls  # a loop of several calls divided by their number


def test_capture_is_none_on_cpu():
    assert bench.capture(lambda: None) is None


def test_no_tf32_restores_the_flags():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    with bench.no_tf32():
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before


@pytest.mark.gpu
def test_on_a_gpu_the_wall_clock_counts_the_host_and_measure_fills_both_clocks():
    from gpulab import runtime

    x = torch.ones(16, device=runtime.device)

    def many_tiny_launches():  # host-bound: 20 launches of almost no device work
        for _ in range(20):
            x.add_(0.0)

    device = bench.time_callable(many_tiny_launches, rep_ms=20)
    wall = bench.wall_time(many_tiny_launches, rep_ms=20)
    assert wall.calls > 1 and wall.median_ms > 0
    assert wall.median_ms > device.median_ms  # the device clock leaves the host's launches out
    r = bench.measure(many_tiny_launches, lesson="00", case="tiny", rep_ms=20)
    assert r.wall_ms is not None and r.wall_ms > 0 and not r.interpreter
    assert bench.measure(many_tiny_launches, lesson="00", case="tiny", rep_ms=20, wall_clock=False).wall_ms is None
