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
# # Exercises 4 — FlashAttention in Triton
#
# Five tasks and a question that go with `notebooks/04_flash_attention.ipynb`. Write your code where it says `# YOUR CODE HERE` (delete the `raise NotImplementedError()`), then run the `# GRADER` cell below it: it tests your code on fresh random inputs against float64 references and raises with a message if something is wrong.
#
# Grade the whole notebook from a terminal with
#
# ```
# make grade NB=exercises/04_flash_attention.ipynb
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
# Two steps, in this order: the new reference point of each row (the larger of the old max and the block's max), then
# the sum. The old sum was taken relative to the old max, so it must be brought to the new one before the block's
# terms, taken relative to the new max too, are added.
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
# Below is the forward kernel of the lesson without its loop over key blocks (non-causal, head dim a power of two, fp32). The prologue loads this program's `[BLOCK_M, HEAD_DIM]` block of queries, points `k_ptrs` and `v_ptrs` at the first `BLOCK_N` rows of this head's K and V, and sets up the running max `m_i`, the running sum `l_i` and the output accumulator `acc`; the epilogue divides by `l_i` and stores the rows. Write the loop over the key blocks. For each block:
#
# 1. load its rows of K and V; the last block may be ragged, so rows past `n_k` must not be read (load zeros there);
# 2. compute its scores in base 2 (the argument `qk_scale` already holds the softmax scale times $\log_2 e$), and give the keys past `n_k` a score of $-\infty$;
# 3. fold it into `m_i`, `l_i` and `acc` with task 1's update written in base 2; the accumulator is rescaled by the same factor as the sum before the block's $PV$ is added.
#
# Ask `tl.dot` for IEEE fp32 products (`input_precision="ieee"`), so the result can be compared with float64. Every query sees at least one key here, so the NaN guard of task 1 is not needed (but does no harm).
#
# <details><summary>Hint 1</summary>
#
# The block that starts at key `start_n` lies `start_n * HEAD_DIM` elements past `k_ptrs` (and `v_ptrs`). One boolean
# vector over the block's key indices serves twice: as a row mask for the loads (`[:, None]`) and as a column mask for
# the scores (`[None, :]`, with `tl.where`).
# </details>
#
# <details><summary>Hint 2</summary>
#
# In base 2 the update reads $m' = \max(m, \operatorname{rowmax} s)$, $lpha = 2^{m - m'}$, $p = 2^{s - m'}$,
# $\ell' = lpha \ell + \operatorname{rowsum} p$, $\mathrm{acc}' = lpha\,\mathrm{acc} + p V$ (`tl.exp2`, `tl.max`,
# `tl.sum` along axis 1). K enters the scores transposed (`tl.trans`). Update `m_i` last: $lpha$ needs the old one.
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
