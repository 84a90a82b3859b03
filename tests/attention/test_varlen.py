"""varlen_attn: packed batches of sequences of different lengths against the float64 reference (forward, LSE, every
gradient), one forward launch for the whole batch, and bad input refused by name."""

import pytest
import torch

from gpulab import attention as A
from gpulab import check, launch, runtime
from gpulab.attention import varlen


def _offsets(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=runtime.device)


def _packed(lens_q, lens_k, hq, hkv, d, dtype=torch.float32):
    cu_q, cu_k = _offsets(lens_q), _offsets(lens_k)
    tq, tk = int(cu_q[-1]), int(cu_k[-1])
    q = check.random_tensor(tq, hq, d, dtype=dtype)
    k = check.random_tensor(tk, hkv, d, dtype=dtype)
    v = check.random_tensor(tk, hkv, d, dtype=dtype)
    do = check.random_tensor(tq, hq, d, dtype=dtype)
    return q, k, v, do, cu_q, cu_k


# (query lengths, key lengths, Hq, Hkv, D, window): an empty sequence, a single token, Nq != Nk both ways
CASES = [
    ("same-lengths-empty-single", ([5, 0, 1, 33, 17], [5, 0, 1, 33, 17], 2, 2, 16, (-1, -1))),
    ("causal-gqa-mixed", ([5, 0, 1, 33, 17], [9, 3, 1, 20, 40], 4, 2, 32, (-1, 0))),
    ("mqa-window30", ([17, 1, 40], [17, 2, 19], 4, 1, 16, (3, 0))),
    ("window52-d64", ([17, 1, 40], [17, 2, 19], 2, 2, 64, (5, 2))),
    ("window-14-no-keys", ([3, 17], [0, 33], 2, 2, 16, (-1, 4))),
    ("window00-d256", ([1, 17], [1, 9], 2, 1, 256, (0, 0))),
]


@pytest.mark.parametrize("case", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_forward_lse_and_gradients_match_the_float64_reference(case, close):
    lens_q, lens_k, hq, hkv, d, window = case
    q, k, v, do, cu_q, cu_k = _packed(lens_q, lens_k, hq, hkv, d)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o, lse = A.varlen_attn(qg, kg, vg, cu_q, cu_k, max(lens_q), max(lens_k), window_size=window,
                           enable_gqa=hq != hkv, return_aux=A.AuxRequest(lse=True))  # fmt: skip
    assert lse.shape == (hq, q.shape[0]) and lse.dtype == torch.float32  # as torch's varlen_attn returns it
    o.backward(do)
    refs = A.varlen_attention_reference(q, k, v, cu_q, cu_k, window_size=window, enable_gqa=hq != hkv, do=do)
    for name, out, ref in zip(("O", "LSE", "dQ", "dK", "dV"), (o.detach(), lse, qg.grad, kg.grad, vg.grad), refs):
        close(out, ref, torch.float32, name, context=str(case))


def test_each_sequence_equals_flash_attention_on_it_alone():
    """Packing changes nothing: sequence s of the batch is flash_attention of its own rows (window bottom-right)."""
    lens = [7, 0, 19]
    q, k, v, _, cu, _ = _packed(lens, lens, 2, 2, 16)
    o = A.varlen_attn(q, k, v, cu, cu, 19, 19, window_size=(4, 0))
    for s in range(len(lens)):
        a, b = int(cu[s]), int(cu[s + 1])
        if a == b:
            continue
        one = A.flash_attention(*(t[a:b].transpose(0, 1)[None] for t in (q, k, v)), window_size=(4, 0))
        check.assert_close(o[a:b], one[0].transpose(0, 1), name=f"sequence {s}")


def test_strided_offsets_give_the_same_output_and_gradients(close):
    """Offsets that are a strided view (``cu[::2]``) hold the same values as their contiguous copy: the kernels, which
    read ``cu_seq[s]`` at the base pointer + s, must see those values (they read the skipped entries before)."""
    lens_q, lens_k = [5, 0, 17], [9, 3, 11]
    q, k, v, do, cu_q, cu_k = _packed(lens_q, lens_k, 2, 2, 16)
    spread = [torch.stack((cu, torch.full_like(cu, 7))).T.reshape(-1) for cu in (cu_q, cu_k)]  # [c0, 7, c1, 7, ...]
    strided_q, strided_k = (t[::2] for t in spread)
    assert not strided_q.is_contiguous() and torch.equal(strided_q, cu_q)
    refs = A.varlen_attention_reference(q, k, v, cu_q, cu_k, window_size=(-1, 0), do=do)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o, lse = A.varlen_attn(qg, kg, vg, strided_q, strided_k, 17, 11, window_size=(-1, 0),
                           return_aux=A.AuxRequest(lse=True))  # fmt: skip
    o.backward(do)
    for name, out, ref in zip(("O", "LSE", "dQ", "dK", "dV"), (o.detach(), lse, qg.grad, kg.grad, vg.grad), refs):
        close(out, ref, torch.float32, name, context="strided offsets")
    grads = varlen.varlen_backward(do, q, k, v, o.detach(), lse, strided_q, strided_k, 17, 11, window_size=(-1, 0))
    for name, out, ref in zip(("dQ", "dK", "dV"), grads, refs[2:]):
        close(out, ref, torch.float32, name, context="varlen_backward, strided offsets")


def test_one_forward_launch_for_the_whole_batch():
    q, k, v, _, cu, _ = _packed([3, 17, 1, 9], [3, 17, 1, 9], 2, 2, 16)
    before = sum(launch.launch_counts().values())
    A.varlen_attn(q, k, v, cu, cu, 17, 17)
    assert sum(launch.launch_counts().values()) - before == 1


def test_offsets_are_read_once_until_written(monkeypatch):
    """The host reads a pair of offsets tensors once (a read waits for the GPU); a write in place, other sizes or a
    new tensor with the same values are read again, and bad offsets written in place are refused."""
    q, k, v, _, cu, _ = _packed([3, 5], [3, 5], 2, 2, 16)
    reads = []
    real = varlen.check_offsets
    monkeypatch.setattr(varlen, "check_offsets", lambda *a: reads.append(a[4:]) or real(*a))
    for _ in range(3):
        A.varlen_attn(q, k, v, cu, cu, 5, 5)
    assert len(reads) == 1, f"the offsets were read {len(reads)} times for one tensor (expected once)"
    A.varlen_attn(q, k, v, cu.clone(), cu, 5, 5)
    A.varlen_attn(q, k, v, cu, cu, 6, 5)
    assert len(reads) == 3, "a new tensor or a new max_q must be read again"
    cu.copy_(_offsets([3, 6]))  # ends at 9, past q's 8 tokens
    with pytest.raises(ValueError, match="past the end"):
        A.varlen_attn(q, k, v, cu, cu, 6, 6)


def test_compiled_fullgraph_equals_the_reference_and_checks_the_offsets():
    """Under torch.compile varlen_attn calls its custom ops (it used to trace into the launcher and fail); the op
    reads and checks the offsets on the real tensors, so bad ones raise the same clear error."""
    q, k, v, do, cu_q, cu_k = _packed([5, 0, 9], [7, 3, 9], 4, 2, 16)

    def f(q, k, v, cu_q, cu_k):
        return A.varlen_attn(q, k, v, cu_q, cu_k, 9, 9, window_size=(3, 0), enable_gqa=True,
                             return_aux=A.AuxRequest(lse=True))  # fmt: skip

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o, lse = compiled(qg, kg, vg, cu_q, cu_k)
    o.backward(do)
    refs = A.varlen_attention_reference(q, k, v, cu_q, cu_k, window_size=(3, 0), enable_gqa=True, do=do)
    for name, out, ref in zip(("O", "LSE", "dQ", "dK", "dV"), (o.detach(), lse, qg.grad, kg.grad, vg.grad), refs):
        check.assert_close(out, ref, name=name)
    with pytest.raises(ValueError, match="past the end"):
        compiled(q, k, v, _offsets([5, 0, 10]), cu_k)


@pytest.mark.gpu
def test_gpu_varlen_is_captured_in_a_cuda_graph():
    """On a GPU: the launch reads no offsets on the host, so a CUDA graph captures it; replayed with new offsets of
    the same shape it computes the new batch."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    q, k, v, _, cu, _ = _packed([100, 0, 1, 300], [100, 0, 1, 300], 8, 2, 128, torch.bfloat16)
    A.varlen_attn(q, k, v, cu, cu, 300, 300, enable_gqa=True, window_size=(-1, 0))  # compile, outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o = A.varlen_attn(q, k, v, cu, cu, 300, 300, enable_gqa=True, window_size=(-1, 0))
    cu.copy_(_offsets([200, 50, 1, 150]))
    graph.replay()
    ref = A.varlen_attention_reference(q, k, v, cu, cu, window_size=(-1, 0), enable_gqa=True)[0]
    check.assert_close(o, ref, dtype=torch.bfloat16, name="O after replay with new offsets")


@pytest.mark.gpu
@pytest.mark.parametrize("window", [(-1, -1), (-1, 0)], ids=["full", "causal"])
def test_gpu_compiled_with_inductor_equals_the_reference(window):
    """On a GPU: varlen_attn inside a model compiled with inductor (fullgraph) runs its custom ops on the shipped
    kernels (version 3 where it takes the batch): O, LSE and every gradient against the float64 reference."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    q, k, v, do, cu_q, cu_k = _packed([300, 0, 1, 700, 129], [300, 0, 1, 700, 129], 8, 2, 128, torch.bfloat16)

    def f(q, k, v, cu_q, cu_k):
        return A.varlen_attn(q, k, v, cu_q, cu_k, 700, 700, window_size=window, enable_gqa=True,
                             return_aux=A.AuxRequest(lse=True))  # fmt: skip

    compiled = torch.compile(f, fullgraph=True)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o, lse = compiled(qg, kg, vg, cu_q, cu_k)
    o.backward(do)
    refs = A.varlen_attention_reference(q, k, v, cu_q, cu_k, window_size=window, enable_gqa=True, do=do)
    for name, out, ref in zip(("O", "LSE"), (o.detach(), lse), refs):
        check.assert_close(out, ref, dtype=torch.bfloat16, name=name)
    for name, out, ref in zip(("dQ", "dK", "dV"), (qg.grad, kg.grad, vg.grad), refs[2:]):  # by norm, as the v3 tests:
        assert torch.isfinite(out).all(), name  # a causal row of few keys rounds dP - D in bf16 elementwise
        err = check.relative_error(out, ref)
        assert err <= check.tolerance(torch.bfloat16), f"{name}: relative error {err:.3g}"
