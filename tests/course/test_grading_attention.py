"""The attention graders: the backward-block grader passes a correct answer and names each common mistake."""

import pytest
import torch
import triton
import triton.language as tl

from gpulab.course import grading_attention as grading


def backward_block(q, k, v, o, do, lse, scale):
    p = torch.exp(scale * q @ k.T - lse[:, None])
    dv = p.T @ do
    dp = do @ v.T
    ds = p * (dp - (do * o).sum(-1, keepdim=True))
    return scale * ds @ k, scale * ds.T @ q, dv


def _mutant(kind):
    def f(q, k, v, o, do, lse, scale):
        p = torch.exp(scale * q @ k.T - (0 if kind == "no lse" else lse[:, None]))
        dp = do @ v.T
        ds = p * (dp if kind == "no D" else dp - (do * o).sum(-1, keepdim=True))
        c = 1.0 if kind == "no scale" else scale
        dk = c * ds.T @ q
        return c * ds @ k, dk.T if kind == "no transpose" else dk, p.T @ do

    return f


def test_a_correct_block_passes(capsys):
    grading.grade_attention_backward(backward_block)
    assert capsys.readouterr().out.startswith("PASSED attention backward for one block")


@pytest.mark.parametrize(
    "kind, message",
    [("no D", "subtract D"), ("no scale", "scale comes back"), ("no lse", "log-sum-exp"), ("no transpose", "shape")],
)
def test_common_mistakes_are_named(kind, message):
    with pytest.raises(AssertionError, match=message):
        grading.grade_attention_backward(_mutant(kind))


def test_the_unsolved_stub_fails_clearly():
    def stub(*args):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented|NotImplementedError|YOUR CODE"):
        grading.grade_attention_backward(stub)


def test_kv_bytes_grader_and_its_mistakes(capsys):
    grading.grade_kv_bytes(lambda n, d, bm, e: -(-n // bm) * 2 * n * d * e)
    assert capsys.readouterr().out.startswith("PASSED K/V bytes read by the forward")
    for wrong, message in (
        (lambda n, d, bm, e: -(-n // bm) * n * d * e, "both K and V"),
        (lambda n, d, bm, e: n / bm * 2 * n * d * e, "ragged"),
        (lambda n, d, bm, e: 2 * n * d * e, "number of Q blocks"),
    ):
        with pytest.raises(AssertionError, match=message):
            grading.grade_kv_bytes(wrong)


def _autograd_softmax(q, k, v, o, do, lse, scale):
    with torch.enable_grad():  # grad mode turned back on inside: the trace still sees autograd's ops
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        return torch.autograd.grad(torch.softmax(scale * q @ k.T, -1) @ v, (q, k, v), do)


def _autograd_exp(q, k, v, o, do, lse, scale):
    with torch.enable_grad():  # no *_backward op: exp's and div's backward are plain mul and div
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        p = torch.exp(scale * q @ k.T - lse[:, None])
        return torch.autograd.grad(p @ v, (q, k, v), do)


def _torch_func(q, k, v, o, do, lse, scale):
    return torch.func.vjp(lambda q, k, v: torch.exp(scale * q @ k.T - lse[:, None]) @ v, q, k, v)[1](do)


def _softmax_recomputed(q, k, v, o, do, lse, scale):
    p = torch.softmax(scale * q @ k.T, -1)  # right numbers, but not from the forward's log-sum-exp
    dv = p.T @ do
    ds = p * (do @ v.T - (do * o).sum(-1, keepdim=True))
    return scale * ds @ k, scale * ds.T @ q, dv


def _elementwise_products(q, k, v, o, do, lse, scale):
    p = torch.exp(scale * (q[:, None, :] * k[None]).sum(-1) - lse[:, None])
    dv = (p.T[:, :, None] * do[None]).sum(1)
    ds = p * ((do[:, None, :] * v[None]).sum(-1) - (do * o).sum(-1, keepdim=True))
    return scale * (ds[:, :, None] * k[None]).sum(1), scale * (ds.T[:, :, None] * q[None]).sum(1), dv


@pytest.mark.parametrize(
    "answer, message",
    [
        (_autograd_softmax, r"_softmax_backward_data.*derive the gradients yourself"),
        (_autograd_exp, "tensors that require grad"),
        (_torch_func, "torch.func"),
        (_softmax_recomputed, "recompute P from the forward's log-sum-exp"),
        (_elementwise_products, "matrix products"),
    ],
    ids=["autograd-softmax", "autograd-exp-enable-grad", "torch-func", "softmax", "no-products"],
)
def test_wrong_methods_are_refused_with_their_name(answer, message):
    with pytest.raises(AssertionError, match=message):
        grading.grade_attention_backward(answer)


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, MISTAKE: tl.constexpr):  # fmt: skip
    bh = tl.program_id(1)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + bh * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
                mask=(offs_m < n_q)[:, None], other=0.0)  # fmt: skip
    k_ptrs = k_ptr + bh * n_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    v_ptrs = v_ptr + bh * n_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, n_k, BLOCK_N):
        cols = start_n + offs_n
        if MISTAKE == "unmasked":  # the ragged last K/V block read past the end
            k = tl.load(k_ptrs + start_n * HEAD_DIM)
            v = tl.load(v_ptrs + start_n * HEAD_DIM)
        else:
            k = tl.load(k_ptrs + start_n * HEAD_DIM, mask=(cols < n_k)[:, None], other=0.0)
            v = tl.load(v_ptrs + start_n * HEAD_DIM, mask=(cols < n_k)[:, None], other=0.0)
        if MISTAKE == "sums":  # scores on the CUDA cores
            s = tl.sum(q[:, None, :] * k[None, :, :], 2) * qk_scale
        else:
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
        s = tl.where((cols < n_k)[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if MISTAKE == "no alpha":  # acc never rescaled
            acc = acc + tl.dot(p, v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    o = acc / l_i[:, None]
    tl.store(o_ptr + bh * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], o,
             mask=(offs_m < n_q)[:, None])  # fmt: skip


@triton.jit
def forward_right(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr):  # fmt: skip
    _forward(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, "none")


@triton.jit
def forward_unmasked(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr):  # fmt: skip
    _forward(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, "unmasked")


@triton.jit
def forward_sums(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr):  # fmt: skip
    _forward(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, "sums")


@triton.jit
def forward_no_alpha(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr):  # fmt: skip
    _forward(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, "no alpha")


def test_a_correct_forward_passes(capsys):
    grading.grade_forward_kernel(forward_right, cases=2)
    assert capsys.readouterr().out.startswith("PASSED FlashAttention forward inner loop")


@pytest.mark.parametrize(
    "kernel, message",
    [
        (forward_unmasked, "tl.load of a .16, 16. tile without a mask"),
        (forward_sums, "tt.dot ops are 16x16 .in the loop.; the loop over key blocks makes two"),
        (forward_no_alpha, "Check the rescaling"),
    ],
    ids=["unmasked-kv", "scores-by-sums", "no-rescale"],
)
def test_forward_wrong_methods_are_named(kernel, message):
    with pytest.raises(AssertionError, match=message):
        grading.grade_forward_kernel(kernel, cases=3)


@triton.jit
def _causal(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr, MISTAKE: tl.constexpr):  # fmt: skip
    bh = tl.program_id(1)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + bh * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
                mask=(offs_m < n_q)[:, None], other=0.0)  # fmt: skip
    k_ptrs = k_ptr + bh * n_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    v_ptrs = v_ptr + bh * n_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    end = n_k if MISTAKE == "all blocks" else tl.minimum(n_k, (tl.program_id(0) + 1) * BLOCK_M)
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptrs + start_n * HEAD_DIM, mask=(cols < n_k)[:, None], other=0.0)
        v = tl.load(v_ptrs + start_n * HEAD_DIM, mask=(cols < n_k)[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
        if MISTAKE == "strict":  # the diagonal left out
            seen = cols[None, :] < offs_m[:, None]
        else:
            seen = cols[None, :] <= offs_m[:, None]
        s = tl.where(seen & (cols < n_k)[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_ref)
        p = tl.exp2(s - m_ref[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    o = acc / l_i[:, None]
    tl.store(o_ptr + bh * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], o,
             mask=(offs_m < n_q)[:, None])  # fmt: skip


@triton.jit
def causal_right(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr):  # fmt: skip
    _causal(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, "none")


@triton.jit
def causal_all_blocks(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr):  # fmt: skip
    _causal(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, "all blocks")


@triton.jit
def causal_strict(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr):  # fmt: skip
    _causal(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, "strict")


def test_a_correct_causal_forward_passes(capsys):
    grading.grade_causal_forward(causal_right, cases=3)
    assert capsys.readouterr().out.startswith("PASSED causal FlashAttention forward")


@pytest.mark.parametrize(
    "kernel, message",
    [
        (forward_right, "non-causal output"),
        (causal_all_blocks, "read key blocks above the diagonal"),
        (causal_strict, "sees key i too"),
        (forward_sums, "no tt.dot|tt.dot ops are"),
    ],
    ids=["not-causal", "all-key-blocks", "strict-mask", "scores-by-sums"],
)
def test_causal_wrong_methods_are_named(kernel, message):
    with pytest.raises(AssertionError, match=message):
        grading.grade_causal_forward(kernel, cases=2)
