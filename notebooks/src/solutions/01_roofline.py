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
# # Exercises 1 — The roofline
#
# Short tasks that go with `notebooks/01_roofline.ipynb`: the roofline formula, the FLOPs and bytes of three kernels counted by hand, whether each is memory- or compute-bound, and the batch size at which an LSTM step stops being memory-bound. Write your code where it says `# YOUR CODE HERE` (delete the `raise NotImplementedError()`), then run the `# GRADER` cell below it: it tests your code on fresh random sizes and raises with a message if something is wrong.
#
# Grade the whole notebook from a terminal with
#
# ```
# make grade NB=exercises/01_roofline.ipynb
# ```
#
# Units throughout: intensity in FLOP per byte, bandwidth in GB/s (1e9 bytes/s), compute in TFLOP/s (1e12 FLOP/s). `itemsize` is the size of one element in bytes (2 for fp16/bf16, 4 for fp32).

# %%
import matplotlib.pyplot as plt

import gpulab
from gpulab import roofline
from gpulab.course import grading_roofline as grading


# %% [markdown]
# ## Task 1: the roofline
#
# A kernel with arithmetic intensity `intensity` runs on a GPU with compute peak `peak_tflops` and memory bandwidth `bandwidth_gbps`. Return the most TFLOP/s it can reach: the smaller of the compute roof and the memory roof. Mind the units.
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# Write down the units: intensity is FLOP per byte, bandwidth bytes per second. Which product of the two is a rate
# of FLOPs, and so a roof?
# </details>
#
# <details><summary>Hint 2</summary>
#
# FLOP/B × GB/s gives GFLOP/s; divide by 1000 for TFLOP/s before taking `min(peak_tflops, ...)`.
# </details>

# %% tags=["solution"]
def attainable_tflops(intensity: float, peak_tflops: float, bandwidth_gbps: float) -> float:
    ### BEGIN SOLUTION
    return min(peak_tflops, intensity * bandwidth_gbps / 1e3)  # FLOP/B * GB/s = GFLOP/s
    ### END SOLUTION


# %%
# GRADER: roofline formula
grading.grade_attainable(attainable_tflops)


# %% [markdown]
# ## Task 2: three kernels, counted by hand
#
# Return `(flops, bytes)` for each, with the course's conventions: a multiply-add is 2 FLOPs; bytes are the fewest the kernel must move through HBM — every input read once, every output written once.
#
# 1. `gemm_cost(m, n, k, itemsize)`: $C = AB$ with $A$ of shape $m \times k$ and $B$ of shape $k \times n$.
# 2. `softmax_cost(rows, cols, itemsize)`: row-wise softmax of a `rows x cols` matrix into a new matrix of the same shape. Count **5 FLOPs per element** (max, subtract, exp, sum, divide).
# 3. `lstm_step_cost(batch, input_size, hidden, itemsize)`: one LSTM step, $[i, f, g, o] = x_t W^\top + h_{t-1} U^\top + b$, then the cell update. $x_t$ is `batch x input_size`, $h$ and $c$ are `batch x hidden`, $W$ is `4*hidden x input_size`, $U$ is `4*hidden x hidden`, $b$ has `4*hidden` elements. FLOPs: the two matrix products only. Bytes: the step reads $x_t$, $h_{t-1}$, $c_{t-1}$, $W$, $U$, $b$ and writes $h_t$, $c_t$ — all of them `itemsize` bytes per element.
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# FLOPs: an $m \times k$ by $k \times n$ product makes $m n$ outputs of $k$ multiply-adds each. Bytes: list every tensor
# the kernel reads or writes, count its elements, multiply by `itemsize`.
# </details>
#
# <details><summary>Hint 2</summary>
#
# The softmax reads its input once and writes an output of the same size: twice `rows * cols` elements. The LSTM step's
# two products are one $[B, I + H] \times [I + H, 4H]$ product.
# </details>
#
# <details><summary>Hint 3</summary>
#
# The LSTM step's elements: $x_t$ ($BI$), $h_{t-1}$ and $c_{t-1}$ ($2BH$), $W$ ($4HI$), $U$ ($4H^2$), $b$ ($4H$), and
# $h_t$, $c_t$ written ($2BH$). A common slip is forgetting $c$ (read and written) or the bias.
# </details>

# %% tags=["solution"]
def gemm_cost(m: int, n: int, k: int, itemsize: int) -> tuple[float, float]:
    ### BEGIN SOLUTION
    return 2 * m * n * k, (m * k + k * n + m * n) * itemsize
    ### END SOLUTION


# %%
# GRADER: GEMM cost
grading.grade_gemm_cost(gemm_cost)


# %% tags=["solution"]
def softmax_cost(rows: int, cols: int, itemsize: int) -> tuple[float, float]:
    ### BEGIN SOLUTION
    return 5 * rows * cols, 2 * rows * cols * itemsize
    ### END SOLUTION


# %%
# GRADER: softmax cost
grading.grade_softmax_cost(softmax_cost)


# %% tags=["solution"]
def lstm_step_cost(batch: int, input_size: int, hidden: int, itemsize: int) -> tuple[float, float]:
    ### BEGIN SOLUTION
    b, i, h = batch, input_size, hidden
    flops = 2 * b * 4 * h * (i + h)  # [b, i + h] @ [i + h, 4h]
    elements = b * i + 2 * b * h + 4 * h * i + 4 * h * h + 4 * h + 2 * b * h  # x, h, c in; W, U, bias; h, c out
    return flops, elements * itemsize
    ### END SOLUTION


# %%
# GRADER: LSTM step cost
grading.grade_lstm_step_cost(lstm_step_cost)


# %% [markdown]
# ## Task 3: memory- or compute-bound?
#
# Return `"memory"` if a kernel of `flops` FLOPs that moves `nbytes` bytes is limited by memory on this GPU, else `"compute"` (exactly at the ridge point, say `"compute"`).
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# On the roofline's x axis, where does this kernel sit, and where on that axis do the two roofs meet (lesson 1,
# section 1)?
# </details>
#
# <details><summary>Hint 2</summary>
#
# The ridge is the intensity where the two roofs meet: peak FLOP/s divided by bytes/s (mind the units: tera and
# giga). At or above it: compute-bound.
# </details>

# %% tags=["solution"]
def bound(flops: float, nbytes: float, peak_tflops: float, bandwidth_gbps: float) -> str:
    ### BEGIN SOLUTION
    ridge = peak_tflops * 1e12 / (bandwidth_gbps * 1e9)  # FLOP per byte where the two roofs meet
    return "compute" if flops / nbytes >= ridge else "memory"
    ### END SOLUTION


# %%
# GRADER: memory- or compute-bound
grading.grade_bound(bound)

# %% [markdown]
# ## Place the three kernels
#
# Your counts, for a 4096³ GEMM, a softmax over 8192 × 8192 scores and an LSTM step with batch 32 and 1024 units, all in bf16 on the H100 (the stored measurement if there is one, else the spec table: the first line says which), placed on its roofline:

# %%
h100 = roofline.ceilings("h100")
peak, hbm = h100.compute("bf16"), h100.bandwidth("HBM")
kernels = [
    ("GEMM 4096^3 bf16", gemm_cost(4096, 4096, 4096, 2), "bf16"),
    ("softmax 8192x8192 bf16", softmax_cost(8192, 8192, 2), "fp32"),  # exp and sums run on the FP32 units
    ("LSTM step B=32 H=1024 bf16", lstm_step_cost(32, 1024, 1024, 2), "bf16"),
]
print(h100.source)
records = []
for name, (flops, nbytes), roof in kernels:
    p = h100.compute(roof)
    verdict = bound(flops, nbytes, p, hbm)
    print(f"{name:28s} I = {flops / nbytes:8.2f} FLOP/B, ridge {p * 1e3 / hbm:5.1f}: {verdict}-bound, "
          f"at most {attainable_tflops(flops / nbytes, p, hbm):6.1f} TFLOP/s")
    records.append(roofline.Intensity(name, flops, nbytes, roof, "bfloat16"))
roofline.plot(records, h100)
plt.show()


# %% [markdown]
# ## Task 4: when does an LSTM step stop being memory-bound?
#
# With the byte count of Task 2, the intensity of one step grows with the batch. Return the **smallest batch** at which one step with these sizes is compute-bound (intensity at or above the ridge point `peak_tflops * 1e3 / bandwidth_gbps`), or `None` if no batch is large enough. A closed form and a search both work; think about what the intensity tends to as the batch grows.
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# The FLOPs grow in proportion to $B$; the bytes are a part that grows with $B$ (activations) plus a part that does not
# (the weights). So the intensity rises with $B$, but towards a limit.
# </details>
#
# <details><summary>Hint 2</summary>
#
# As $B \to \infty$ the intensity tends to $8H(I+H) / (s(I + 4H))$. If that limit is not above the ridge, no batch
# is large enough: return `None` (a search without this check never ends).
# </details>
#
# <details><summary>Hint 3</summary>
#
# Otherwise count up from $B = 1$ with your `lstm_step_cost` until `flops / nbytes >= ridge`, or solve the
# inequality for $B$ and round up.
# </details>

# %% tags=["solution"]
def smallest_compute_bound_batch(input_size, hidden, itemsize, peak_tflops, bandwidth_gbps):
    ### BEGIN SOLUTION
    i, h, s = input_size, hidden, itemsize
    ridge = peak_tflops * 1e3 / bandwidth_gbps
    # intensity(B) = 8BH(I+H) / (s (B (I + 4H) + 4H(I+H) + 4H)): rises with B towards 8H(I+H) / (s (I + 4H))
    if 8 * h * (i + h) <= ridge * s * (i + 4 * h):
        return None
    b = 1
    while True:
        flops, nbytes = lstm_step_cost(b, i, h, s)
        if flops / nbytes >= ridge:
            return b
        b += 1
    ### END SOLUTION


# %%
# GRADER: smallest compute-bound batch
grading.grade_compute_bound_batch(smallest_compute_bound_batch)

# %%
for dtype, itemsize, roof in (("bf16", 2, "bf16"), ("tf32", 4, "tf32")):
    b = smallest_compute_bound_batch(1024, 1024, itemsize, h100.compute(roof), h100.bandwidth("HBM"))
    print(f"H=1024 LSTM step in {dtype} on the H100: compute-bound from batch {b}")

# %% [markdown]
# ## Question
#
# A FlashRNN-style kernel keeps the weights on chip for the whole sequence, so against HBM its intensity is in the thousands even at batch 16. Why is it still not running at the tensor-core roof at batch 16? Name the roof (or the other limit) that takes over.
#
# ### BEGIN SOLUTION
# The weights are still read at every step — from registers and shared memory instead of HBM — so against the **on-chip (L1 / shared memory) roof** the intensity is again that of one step, about 2B/itemsize = 16 FLOP/byte at batch 16, and the tensor cores wait for on-chip bandwidth. On top of that, each step depends on the previous one: all SMs must finish step t and exchange h_t before step t+1 can start, so a grid-wide synchronisation per step (latency, not bandwidth) bounds it too. Only a larger batch (more work per weight read) raises the intensity against every level.
# ### END SOLUTION
