"""Lesson 4: softmax three ways, tiled attention, and the FlashAttention forward and backward (gpulab.attention)."""

import pytest
import torch

from gpulab import attention as A
from gpulab import check, hardware, runtime

# (batch, heads, seq_q, seq_k, head_dim, causal): odd lengths, seq_q != seq_k both ways, batch 1, padded head dims
CPU_CASES = [
    (1, 1, 1, 1, 16, False),
    (1, 1, 1, 1, 16, True),
    (2, 2, 17, 17, 16, False),
    (2, 1, 17, 17, 24, True),
    (1, 2, 33, 17, 80, True),
    (1, 2, 17, 33, 24, True),
    (1, 1, 17, 33, 16, False),
    (2, 1, 33, 33, 16, True),
    (1, 1, 1, 17, 16, True),
    (1, 1, 17, 1, 24, True),
]


def _inputs(b, h, nq, nk, d, dtype=torch.float32, scale=1.0):
    q = check.random_tensor(b, h, nq, d, dtype=dtype, scale=scale)
    k = check.random_tensor(b, h, nk, d, dtype=dtype, scale=scale)
    v = check.random_tensor(b, h, nk, d, dtype=dtype)
    do = check.random_tensor(b, h, nq, d, dtype=dtype)
    return q, k, v, do


def _close(out, ref, dtype, name, rtol=None, context=""):
    """assert_close, except where the reference is exactly zero everywhere (a one-key softmax has dQ = dK = 0):
    then the metric has no scale, and the output must be zero up to rounding of order-one terms."""
    assert torch.isfinite(out).all(), f"{name} ({context}) has NaN or inf"
    if ref.abs().max() == 0:
        tol = rtol or check.tolerance(dtype)
        assert out.abs().max().item() <= tol, f"{name} ({context}) should be 0, got up to {out.abs().max().item()}"
        return 0.0
    return check.assert_close(out, ref, dtype=dtype, rtol=rtol, name=name, context=context)


def _check_attention(b, h, nq, nk, d, causal, dtype, scale=1.0, rtol=None, grad_rtol=None):
    q, k, v, do = _inputs(b, h, nq, nk, d, dtype, scale)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = A.flash_attention(qg, kg, vg, is_causal=causal)
    o.backward(do)
    o_ref, dq_ref, dk_ref, dv_ref = A.attention_reference(q, k, v, is_causal=causal, do=do)
    ctx = f"B={b} H={h} Nq={nq} Nk={nk} D={d} causal={causal} {dtype}"
    _close(o.detach(), o_ref, dtype, "O", rtol, ctx)
    for name, g, ref in (("dQ", qg.grad, dq_ref), ("dK", kg.grad, dk_ref), ("dV", vg.grad, dv_ref)):
        _close(g, ref, dtype, name, grad_rtol or rtol, ctx)
    if causal and nk > nq:  # keys that no query sees
        assert (kg.grad[:, :, nq:] == 0).all() and (vg.grad[:, :, nq:] == 0).all()


# ----------------------------------------------------------------------------------------------------------------
# CPU covering set (Triton interpreter)


@pytest.mark.parametrize("b, h, nq, nk, d, causal", CPU_CASES)
def test_flash_attention_forward_and_gradients_fp32(b, h, nq, nk, d, causal):
    _check_attention(b, h, nq, nk, d, causal, torch.float32)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_fp16(causal):
    # fp16 operands, fp32 accumulation; P and dS are rounded to fp16 before their products, as on the GPU.
    _check_attention(1, 2, 33, 17, 24, causal, torch.float16, grad_rtol=1e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_large_logits_stay_finite_and_accurate(causal):
    # Logits of a few hundred: naive softmax overflows; the online max keeps everything finite. The reference's
    # softmax of exact logits differs from one of fp32-rounded logits by ~eps32 * |S| relative, hence the rtol.
    q, k, v, do = _inputs(1, 2, 33, 17, 16, scale=6.0)
    s = torch.matmul(q, k.transpose(-2, -1)) / 4.0
    assert s.abs().max() > 88, "the test needs logits that overflow exp in fp32"
    assert not torch.isfinite(A.softmax_naive(s)).all()
    _check_attention(1, 2, 33, 17, 16, causal, torch.float32, scale=6.0, rtol=5e-4)


def test_forward_lse_matches_reference_and_explicit_scale():
    q, k, v, _ = _inputs(2, 1, 33, 17, 24)
    o, lse = A.attention_forward(q, k, v, is_causal=True, scale=0.3)
    check.assert_close(o, A.attention_reference(q, k, v, is_causal=True, scale=0.3), name="O")
    check.assert_close(lse, A.logsumexp_reference(q, k, is_causal=True, scale=0.3), name="LSE")


def test_references_agree_with_sdpa_and_each_other():
    for nq, nk, causal in ((17, 17, False), (17, 33, True), (33, 17, True), (1, 5, True)):
        q, k, v, _ = (t.double() for t in _inputs(2, 2, nq, nk, 24))
        sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        check.assert_close(A.naive_attention(q, k, v, is_causal=causal), sdpa, rtol=1e-12, name="naive")
        check.assert_close(A.attention_reference(q, k, v, is_causal=causal), sdpa, rtol=1e-12, name="reference")
        o, lse = A.tiled_attention(q, k, v, is_causal=causal, block_q=8, block_k=16)
        check.assert_close(o, sdpa, rtol=1e-12, name="tiled")
        check.assert_close(lse, A.logsumexp_reference(q, k, is_causal=causal), rtol=1e-12, name="tiled LSE")
    assert A.causal_mask(2, 3).tolist() == [[True, False, False], [True, True, False]]  # top-left aligned


def test_autograd_function_saves_inputs_output_and_lse_only():
    b, h, nq, nk, d = 1, 2, 33, 17, 24
    q, k, v, _ = _inputs(b, h, nq, nk, d)
    q.requires_grad_(True)
    o = A.FlashAttentionFunction.apply(q, k, v, True, None, False)
    shapes = [tuple(t.shape) for t in o.grad_fn.saved_tensors]
    assert shapes == [(b, h, nq, d), (b, h, nk, d), (b, h, nk, d), (b, h, nq, d), (b, h, nq)]
    assert o.grad_fn.saved_tensors[4].dtype == torch.float32
    for s in shapes:  # nothing N x N
        assert not (nq in s[-2:] and nk in s[-2:] and s[-1] != d)


def test_validation_errors():
    q, k, v, _ = _inputs(1, 2, 5, 7, 16)
    with pytest.raises(ValueError, match="4-dimensional"):
        A.flash_attention(q[0], k[0], v[0])
    with pytest.raises(ValueError, match="same batch and heads"):
        A.flash_attention(q, k[:, :1], v[:, :1])
    with pytest.raises(ValueError, match="same shape"):
        A.flash_attention(q, k, v[:, :, :3])
    with pytest.raises(ValueError, match="head_dim"):
        A.flash_attention(q, k[..., :8], v[..., :8])
    big = check.random_tensor(1, 1, 4, 160)
    with pytest.raises(ValueError, match="head dims 1 to 128"):
        A.flash_attention(big, big, big)
    with pytest.raises(ValueError, match="share one dtype"):
        A.flash_attention(q, k.half(), v)
    with pytest.raises(ValueError, match="allow_tf32"):
        A.flash_attention(q.half(), k.half(), v.half(), allow_tf32=True)
    with pytest.raises(ValueError, match="finite"):
        A.flash_attention(q, k, v, scale=float("inf"))
    if runtime.INTERPRET:
        with pytest.raises(ValueError, match="bfloat16"):
            A.flash_attention(q.bfloat16(), k.bfloat16(), v.bfloat16())
        with pytest.raises(ValueError, match="is on"):
            A.flash_attention(q.to("meta"), k, v)
    with pytest.raises(TypeError):
        A.flash_attention(q.tolist(), k, v)


def test_empty_sequences():
    q, k, v, _ = _inputs(1, 1, 0, 5, 16)
    assert A.flash_attention(q, k, v).shape == (1, 1, 0, 16)
    q, k, v, _ = _inputs(1, 1, 3, 0, 16)
    assert (A.flash_attention(q, k, v) == 0).all()  # no key to see: 0, not NaN


def test_softmax_three_ways_match_torch():
    x = check.random_tensor(3, 4, 37, dtype=torch.float64, scale=3.0)
    ref = torch.softmax(x, -1)
    for name, f in (("naive", A.softmax_naive), ("safe", A.softmax_safe), ("online", A.softmax_online)):
        check.assert_close(f(x), ref, rtol=1e-12, name=name)
    check.assert_close(A.softmax_online(x, block=8), ref, rtol=1e-12, name="online, blocks of 8")
    big = x * 100  # logits up to ~1000: exp overflows even in float64
    assert not torch.isfinite(A.softmax_naive(big)).all()
    check.assert_close(A.softmax_safe(big), torch.softmax(big, -1), rtol=1e-12, name="safe, large")
    check.assert_close(A.softmax_online(big), torch.softmax(big, -1), rtol=1e-12, name="online, large")


@pytest.mark.parametrize(
    "shape, dtype", [((3, 1000), torch.float32), ((2, 3, 7), torch.float32), ((5, 300), torch.float16)]
)
def test_online_softmax_kernel(shape, dtype):
    x = check.random_tensor(shape, dtype=dtype, scale=20.0)  # logits up to ~100: past exp's fp32 range
    y = A.online_softmax(x, block=64)
    assert y.dtype == dtype and y.shape == x.shape
    check.assert_close(y, torch.softmax(x.double(), -1), dtype=dtype, name="online softmax kernel")


def test_configs_fit_every_gpu_and_are_small_in_the_interpreter():
    for spec in hardware.SPECS.values():
        for kind in ("forward", "dkdv", "dq"):
            for d in (16, 24, 64, 80, 96, 128):
                for dtype in (torch.float16, torch.float32):
                    c = A.attention_config(kind, d, dtype, gpu=spec, interpreter=False)
                    assert c.block_d == runtime.dot_block(d) and c.block_m >= 16 and c.block_n >= 16
                    smem = A.smem_estimate(
                        kind, c.block_m, c.block_n, c.block_d, 4 if dtype == torch.float32 else 2, c.num_stages
                    )
                    assert smem <= spec.smem_per_block, (spec.name, kind, d, dtype, c)
    c = A.attention_config("forward", 80, torch.float16, seq_q=17, seq_k=1000, gpu="H100", interpreter=False)
    assert c.block_m == 32 and c.block_d == 128  # tiles no larger than the sequence needs
    assert A.attention_config("dq", 80, interpreter=True) == A.AttentionConfig(16, 16, 128, 4, 1)
    with pytest.raises(ValueError, match="head_dim"):
        A.attention_config("forward", 256)


# ----------------------------------------------------------------------------------------------------------------
# full grid on the GPU (`pytest -m gpu`)

GPU_RTOL = {torch.float32: (1e-5, 1e-4), torch.float16: (5e-3, 2e-2), torch.bfloat16: (3e-2, 8e-2)}


# Every case compiles its own kernels (~5 s each on the H100), so the grid is a covering set, not a full product:
# bf16 over head dims 64/80/128 and every shape; fp16 and fp32 over two head dims and the shapes that stress them.
_SHAPES = [(1, 1), (17, 17), (17, 1000), (1000, 17), (1000, 1000), (4096, 4096)]
_GPU_GRID = (
    [(torch.bfloat16, d, nq, nk) for d in (64, 80, 128) for nq, nk in _SHAPES]
    + [(torch.float16, d, nq, nk) for d in (96, 128) for nq, nk in [(17, 1000), (1000, 1000), (4096, 4096)]]
    + [(torch.float32, d, nq, nk) for d in (64, 80) for nq, nk in [(1, 1), (17, 1000), (1000, 17), (1000, 1000)]]
)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, d, nq, nk", _GPU_GRID)
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_full_grid(dtype, d, nq, nk, causal):
    b, h = (1, 2) if nq * nk > 10**6 else (2, 3)
    q, k, v, do = _inputs(b, h, nq, nk, d, dtype)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = A.flash_attention(qg, kg, vg, is_causal=causal)
    o.backward(do)
    refs = A.attention_reference(q, k, v, is_causal=causal, do=do)
    # the peer in the same dtype: our error may be at most a small multiple of SDPA's own (norm-wise)
    qs, ks, vs = (t.clone().requires_grad_(True) for t in (q, k, v))
    os_ = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
    os_.backward(do)
    fwd_rtol, grad_rtol = GPU_RTOL[dtype]
    ctx = f"B={b} H={h} Nq={nq} Nk={nk} D={d} causal={causal} {dtype}"
    for name, ours, peer, ref, rtol in (
        ("O", o.detach(), os_.detach(), refs[0], fwd_rtol),
        ("dQ", qg.grad, qs.grad, refs[1], grad_rtol),
        ("dK", kg.grad, ks.grad, refs[2], grad_rtol),
        ("dV", vg.grad, vs.grad, refs[3], grad_rtol),
    ):
        assert torch.isfinite(ours).all(), f"{name} ({ctx}) has NaN or inf"
        if ref.abs().max() == 0:
            assert ours.abs().max().item() <= rtol, f"{name} ({ctx}) should be 0"
            continue
        err, err_peer = check.relative_error(ours, ref), check.relative_error(peer, ref)
        assert err <= max(3 * err_peer, rtol), f"{name} ({ctx}): relative error {err:.3g}, SDPA's {err_peer:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_large_logits_finite(dtype):
    q, k, v, do = _inputs(2, 2, 1000, 1000, 64, dtype, scale=8.0)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = A.flash_attention(qg, kg, vg, is_causal=True)
    o.backward(do)
    for t in (o, qg.grad, kg.grad, vg.grad):
        assert torch.isfinite(t).all()
    check.assert_close(o.detach(), A.attention_reference(q, k, v, is_causal=True), dtype=dtype, rtol=0.1, name="O")


@pytest.mark.gpu
def test_gpu_tf32_and_online_softmax():
    q, k, v, _ = _inputs(2, 2, 1000, 1000, 64)
    o = A.flash_attention(q, k, v, allow_tf32=True)
    # two chained TF32 products (S = QK^T, then PV; unit roundoff 2^-11 each): elementwise errors reach ~6e-3 of the
    # output's rms on some draws (one H100 run: 4 of 256000 elements over 5e-3, norm-wise error 1.6e-3), so 1e-2
    check.assert_close(o, A.attention_reference(q, k, v), dtype="tf32", rtol=1e-2, name="O (tf32)")
    x = check.random_tensor(64, 100_000, scale=10.0)
    check.assert_close(A.online_softmax(x), torch.softmax(x.double(), -1), name="online softmax, long rows")


# ----------------------------------------------------------------------------------------------------------------
# the forward's block schedule and the lesson's benchmark (CPU smoke run)


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
            if kind == A.forward.FULL:  # no mask applied: every pair must be a real, visible one
                assert all(j < nk and (not causal or j <= i) for i, j in pairs if i < nq), (qi, ki)
            elif kind == A.forward.SKIPPED:  # never loaded: nothing in it may be visible
                assert not any(seen), (qi, ki)
            else:
                assert kind == A.forward.MASKED


def test_block_schedule_rejects_bad_sizes():
    with pytest.raises(ValueError, match="block_m"):
        A.block_schedule(10, 10, 0, 16)


def test_benchmark_runs_on_cpu_and_reports():
    from gpulab.attention import benchmark as ab

    results, fig = ab.benchmark(
        problems=[dict(dtype=torch.float32, batch=1, heads=2, seq=17, head_dim=16, causal=True)], memory_seqs=(16,)
    )
    ours = [r for r in results if r.params.get("impl") == "gpulab" and r.params.get("kind") == "throughput"]
    assert {r.params["direction"] for r in ours} == {"forward", "forward+backward"}
    assert all(r.params["check"] == "ok" and r.params["rel_err"] < 1e-5 for r in ours)
    assert all(r.params["vs_default"] > 0 for r in ours)
    assert "forward+backward" in ab.summary_table(results)
    assert any("gpulab / SDPA default" in line for line in ab.targets(results))
    assert {r.params["kind"] for r in results} == {"throughput", "memory"}
    assert fig is not None


# ----------------------------------------------------------------------------------------------------------------
# autotuning (the choice logic runs anywhere; the timing on a GPU)


def test_candidates_start_with_the_default_and_fit():
    for kind in ("forward", "dkdv", "dq"):
        for d in (64, 80, 128):
            cs = A.candidates(kind, d, torch.bfloat16, 4096, 4096, gpu="H100", interpreter=False)
            assert cs[0] == A.attention_config(kind, d, torch.bfloat16, 4096, 4096, gpu="H100", interpreter=False)
            assert len(cs) == len(set(cs)) >= 2
            for c in cs:
                smem = A.smem_estimate(kind, c.block_m, c.block_n, c.block_d, 2, c.num_stages)
                assert smem <= hardware.spec("H100").smem_per_block
    assert len(A.candidates("forward", 64, torch.float32, 17, 17, interpreter=True)) == 1


def test_autotune_keeps_the_fastest_skips_failures_and_remembers(monkeypatch):
    from gpulab.attention import configs

    monkeypatch.setattr(configs, "_TUNED", {})
    cs = A.candidates("forward", 64, torch.float16, 1000, 1000, gpu="H100", interpreter=False)
    fake_ms = {c: 3.0 - i for i, c in enumerate(cs)}  # the last candidate is fastest
    calls = []

    def run(c):
        calls.append(c)
        if c == cs[0]:
            raise RuntimeError("out of resources")  # a candidate this GPU cannot run
        return fake_ms[c]

    key = configs.tuning_key("forward", 64, torch.float16, False, 1000, 1000)
    assert key == ("forward", 64, "float16", False, 1024, 1024)
    best = A.autotune(key, cs, run, timer=lambda fn: fn())
    assert best == cs[-1] and calls == cs
    assert A.autotune(key, cs, run, timer=lambda fn: fn()) == best and calls == cs  # remembered: not re-timed
    assert A.tuned()[key]["config"] == best and A.tuned()[key]["tried"] == len(cs) - 1
    with pytest.raises(RuntimeError, match="out of resources"):
        A.autotune(("other",), cs[:1], run, timer=lambda fn: fn())


def test_flash_attention_autotune_flag_runs_on_cpu_and_is_validated():
    q, k, v, do = _inputs(1, 2, 17, 17, 16, torch.float32)
    qg = q.clone().requires_grad_(True)
    o = A.flash_attention(qg, k, v, is_causal=True, autotune=True)  # the interpreter keeps the fixed config
    o.backward(do)
    check.assert_close(o.detach(), A.attention_reference(q, k, v, is_causal=True), name="O")
    with pytest.raises(ValueError, match="autotune"):
        A.flash_attention(q, k, v, autotune="yes")


@pytest.mark.gpu
def test_gpu_autotune_is_correct_and_records_its_choice():
    q, k, v, do = _inputs(2, 4, 1000, 1000, 64, torch.bfloat16)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = A.flash_attention(qg, kg, vg, is_causal=True, autotune=True)
    o.backward(do)
    refs = A.attention_reference(q, k, v, is_causal=True, do=do)
    for name, got, ref in zip(("O", "dQ", "dK", "dV"), (o.detach(), qg.grad, kg.grad, vg.grad), refs):
        check.assert_close(got, ref, dtype=torch.bfloat16, rtol=8e-2, name=name)
    kinds = {key[0] for key in A.tuned() if key[1:4] == (64, "bfloat16", True)}
    assert kinds == {"forward", "dkdv", "dq"}
