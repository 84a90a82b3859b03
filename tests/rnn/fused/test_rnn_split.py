"""The split-head fused forward (one head over several programs, a grid barrier per step) and its chooser.

On CPU the kernel runs one launch per step (the interpreter runs programs one after another, so a barrier cannot
work there); tilings with few programs keep the interpreter quick. The persistent kernel with its barrier runs in
the GPU tests at full size (and in the stress test of `python -m gpulab bench 07 split`).
"""

import dataclasses
import math

import pytest
import torch

from gpulab import check, gluon_compat, hardware, rnn, runtime
from gpulab.rnn.fused import plan, split, split_tiling, tiles

FUNCTIONS = ["lstm", "gru", "elman"]


def _few_programs(B, DH, function, dtype, block_u=64):
    """The chosen tiling with ``block_u`` units per program: few programs, quick in the interpreter."""
    cfg = split_tiling.split_tiling(B, 1, DH, function, dtype, gpu="H100")
    return dataclasses.replace(cfg, block_u=block_u, split=math.ceil(DH / block_u), programs=math.ceil(DH / block_u))


def _reference(inputs, function):
    return rnn.flashrnn(*(t.double() for t in inputs), function=function, backend="vanilla")


@pytest.mark.parametrize("dtype", [torch.float16])
def test_split_forward_with_two_heads_and_two_batch_tiles(dtype, make_inputs):
    """Programs of several heads and batch tiles share the grid: each head's units and rows stay its own (float16:
    the input projections travel as 32-bit words of two values)."""
    inputs = make_inputs("lstm", 17, 2, 2, 40, dtype=dtype, device=runtime.device, seed=5)
    cfg = dataclasses.replace(split_tiling.split_tiling(17, 2, 40, "lstm", torch.float32, gpu="H100"), block_b=16)
    cfg = dataclasses.replace(cfg, block_u=16, split=3, programs=3 * 2 * 2)
    out, last, _ = split.split_rnn_forward(*inputs, function="lstm", save_gates=False, tiling=cfg)
    ref = _reference(inputs, "lstm")
    check.assert_close(out, ref[0], dtype=dtype, name="states_all")
    check.assert_close(last, ref[1], dtype=dtype, name="states_last")


def test_fused_backend_runs_a_head_past_one_sm_and_trains_through_it(run_case):
    """flashrnn(backend='fused') plans a split for one head of 300 (fp32: R is 1.4 MB for an LSTM) and every
    gradient is right (split forward, split backward, parameter products; each function's kernels are checked
    alone below)."""
    assert plan.choose(2, 1, 300, "lstm", torch.float32, training=True).kind == "split"
    run_case("fused", "lstm", 2, 2, 1, 300)


def test_persistent_kernel_refuses_the_interpreter(make_inputs):
    if not runtime.INTERPRET:
        pytest.skip("the interpreter's refusal")
    inputs = make_inputs("elman", 1, 1, 1, 256, device=runtime.device)
    with pytest.raises(RuntimeError, match="persistent=False"):
        split.split_rnn_forward(*inputs, function="elman", persistent=True)


@pytest.mark.parametrize(
    "dh,want", [(768, (256, 3)), (300, (128, 3)), (256, (256, 1)), (1024, (1024, 1)), (17, (32, 1))]
)
def test_chunking_covers_the_head_dim_with_little_padding(dh, want):
    block_k, chunks = split_tiling.chunking(dh)
    assert (block_k, chunks) == want
    assert block_k * chunks >= dh and chunks <= split_tiling.MAX_CHUNKS


@pytest.mark.parametrize("gpu", sorted(hardware.SPECS))
def test_plan_for_every_gpu_is_a_fit_or_a_clear_refusal(gpu):
    spec = hardware.SPECS[gpu]
    dtype = torch.bfloat16 if spec.has_bf16 else torch.float16
    for dh in (64, 256, 384, 512, 768, 1024):
        try:
            p = plan.choose(16, 1, dh, "lstm", dtype, gpu=spec, training=True)
        except ValueError as exc:
            assert dh >= 256 and "backend='alternating'" in str(exc) and spec.name in str(exc)
            continue
        assert p.kind == ("single" if dh <= 64 else "split") and p.why
        if p.kind == "split":
            c = p.tiling
            assert c.fits and c.split == math.ceil(dh / c.block_u) and c.programs <= spec.sm_count * c.programs_per_sm
            assert c.shared_bytes <= spec.smem_per_block and c.registers_per_thread <= spec.max_registers_per_thread
            assert str(c.split) in p.why


def test_h100_splits_one_head_of_768_and_says_why():
    p = plan.choose(16, 1, 768, "lstm", torch.bfloat16, gpu="H100")
    assert p.kind == "split" and "does not fit one SM" in p.why
    assert p.tiling.programs <= 132 and p.tiling.block_k * p.tiling.chunks == 768
    text = plan.explain(16, 1, 768, "lstm", torch.bfloat16, gpu="H100")
    assert "block_u" in text and "plan: split" in text and "per block" in text  # a refused candidate says why
    assert plan.choose(16, 12, 64, "lstm", torch.bfloat16, gpu="H100").kind == "single"


def test_measured_tilings_win_on_hopper_only():
    """Where the H100 sweeps found another tiling fastest, the chooser takes it there (the best-scored candidate of
    the measured block_u and warps); elsewhere, and at head dims not measured, the estimate decides."""
    for direction in ("forward", "backward"):
        block_u, warps = split_tiling.MEASURED[(direction, 192)]
        h100 = split_tiling.split_tiling(32, 4, 192, "lstm", torch.bfloat16, gpu="H100", direction=direction)
        assert h100.num_warps == warps and block_u in (None, h100.block_u), h100
        mine = [c for c in split_tiling.split_candidates(32, 4, 192, "lstm", torch.bfloat16, gpu="H100",
                                                         direction=direction)
                if c.fits and c.num_warps == warps and block_u in (None, c.block_u)]  # fmt: skip
        assert h100.score == min(c.score for c in mine)
        a100 = split_tiling.split_tiling(32, 4, 192, "lstm", torch.bfloat16, gpu="A100", direction=direction)
        cands = split_tiling.split_candidates(32, 4, 192, "lstm", torch.bfloat16, gpu="A100", direction=direction)
        best = min(c.score for c in cands if c.fits)
        assert a100.score == best and a100.num_warps == min(c.num_warps for c in cands if c.fits and c.score == best)
    at_768 = split_tiling.split_tiling(32, 1, 768, "lstm", torch.bfloat16, gpu="H100", direction="backward")
    assert (at_768.block_u, at_768.num_warps) == split_tiling.MEASURED[("backward", 768)] == (16, 8), at_768
    unmeasured = split_tiling.split_tiling(16, 1, 640, "lstm", torch.bfloat16, gpu="H100", direction="backward")
    cands = split_tiling.split_candidates(16, 1, 640, "lstm", torch.bfloat16, gpu="H100", direction="backward")
    assert unmeasured.score == min(c.score for c in cands if c.fits)


def test_refusal_when_nothing_fits_names_the_alternative():
    with pytest.raises(ValueError, match=r"head dim 4096.*backend='alternating'"):
        plan.choose(16, 1, 4096, "lstm", torch.float32, gpu="H100")
    with pytest.raises(ValueError, match="resident at once"):  # an L4 has 58 SMs: 768 units need more programs
        split_tiling.split_tiling(16, 1, 768, "lstm", torch.bfloat16, gpu="L4")


def test_fused_backend_runs_alternating_where_no_split_holds_and_says_so():
    """A head of 4096 fits no launch at any batch: the fused backend warns (naming why) and runs alternating."""
    g = torch.Generator().manual_seed(0)
    Wx = torch.randn(1, 2, 4, 1, 4096, generator=g).to(runtime.device)
    R = (torch.randn(4, 1, 4096, 4096, generator=g) / 64).to(runtime.device)
    b = torch.randn(4, 1, 4096, generator=g).to(runtime.device)
    gluon_compat._WARNED.discard(("rnn fused", 1, 4096, "lstm", torch.float32, False))
    with pytest.warns(RuntimeWarning, match="cannot run 1 head\\(s\\) of 4096.*backend='alternating'"):
        out, last = rnn.flashrnn(Wx, R, b, backend="fused")
    ref_out, ref_last = rnn.flashrnn(Wx.double(), R.double(), b.double(), backend="vanilla")
    check.assert_close(out, ref_out, dtype=torch.float32, name="h")
    check.assert_close(last, ref_last, dtype=torch.float32, name="last")


def test_barrier_counter_is_one_per_device_and_program_count():
    dev = torch.device(runtime.device)
    a, b, c = tiles.barrier_counter(dev, 96), tiles.barrier_counter(dev, 96), tiles.barrier_counter(dev, 48)
    assert a is b and a is not c and a.dtype == torch.int64 and not a.any()
    grouped = tiles.barrier_counter(dev, 96, groups=2)  # one counter per group, each in its own 128-byte line
    assert grouped is not a and grouped.numel() == 2 * tiles.COUNTER_STRIDE == 2 * 128 // 8 and not grouped.any()


@pytest.mark.gpu
@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("DH", [256, 768, 1024])
def test_persistent_split_forward_on_gpu(function, DH, make_inputs):
    """The barrier kernel at full size (B = 16, T = 64, bf16, the chooser's tiling) equals the per-step launches
    bit for bit and float64 within bf16's tolerance, and repeated launches and graph replays agree."""
    inputs = make_inputs(function, 16, 64, 1, DH, dtype=torch.bfloat16, device=runtime.device)
    out, last, _ = split.split_rnn_forward(*inputs, function=function, save_gates=False)
    steps, _, _ = split.split_rnn_forward(*inputs, function=function, save_gates=False, persistent=False)
    assert torch.equal(out, steps)
    ref = _reference(inputs, function)
    check.assert_close(out, ref[0], dtype=torch.bfloat16, name="states_all")
    for _ in range(50):
        again, _, _ = split.split_rnn_forward(*inputs, function=function, save_gates=False)
        assert torch.equal(again, out)


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("B,T,DH", [(2, 1, 256), (1, 2, 300), (1, 1, 768)])
def test_split_forward_and_backward_match_float64(function, B, T, DH, make_inputs):
    """The split forward (every state of every step, the last states, from random initial states; outputs
    poisoned first) and every gradient (Wx, R, b, initial states) of the split backward, with a gradient on every
    state and on the last states, against float64 autograd through the vanilla backend."""
    from gpulab.rnn.fused import split_backward

    inputs = make_inputs(function, B, T, 1, DH, device=runtime.device, seed=DH + T)
    block_u = 128 if DH > 512 else 64  # 6 programs at 768, 5 at 300: a real split, quick in the interpreter
    fwd = _few_programs(B, DH, function, torch.float32, block_u=block_u)
    bwd = dataclasses.replace(
        split_tiling.split_tiling(B, 1, DH, function, torch.bfloat16, gpu="H100", direction="backward"),
        block_u=block_u, split=math.ceil(DH / block_u), programs=math.ceil(DH / block_u),
    )  # fmt: skip
    out, last, gates = split.split_rnn_forward(*inputs, function=function, save_gates=True, tiling=fwd)
    g = torch.Generator().manual_seed(7)
    d_out = torch.randn(out.shape, generator=g, dtype=torch.float64)
    d_last = torch.randn(last.shape, generator=g, dtype=torch.float64)
    got = split_backward.split_rnn_gradients(
        d_out.float(), gates, out, inputs[3], inputs[1], function, d_last=d_last.float(), tiling=bwd
    )
    ref_in = [t.detach().double().requires_grad_() for t in inputs]
    ref = rnn.flashrnn(*ref_in, function=function, backend="vanilla")
    context = f"split {function} B={B} T={T} DH={DH}"
    check.assert_close(out, ref[0], dtype=torch.float32, name="states_all", context=context)
    check.assert_close(last, ref[1], dtype=torch.float32, name="states_last", context=context)
    assert gates.shape == (B, T, rnn.functions.get_function(function).gates_b, 1, DH) and gates.isfinite().all()
    want = torch.autograd.grad((ref[0] * d_out).sum() + (ref[1] * d_last).sum(), ref_in)
    for name, a, w in zip(("dWx", "dR", "db", "dstates"), got, want):
        check.assert_close(a, w, dtype=torch.float32, name=name, context=context)


def test_fused_backend_trains_a_split_head_through_the_split_backward():
    """The plan for training a head past one SM carries a split backward; elman at DH 300 end to end."""
    p = plan.choose(2, 1, 300, "elman", torch.float32, training=True)
    assert p.kind == "split" and p.backward is not None and p.backward.block_u >= 16 and "backward over" in p.why


@pytest.mark.gpu
@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("DH", [256, 768])
def test_persistent_split_backward_on_gpu(function, DH, make_inputs):
    """The barrier backward at full size (B = 16, T = 64, bf16) equals its per-step launches bit for bit, and its
    gradients match float64 norm-wise within bf16's tolerance."""
    from gpulab.rnn.fused import split_backward

    inputs = make_inputs(function, 16, 64, 1, DH, dtype=torch.bfloat16, device=runtime.device)
    out, last, gates = split.split_rnn_forward(*inputs, function=function, save_gates=True)
    d_out = torch.randn_like(out)
    d_last = torch.randn_like(last)
    dG, ds0 = split_backward.split_rnn_backward(d_out, gates, out, inputs[3], inputs[1], function, d_last=d_last)
    dG2, ds02 = split_backward.split_rnn_backward(
        d_out, gates, out, inputs[3], inputs[1], function, d_last=d_last, persistent=False
    )
    assert torch.equal(dG, dG2) and torch.equal(ds0, ds02)
    got = split_backward.split_rnn_gradients(d_out, gates, out, inputs[3], inputs[1], function, d_last=d_last)
    ref_in = [t.detach().double().requires_grad_() for t in inputs]
    ref = rnn.flashrnn(*ref_in, function=function, backend="vanilla")
    want = torch.autograd.grad((ref[0] * d_out.double()).sum() + (ref[1] * d_last.double()).sum(), ref_in)
    for name, a, w in zip(("dWx", "dR", "db", "dstates"), got, want):
        err = check.relative_error(a, w)
        assert err <= check.tolerance(torch.bfloat16), f"{name}: relative error {err:.3g} ({function} DH={DH})"
