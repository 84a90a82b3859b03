"""Lesson 0's working-set sweep (gpulab.memory): the schedule and plan on the host, checked by brute force, and the
kernel in Triton's interpreter against its float64 reference. (Bad input: test_memory_bad_input.py.)"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulab import check, memory

# ----------------------------------------------------------------------------------------------------------------
# sweep plan and schedule


def _bytes_by_brute_force(n, block, programs, iters, itemsize):
    """Walk the kernel's loop program by program and add up what each masked load reads."""
    n_chunks = math.ceil(n / block)
    total = 0
    for p in range(programs):
        chunk = p % n_chunks
        for _ in range(iters):
            total += sum(1 for lane in range(block) if chunk * block + lane < n) * itemsize
            chunk = (chunk + programs) % n_chunks
    return total


@pytest.mark.parametrize(
    ("n", "block", "programs", "bytes_to_read", "itemsize"),
    [
        (17, 4, 3, 100, 4),  # 5 chunks, ragged tail of 1
        (1000, 64, 4, 10_000, 4),  # 16 chunks: 4 is bumped to 5
        (4097, 64, 6, 50_000, 2),  # 65 chunks, tail of 1, fp16
        (61, 8, 1, 0, 4),  # one program, nothing asked beyond one pass
        (5, 16, 3, 1000, 4),  # one chunk smaller than a block
    ],
)
def test_sweep_plan(n, block, programs, bytes_to_read, itemsize):
    plan = memory.sweep_plan(n, bytes_to_read, block, programs, itemsize=itemsize)
    p, iters, n_chunks = plan["programs"], plan["iters"], plan["n_chunks"]
    assert n_chunks == math.ceil(n / block)
    # the smallest program count >= the request that is coprime to the chunk count
    assert p >= programs and math.gcd(p, n_chunks) == 1
    assert all(math.gcd(q, n_chunks) != 1 for q in range(programs, p))
    # at least one full pass over the working set, and at least the bytes asked for (counting full chunks)
    assert p * iters >= n_chunks
    assert p * iters * block * itemsize >= bytes_to_read
    if iters > 1:  # and no more steps than needed
        assert p * (iters - 1) < n_chunks or p * (iters - 1) * block * itemsize < bytes_to_read
    assert plan["bytes"] == _bytes_by_brute_force(n, block, p, iters, itemsize)


def test_sweep_plan_bytes_for_an_exact_multiple():
    plan = memory.sweep_plan(4096 * 4, 1 << 20, 4096, 3)
    assert plan["bytes"] == plan["programs"] * plan["iters"] * 4096 * 4


@pytest.mark.parametrize(("n_chunks", "programs"), [(1, 3), (4, 3), (16, 5), (65, 7), (12, 7), (7, 12)])
def test_every_program_visits_every_chunk_when_coprime(n_chunks, programs):
    assert math.gcd(n_chunks, programs) == 1
    sched = memory.chunk_schedule(n_chunks, programs, n_chunks)
    assert sched.shape == (programs, n_chunks)
    for row in sched:
        assert sorted(row.tolist()) == list(range(n_chunks))
    # at each step the grid reads consecutive chunks: the grid as a whole marches through the working set
    assert sched.T.reshape(-1).tolist() == [k % n_chunks for k in range(programs * n_chunks)]


def test_programs_sharing_a_factor_miss_chunks():
    """The structural check above can fail: with P=2 and C=4, program 0 only ever sees chunks 0 and 2."""
    sched = memory.chunk_schedule(4, 2, 4)
    assert sorted(set(sched[0].tolist())) == [0, 2]


# ----------------------------------------------------------------------------------------------------------------
# sweep kernel


@pytest.mark.parametrize(
    ("n", "block", "programs"),
    [
        (1, 4096, 3),
        (17, 4096, 3),
        (4096, 4096, 3),
        (4097, 4096, 3),
        (3 * 4096 + 5, 4096, 3),
        (17, 16, 3),
        (1000, 64, 4),
        (333, 32, 2),
        (129, 128, 1),
    ],
)
def test_working_set_sweep_matches_reference(n, block, programs, guarded_sweep_data):
    x = guarded_sweep_data(n)
    plan = memory.sweep_plan(n, 3 * n * 4, block, programs)
    out = memory.working_set_sweep(x, n, plan["programs"], plan["iters"], block)
    assert out.shape == (plan["programs"],) and out.dtype == torch.float32
    assert not torch.isnan(out).any()  # every program stored its sum
    ref = memory.sweep_reference(x, n, plan["programs"], plan["iters"], block)
    check.assert_close(out, ref, name="partial sums", context=f"n={n}, block={block}, plan={plan}")


def test_sweep_reference_by_hand():
    x = torch.arange(1.0, 11.0)  # chunks of 4: [1..4]=10, [5..8]=26, [9, 10]=19
    ref = memory.sweep_reference(x, 10, programs=2, iters=3, block=4)
    # program 0 reads chunks 0, 2, 1; program 1 reads 1, 0, 2
    assert ref.tolist() == [10 + 19 + 26, 26 + 10 + 19]
    assert ref.dtype == torch.float64
    out = memory.working_set_sweep(x, 10, 2, 3, 4)
    check.assert_close(out, ref)


@settings(deadline=None, max_examples=30, derandomize=True)
@given(
    n=st.integers(1, 5000),
    block=st.sampled_from([1, 4, 16, 64, 4096]),
    programs=st.integers(1, 12),
    bytes_to_read=st.integers(0, 200_000),
)
def test_sweep_plan_properties(n, block, programs, bytes_to_read):
    plan = memory.sweep_plan(n, bytes_to_read, block, programs)
    p, iters, n_chunks = plan["programs"], plan["iters"], plan["n_chunks"]
    assert n_chunks == math.ceil(n / block) and p >= programs and math.gcd(p, n_chunks) == 1
    assert p * iters >= n_chunks  # at least one pass
    # the exact bytes: between every visit reading the ragged tail and every visit reading a full chunk
    assert p * iters * min(n, block) * 4 >= plan["bytes"] >= p * iters * (n - (n_chunks - 1) * block) * 4
    if p * iters == n_chunks:  # exactly one pass reads the working set once
        assert plan["bytes"] == n * 4
    sched = memory.chunk_schedule(n_chunks, p, iters)
    assert sched.shape == (p, iters) and sched.min() >= 0 and sched.max() < n_chunks
