"""Grouped-query heads and sliding windows in flash_attention: every output and gradient against the float64
reference, the window's skipped blocks never loaded, and bad input refused by name."""

import pytest
import torch

from gpulab import attention as A
from gpulab import check
from gpulab.attention import ops, plan


def _inputs(b, hq, hkv, nq, nk, d, dtype=torch.float32):
    q = check.random_tensor(b, hq, nq, d, dtype=dtype)
    k = check.random_tensor(b, hkv, nk, d, dtype=dtype)
    v = check.random_tensor(b, hkv, nk, d, dtype=dtype)
    do = check.random_tensor(b, hq, nq, d, dtype=dtype)
    return q, k, v, do


# (B, Hq, Hkv, Nq, Nk, D, is_causal, window): odd lengths, Nq != Nk both ways, MQA (Hkv = 1), head dims 16/64/256
CASES = [
    ("gqa-full-33x17", (2, 4, 2, 33, 17, 16, False, (-1, -1))),
    ("mqa-window30-17x33", (1, 4, 1, 17, 33, 16, False, (3, 0))),
    ("gqa-window52-1x17-d64", (1, 2, 1, 1, 17, 64, False, (5, 2))),
    ("window00-33x17", (1, 2, 2, 33, 17, 16, False, (0, 0))),
    ("window-14-17x33", (1, 2, 2, 17, 33, 16, False, (-1, 4))),
    ("bottom-right-causal-33x17", (1, 2, 2, 33, 17, 16, False, (-1, 0))),
    ("gqa-causal-top-left-17x33", (1, 4, 2, 17, 33, 16, True, (-1, -1))),
    ("mqa-window30-17-d256", (1, 2, 1, 17, 17, 256, False, (3, 0))),
    ("one-token", (1, 2, 1, 1, 1, 16, False, (0, 0))),
]


@pytest.mark.parametrize("case", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_forward_and_gradients_match_the_float64_reference(case, close):
    b, hq, hkv, nq, nk, d, causal, window = case
    q, k, v, do = _inputs(b, hq, hkv, nq, nk, d)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    gqa = hq != hkv
    o = A.flash_attention(qg, kg, vg, is_causal=causal, enable_gqa=gqa, window_size=window)
    o.backward(do)
    o_ref, dq_ref, dk_ref, dv_ref = A.attention_reference(
        q, k, v, is_causal=causal, do=do, enable_gqa=gqa, window_size=window
    )
    ctx = f"{case}"
    assert kg.grad.shape == k.shape and vg.grad.shape == v.shape  # summed over each group, not per query head
    for name, out, ref in (("O", o.detach(), o_ref), ("dQ", qg.grad, dq_ref), ("dK", kg.grad, dk_ref),
                           ("dV", vg.grad, dv_ref)):  # fmt: skip
        close(out, ref, torch.float32, name, context=ctx)
    lse = A.attention_forward(q, k, v, is_causal=causal, enable_gqa=gqa, window_size=window)[1]
    lse_ref = A.logsumexp_reference(q, k, is_causal=causal, enable_gqa=gqa, window_size=window)
    close(lse, lse_ref, torch.float32, "LSE", context=ctx)


def test_key_blocks_outside_the_window_are_never_loaded():
    """Nq = 17 queries, window (3, 0) bottom-right: they see the last 20 keys only. With Nk four of the largest key
    tiles long, the keys before the last tile boundary below Nk - 20 are outside every Q block's range (and every K
    block there is seen by no Q block). NaN there cannot reach any output or gradient unless a kernel loads them (a
    masked score still multiplies its V row: 0 * NaN = NaN)."""
    tiles = [A.attention_config(kind, 16, torch.float32, 17, 4096) for kind in ("forward", "dq", "dkdv")]
    block = max(max(c.block_n, c.block_m) for c in tiles)
    nk = 4 * block
    cut = (nk - 20) // block * block
    q, k, v, do = _inputs(1, 2, 1, 17, nk, 16)
    kp, vp = k.clone(), v.clone()
    kp[:, :, :cut] = float("nan")
    vp[:, :, :cut] = float("nan")
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, kp, vp))
    o = A.flash_attention(qg, kg, vg, enable_gqa=True, window_size=(3, 0))
    o.backward(do)
    o_ref, dq_ref, dk_ref, dv_ref = A.attention_reference(q, k, v, do=do, enable_gqa=True, window_size=(3, 0))
    check.assert_close(o.detach(), o_ref, name="O")
    check.assert_close(qg.grad, dq_ref, name="dQ")
    assert (kg.grad[:, :, :cut] == 0).all() and (vg.grad[:, :, :cut] == 0).all()
    check.assert_close(kg.grad[:, :, cut:], dk_ref[:, :, cut:], name="dK")
    check.assert_close(vg.grad[:, :, cut:], dv_ref[:, :, cut:], name="dV")


@pytest.mark.parametrize("window", [(-1, 0), (2, 0)])
def test_a_query_that_sees_no_key_gets_zeros(window):
    """As flash_attention's docstring says (and FlashAttention gives): with Nq > Nk and the right side bounded, the
    first Nq - Nk queries see no key; their rows of O and dQ are exactly 0 (not NaN, not poison), LSE 0."""
    q, k, v, do = _inputs(1, 4, 2, 19, 7, 16)
    qg = q.clone().requires_grad_(True)
    o = A.flash_attention(qg, k, v, enable_gqa=True, window_size=window)
    o.backward(do)
    assert (o[:, :, :12] == 0).all() and (qg.grad[:, :, :12] == 0).all()
    _, lse = A.attention_forward(q, k, v, enable_gqa=True, window_size=window)
    assert (lse[:, :, :12] == 0).all() and torch.isfinite(lse).all()


def test_windows_run_on_version_1_here_and_refuse_version_2():
    """On the CPU both features take version 1; version 2 has no window; version 3 (Hopper) has both, and says why
    it cannot run here (tests/attention/v3/test_v3_gqa_window_gpu.py runs it on the GPU)."""
    q, k, v, _ = _inputs(1, 4, 2, 17, 17, 16)
    assert plan.forward_plan(q, k, v, enable_gqa=True).version == 1  # on CPU
    assert plan.forward_plan(q, q, q, window_size=(3, 0)).version == 1
    with pytest.raises(ValueError, match="versions 1 and 3 have it"):
        A.attention_forward(q.half(), q.half(), q.half(), window_size=(3, 0), version=2)
    # no GPU here; on a Triton version 3 was not measured on, that reason comes first
    why = r"version=3 cannot run this input: version 3 (runs on a CUDA GPU|\(Gluon\) was measured on Triton)"
    with pytest.raises(ValueError, match=why):
        A.attention_forward(q, k, v, enable_gqa=True, window_size=(3, 0), version=3)


def test_version_2_forward_reads_kv_head_h_over_group(close):
    """Version 2 (TMA descriptors; runs in the interpreter) with grouped heads: each query head's descriptor starts at
    its KV head's rows."""
    q, k, v, _ = _inputs(2, 4, 1, 33, 17, 16, torch.float16)
    o, lse = A.attention_forward(q, k, v, is_causal=True, enable_gqa=True, version=2)
    close(o, A.attention_reference(q, k, v, is_causal=True, enable_gqa=True), torch.float16, "O")
    close(lse, A.logsumexp_reference(q, k, is_causal=True, enable_gqa=True), torch.float16, "LSE")


def test_custom_op_with_gqa_and_window_passes_opcheck():
    q, k, v, do = _inputs(1, 4, 2, 9, 17, 16)
    torch.library.opcheck(ops.forward_op, (q, k, v, False, 0.25, False, False, True, [3, 1]))
    o, lse = ops.forward_op(q, k, v, False, 0.25, False, False, True, [3, 1])
    dq, dk, dv = ops.backward_op(do, q, k, v, o, lse, False, 0.25, False, False, True, [3, 1])
    refs = A.attention_reference(q, k, v, scale=0.25, do=do, enable_gqa=True, window_size=(3, 1))
    for name, out, ref in zip(("O", "dQ", "dK", "dV"), (o, dq, dk, dv), refs):
        check.assert_close(out, ref, name=name)


def test_compiled_fullgraph_with_gqa_and_window_equals_the_reference():
    """Under torch.compile the custom ops carry enable_gqa and the window; their fake gives dK, dV KV-head shapes."""
    q, k, v, do = _inputs(1, 4, 2, 17, 33, 16)

    def f(q, k, v):
        return A.flash_attention(q, k, v, enable_gqa=True, window_size=(5, 2))

    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = torch.compile(f, fullgraph=True, backend="aot_eager")(qg, kg, vg)
    o.backward(do)
    refs = A.attention_reference(q, k, v, do=do, enable_gqa=True, window_size=(5, 2))
    for name, out, ref in zip(("O", "dQ", "dK", "dV"), (o.detach(), qg.grad, kg.grad, vg.grad), refs):
        check.assert_close(out, ref, name=name)
