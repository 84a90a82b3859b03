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
# # Exercises 6 — A fused RNN on one SM
#
# Six tasks that go with `notebooks/06_fused_rnn.ipynb`. Write your code where it says `# YOUR CODE HERE` (delete the `raise NotImplementedError()`), then run the `# GRADER` cell below it: it tests your code on fresh random inputs against float64 references and raises with a message if something is wrong.
#
# Grade the whole notebook from a terminal with
#
# ```
# make grade NB=exercises/06_fused_rnn.ipynb
# ```
#
# Everything runs on CPU (Triton's interpreter) as well as on a GPU.

# %%
import torch

import gpulab  # first: decides GPU vs CPU interpreter before any kernel is defined
from gpulab.course import grading_rnn as grading
from gpulab.rnn.cells import lstm_cell

import triton  # isort: skip
import triton.language as tl  # isort: skip


# %% [markdown]
# ## Task 1: the GRU cell as a Triton function
#
# The fused kernels of the lesson call the cell's math as a `@triton.jit` *function* (not a kernel): it takes blocks of fp32 values and returns a block, and Triton inlines it wherever it is called. Write `gru_cell(g, r, z, n, h)` with the GRU semantics of the `flashrnn` package. Its four inputs are gate **pre-activations**, already summed:
#
# - `g` $= R_0 h_{t-1} + b_0$ (the recurrent part of the candidate; PyTorch's $W_{hn} h + b_{hn}$),
# - `r` $= Wx_0 + R_1 h_{t-1} + b_1$ (reset), `z` $= Wx_1 + R_2 h_{t-1} + b_2$ (update),
# - `n` $= Wx_2 + b_3$ (the input part of the candidate),
# - `h` $= h_{t-1}$, the old state.
#
# Return the new state:
#
# $$ r' = \sigma(r), \qquad z' = \sigma(z), \qquad n' = \tanh(n + r' \odot g), \qquad h_t = z' \odot h_{t-1} + (1 - z') \odot n'. $$
#
# `tl.sigmoid` exists; write $\tanh(x) = 2\sigma(2x) - 1$ (it never overflows, and runs the same compiled and interpreted). The grader launches its own kernel that calls *your* function on random blocks, with pre-activations up to about 30.
#
# <details><summary>Hint 1</summary>
#
# `r` and `z` arrive as pre-activations: apply `tl.sigmoid` to both first. The reset gate acts *inside* the candidate's
# tanh, on the recurrent part `g` only.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Check which of the two states the update gate $z'$ multiplies in the task's formula, and which one $1 - z'$ does:
# swapping them is the most common mistake, and the grader names it.
# </details>

# %% tags=["solution"]
@triton.jit
def gru_cell(g, r, z, n, h):
    ### BEGIN SOLUTION
    r = tl.sigmoid(r)
    z = tl.sigmoid(z)
    n = 2.0 * tl.sigmoid(2.0 * (n + r * g)) - 1.0
    return z * h + (1.0 - z) * n
    ### END SOLUTION


# %%
# GRADER: GRU cell
grading.grade_gru_cell(gru_cell)


# %% [markdown]
# ## Task 2: the time loop of a fused LSTM forward
#
# Below is a simplified version of the lesson's fused forward kernel: LSTM only, fp32, one program per head holding every batch row ($B \le$ `BLOCK_B` = 16), head dim `DH` a power of two $\ge 16$. Layouts are flashrnn's: `wx` $[B, T, 4, NH, DH]$, `r` $[4, NH, DH, DH]$, `b` $[4, NH, DH]$, `s0` (initial $h, c$) $[2, B, 1, NH, DH]$, `out` (all states) $[2, B, T, NH, DH]$, `last` $[2, B, 1, NH, DH]$.
#
# The prologue is written: it loads this head's $R^\top$ per gate **once**, into registers (`rt_i, rt_f, rt_z, rt_o`, each $[DH, DH]$ with `rt_g[k, j] = R[g, n, j, k]`), the four biases as $[1, DH]$ rows, the initial $h$ and $c$ as fp32 $[BLOCK\_B, DH]$ tiles, and the pointers of this program's rows at step 0 (`wx_rows`, `out_rows`). The epilogue stores the last $h$ and $c$. Write the loop over the $T$ steps, using what the prologue prepared:
#
# - **where things are.** In `wx`, one step of one batch row holds the four gates one after another, each gate an $[NH, DH]$ slice of `HD` elements; in `out`, all $h$ come first and all $c$ follow, `state_stride` elements later. Rows past $B$ are masked (`mask`); masked loads must read zeros.
# - **what a step computes.** Each gate's pre-activation is its part of $Wx_t$, plus $h_{t-1}$ times that gate's tile of $R^\top$, plus its bias; the product in fp32 with IEEE precision (`input_precision="ieee"`, so that it matches float64 closely). The course's `lstm_cell`, imported above, turns the four pre-activations and the old $c$ into the new $h$ and $c$.
# - **what a step writes.** Step $t$'s $h$ and $c$ in `out`; the new $h$ and $c$ carried into step $t + 1$.
#
# The grader runs your kernel on random shapes ($B$ 1–3, $T$ 1–5, $NH$ 1–3, $DH$ = 16) against `gpulab.rnn.flashrnn(..., backend="vanilla")` in float64, with outputs poisoned with NaN beforehand.
#
# <details><summary>Hint 1</summary>
#
# `h` and `c` are carried through the loop as plain variables: `for t in range(T):` reassigns them every step, and the
# epilogue stores their last values.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Count offsets in elements from `wx_rows`: how many elements does one step of a batch row span, and how many lie
# between two gates of one step? The same question for `out_rows`: where is step $t$'s $h$, and where its $c$?
# </details>

# %% tags=["solution"]
# ruff: noqa: F841  (until the loop is written, the prologue's values are unused)
@triton.jit
def lstm_forward_kernel(wx_ptr, r_ptr, b_ptr, s0_ptr, out_ptr, last_ptr, B, T, NH,
                        DH: tl.constexpr, BLOCK_B: tl.constexpr):
    n = tl.program_id(0)  # this program's head
    rows = tl.arange(0, BLOCK_B)
    cols = tl.arange(0, DH)
    mask = (rows < B)[:, None] & (cols < DH)[None, :]
    HD = NH * DH  # elements of one gate (or state) slice of all heads
    state_stride = B * T * HD  # from h to c in out

    # R^T of head n per gate, in registers for the whole sequence: rt_g[k, j] = R[g, n, j, k]
    r_tile = r_ptr + n * DH * DH + cols[:, None] + cols[None, :] * DH
    rt_i = tl.load(r_tile)
    rt_f = tl.load(r_tile + 1 * NH * DH * DH)
    rt_z = tl.load(r_tile + 2 * NH * DH * DH)
    rt_o = tl.load(r_tile + 3 * NH * DH * DH)
    # biases, [1, DH] rows broadcast over the batch
    b_row = b_ptr + n * DH + cols[None, :]
    b_i = tl.load(b_row)
    b_f = tl.load(b_row + 1 * HD)
    b_z = tl.load(b_row + 2 * HD)
    b_o = tl.load(b_row + 3 * HD)
    # initial states, fp32 [BLOCK_B, DH] tiles that stay in registers
    s_off = rows[:, None] * HD + n * DH + cols[None, :]
    h = tl.load(s0_ptr + s_off, mask=mask, other=0.0)
    c = tl.load(s0_ptr + B * HD + s_off, mask=mask, other=0.0)
    # row pointers of step 0
    wx_rows = wx_ptr + rows[:, None] * T * 4 * HD + n * DH + cols[None, :]
    out_rows = out_ptr + rows[:, None] * T * HD + n * DH + cols[None, :]

    ### BEGIN SOLUTION
    for t in range(T):
        wx = wx_rows + t * 4 * HD
        i = tl.load(wx, mask=mask, other=0.0) + tl.dot(h, rt_i, input_precision="ieee") + b_i
        f = tl.load(wx + 1 * HD, mask=mask, other=0.0) + tl.dot(h, rt_f, input_precision="ieee") + b_f
        z = tl.load(wx + 2 * HD, mask=mask, other=0.0) + tl.dot(h, rt_z, input_precision="ieee") + b_z
        o = tl.load(wx + 3 * HD, mask=mask, other=0.0) + tl.dot(h, rt_o, input_precision="ieee") + b_o
        h, c = lstm_cell(i, f, z, o, c)
        tl.store(out_rows + t * HD, h, mask=mask)
        tl.store(out_rows + state_stride + t * HD, c, mask=mask)
    ### END SOLUTION

    tl.store(last_ptr + s_off, h, mask=mask)
    tl.store(last_ptr + B * HD + s_off, c, mask=mask)


# %%
# GRADER: fused LSTM forward time loop
grading.grade_lstm_loop(lstm_forward_kernel)

# %% [markdown]
# ## Task 3: all gates in one product (lesson 6's v1 -> v2)
#
# Your loop makes four products per step, `tl.dot(h, rt_g)` for each gate: four small tensor-core operations, each
# with its own $[DH, DH]$ operand in registers. The lesson's kernel makes **one**: it lays $R^\top$ of the four gates
# side by side as one $[DH, 4\,DH]$ tile, $R_\text{all}^\top$, so a single `tl.dot` computes every gate's product,
# $[B_\text{tile}, 4\,DH]$, and then takes the gates apart.
#
# **Spec.** Write the `@triton.jit` function `all_gates(h, r_ptr, n, NH, BLOCK_B, DH)`:
#
# - `h` is an fp32 $[BLOCK\_B, DH]$ tile (head `n`'s state); `r_ptr` points at $R$ $[4, NH, DH, DH]$ (fp32,
#   contiguous) and gate $g$ of head $n$ gets $h\, R_{g,n}^\top$, i.e. `R[g, n, j, k]` takes input unit $k$ to gate
#   unit $j$;
# - load $R_\text{all}^\top$ of head `n` as one $[DH, 4\,DH]$ tile: row $k$, column $c$ holds gate $g = c // DH$,
#   unit $j = c \bmod DH$;
# - make **one** product, `tl.dot(h, rt_all, input_precision="ieee")`;
# - return the four $[BLOCK\_B, DH]$ products in the order $i, f, z, o$. `tl.split` only halves a last dimension of
#   size 2, so the gate index has to become two size-2 dimensions first (`tl.reshape`, `tl.permute`).
#
# The grader first compiles your function inside its kernel for an H100 (sm_90; no GPU needed) and reads the
# compiled code: it must make exactly one `tt.dot`, of shape $[BLOCK\_B, 4\,DH]$ (four products, a product in a
# loop over the gates, or products written as `tl.sum` of broadcasts are refused, each with its reason). Then its
# kernel calls your function on random heads, batches and head dims 16 and 32 and compares with float64
# $h\, R_{g,n}^\top$. In the lesson's kernel the
# load of $R_\text{all}^\top$ sits before the time loop; here it is inside the function to keep the task small.
#
# <details><summary>Hint 1</summary>
#
# Build the tile's offsets from two index vectors, one over the rows ($k$, DH of them, as a column) and one over
# the columns (4 DH of them, as a row), and split the column index into its gate $g$ and unit $j$. Element `R[g, n, j, k]` is at
# `g * NH * DH * DH + n * DH * DH + j * DH + k`.
# </details>
#
# <details><summary>Hint 2</summary>
#
# `tl.reshape(acc, [BLOCK_B, 2, 2, DH])` puts gate $g = 2a + c$ at `[b, a, c, j]`. Move the two size-2 dimensions
# last with `tl.permute(x, (0, 3, 1, 2))`: `[b, j, a, c]`.
# </details>
#
# <details><summary>Hint 3</summary>
#
# After the permute the last dimension is $c$: one `tl.split` over it gives gates $\{0, 2\}$ and $\{1, 3\}$ (not
# 0 and 1!). One more split of each half over $a$ gives the four gates; return them in the order i, f, z, o.
# </details>

# %% tags=["solution"]
@triton.jit
def all_gates(h, r_ptr, n, NH, BLOCK_B: tl.constexpr, DH: tl.constexpr):
    ### BEGIN SOLUTION
    # R_all^T [DH, 4 * DH]: row k, column c = g * DH + j holds R[g, n, j, k]
    k = tl.arange(0, DH)[:, None]
    c = tl.arange(0, 4 * DH)[None, :]
    g, j = c // DH, c % DH
    rt_all = tl.load(r_ptr + g * NH * DH * DH + n * DH * DH + j * DH + k)
    acc = tl.dot(h, rt_all, input_precision="ieee")  # [BLOCK_B, 4 * DH]: every gate's product at once
    # gate g = 2a + c: [b, a, c, j] -> [b, j, a, c], then halve c, then a (tl.split halves the last dimension)
    x = tl.permute(tl.reshape(acc, [BLOCK_B, 2, 2, DH]), (0, 3, 1, 2))
    x02, x13 = tl.split(x)
    x0, x2 = tl.split(x02)
    x1, x3 = tl.split(x13)
    return x0, x1, x2, x3
    ### END SOLUTION


# %%
# GRADER: all gates in one product
grading.grade_all_gates(all_gates)

# %% [markdown]
# Why bother: four products of $[B_\text{tile}, DH] \times [DH, DH]$ are four separate tensor-core instruction chains
# whose results each wait on the same $h$; one product of width $4\,DH$ keeps the tensor cores busy with a single,
# wider chain and reads $h$'s fragments once; it also means one tile of $Wx_t$ to load and one tile of gates to
# store per step, and every tile whose memory layout differs from the tensor cores' costs a round trip through
# shared memory. Taking the gates apart costs nothing on the GPU: in the tensor cores' output layout a thread
# already holds all four gates of its units, so reshape, permute and split only rename registers. Lesson 6's v2
# makes exactly this change.

# %% [markdown]
# ## Task 4: one reverse-time step of the LSTM backward
#
# The fused backward kernel walks the sequence from $t = T-1$ down to 0, carrying $\delta h$ and $\delta c$ in
# registers; each step turns them into the gate gradients $\delta G_t$ (written out for the parameter products) and
# the carries of step $t-1$. Write that step in PyTorch (float64 here):
# `step(i, f, z, o, c_prev, dh, dc, R) -> (dG, dh_prev, dc_prev)`, where `i, f, z, o` $[B, H]$ are the forward's
# activations (the kernel saves them), `c_prev` is $c_{t-1}$, `dh` is $\partial L / \partial h_t$ (everything that
# reaches $h_t$), `dc` the $\partial L / \partial c_t$ carried from step $t+1$, and `R` $[4, H, H]$ the recurrent
# weights: gate $g$'s pre-activation is $\ldots + h_{t-1} R_g^\top$. Return `dG` $[B, 4, H]$ (order i, f, z, o).
#
# **Goal.** The forward step was: $i, f, o = \sigma(\cdot)$ and $z = \tanh(\cdot)$ of the four pre-activations
# $G_g = x_t W_g^\top + h_{t-1} R_g^\top + b_g$, then $c_t = f \odot c_{t-1} + i \odot z$ and
# $h_t = o \odot \tanh c_t$. Derive the step's backward yourself, line by line in reverse: what reaches $c_t$, what
# each pre-activation receives, what passes on to $c_{t-1}$ and $h_{t-1}$. Shapes: `dG` $[B, 4, H]$, `dh_prev` and
# `dc_prev` $[B, H]$. Autograd (in any form: `.backward()`, `torch.autograd.grad`, `torch.func`) is refused by the
# grader, which reads the ops your function runs.
#
# Open the hints one at a time, only when stuck: each gives away more than the one before.
#
# <details><summary>Hint 1: the shapes and the chain rule</summary>
#
# Draw the step as a graph: $G \to (i, f, z, o)$, $(f, c_{t-1}, i, z) \to c_t$, $(o, c_t) \to h_t$, and
# $h_{t-1} \to G$ through $R$. The gradient of each node is the sum over the paths leaving it. $c_t$ has two
# outgoing paths (into $h_t$, and into the next step, whose gradient is `dc`); everything is elementwise except the
# path from $G$ back to $h_{t-1}$, a product with $R$ of shape $[B, 4H] \times [4H, H]$.
# </details>
#
# <details><summary>Hint 2: the key identities</summary>
#
# The forward saved activations, not pre-activations, so write the derivatives with them:
# $\sigma'(x) = s(1 - s)$ where $s = \sigma(x)$, and $\tanh'(x) = 1 - t^2$ where $t = \tanh x$. Only
# $\tau = \tanh c_t$ must be recomputed (from $c_t = f c_{t-1} + i z$). Gate $g$'s unit $j$ reads
# $\sum_k h_{t-1,k} R_{g,j,k}$: which index of `R[g]` does $dh_{t-1}$ sum over?
# </details>
#
# <details><summary>Hint 3: where each gradient starts</summary>
#
# What reaches $c_t$ is $\delta c = dc + dh \odot o \odot (1 - \tau^2)$. Each gate's pre-activation then gets
# $\delta c$ (or $dh$, for $o$) times what multiplies that gate in the forward, times its activation's derivative;
# $dc_{t-1}$ is what $\delta c$ passes through $f$. `torch.stack(..., 1)` builds `dG` $[B, 4, H]$, and one
# `torch.einsum` over the gate and unit indices of `R` gives $dh_{t-1}$.
# </details>

# %% tags=["solution"]
def step(i, f, z, o, c_prev, dh, dc, R):
    ### BEGIN SOLUTION
    tau = torch.tanh(f * c_prev + i * z)  # tanh(c_t), recomputed
    dct = dc + dh * o * (1 - tau * tau)  # both ways into c_t
    dG = torch.stack(  # [B, 4, H]: the pre-activations' gradients, gates i, f, z, o
        [dct * z * i * (1 - i), dct * c_prev * f * (1 - f), dct * i * (1 - z * z), dh * tau * o * (1 - o)], 1
    )
    return dG, torch.einsum("bgj,gjk->bk", dG, R), dct * f
    ### END SOLUTION


# %%
# GRADER: LSTM backward step
grading.grade_lstm_backward_step(step)


# %% [markdown]
# ## Task 5: does a head fit on one SM?
#
# The fused kernel keeps a head's recurrent weights on chip for the whole sequence. Count what one program needs in
# shared memory, as `gpulab.rnn.fused.tiling` does: `shared_bytes(head_dim, function, dtype_bytes, block_b) -> int`.
#
# **Spec.** The tensor cores work on blocks, so the head dim is padded to $D$ = `gpulab.runtime.dot_block(head_dim)`
# (a power of two, at least 16). The kernels hold all gates side by side: $g$ = `gpulab.rnn.fused.tiling.slots(function)`
# gate slots (4 for the LSTM and the GRU, whose three recurrent gates are padded to four; 1 for Elman). Shared memory
# holds $R_\text{all}$, $g \cdot D \cdot D$ elements, and one layout-conversion buffer of $[B_\text{tile}, g D]$
# elements (`block_b` rows), each element `dtype_bytes` bytes.
#
# <details><summary>Hint 1</summary>
#
# Count the two tiles separately, in elements, then multiply by the bytes per element: what are the sides of
# $R_\text{all}$ (gate slots side by side), and of the buffer?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Pad first, then count: `runtime.dot_block(17)` is 32, so a head dim of 17 costs as much as 32.
# </details>

# %% tags=["solution"]
def shared_bytes(head_dim, function, dtype_bytes, block_b):
    ### BEGIN SOLUTION
    from gpulab import runtime
    from gpulab.rnn.fused import tiling

    g, d = tiling.slots(function), runtime.dot_block(head_dim)
    return g * d * d * dtype_bytes + g * block_b * d * dtype_bytes
    ### END SOLUTION


# %%
# GRADER: does a head fit on chip
grading.grade_shared_bytes(shared_bytes)

# %% [markdown]
# With the H100's 227 KB of shared memory per block, which LSTM head dims fit in bf16 with 16-row tiles? The cell
# below asks your function; `gpulab.rnn.fused.tiling.explain` shows the full constraint problem (registers too).

# %%
from gpulab import hardware

smem = hardware.spec("H100").smem_per_block
try:
    for dh in (64, 128, 192, 256):
        need = shared_bytes(dh, "lstm", 2, 16)
        print(f"head dim {dh:3d}: {need / 1024:6.0f} KB {'fits' if need <= smem else 'does not fit'}")
except NotImplementedError:
    print("write shared_bytes (task 5) first")


# %% [markdown]
# ## Task 6 (a number, auto-graded): the bytes of R per forward
#
# Your kernel reads the four $DH \times DH$ blocks of $R$ of each head once and then runs all $T$ steps; the
# `alternating` backend reads $R$ at every step. Write `r_bytes(T, NH, DH, itemsize, fused)`: the bytes of $R$
# ($[4, NH, DH, DH]$, `itemsize` bytes per element) one forward pass reads, with `fused` True for the fused kernel and
# False for `alternating`.
#
# <details><summary>Hint 1</summary>
#
# First the size of $R$ itself: four gates, each an $[NH, DH, DH]$ block, times the bytes per element.
# </details>
#
# <details><summary>Hint 2</summary>
#
# How many times does each backend load the whole of $R$ during one forward of $T$ steps? Lesson 6, section 1
# counts a step of each.
# </details>

# %% tags=["solution"]
def r_bytes(T, NH, DH, itemsize, fused):
    ### BEGIN SOLUTION
    once = 4 * NH * DH * DH * itemsize
    return once if fused else T * once
    ### END SOLUTION


# %%
# GRADER: bytes of R per forward
grading.grade_r_bytes(r_bytes)

# %%
try:
    for fused in (True, False):
        mb = r_bytes(1024, 12, 64, 2, fused) / 1e6
        print(f"{'fused' if fused else 'alternating':11s}: {mb:8.2f} MB of R per forward (B 16, T 1024, 12x64)")
except NotImplementedError:
    print("write r_bytes (task 6) first")

# %% [markdown]
# ## Question
#
# The fused kernel reads $R$ once per forward (task 6) instead of $T$ times. Why does it still not run anywhere near the H100's tensor-core roof?
#
# ### BEGIN SOLUTION
# As task 6 counts, $R$ is $4 \cdot 12 \cdot 64^2 \cdot 2$ bytes = 393 KB. The fused kernel reads it once (393 KB); the alternating backend reads it at every step, $1024 \times 393$ KB = 403 MB (mostly from L2, where it fits). Even so, the fused kernel is far from the tensor-core roof because the work is a chain of 1024 dependent steps, each tiny: per step and program a $[16, 64] \times [64, 64]$ product per gate, about 0.5 MFLOP, a few nanoseconds of tensor-core time, while the step's chain (load $Wx_t$, four products, the cell's sigmoids and tanh, the store, the layout conversion of $h$ back into a product operand) takes hundreds of nanoseconds of latency. Only 12 programs run (one per head), on 12 of 132 SMs. By this count the kernel is latency-bound: each step costs its chain's latency, not its arithmetic, so more work per step (a larger batch per program, more heads on the idle SMs) should add little time per step; lesson 6, section 8 measures how little over the batch.
# ### END SOLUTION
