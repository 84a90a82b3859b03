"""Bad input to grouped-query heads, windows and varlen_attn, refused by name (the argument, what was given, what is
allowed): flash_attention, varlen_attn and the references and checks beside them."""

import pytest
import torch

from gpulab import attention as A
from gpulab import bench, runtime
from gpulab.attention import inputs, reference, varlen
from gpulab.attention.measure import features_bench


def _zeros(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype, device=runtime.device)


def _cu(*values):
    return torch.tensor(values, dtype=torch.int32, device=runtime.device)


FLASH = [
    ("heads-differ-no-gqa", dict(hkv=2), {}, ValueError, "enable_gqa=False they must be equal"),
    ("heads-not-multiple", dict(hkv=4), dict(enable_gqa=True), ValueError, "multiple of the KV heads"),
    ("gqa-not-bool", dict(hkv=2), dict(enable_gqa=1), TypeError, "enable_gqa"),
    ("window-below-minus-one", {}, dict(window_size=(-2, 0)), ValueError, r"window_size\[0\] \(left\) is -2"),
    ("window-right-below", {}, dict(window_size=(3, -5)), ValueError, r"window_size\[1\]"),
    ("window-with-causal", {}, dict(window_size=(3, 0), is_causal=True), ValueError, "is_causal=True together"),
    ("window-not-pair", {}, dict(window_size=(3,)), TypeError, "pair"),
    ("window-float", {}, dict(window_size=(3.0, 0)), TypeError, "must be an int"),
    ("head-dim-264", dict(d=264), {}, ValueError, "head dims 1 to 256"),
]


@pytest.mark.parametrize("shape, kwargs, error, word", [c[1:] for c in FLASH], ids=[c[0] for c in FLASH])
def test_flash_attention_refuses_bad_heads_and_windows(shape, kwargs, error, word):
    dims = dict(hq=6, hkv=6, d=16) | shape
    q, k = _zeros(1, dims["hq"], 5, dims["d"]), _zeros(1, dims["hkv"], 5, dims["d"])
    with pytest.raises(error, match=word):
        A.flash_attention(q, k, k, **kwargs)


def _call(**over):
    q = _zeros(8, 4, 16)
    cu = _cu(0, 3, 8)
    args = dict(query=q, key=q, value=q, cu_seq_q=cu, cu_seq_k=cu, max_q=5, max_k=5) | over
    positional = [args.pop(n) for n in ("query", "key", "value", "cu_seq_q", "cu_seq_k", "max_q", "max_k")]
    return A.varlen_attn(*positional, **args)


VARLEN = [
    ("offsets-int64", dict(cu_seq_q=_cu(0, 3, 8).long()), TypeError, "cu_seq_q must be an int32"),
    ("offsets-2d", dict(cu_seq_k=_cu(0, 3, 8)[None]), ValueError, "cu_seq_k must be 1-D"),
    ("offsets-not-from-0", dict(cu_seq_q=_cu(1, 3, 8)), ValueError, r"cu_seq_q\[0\] is 1"),
    ("offsets-decrease", dict(cu_seq_k=_cu(0, 6, 5)), ValueError, "decreases at sequence 1"),
    ("offsets-past-end", dict(cu_seq_q=_cu(0, 3, 9)), ValueError, "past the end"),
    ("offsets-lengths-differ", dict(cu_seq_k=_cu(0, 8)), ValueError, "same length"),
    ("max-q-too-small", dict(max_q=4), ValueError, "longer than max_q=4"),
    ("max-q-zero", dict(max_q=0), ValueError, "max_q must be a positive int"),
    ("max-k-float", dict(max_k=5.0), ValueError, "max_k must be a positive int"),
    ("window-below", dict(window_size=(-3, 0)), ValueError, "window_size"),
    ("heads-differ", dict(key=_zeros(8, 3, 16), value=_zeros(8, 3, 16)), ValueError, "enable_gqa=False"),
    (
        "heads-not-multiple",
        dict(key=_zeros(8, 3, 16), value=_zeros(8, 3, 16), enable_gqa=True),
        ValueError,
        "multiple of the KV heads",
    ),  # fmt: skip
    ("not-packed", dict(query=_zeros(1, 8, 4, 16)), ValueError, "packed"),
    (
        "head-dim-264",
        dict(query=_zeros(8, 4, 264), key=_zeros(8, 4, 264), value=_zeros(8, 4, 264)),
        ValueError,
        "head dims 1 to 256",
    ),  # fmt: skip
    ("float64", dict(query=_zeros(8, 4, 16, dtype=torch.float64)), ValueError, "float64"),
    ("seqused-k", dict(seqused_k=_cu(3, 5)), ValueError, "seqused_k"),
    ("block-table", dict(block_table=_cu(0, 1)), ValueError, "block_table"),
    ("num-splits", dict(num_splits=1), ValueError, "num_splits"),
    ("cu-seq-k-none", dict(cu_seq_k=None), ValueError, "cu_seq_k is None"),
    ("return-aux-bool", dict(return_aux=True), TypeError, "return_aux"),
    ("scale-beyond-float32", dict(scale=1e39), ValueError, "beyond float32"),  # ran, and returned NaN everywhere
]


@pytest.mark.parametrize("over, error, word", [c[1:] for c in VARLEN], ids=[c[0] for c in VARLEN])
def test_varlen_attn_refuses_bad_input_by_name(over, error, word):
    with pytest.raises(error, match=word):
        _call(**over)


@pytest.mark.skipif(not runtime.INTERPRET, reason="Triton's CPU interpreter computes bfloat16 wrongly; GPUs do not")
def test_varlen_attn_refuses_bf16_in_the_interpreter():
    # it used to run and return garbage (values near 1e8) instead of refusing as flash_attention does
    q = _zeros(8, 4, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="query is bfloat16, which Triton's CPU interpreter computes wrongly"):
        _call(query=q, key=q, value=q)


HELPERS = [
    ("check_window-triple", lambda: reference.check_window((1, 2, 3)), TypeError, "pair"),
    ("check_window-bool", lambda: reference.check_window((True, 0)), TypeError, "must be an int"),
    ("visible_mask-negative", lambda: reference.visible_mask(-1, 3), ValueError, "seq_q"),
    ("visible_mask-window-causal", lambda: reference.visible_mask(3, 3, True, (2, 0)), ValueError, "is_causal"),
    ("gqa_group-zero-kv", lambda: reference.gqa_group(4, 0, True), ValueError, "multiple"),
    ("varlen_attention_reference-4d", lambda: reference.varlen_attention_reference(
        _zeros(1, 8, 2, 4), _zeros(8, 2, 4), _zeros(8, 2, 4), _cu(0, 8), _cu(0, 8)), ValueError, "packed"),
    ("varlen_attention_reference-int64", lambda: reference.varlen_attention_reference(
        _zeros(8, 2, 4), _zeros(8, 2, 4), _zeros(8, 2, 4), _cu(0, 8).long(), _cu(0, 8)), ValueError, "int32"),
    ("check_offsets-decrease", lambda: varlen.check_offsets(_cu(0, 4, 2), _cu(0, 4, 2), 4, 4, 4, 4), ValueError,
     "decreases"),
    ("checked_offsets-longer-than-max", lambda: varlen.checked_offsets(_cu(0, 4, 9), _cu(0, 4, 9), 9, 9, 4, 5),
     ValueError, "longer than max_q=4"),
    ("mixed_lengths-tokens", lambda: features_bench.mixed_lengths(0, 1, 4), ValueError, "tokens"),
    ("mixed_lengths-order", lambda: features_bench.mixed_lengths(10, 5, 2), ValueError, "shortest=5"),
    ("varlen_backward-offsets-past-end", lambda: varlen.varlen_backward(
        *(_zeros(8, 4, 16),) * 5, _zeros(4, 8), _cu(0, 3, 9), _cu(0, 3, 9), 6, 6), ValueError, "past the end"),
    ("varlen_backward-window", lambda: varlen.varlen_backward(
        *(_zeros(8, 4, 16),) * 5, _zeros(4, 8), _cu(0, 8), _cu(0, 8), 8, 8, window_size=(-4, 0)), ValueError,
     "window_size"),
    ("check_scale-inf", lambda: inputs.check_scale(16, float("inf")), ValueError, "finite"),
    ("check_scale-beyond-float32", lambda: inputs.check_scale(16, -1e39), ValueError, "beyond float32"),
    ("varlen_plan-max-q", lambda: varlen.varlen_plan(_zeros(4, 2, 8), _zeros(4, 2, 8), _zeros(4, 2, 8), _cu(0, 4),
                                                     _cu(0, 4), -1, 4, None, (-1, -1), False), ValueError, "max_q"),
]  # fmt: skip


@pytest.mark.parametrize("call, error, word", [c[1:] for c in HELPERS], ids=[c[0] for c in HELPERS])
def test_references_and_checks_refuse_bad_input(call, error, word):
    with pytest.raises(error, match=word):
        call()


FLOPS = [
    ("window-triple", lambda: bench.visible_pairs(3, 3, False, (1, 2, 3)), TypeError, "window_size"),
    ("window-below", lambda: bench.visible_pairs(3, 3, False, (-2, 0)), ValueError, r"window_size\[0\]"),
    ("window-and-causal", lambda: bench.visible_pairs(3, 3, True, (1, 0)), ValueError, "is_causal"),
    ("lengths-differ", lambda: bench.visible_attention_flops([1, 2], [1], 16), ValueError, "one pair per sequence"),
    ("negative-seq", lambda: bench.visible_pairs(-1, 3), ValueError, "seq_q"),
    ("head-dim-float", lambda: bench.visible_attention_flops(3, 3, 16.0), TypeError, "head_dim"),
]


@pytest.mark.parametrize("call, error, word", [c[1:] for c in FLOPS], ids=[c[0] for c in FLOPS])
def test_visible_flops_refuse_bad_input(call, error, word):
    with pytest.raises(error, match=word):
        call()
