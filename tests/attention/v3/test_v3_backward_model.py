"""Version 3's backward on the CPU: the kernel's block order and accumulation points (the model) against float64
autograd, and the numbers of dQ additions each step makes."""

import pytest
import torch

from gpulab import check
from gpulab.attention.measure import v3_backward_model as bm

CASES = [(200, 300, 64), (333, 129, 128), (129, 517, 64), (70, 70, 64), (300, 517, 64)]
IDS = ["nq<nk", "nq>nk", "ragged", "one-block", "keys-nobody-sees"]


def _inputs(n_q, n_k, d, causal, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed + n_q * 7 + n_k)
    q, do = (torch.randn(n_q, d, dtype=torch.float64, generator=gen) for _ in "qd")
    k, v = (torch.randn(n_k, d, dtype=torch.float64, generator=gen) for _ in "kv")
    q, k, v, do = (t.to(dtype).double() for t in (q, k, v, do))  # values representable in dtype
    o, lse, *grads = bm.reference_backward(q, k, v, do, causal)
    return q, k, v, o, do, lse, grads


@pytest.mark.parametrize("step", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n_q, n_k, d", CASES, ids=IDS)
def test_model_in_float64_is_the_gradient(n_q, n_k, d, causal, step):
    """Without roundings, the kernel's decomposition (bounds, masks, skipped blocks, zero rows) is exact."""
    q, k, v, o, do, lse, ref = _inputs(n_q, n_k, d, causal)
    got = bm.model_backward(q, k, v, o, do, lse, causal, step=step, acc_dtype=torch.float64)[:3]
    for g, r in zip(got, ref):
        assert torch.isfinite(g).all()
        assert check.relative_error(g, r) < 1e-12


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_model_with_the_kernels_roundings_is_within_tolerance(dtype):
    q, k, v, o, do, lse, ref = _inputs(257, 300, 64, True, dtype)
    got = bm.model_backward(q, k, v, o, do, lse, True, step=3, round_to=dtype)[:3]
    for g, r in zip(got, ref):
        assert 0 < check.relative_error(g, r) < check.tolerance(dtype)


def test_model_catches_a_wrong_causal_start():
    """The check can fail: starting each program's query loop one block late drops the diagonal's gradients."""
    q, k, v, o, do, lse, ref = _inputs(300, 300, 64, True)
    orig = bm.key_programs

    def late(*a, **kw):
        return [{**p, "lo": p["lo"] + 64, "n_m": p["n_m"] - 1} for p in orig(*a, **kw)]

    bm.key_programs = late
    try:
        bad = bm.model_backward(q, k, v, o, do, lse, True, step=3, acc_dtype=torch.float64)[1]
    finally:
        bm.key_programs = orig
    assert check.relative_error(bad, ref[1]) > 1e-2


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_dq_additions_per_step(causal):
    """Steps 1-2 add dS K once per 64 keys, steps 3-6 once per 128 (dS shared, or the writer summing both
    consumers' products): half the atomics.
    Causal: query row i is added to by the programs whose keys start at or before it."""
    n_q = n_k = 520
    q, k, v, o, do, lse, _ = _inputs(n_q, n_k, 64, causal)
    counts = {s: bm.model_backward(q, k, v, o, do, lse, causal, step=s)[3] for s in (1, 3, 6)}
    assert torch.equal(counts[6], counts[3])
    rows = torch.arange(n_q)
    if causal:
        assert torch.equal(counts[1], rows // 64 + 1)
        assert torch.equal(counts[3], rows // 128 + 1)
    else:
        assert torch.equal(counts[1], torch.full((n_q,), -(-n_k // 64)))
        assert torch.equal(counts[3], torch.full((n_q,), -(-n_k // 128)))


def test_programs():
    progs = bm.key_programs(300, 517, True, step=3)
    assert [p["start_n"] for p in progs] == [0, 128, 256, 384, 512]
    assert [p["n_m"] for p in progs][:3] == [5, 3, 1]
    assert all(p["n_m"] <= 0 for p in progs[3:])  # keys past the last query: no block (dK = dV = 0)
    with pytest.raises(ValueError, match="step"):
        bm.key_programs(10, 10, False, step=8)
    with pytest.raises(ValueError, match=r"\[N, d\]"):
        bm.model_backward(*(torch.zeros(1, 4, 8),) * 5, torch.zeros(4))


@pytest.mark.parametrize("n_q, n_k, n_bh, programs", [(1024, 1024, 256, 132), (300, 517, 3, 4), (1000, 1000, 5, 7),
                                                      (129, 64, 2, 132)])  # fmt: skip
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_persistent_tiles_cover_every_key_block_once(n_q, n_k, n_bh, programs, causal):
    """Step 7: the programs' tiles are every (head, key block) of steps 2-6 exactly once, with the same query blocks;
    the only other tiles are causal's blocks past the last (odd key-block counts), which visit no query block."""
    want = {(bh, p["start_n"]): (p["lo"], p["n_m"]) for bh in range(n_bh) for p in bm.key_programs(n_q, n_k, causal)}
    seen: dict = {}
    for tiles in bm.persistent_tiles(n_q, n_k, n_bh, causal, programs):
        for t in tiles:
            if t["start_n"] >= n_k:
                assert causal and t["n_m"] == 0, t
                continue
            key = (t["bh"], t["start_n"])
            assert key not in seen, f"{key} taken twice"
            seen[key] = (t["lo"], t["n_m"])
    assert seen == want


def test_persistent_causal_pairs_balance_the_programs():
    """Causal N = 1024 (256 heads, 132 programs): by query blocks, the busiest program has at most 10% more than the
    mean with the pairs; plain round-robin over (head, key block) would give one program about 1.4x the mean."""
    n, n_bh, programs = 1024, 256, 132
    work = [sum(max(t["n_m"], 0) for t in tiles) for tiles in bm.persistent_tiles(n, n, n_bh, True, programs)]
    mean = sum(work) / programs
    assert max(work) <= 1.1 * mean, (max(work), mean)
    blocks = [p["n_m"] for p in bm.key_programs(n, n, True)] * n_bh  # tile t: head t // 8, key block t % 8
    plain = [sum(blocks[pid::programs]) for pid in range(programs)]
    assert max(plain) > 1.3 * mean, (max(plain), mean)


@pytest.mark.parametrize("n_q, n_k", [(520, 520), (300, 517), (517, 300), (129, 64), (1000, 17)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_step8_counts_and_last_arrival(n_q, n_k, causal):
    """Step 8: the kernel's expected arrivals per query block are the programs the model adds with (one per 128
    keys); over random interleavings each block is cast once, from every program's addition (the output is
    scale * sum of t + 1 over the programs visiting it), and the buffer and counters are left zeroed, so a second
    call on the same buffers gives the same."""
    n_qb = -(-n_q // 64)
    q, k, v, o, do, lse, _ = _inputs(n_q, n_k, 64, causal)
    rows_added = bm.model_backward(q, k, v, o, do, lse, causal, step=5)[3]
    assert bm.dq_arrivals(n_q, n_k, causal) == [int(rows_added[64 * qb]) for qb in range(n_qb)]
    progs = [p for p in bm.key_programs(n_q, n_k, causal, step=5) if p["n_m"] > 0]
    want = torch.zeros(n_q, dtype=torch.float64)
    for t, p in enumerate(progs):
        want[p["lo"] :] += t + 1
    gen = torch.Generator().manual_seed(n_q + n_k)
    buf, cnt = None, None
    for _ in range(3):  # the same buffers again: what one call leaves is the next call's start
        out, buf, cnt, casts = bm.replay_dq_cast(n_q, n_k, causal, 0.125, gen, buf, cnt)
        assert torch.equal(casts, torch.ones(n_qb, dtype=torch.int64))
        assert torch.equal(out, 0.125 * want)
        assert not buf.any() and not cnt.any()
