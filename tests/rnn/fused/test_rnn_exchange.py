"""The split forward's tagged exchange (h stored with its step's tag; the load is the barrier) and the clock stamps'
arithmetic. On CPU the kernel runs one launch per step in the interpreter, where a stale word is never waited for:
a reader that finds one uses it (and the result is wrong), so these tests see a tag that does not line up."""

import dataclasses
import math

import pytest
import torch

from gpulab import check, rnn, runtime
from gpulab.rnn.fused import clocks, exchange, split, split_backward, split_tiling
from gpulab.rnn.fused.measure import split_report

import triton  # isort: skip  (after gpulab: it decides whether Triton interprets)
import triton.language as tl  # isort: skip


def _tiling(B, NH, DH, block_u=16):
    cfg = dataclasses.replace(split_tiling.split_tiling(B, NH, DH, "lstm", torch.float32, gpu="H100"), block_b=16)
    split_ = math.ceil(DH / block_u)
    return dataclasses.replace(cfg, block_u=block_u, split=split_, programs=split_ * NH * math.ceil(B / 16))


@pytest.mark.parametrize(
    "function,how,B,NH",
    [
        ("lstm", "tagged", 17, 2),
        ("elman", "tagged", 3, 1),
        ("lstm", "flags", 17, 2),
        ("lstm", "hinted", 17, 2),
        ("elman", "hinted", 3, 1),
    ],
)
def test_exchanges_match_float64_and_the_barrier_kernel(function, how, B, NH, make_inputs):
    """Three programs per head (with two heads and two batch tiles: each group's own words or flags): every state of
    every step against float64, and equal bit for bit to the barrier kernel (the same math; only the exchange
    differs). Run twice: the second call's tags continue the first's."""
    inputs = make_inputs(function, B, 2, NH, 40, dtype=torch.float16, device=runtime.device, seed=7)
    cfg = _tiling(B, NH, 40)
    ref = rnn.flashrnn(*(t.double() for t in inputs), function=function, backend="vanilla")
    base, _, _ = split.split_rnn_forward(*inputs, function=function, save_gates=False, tiling=cfg, exchange="barrier")
    for _ in range(2):
        out, last, _ = split.split_rnn_forward(*inputs, function=function, save_gates=False, tiling=cfg,
                                               exchange=how)  # fmt: skip
        check.assert_close(out, ref[0], dtype=torch.float16, name="states_all")
        check.assert_close(last, ref[1], dtype=torch.float16, name="states_last")
        assert torch.equal(out, base)


def test_hinted_tags_of_a_sequence_end_above_every_tag_it_stored(make_inputs):
    """The hinted words of step t carry tag0 + t + 2 (h_{-1}'s, in a persistent launch, tag0 + 1), so a sequence of T
    steps stores tags up to tag0 + T + 1: the sequence number must move by T + 1, whether one launch ran the steps or
    T launches of one step each (the interpreter's mode). One short, the next launch's h_{-1} tag equals the last h's
    (a persistent launch after one-step launches read stale words on the H100)."""
    B, T, DH = 3, 5, 40
    inputs = make_inputs("lstm", B, T, 1, DH, dtype=torch.float16, device=runtime.device, seed=3)
    cfg = _tiling(B, 1, DH)
    seq, _ = exchange.tagged_state(torch.device(runtime.device), cfg.programs, B * DH, "hinted")
    for _ in range(2):
        before = int(seq[0])
        split.split_rnn_forward(*inputs, function="lstm", save_gates=False, tiling=cfg, exchange="hinted")
        assert int(seq[0]) - before == T + 1


def test_measured_exchanges_are_the_records_faster_ones():
    """Every :data:`split_tiling.MEASURED_EXCHANGE` entry beats the counter barrier in lesson 5's newest H100 records
    on both clocks: the exchange sweep (``*-hinted.jsonl``: that exchange at that tiling against every barrier
    tiling) and the forward as called (``*-steps.jsonl``, kind 'time'); the chooser takes it where it applies
    (Hopper, B <= 16, one head, 16-bit) with the entry's tiling, and the barrier elsewhere."""
    assert split_tiling.MEASURED_EXCHANGE, "no measured exchange: this test then holds nothing"
    sweep = [r for r in split_report.load_split("h100", record="hinted") if r.get("kind") == "hinted" and "ms" in r]
    steps = [r for r in split_report.load_split("h100", record="steps") if r.get("kind") == "time" and "ms" in r]
    for (direction, function, dh), (how, block_u, warps) in split_tiling.MEASURED_EXCHANGE.items():
        assert direction == "forward" and function == "lstm"  # what the records time
        at = [r for r in sweep if r.get("DH") == dh and r.get("direction", "forward") == direction]
        mine = [r for r in at if (r.get("exchange"), r.get("block_u"), r.get("warps")) == (how, block_u, warps)]
        barrier = [r for r in at if r.get("exchange") == "barrier"]
        assert len(mine) == 1 and barrier, (mine, barrier)
        for b in barrier:
            assert mine[0]["ms"] < b["ms"] and mine[0]["wall_ms"] < b["wall_ms"], (mine[0], b)
        called = {r["exchange"]: r for r in steps if r.get("DH") == dh and not r.get("training") and "exchange" in r}
        assert called[how]["ms"] < called["barrier"]["ms"] and called[how]["wall_ms"] < called["barrier"]["wall_ms"]
        chosen = split_tiling.split_tiling(16, 1, dh, function, torch.bfloat16, gpu="H100", direction=direction)
        assert (chosen.exchange, chosen.block_u, chosen.num_warps, chosen.block_b) == (how, block_u, warps, 16)
        for other in (
            split_tiling.split_tiling(32, 1, dh, function, torch.bfloat16, gpu="H100", direction=direction),
            split_tiling.split_tiling(16, 2, dh, function, torch.bfloat16, gpu="H100", direction=direction),
            split_tiling.split_tiling(16, 1, dh, function, torch.float32, gpu="H100", direction=direction),
            split_tiling.split_tiling(16, 1, dh, function, torch.bfloat16, gpu="H100", direction="backward"),
        ):
            assert other.exchange == "barrier", other


def test_tagged_exchange_refuses_what_it_cannot_carry(make_inputs):
    inputs = make_inputs("lstm", 2, 1, 1, 40, device=runtime.device)  # float32: one value per 32 bits
    with pytest.raises(ValueError, match="exchange='barrier'"):
        split.split_rnn_forward(*inputs, tiling=_tiling(2, 1, 40), exchange="tagged")
    with pytest.raises(ValueError, match="exchange"):
        split.split_rnn_forward(*inputs, tiling=_tiling(2, 1, 40), exchange="ll")


@triton.jit
def _roundtrip(x_ptr, w_ptr, y_ptr, n_ptr, tag, other, R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    w = exchange.pack_tagged(tl.load(x_ptr + r * C + c), tag.to(tl.int64), R, C)
    cw = tl.arange(0, C // 2)[None, :]
    w = tl.where((r == 1) & (cw == 2), (w & 0xFFFFFFFF) | (other.to(tl.int64) << 32), w)  # one word re-tagged
    tl.store(w_ptr + r * (C // 2) + cw, w)
    tl.store(n_ptr, exchange.stale_words(w, r < R, tag.to(tl.int64)))
    tl.store(y_ptr + r * C + c, exchange.unpack_tagged(w, x_ptr.dtype.element_ty, R, C))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tagged_words_carry_two_values_and_their_tag(dtype):
    x = torch.randn(4, 8, device=runtime.device).to(dtype)
    w = torch.zeros(4, 4, dtype=torch.int64, device=runtime.device)
    y = torch.full_like(x, float("nan"))
    n = torch.full((1,), -1, dtype=torch.int32, device=runtime.device)
    _roundtrip[(1,)](x, w, y, n, 0x7FFFFFFE, 5, R=4, C=8)
    assert torch.equal(y, x)  # bits, in order
    assert int(n) == 1  # the one word of another step
    assert int(w[0, 0]) >> 32 == 0x7FFFFFFE and int(w[1, 2]) >> 32 == 5


@triton.jit
def _hinted_roundtrip(x_ptr, w_ptr, y_ptr, n_ptr, tag, other, R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    w = exchange.pack_hinted(tl.load(x_ptr + r * C + c), tag)
    w = tl.where((r == 1) & (c == 2), exchange.pack_hinted(tl.load(x_ptr + r * C + c), other), w)  # one re-tagged
    tl.store(w_ptr + r * C + c, w)
    y, x = exchange.hinted_chunk(w_ptr + r * C + c, r < R, tag, x_ptr.dtype.element_ty)
    tl.store(y_ptr + r * C + c, y)
    tl.store(n_ptr, exchange.hinted_stale(x).to(tl.int32))
    y, x = exchange.hinted_chunk(w_ptr + r * C + c, (r != 1) | (c != 2), tag, x_ptr.dtype.element_ty)
    tl.store(n_ptr + 1, exchange.hinted_stale(x).to(tl.int32))  # the re-tagged word masked off: none stale


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_hinted_words_carry_a_value_and_its_tag(dtype):
    x = torch.randn(4, 8, device=runtime.device).to(dtype)
    w = torch.zeros(4, 8, dtype=torch.int32, device=runtime.device)
    y = torch.full_like(x, float("nan"))
    n = torch.full((2,), -1, dtype=torch.int32, device=runtime.device)
    _hinted_roundtrip[(1,)](x, w, y, n, 0x7FFF + 5, 3, R=4, C=8)  # the tag wraps to 15 bits: 0x7FFF + 5 -> 4
    assert torch.equal(y, x)  # bits
    assert n.tolist() == [1, 0]
    assert int(w[0, 0]) >> 16 == 4 and int(w[1, 2]) >> 16 == 3 and bool((w >= 0).all())


def test_step_parts_from_stamps():
    """Stamps 100 cycles apart within a step, steps 1000 apart, a 2 GHz clock: each part 50 ns, the step 500."""
    P, T = 3, 40
    s = torch.zeros(P, T + 1, 8, dtype=torch.int64)
    t0 = torch.arange(T)[None, :, None] * 1000 + torch.arange(P)[:, None, None] * 7
    s[:, :T, :6] = t0 + torch.arange(6)[None, None, :] * 100
    s[:, T, :4] = torch.tensor([0, 0, 2_000_000, 1_000_000])
    parts = clocks.step_parts(s)
    assert parts["cycles_per_ns"] == pytest.approx(2.0) and parts["step_ns"] == pytest.approx(500.0)
    assert all(parts[k] == pytest.approx(50.0) for k in clocks.PARTS[1:]) and parts["inputs"] == pytest.approx(250.0)
    rev = s.clone()  # the backward: step t runs after step t + 1
    rev[:, :T] = s[:, :T].flip(1)
    back = clocks.step_parts(rev, backward=True)
    assert back["step_ns"] == pytest.approx(500.0) and back["inputs"] == pytest.approx(250.0)
    assert clocks.step_parts(rev)["step_ns"] == pytest.approx(-500.0)  # read forward, the steps go back in time
    with pytest.raises(ValueError, match="steps"):
        clocks.step_parts(s[:, -10:])


@pytest.mark.gpu
@pytest.mark.parametrize("function", ["lstm", "gru", "elman"])
@pytest.mark.parametrize("DH", [256, 768])
def test_persistent_forward_with_flags_equals_the_barrier_kernel_on_gpu(function, DH, make_inputs):
    """B = 16, T = 64, bf16, the chooser's tiling: bit for bit the barrier kernel's states, launch after launch;
    the tagged exchange within bf16's tolerance of float64 and the same launch after launch."""
    inputs = make_inputs(function, 16, 64, 1, DH, dtype=torch.bfloat16, device=runtime.device)
    want, last, _ = split.split_rnn_forward(*inputs, function=function, exchange="barrier")
    for _ in range(20):
        out, again, _ = split.split_rnn_forward(*inputs, function=function, exchange="flags")
        assert torch.equal(out, want) and torch.equal(again, last)
    ref = rnn.flashrnn(*(t.double() for t in inputs), function=function, backend="vanilla")
    tagged, _, _ = split.split_rnn_forward(*inputs, function=function, exchange="tagged")
    check.assert_close(tagged, ref[0], dtype=torch.bfloat16, name="tagged states_all")
    for _ in range(5):
        assert torch.equal(split.split_rnn_forward(*inputs, function=function, exchange="tagged")[0], tagged)


@pytest.mark.gpu
@pytest.mark.parametrize("function", ["lstm", "gru", "elman"])
@pytest.mark.parametrize("DH", [256, 768])
def test_persistent_forward_with_hinted_words_equals_the_barrier_kernel_on_gpu(function, DH, make_inputs):
    """B = 16, T = 64, bf16, the chooser's tiling and 8 units in 4 warps: the hinted words give the barrier kernel's
    states bit for bit (the same values cross, the same product), launch after launch (tags continue)."""
    inputs = make_inputs(function, 16, 64, 1, DH, dtype=torch.bfloat16, device=runtime.device, seed=4)
    chosen = split_tiling.split_tiling(16, 1, DH, function, torch.bfloat16)
    four = [c for c in split_tiling.split_candidates(16, 1, DH, function, torch.bfloat16)
            if (c.block_u, c.num_warps, c.block_b) == (8, 4, 16) and c.fits]  # fmt: skip
    for cfg in [chosen, *four]:
        want, last, _ = split.split_rnn_forward(*inputs, function=function, tiling=cfg, exchange="barrier")
        for _ in range(20):
            out, again, _ = split.split_rnn_forward(*inputs, function=function, tiling=cfg, exchange="hinted")
            assert torch.equal(out, want) and torch.equal(again, last)


@pytest.mark.gpu
@pytest.mark.parametrize("function", ["lstm", "gru", "elman"])
@pytest.mark.parametrize("DH", [256, 768])
def test_persistent_backward_with_flags_and_hinted_words_equals_the_barrier_kernel_on_gpu(function, DH, make_inputs):
    inputs = make_inputs(function, 16, 64, 1, DH, dtype=torch.bfloat16, device=runtime.device, seed=2)
    out, _, gates = split.split_rnn_forward(*inputs, function=function, save_gates=True)
    d_out = torch.randn_like(out)
    cfg = split_tiling.split_tiling(16, 1, DH, function, torch.bfloat16, direction="backward")
    args = (d_out, gates, out, inputs[3], inputs[1], function, cfg)
    want = split_backward.split_rnn_backward(*args, exchange="barrier")
    for how in ("flags", "hinted") * 10:
        got = split_backward.split_rnn_backward(*args, exchange=how)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_backward_with_flags_equals_the_barrier_kernel(make_inputs):
    """The split backward with a flag per program, and with hinted words, gives the barrier kernel's gate gradients
    and d(initial states) bit for bit (two heads, two batch tiles; launches of one step each continue each other's
    tags, twice each)."""
    inputs = make_inputs("lstm", 17, 2, 2, 40, dtype=torch.float16, device=runtime.device, seed=3)
    fwd = _tiling(17, 2, 40)
    out, _, gates = split.split_rnn_forward(*inputs, function="lstm", save_gates=True, tiling=fwd)
    d_out = torch.randn_like(out)
    want = split_backward.split_rnn_backward(d_out, gates, out, inputs[3], inputs[1], tiling=fwd, exchange="barrier")
    assert bool(want[0].abs().sum() > 0) and bool(want[1].abs().sum() > 0)
    for how in ("flags", "hinted", "flags", "hinted"):
        got = split_backward.split_rnn_backward(d_out, gates, out, inputs[3], inputs[1], tiling=fwd, exchange=how)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    with pytest.raises(ValueError, match="exchange"):
        split_backward.split_rnn_backward(d_out, gates, out, inputs[3], inputs[1], tiling=fwd, exchange="tagged")
