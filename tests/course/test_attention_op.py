"""Exercise 4, task 6: the attention op assembled from the learner's forward kernel and backward (CS336's problem,
graded for correctness on CPU at small sizes). The answer below passes; each wrong answer is refused with the
message that names its mistake (the README's catalogue of common mistakes lists them)."""

import math

import pytest
import torch
import triton
import triton.language as tl

from gpulab.course import grading_attention
from gpulab.triton_ops import LOG2E_F


@triton.jit
def _op_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_q, n_k, qk_scale, HEAD_DIM: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):  # fmt: skip
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + (bh * n_q + offs_m[:, None]) * HEAD_DIM + offs_d[None, :], mask=(offs_m < n_q)[:, None])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    end = tl.minimum(n_k, (pid_m + 1) * BLOCK_M) if CAUSAL else n_k
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + offs_n
        kv = (bh * n_k + cols[:, None]) * HEAD_DIM + offs_d[None, :]
        k = tl.load(k_ptr + kv, mask=(cols < n_k)[:, None], other=0.0)
        v = tl.load(v_ptr + kv, mask=(cols < n_k)[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
        keep = (cols < n_k)[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_new
    rows = bh * n_q + offs_m
    out = (acc / l_i[:, None]).to(o_ptr.dtype.element_ty)
    tl.store(o_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], out, mask=(offs_m < n_q)[:, None])
    tl.store(lse_ptr + rows, (m_i + tl.log2(l_i)) * 0.6931471805599453, mask=offs_m < n_q)


@triton.jit
def causal_lse_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_q, n_k, qk_scale, HEAD_DIM: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    _op_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_q, n_k, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, True)


@triton.jit
def full_lse_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_q, n_k, qk_scale, HEAD_DIM: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    _op_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_q, n_k, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, False)


def _forward(kernel, q, k, v):
    b, h, n, d = q.shape
    q, k, v = (t.contiguous() for t in (q, k, v))
    o, lse = torch.empty_like(q), torch.empty(b, h, n, device=q.device)
    kernel[(triton.cdiv(n, 16), b * h)](q, k, v, o, lse, n, n, LOG2E_F / math.sqrt(d), HEAD_DIM=d, BLOCK_M=16,
                                        BLOCK_N=16)  # fmt: skip
    return o, lse


def _backward(q, k, v, o, do, lse, causal=True):
    """Task 3's algebra for [B, H, N, D] at once, P = 0 above the diagonal."""
    dtype, (q, k, v, o, do) = q.dtype, (t.float() for t in (q, k, v, o, do))
    n, scale = q.shape[-2], 1.0 / math.sqrt(q.shape[-1])
    p = torch.exp(scale * q @ k.mT - lse[..., None])
    if causal:
        p = p.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), 0.0)
    ds = p * (do @ v.mT - (do * o).sum(-1, keepdim=True))
    return (scale * ds @ k).to(dtype), (scale * ds.mT @ q).to(dtype), (p.mT @ do).to(dtype)


def _op(kernel=causal_lse_kernel, sdpa=False, backward="ours", torch_lse=False):
    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            if sdpa:
                o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                above = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool, device=q.device).triu(1)
                lse = torch.logsumexp((q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(above, float("-inf")), -1)
            else:
                o, lse = _forward(kernel, q, k, v)
            if torch_lse:  # the log-sum-exp recomputed from N x N scores in PyTorch
                above = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool, device=q.device).triu(1)
                lse = torch.logsumexp((q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(above, float("-inf")), -1)
            ctx.save_for_backward(q, k, v, o, lse)
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            if backward == "autograd":  # a float64 reference differentiated by autograd
                with torch.enable_grad():
                    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
                    ref = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True)
                    return tuple(g.to(q.dtype) for g in torch.autograd.grad(ref, leaves, do.double()))
            return _backward(q, k, v, o, do, lse, causal=backward != "not causal")

    return Attention.apply


def _plain_torch(q, k, v):
    """Differentiable PyTorch (autograd makes the backward), the kernel never launched."""
    n = q.shape[-2]
    above = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
    s = (q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(above, float("-inf"))
    return torch.softmax(s, -1) @ v


def test_attention_op_passes(capsys):
    grading_attention.grade_attention_op(_op(), causal_lse_kernel, cases=2)
    assert "PASSED attention op" in capsys.readouterr().out


@pytest.mark.parametrize(
    "attention, kernel, message",
    [
        (_op(sdpa=True), causal_lse_kernel, "PyTorch's own attention \\(SDPA\\)"),
        (_op(backward="autograd"), causal_lse_kernel, "the op's backward used autograd"),
        (_op(kernel=full_lse_kernel), full_lse_kernel, "It is the non-causal output"),
        (_op(backward="not causal"), causal_lse_kernel, "P was not masked"),
        (_plain_torch, causal_lse_kernel, "ran aten._softmax|launched no Triton kernel"),
        (_op(kernel=full_lse_kernel), causal_lse_kernel, "not the kernel you passed"),
        (_op(torch_lse=True), causal_lse_kernel, "matrix products in PyTorch besides the kernel"),
    ],
    ids=[
        "forward-sdpa",
        "backward-autograd",
        "mask-not-causal",
        "backward-not-causal",
        "plain-torch",
        "other-kernel",
        "lse-in-torch",
    ],  # fmt: skip
)
def test_attention_op_wrong_methods_are_named(attention, kernel, message):
    with pytest.raises(AssertionError, match=message):
        grading_attention.grade_attention_op(attention, kernel, cases=2)
