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
# # Exercises 4 — From online softmax to FlashAttention
#
# Six tasks that go with `notebooks/04_attention.ipynb`. Write your code where it says `# YOUR CODE HERE` (delete the `raise NotImplementedError()`), then run the `# GRADER` cell below it: it tests your code on fresh random inputs against float64 references and raises with a message if something is wrong.
#
# Grade the whole notebook from a terminal with
#
# ```
# make grade NB=exercises/04_attention.ipynb
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
# ## Task 1: the online-softmax update
#
# A row of scores arrives in blocks. After each block you keep two numbers per row: the running max $m$ and the running sum $\ell = \sum_j e^{x_j - m}$ over the values seen so far. Write `update(m, l, x)` that folds one block `x` ($[R, C]$) into `m` and `l` (both $[R]$, float32) and returns the new pair:
#
# $$ m' = \max(m, \max_j x_j), \qquad \ell' = \ell \, e^{m - m'} + \sum_j e^{x_j - m'}. $$
#
# At the start $m = -\infty$ and $\ell = 0$. Blocks may contain $-\infty$ (masked scores), and a row may have seen only $-\infty$ so far: then $m' = -\infty$ too, and $e^{m - m'}$ would be $e^{-\infty + \infty}$ = NaN. In that case use 0 as the reference point instead of $m'$ (the row's $\ell$ stays 0). The grader folds random rows in random block sizes, with values up to $10^3$ (where $e^x$ overflows even in float64), and checks $m$ = the row max and $m + \log \ell$ = the row's log-sum-exp.
#
# <details><summary>Hint 1</summary>
#
# The new max first: `torch.maximum(m, x.max(dim=1).values)`. The old sum was taken relative to the old max, so it is
# rescaled by $e^{m - m'}$ before the block's terms are added.
# </details>
#
# <details><summary>Hint 2</summary>
#
# The guard: a reference point `ref = torch.where(m_new == -inf, 0, m_new)`; use `ref` in both exponentials,
# `torch.exp(m - ref)` and `torch.exp(x - ref[:, None])`. Never subtract a max that is $-\infty$ from $-\infty$.
# </details>

# %% tags=["solution"]
def update(m, l, x):
    ### BEGIN SOLUTION
    m_new = torch.maximum(m, x.max(dim=1).values)
    ref = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
    l_new = l * torch.exp(m - ref) + torch.exp(x - ref[:, None]).sum(dim=1)
    return m_new, l_new
    ### END SOLUTION


# %%
# GRADER: online softmax update
grading.grade_online_update(update)


# %% [markdown]
# ## Task 2: the inner loop of the FlashAttention forward
#
# Below is the forward kernel of the lesson without its loop over key blocks (non-causal, head dim a power of two, fp32). The prologue loads this program's `[BLOCK_M, HEAD_DIM]` block of queries and sets up the running max `m_i`, the running sum `l_i` and the output accumulator `acc`; the epilogue divides by `l_i` and stores the rows. Write the loop: for each block of `BLOCK_N` keys,
#
# 1. load the K and V blocks (`k_ptrs + start_n * HEAD_DIM`; the last block may be ragged: mask rows with `cols < n_k`, `other=0.0`);
# 2. scores in base 2: `s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale` (`qk_scale` already holds `scale * log2(e)`); give keys `>= n_k` a score of `-inf`;
# 3. the online-softmax update of task 1 in base 2 (`tl.exp2`), on `m_i`, `l_i` and on `acc`: `acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")`.
#
# Every query sees at least one key here, so the NaN guard of task 1 is not needed (but does no harm).
#
# <details><summary>Hint 1</summary>
#
# `for start_n in range(0, n_k, BLOCK_N):` with the block's key indices `cols = start_n + offs_n`; the same test
# `cols < n_k` masks the K and V loads (as rows, `[:, None]`) and sets the scores of missing keys to `-inf`
# (as columns: `tl.where((cols < n_k)[None, :], s, float("-inf"))`).
# </details>
#
# <details><summary>Hint 2</summary>
#
# Task 1 in base 2: `m_new = tl.maximum(m_i, tl.max(s, 1))`, `alpha = tl.exp2(m_i - m_new)`,
# `p = tl.exp2(s - m_new[:, None])`, `l_i = l_i * alpha + tl.sum(p, 1)`, then rescale `acc` by the same `alpha` before
# adding `tl.dot(p, v)`, and set `m_i = m_new` last.
# </details>

# %% tags=["solution"]
# ruff: noqa: F841 - until the loop is written, some names set up here are unused
@triton.jit
def forward_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale,
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    bh = tl.program_id(1)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + bh * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
                mask=(offs_m < n_q)[:, None], other=0.0)
    k_ptrs = k_ptr + bh * n_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    v_ptrs = v_ptr + bh * n_k * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    ### BEGIN SOLUTION
    for start_n in range(0, n_k, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptrs + start_n * HEAD_DIM, mask=(cols < n_k)[:, None], other=0.0)
        v = tl.load(v_ptrs + start_n * HEAD_DIM, mask=(cols < n_k)[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
        s = tl.where((cols < n_k)[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    ### END SOLUTION
    o = acc / l_i[:, None]
    tl.store(o_ptr + bh * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], o,
             mask=(offs_m < n_q)[:, None])


# %%
# GRADER: FlashAttention forward inner loop
grading.grade_forward_kernel(forward_kernel)

# %% [markdown]
# ## Task 3: the backward pass for one block
#
# The forward kept, per query row, only $O$ and the log-sum-exp $L_i = \log \sum_j e^{S_{ij}}$ of the scaled scores
# $S = s\,QK^\top$ ($s$ the scale). The backward never stores $P$ either: it recomputes it from $L$. Write, in PyTorch
# (float64 here), the gradients of one head's block, `backward_block(q, k, v, o, do, lse, scale) -> (dq, dk, dv)`:
# `q`, `o`, `do` are $[n_q, d]$, `k`, `v` are $[n_k, d]$, `lse` is $[n_q]$. Do not call `torch.softmax` or autograd:
# the point is the algebra the FlashAttention-2 kernels run block by block, which you derive here. The grader reads
# the ops your function runs: autograd in any form (also under `torch.enable_grad()`, or `torch.func`), a softmax, or
# a backward without matrix products are refused, each with its reason.
#
# **Goal.** With $S = s\,QK^\top$, $P = \mathrm{softmax}(S)$ row by row and $O = PV$, and $dO = \partial L/\partial O$
# given, return $dQ$ $[n_q, d]$, $dK$ $[n_k, d]$, $dV$ $[n_k, d]$, without ever forming a softmax: $P$ comes back
# from $L$, and the softmax's backward must not need a row of $P$ beyond the block in hand.
#
# Open the hints one at a time, only when stuck: each gives away more than the one before.
#
# <details><summary>Hint 1: the shapes and the chain rule</summary>
#
# Go backwards through the three forward lines: $O = PV$ gives $dV$ and $dP$ (each a product of two of $P$, $V$,
# $dO$; let the shapes $[n_k, d]$ and $[n_q, n_k]$ tell which, and which transposed); $P = \mathrm{softmax}(S)$
# gives $dS$ from $dP$; $S = s\,QK^\top$ gives $dQ$ and $dK$ from $dS$ (the scale comes back). $P$ itself:
# `torch.exp(scale * q @ k.T - lse[:, None])`, whose rows sum to 1.
# </details>
#
# <details><summary>Hint 2: the key identity</summary>
#
# A softmax row has Jacobian $\partial P_j / \partial S_k = P_j(\delta_{jk} - P_k)$, so
# $dS_k = P_k\,dP_k - P_k \sum_j P_j\,dP_j$. The sum $D_i = \sum_j P_{ij}\,dP_{ij}$ looks like it needs the whole
# row of $P$; expand $dP_{ij} = dO_i \cdot V_j$ and sum over $j$ first: $D_i = dO_i \cdot \sum_j P_{ij} V_j =
# dO_i \cdot O_i$, a row sum of $dO \circ O$ (the kernels compute it before their main loop).
# </details>
#
# <details><summary>Hint 3: the formulas</summary>
#
# $$ dV = P^\top dO, \qquad dP = dO\,V^\top, \qquad dS = P \circ (dP - D), \qquad dQ = s\,dS\,K, \qquad
#    dK = s\,dS^\top Q, $$
#
# with `D = (do * o).sum(-1, keepdim=True)` broadcast over the columns of `dp`.
# </details>

# %% tags=["solution"]
def backward_block(q, k, v, o, do, lse, scale):
    ### BEGIN SOLUTION
    p = torch.exp(scale * q @ k.T - lse[:, None])  # [n_q, n_k]: P recomputed from the forward's log-sum-exp
    dv = p.T @ do  # [n_k, d]
    dp = do @ v.T  # [n_q, n_k]
    ds = p * (dp - (do * o).sum(-1, keepdim=True))  # D = rowsum(dO o O), no P needed
    return scale * ds @ k, scale * ds.T @ q, dv
    ### END SOLUTION


# %%
# GRADER: attention backward for one block
grading.grade_attention_backward(backward_block)


# %% [markdown]
# ## Task 4 (a number, auto-graded): the K/V bytes of the forward
#
# The kernel reads each K/V block once per Q block. Write `kv_bytes(n, d, block_m, elem_bytes)`: the bytes of K and V
# one head reads in total at sequence length `n`, head dim `d`, Q blocks of `block_m` rows (the last may be ragged).
#
# <details><summary>Hint 1</summary>
#
# How many Q blocks are there (round up: a ragged block still reads everything)? Each of them reads all of K and all of
# V once.
# </details>
#
# <details><summary>Hint 2</summary>
#
# K and V are each $n \times d$ elements: one Q block reads $2 n d \cdot s$ bytes; multiply by
# $\lceil n / B_M \rceil$, written `-(-n // block_m)`.
# </details>

# %% tags=["solution"]
def kv_bytes(n, d, block_m, elem_bytes):
    ### BEGIN SOLUTION
    q_blocks = -(-n // block_m)  # ceil: a ragged last block reads all of K and V too
    return q_blocks * 2 * n * d * elem_bytes
    ### END SOLUTION


# %%
# GRADER: K/V bytes read by the forward
grading.grade_kv_bytes(kv_bytes)


# %% [markdown]
# ## Task 5: causal masking
#
# A decoder's attention is causal: query $i$ may see keys $j \le i$ only (SDPA's `is_causal=True`, here with
# $n_q = n_k = n$). Write the whole causal forward kernel, same launch and arguments as task 2's. Two things make it
# causal, and the grader checks both: the output (against float64), and that a Q block **never loads** the key
# blocks that lie entirely above the diagonal (it launches one Q block alone over K and V whose later rows are NaN).
# Masking their scores to $-\infty$ is not enough: it still loads them and multiplies $P$ (zeros there) by their $V$,
# which on a GPU is half of all the work at long $n$.
#
# <details><summary>Hint 1</summary>
#
# Which keys can the rows `offs_m` of this program see at most? The last row of the block is
# `(pid_m + 1) * BLOCK_M - 1`, so no key at or past `(pid_m + 1) * BLOCK_M` matters (nor past `n_k`).
# </details>
#
# <details><summary>Hint 2</summary>
#
# End the loop there: `for start_n in range(0, tl.minimum(n_k, (pid_m + 1) * BLOCK_M), BLOCK_N)`. Inside, a block
# that straddles the diagonal still needs the per-element mask: `(cols[None, :] <= offs_m[:, None]) &
# (cols < n_k)[None, :]` (query $i$ sees key $i$ itself: `<=`).
# </details>

# %% tags=["solution"]
@triton.jit
def causal_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n_q, n_k, qk_scale,
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
    # key blocks past this Q block's last row are above the diagonal for all its rows: never loaded
    for start_n in range(0, tl.minimum(n_k, (pid_m + 1) * BLOCK_M), BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_ptrs + start_n * HEAD_DIM, mask=(cols < n_k)[:, None], other=0.0)
        v = tl.load(v_ptrs + start_n * HEAD_DIM, mask=(cols < n_k)[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
        s = tl.where((cols[None, :] <= offs_m[:, None]) & (cols < n_k)[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))  # finite: key 0 is in every row's first block
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m_i = m_new
    tl.store(o_ptr + bh * n_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc / l_i[:, None],
             mask=(offs_m < n_q)[:, None])
    ### END SOLUTION


# %%
# GRADER: causal FlashAttention forward
grading.grade_causal_forward(causal_kernel)

# %% [markdown]
# ## Task 6: one attention op, forward and backward (CS336's problem)
#
# Assemble your forward (task 5) and your backward (task 3) into one differentiable op, `attention(q, k, v) -> O`:
# causal attention of q, k, v $[B, H, N, D]$ with scale $1/\sqrt{D}$, whose gradients flow to all three. This is
# the problem of CS336's attention leaderboard (B 1, N 16384, 16 heads of 64, bf16, causal, forward and backward):
# on a GPU, `make grade` times your op there against the package's `flash_attention` and SDPA's cuDNN and flash
# backends. Here (CPU) it is graded for correctness at small sizes, in fp32, against float64: O and dQ, dK, dV.
#
# Three pieces:
#
# 1. `causal_lse_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, n_q, n_k, qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N)`: your
#    causal kernel of task 5, which also stores each row's log-sum-exp $L_i$ of the scaled scores (natural log,
#    fp32, `lse` $[B \cdot H, N]$), and works in bf16 (the grader compiles it for bf16 tiles of 64 x 64).
# 2. The backward for $[B \cdot H, N, D]$ tensors: task 3's algebra, now causal, and in blocks of keys so that
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
# Task 3 gave the gradients of one block pair: P from the log-sum-exp, $D = \mathrm{rowsum}(dO \circ O)$ from whole
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

# %%
# The H100's ridge points for bf16 tensor cores: lesson 1's stored ceilings (its bf16 GEMM over its HBM copy and its
# L2 read), the numbers the question below needs.
from gpulab import roofline
from gpulab.course import claims

roofs = roofline.ceilings("H100")
if roofs.mode == "cuda" and roofs.l2_gbps:
    claims.show(claims.claim(
        "Lesson 1's stored ceilings put the H100's bf16 ridge point at {hbm:.0f} FLOP/B against HBM and {l2:.0f} "
        "against L2 ({source}).",
        holds=lambda hbm, l2, **_: l2 < 128 < hbm,  # the answer below places B_M = 128's intensity between them
        hbm=roofs.bf16_tflops * 1e3 / roofs.hbm_gbps,
        l2=roofs.bf16_tflops * 1e3 / roofs.l2_gbps, source=roofs.source,
    ))  # fmt: skip
else:
    print("(no stored ceilings of the H100: lesson 1's `python -m gpulab bench 01` makes them)")

# %% [markdown]
# ## Question
#
# With the bytes of task 4 against the FLOPs, and the ridge points above, where does the kernel sit on the H100's roofline at $N = 4096$, $d = 128$, $B_M = 128$ in bf16, and why?
#
# ### BEGIN SOLUTION
# Each of the $N / B_M$ Q blocks reads all of K and V: $(N / B_M) \cdot 2 N d \cdot 2$ bytes = $4 N^2 d / B_M$ bytes per head, against $4 N^2 d$ FLOPs (non-causal). The intensity is therefore about $B_M$ FLOPs per byte of K/V traffic: 128 FLOP/B, and most of those re-reads hit L2 (one head's K and V at $N = 4096$, $d = 128$ are 2 MB), so the intensity against HBM is far higher, past the HBM ridge. Against L2, 128 FLOP/B is right of the ridge printed above: by the roofline the kernel is limited by its arithmetic, not by either memory, and larger $B_M$ (more reuse per load) moves it further right until registers run out.
# ### END SOLUTION
