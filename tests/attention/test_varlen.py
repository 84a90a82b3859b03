"""varlen_attn: packed batches of sequences of different lengths against the float64 reference (forward, LSE, every
gradient), one forward launch for the whole batch, and bad input refused by name."""

import pytest
import torch

from gpulab import attention as A
from gpulab import check, launch, runtime


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


def test_one_forward_launch_for_the_whole_batch():
    q, k, v, _, cu, _ = _packed([3, 17, 1, 9], [3, 17, 1, 9], 2, 2, 16)
    before = sum(launch.launch_counts().values())
    A.varlen_attn(q, k, v, cu, cu, 17, 17)
    assert sum(launch.launch_counts().values()) - before == 1


def _call(**over):
    q, k, v, _, cu, _ = _packed([3, 5], [3, 5], 4, 4, 16)
    args = dict(query=q, key=k, value=v, cu_seq_q=cu, cu_seq_k=cu, max_q=5, max_k=5) | over
    return A.varlen_attn(**{n: args.pop(n) for n in ("query", "key", "value", "cu_seq_q", "cu_seq_k", "max_q",
                                                      "max_k")}, **args)  # fmt: skip


_CU = torch.tensor([0, 3, 8], dtype=torch.int32)
BAD = [
    ("offsets-int64", dict(cu_seq_q=_CU.long()), TypeError, "cu_seq_q must be an int32"),
    ("offsets-2d", dict(cu_seq_k=_CU[None]), ValueError, "cu_seq_k must be 1-D"),
    ("offsets-not-from-0", dict(cu_seq_q=torch.tensor([1, 3, 8], dtype=torch.int32)), ValueError, r"cu_seq_q\[0\]"),
    ("offsets-decrease", dict(cu_seq_k=torch.tensor([0, 6, 5], dtype=torch.int32)), ValueError, "decreases"),
    ("offsets-past-end", dict(cu_seq_q=torch.tensor([0, 3, 9], dtype=torch.int32)), ValueError, "past the end"),
    ("offsets-lengths-differ", dict(cu_seq_k=torch.tensor([0, 8], dtype=torch.int32)), ValueError, "same length"),
    ("max-q-too-small", dict(max_q=4), ValueError, "longer than max_q=4"),
    ("max-q-zero", dict(max_q=0), ValueError, "max_q must be a positive int"),
    ("max-k-float", dict(max_k=5.0), ValueError, "max_k must be a positive int"),
    ("window-below", dict(window_size=(-3, 0)), ValueError, "window_size"),
    ("heads-differ", dict(key=torch.zeros(8, 3, 16), value=torch.zeros(8, 3, 16)), ValueError, "enable_gqa=False"),
    (
        "heads-not-multiple",
        dict(key=torch.zeros(8, 3, 16), value=torch.zeros(8, 3, 16), enable_gqa=True),
        ValueError,
        "multiple of the KV heads",
    ),  # fmt: skip
    ("not-packed", dict(query=torch.zeros(1, 8, 4, 16)), ValueError, "packed"),
    (
        "head-dim-264",
        dict(query=torch.zeros(8, 4, 264), key=torch.zeros(8, 4, 264), value=torch.zeros(8, 4, 264)),
        ValueError,
        "head dims 1 to 256",
    ),  # fmt: skip
    ("seqused-k", dict(seqused_k=torch.tensor([3, 5], dtype=torch.int32)), ValueError, "seqused_k"),
    ("block-table", dict(block_table=torch.zeros(2, 1, dtype=torch.int32)), ValueError, "block_table"),
    ("num-splits", dict(num_splits=1), ValueError, "num_splits"),
    ("cu-seq-k-none", dict(cu_seq_k=None), ValueError, "cu_seq_k is None"),
]


@pytest.mark.parametrize("over, error, word", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_input_is_refused_by_name(over, error, word):
    with pytest.raises(error, match=word):
        _call(**over)


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
