# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version,-jupytext.text_representation.format_version
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercises 5 — FlashAttention on Hopper
#
# One task that goes with `notebooks/05_attention_hopper.ipynb`: the CS336 leaderboard's problem, whose timings lesson 5 compares. Write your code where it says `# YOUR CODE HERE` (delete the `raise NotImplementedError()`), then run the `# GRADER` cell below it: it tests your code on fresh random inputs against float64 references and raises with a message if something is wrong.
#
# Grade the whole notebook from a terminal with
#
# ```
# make grade NB=exercises/05_attention_hopper.ipynb
# ```
#
# Everything runs on CPU (Triton's interpreter) as well as on a GPU.

# %%
import math

import torch

import gpulab  # first: decides GPU vs CPU interpreter before any kernel is defined
from gpulab.course import grading_attention as grading
from gpulab.triton_ops import LOG2E_F

import triton  # isort: skip
import triton.language as tl  # isort: skip


# %% [markdown]
# ## Task 1: one attention op, forward and backward (CS336's problem)
#
# Assemble a causal forward kernel and a blockwise backward into one differentiable op, `attention(q, k, v) -> O`:
# causal attention of q, k, v $[B, H, N, D]$ with scale $1/\sqrt{D}$, whose gradients flow to all three. This is
# the problem of CS336's attention leaderboard (B 1, N 16384, 16 heads of 64, bf16, causal, forward and backward):
# on a GPU, `make grade` times your op there against the package's `flash_attention` and SDPA's cuDNN and flash
# backends. Here (CPU) it is graded for correctness at small sizes, in fp32, against float64: O and dQ, dK, dV.
#
# Three pieces:
#
# 1. `causal_lse_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_q, n_k, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N)`: a
#    causal forward kernel (task 5 of exercises 4 is one), which also stores each row's log-sum-exp $L_i$ of the scaled scores (natural log,
#    fp32, `lse` $[B \cdot H, N]$), and works in bf16 (the grader compiles it for bf16 tiles of 64 x 64).
# 2. The backward for $[B \cdot H, N, D]$ tensors: the algebra of lesson 4's section 5 (task 3 of exercises 4), now causal, and in blocks of keys so that
#    $P$ never exists whole (at N = 16384 one head's $P$ is a GiB in fp32).
# 3. `CausalAttention`, a `torch.autograd.Function`: `forward(ctx, q, k, v)` launches the kernel and saves what the
#    backward needs, `backward(ctx, do)` returns `(dq, dk, dv)`. (Optionally register it as a custom op with
#    `torch.library.custom_op` and `register_autograd`, as `gpulab.attention.ops` does, so `torch.compile` sees it.)
#
# The grader reads the method: your kernel must be launched by the forward (PyTorch's SDPA or a softmax are
# refused), autograd must not differentiate the forward (the graph holds your Function only), and the backward
# must not use autograd in any form, nor a softmax; it needs its matrix products.
#
# <details><summary>Hint 1: the log-sum-exp and bf16</summary>
#
# After the loop, `m_i` and `log2(l_i)` are in base 2 (the kernel's scores are `scale * log2(e) * q k^T`):
# $\log_2 \sum_j 2^{s_j} = m + \log_2 \ell$, and $L = \ln 2 \cdot (m + \log_2 \ell)$. In bf16, `tl.dot` wants
# both operands in one dtype: P is fp32, so multiply `p.to(v.dtype)` by V; store O in `o_ptr`'s dtype.
# </details>
#
# <details><summary>Hint 2: the causal backward</summary>
#
# Lesson 4's section 5 gave the gradients of one block pair: P from the log-sum-exp, $D = \mathrm{rowsum}(dO \circ O)$ from whole
# rows, so the gradient of a key block sums the contributions of every query block, and dQ sums over key blocks.
# Causal: $P_{ij} = 0$ for $j > i$, but `exp(S - lse)` is not 0 there by itself, so mask it; a key block starting
# at key $s$ is seen by queries $i \ge s$ only.
# </details>
#
# <details><summary>Hint 3: the loop</summary>
#
# For each key block `[s, e)`: `qi, doi = q[:, s:], do[:, s:]`; `p = exp(scale * qi @ kj.mT - lse[:, s:, None])`
# with `p = 0` where key > query; then `dv[:, s:e] = p.mT @ doi`, `ds = p * (doi @ vj.mT - D[:, s:])`,
# `dq[:, s:] += scale * ds @ kj`, `dk[:, s:e] = scale * ds.mT @ qi` (in fp32, cast at the end).
# </details>

# %% tags=["solution"]
@triton.jit
def causal_lse_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_q, n_k, qk_scale,
                      HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    ### BEGIN SOLUTION
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + bh * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
                mask=(offs_m < n_q)[:, None], other=0.0)
    k_ptrs = k_ptr + bh * n_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    v_ptrs = v_ptr + bh * n_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, tl.minimum(n_k, (pid_m + 1) * BLOCK_M), BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptrs + start_n * HEAD_DIM, mask=(cols < n_k)[:, None], other=0.0)
        v = tl.load(v_ptrs + start_n * HEAD_DIM, mask=(cols < n_k)[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
        s = tl.where((cols[None, :] <= offs_m[:, None]) & (cols < n_k)[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")  # bf16 x bf16 -> fp32
        m_i = m_new
    rows = bh * n_q + offs_m
    tl.store(o_ptr + rows[:, None] * HEAD_DIM + offs_d[None, :], (acc / l_i[:, None]).to(o_ptr.dtype.element_ty),
             mask=(offs_m < n_q)[:, None])
    # the log-sum-exp of the scaled scores, natural log: m_i and log2(l_i) are base 2
    tl.store(lse_ptr + rows, (m_i + tl.log2(l_i)) * 0.6931471805599453, mask=offs_m < n_q)
    ### END SOLUTION


# %% tags=["solution"]
def causal_backward(q, k, v, o, do, lse, scale, block=1024):
    """dq, dk, dv (fp32) of causal attention; q, k, v, o, do [BH, N, D], lse [BH, N] (natural log)."""
    ### BEGIN SOLUTION
    n = q.shape[1]
    q, k, v, o, do = (t.float() for t in (q, k, v, o, do))
    dq, dk, dv = torch.zeros_like(q), torch.empty_like(k), torch.empty_like(v)
    d = (do * o).sum(-1, keepdim=True)  # [BH, N, 1]: D = rowsum(dO o O)
    for start in range(0, n, block):  # key block [start, end), seen by queries start.. only
        end = min(start + block, n)
        kj, vj, qi, doi = k[:, start:end], v[:, start:end], q[:, start:], do[:, start:]
        p = torch.exp(scale * qi @ kj.mT - lse[:, start:, None])  # [BH, n - start, end - start]
        above = torch.arange(start, end, device=q.device)[None, :] > torch.arange(start, n, device=q.device)[:, None]
        p = p.masked_fill(above, 0.0)  # causal: key j > query i has P = 0
        dv[:, start:end] = p.mT @ doi
        ds = p * (doi @ vj.mT - d[:, start:])
        dq[:, start:] += scale * ds @ kj
        dk[:, start:end] = scale * ds.mT @ qi
    return dq, dk, dv
    ### END SOLUTION


# %% tags=["solution"]
class CausalAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        ### BEGIN SOLUTION
        b, h, n, d = q.shape
        q, k, v = (t.contiguous() for t in (q, k, v))
        o = torch.empty_like(q)
        lse = torch.empty(b, h, n, device=q.device, dtype=torch.float32)
        blk = 64 if q.is_cuda else 16
        causal_lse_kernel[(triton.cdiv(n, blk), b * h)](q, k, v, o, lse, n, n, LOG2E_F / math.sqrt(d),
                                                         HEAD_DIM=d, BLOCK_M=blk, BLOCK_N=blk)
        ctx.save_for_backward(q, k, v, o, lse)
        return o
        ### END SOLUTION

    @staticmethod
    def backward(ctx, do):
        ### BEGIN SOLUTION
        q, k, v, o, lse = ctx.saved_tensors
        b, h, n, d = q.shape
        flat = (t.reshape(b * h, n, d) for t in (q, k, v, o, do))
        grads = causal_backward(*flat, lse.reshape(b * h, n), 1.0 / math.sqrt(d))
        return tuple(g.view(b, h, n, d).to(q.dtype) for g in grads)
        ### END SOLUTION


def attention(q, k, v):
    return CausalAttention.apply(q, k, v)


# %%
# GRADER: attention op: forward and backward (CS336)
grading.grade_attention_op(attention, causal_lse_kernel)
