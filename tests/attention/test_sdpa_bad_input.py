"""gpulab as SDPA's flash backend (gpulab.attention.sdpa), refusing: what the aten operators may be asked and gpulab
does not do raises a RuntimeError that names it and the way back to PyTorch's kernels; a wrong layout, bad offsets
or an unknown dispatch key a ValueError or TypeError naming the argument."""

import pytest
import torch

from gpulab import check, runtime
from gpulab.attention import sdpa
from gpulab.attention.sdpa import (
    activate_kernels,
    flash_attention_backward_impl,
    flash_attention_forward_impl,
    flash_attention_forward_inplace_impl,
    sdpa_flash_backward_impl,
    sdpa_flash_forward_impl,
)

aten = torch.ops.aten
U2, U0 = torch.zeros(2, dtype=torch.uint64), torch.zeros((), dtype=torch.uint64)  # rng_state, philox offset


def rand(*shape):
    return check.random_tensor(*shape)


@pytest.fixture
def routed():
    """gpulab's implementations registered for the key of gpulab's device for one test (CPU here; CUDA when the
    suite runs on a GPU, where these tests' fp32 inputs would otherwise reach PyTorch's own kernels), then removed."""
    handle = activate_kernels("CUDA" if runtime.on_gpu() else "CPU")
    yield handle
    handle.remove()


def _dense(**kw):
    q = rand(1, 5, 2, 8)
    args = dict(dropout_p=0.0, is_causal=False, return_debug_mask=False)
    args.update({n: kw.pop(n) for n in list(kw) if n in args})
    return flash_attention_forward_impl(q, q, q, None, None, 5, 5, args["dropout_p"], args["is_causal"],
                                        args["return_debug_mask"], **kw)  # fmt: skip


@pytest.mark.parametrize(
    "kwargs,named",
    [
        ({"dropout_p": 0.1}, "dropout"),
        ({"return_debug_mask": True}, "return_debug_mask"),
        ({"alibi_slopes": torch.ones(2)}, "ALiBi"),
        ({"seqused_k": torch.ones(1, dtype=torch.int32)}, "seqused_k"),
        ({"block_table": torch.zeros(1, 1, dtype=torch.int32)}, "block table"),
        ({"num_splits": 4}, "num_splits=4"),
        ({"softcap": 30.0}, "softcap=30.0"),  # an argument a later torch may add: refused by name, not ignored
    ],
    ids=["dropout", "debug_mask", "alibi", "seqused_k", "block_table", "num_splits", "unknown"],
)
def test_refuses_what_it_does_not_do(kwargs, named):
    with pytest.raises(RuntimeError, match=named) as err:
        _dense(**kwargs)
    assert "restore_flash_attention_impl()" in str(err.value)


def test_refuses_through_the_dispatcher(routed):
    q = rand(1, 2, 5, 8)
    with pytest.raises(RuntimeError, match="dropout"):
        aten._scaled_dot_product_flash_attention(q, q, q, 0.5, False)
    with pytest.raises(RuntimeError, match="dropout"):
        aten._scaled_dot_product_flash_attention_backward(q, q, q, q, q, q[..., 0], None, None, 5, 5, 0.5, False, U2,
                                                          U0)  # fmt: skip
    if "block_table" in str(aten._flash_attention_forward.default._schema):  # torch 2.13 has it, 2.11 not
        with pytest.raises(RuntimeError, match="block table"):
            aten._flash_attention_forward(q, q, q, None, None, 2, 2, 0.0, False, False,
                                          block_table=torch.zeros(1, 1, dtype=torch.int32))  # fmt: skip


def test_refuses_dropout_in_every_operator():
    q, qb = rand(1, 2, 5, 8), rand(1, 5, 2, 8)
    lse = torch.zeros(1, 2, 5)
    calls = [
        lambda: sdpa_flash_forward_impl(q, q, q, 0.5),
        lambda: sdpa_flash_backward_impl(q, q, q, q, q, lse, None, None, 5, 5, 0.5, False, U2, U0),
        lambda: flash_attention_forward_impl(qb, qb, qb, None, None, 5, 5, 0.5, False, False),
        lambda: flash_attention_forward_inplace_impl(qb.clone(), qb, qb, qb, None, None, 5, 5, 0.5, False, False),
        lambda: flash_attention_backward_impl(qb, qb, qb, qb, qb, lse, None, None, 5, 5, 0.5, False, U2, U0),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match="dropout"):
            call()


def test_refuses_fp8():
    q = torch.zeros(1, 2, 5, 8, dtype=torch.float8_e4m3fn)
    with pytest.raises(RuntimeError, match="fp8"):
        sdpa_flash_forward_impl(q, q, q)


def test_wrong_layouts_name_the_tensor_and_the_layout():
    q3, q4 = rand(5, 2, 8), rand(1, 5, 2, 8)
    with pytest.raises(ValueError, match=r"query must be 4-dimensional \[B, H, N, D\]"):
        sdpa_flash_forward_impl(q3, q3, q3)
    with pytest.raises(ValueError, match=r"grad_out must be 4-dimensional"):
        sdpa_flash_backward_impl(q3, q4, q4, q4, q4, torch.zeros(1, 5, 2), None, None, 5, 5, 0.0, False, U2, U0)
    with pytest.raises(ValueError, match=r"key must be 4-dimensional \[B, N, H, D\] \(dense"):
        flash_attention_forward_impl(q4, q3, q4, None, None, 5, 5, 0.0, False, False)
    cu = torch.tensor([0, 5], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"query must be 3-dimensional \[T, H, D\] \(packed"):
        flash_attention_forward_impl(q4, q3, q3, cu, cu, 5, 5, 0.0, False, False)
    with pytest.raises(ValueError, match=r"out must be 3-dimensional"):
        flash_attention_backward_impl(q3, q3, q3, q3, q4, torch.zeros(2, 5), cu, cu, 5, 5, 0.0, False, U2, U0)
    with pytest.raises(TypeError, match="value must be a torch.Tensor"):
        flash_attention_forward_inplace_impl(q4.clone(), q4, q4, None, None, None, 5, 5, 0.0, False, False)


@pytest.mark.parametrize(
    "cu_q,cu_k,match",
    [
        (torch.tensor([0, 3, 5], dtype=torch.int64), None, "cu_seq_q must be an int32 tensor"),
        (None, torch.tensor([[0, 3, 5]], dtype=torch.int32), r"cu_seq_k must be 1-D"),
        (torch.tensor([0, 5], dtype=torch.int32), None, r"cu_seq_q \(2,\) and cu_seq_k \(3,\) must have the same"),
        (torch.tensor([1, 3, 5], dtype=torch.int32), None, r"cu_seq_q\[0\] is 1; cumulative offsets start at 0"),
        (None, torch.tensor([0, 4, 2], dtype=torch.int32), "cu_seq_k decreases at sequence 1"),
        (torch.tensor([0, 3, 6], dtype=torch.int32), None, "past the end of the packed tensor's 5 tokens"),
    ],
    ids=["int64", "2-D", "lengths", "not-from-0", "decreasing", "past-the-end"],
)
def test_packed_backward_checks_the_offsets(cu_q, cu_k, match):
    good = torch.tensor([0, 3, 5], dtype=torch.int32)
    cu_q, cu_k = ((good if cu is None else cu).to(runtime.device) for cu in (cu_q, cu_k))  # on q's device, as aten's
    q, lse = rand(5, 2, 8), torch.zeros(2, 5, device=runtime.device)
    with pytest.raises((ValueError, TypeError), match=match):
        flash_attention_backward_impl(q, q, q, q, q, lse, cu_q, cu_k, 3, 3, 0.0, False, U2, U0)


def test_packed_forward_needs_key_offsets():
    q, cu = rand(5, 2, 8), torch.tensor([0, 5], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="cum_seq_k=None"):
        flash_attention_backward_impl(q, q, q, q, q, torch.zeros(2, 5), cu, None, 5, 5, 0.0, False, U2, U0)


@pytest.mark.parametrize("key", ["cuda", "Meta", 1, None], ids=str)
def test_activate_kernels_takes_cuda_or_cpu(key):
    with pytest.raises(ValueError, match="dispatch_key must be 'CUDA'"):
        activate_kernels(key)
    assert sdpa.sdpa_status()["active"] is False
