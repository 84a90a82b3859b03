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
# # Lesson 3 — The cuDNN 5 LSTM optimization ladder
#
# **What you will learn**
# - how NVIDIA made LSTMs fast in **cuDNN** 5 (NVIDIA's library of deep-learning kernels; Appleyard, *Optimizing Recurrent Neural Networks in cuDNN 5*, 2016): a baseline and six optimizations, each rebuilt here as a small function in `gpulab.rnn.ladder` that computes the same 4-layer LSTM forward and is checked against `torch.nn.LSTM`;
# - why an LSTM with a small minibatch is bound, run from Python, by **kernel launches** (the *host*, the CPU, asks the GPU to start each kernel, which costs microseconds per kernel): the article's 2016 ladder (349 → 3898 GFLOP/s, 11.1x on an M40) becomes, on an H100, mostly a ladder of launch counts;
# - how a **CUDA graph** (a whole forward's kernels recorded once and replayed with one launch) removes the launch cost, and what each step buys run **eagerly** (each operation launched from Python as the code reaches it) and graphed;
# - how close the best step gets to cuDNN (`torch.nn.LSTM`) and what remains between it and the hardware's roofs.
#
# **How this notebook runs.** On a machine without a GPU, the Triton kernel runs in the CPU interpreter on a tiny LSTM (2 layers, hidden 16, batch 3, 4 steps); streams are no-ops and graphs are skipped, and the live timings time the interpreter. The measurements that matter were taken on an H100 with `python -m gpulab bench 03` and are stored under `benchmarks/03_cudnn_ladder/`; section 5 shows them.

# %%
# NBVAL_IGNORE_OUTPUT
import copy
import inspect

import matplotlib.pyplot as plt
import torch

import gpulab  # first: decides GPU vs CPU interpreter before any kernel is defined
from gpulab import bench, check, roofline, runtime
from gpulab.rnn import cells, from_torch_lstm, ladder
from gpulab.course import claims

print(f"kernels run in {runtime.MODE} mode on {runtime.device}; torch {torch.__version__}")

# %% [markdown]
# ## 1. Count: one LSTM step, and the whole problem
#
# For gate pre-activations $[i\ f\ z\ o] = x_t W_{ih}^T + h_{t-1} W_{hh}^T + b$ (shape $[B, 4H]$, nn.LSTM's gate order):
#
# $$ c_t = \sigma(f) \odot c_{t-1} + \sigma(i) \odot \tanh(z), \qquad h_t = \sigma(o) \odot \tanh(c_t). $$
#
# The two products are $2 \cdot B \cdot 4H \cdot (I + H)$ FLOPs. A step that runs as separate kernels must read the weights ($4H(I+H)$ elements) from memory every time, and they dwarf the state: for $B = 64$ the intensity is about $2B / s$ FLOP per byte ($s$ bytes per element), 32 in fp32, 64 in fp16. fp16 runs on the tensor cores; fp32, with TF32 off as in the article, on the FMA units, whose ridge point is much lower. Each product is also tiny: $64 \times 2048 \times 512$ is 134 MFLOP, a few microseconds, about what it costs Python to launch it. The table places the step on the H100's measured roofs:

# %%
ops = [roofline.lstm_step(64, 512, 512, dt) for dt in ("float32", "float16")]
ops += [roofline.lstm_sequence(64, 100, 512, 512, dt, layers=4) for dt in ("float32", "float16")]
ops += [roofline.lstm_sequence(64, 100, 512, 512, "float16", layers=4, weights_on_chip=True)]
print(roofline.intensity_table(ops))
print(f"\nthe article's problem: {ops[2].flops / 1e9:.1f} GFLOP in {4 * 100} cells")
h100 = roofline.ceilings("h100")
on = {op.compute: (op.intensity, h100.ridge(op.compute)) for op in ops[:2]}  # one step, fp32 and fp16
claims.show(claims.claim(
    "On paper, one fp32 step (intensity {i32:.1f} FLOP/B against the FMA units' ridge point of {r32:.0f}) is "
    "**compute-bound**, and one fp16 step ({i16:.1f} against the tensor cores' {r16:.0f}) **memory-bound**. Either "
    "way each step's products are microseconds of work, so run from Python, expect the *launches* to set the time: "
    "section 5 measures it.",
    holds=lambda i32, r32, i16, r16: i32 >= r32 and i16 < r16, i32=on["fp32"][0], r32=on["fp32"][1],
    i16=on["fp16"][0], r16=on["fp16"][1],
))  # fmt: skip

# %%
ax = roofline.plot(ops, title="One LSTM step and the article's LSTM on the roofline (predictions)")
plt.show()

# %% [markdown]
# ## 2. The reference and the problem
#
# Every step takes an `nn.LSTM`'s weights through `gpulab.rnn.from_torch_lstm` (all layers, gate order i, f, g, o, both biases summed once, `batch_first` kept) and returns exactly what the module returns: `(y, (h_n, c_n))`. Each is checked against the module run in float64 on the same weights, with `gpulab.check`'s tolerance for the dtype. The cell state $c$ is kept in fp32 between steps in every step.

# %%
module, weights, x = ladder.make_problem(torch.float32)
p = ladder.problem()
print(f"problem here: layers {p['layers']}, hidden {p['hidden']}, batch {p['batch']}, seq {p['seq']} "
      f"(the article's: {ladder.ARTICLE})")
with torch.no_grad():
    ref = copy.deepcopy(module).double()(x.double())


def build_and_check(n):
    print(inspect.getsource(ladder.STEPS[n][1]))
    with torch.no_grad():
        ladder._check(ladder.run_step(n, x, weights), ref, torch.float32, f"step {n}")
    print(f"step {n} matches nn.LSTM (max rel err below tol)")


# %% [markdown]
# The cell itself, in `gpulab.rnn.cells`: the math as a `@triton.jit` function, computed in fp32, and the kernel that lesson 6 reuses.

# %%
print(inspect.getsource(cells.lstm_cell.fn))  # .fn: the Python source behind @triton.jit
print(inspect.getsource(cells.lstm_pointwise_kernel.fn))

# %% [markdown]
# ## 3. The ladder, one step at a time

# %% [markdown]
# **Step 0, the baseline.** Per cell (layer $l$, time $t$): eight matrix products, one per gate and per operand ($x_t W_g^T$, $h_{t-1} U_g^T$ for $g \in \{i, f, z, o\}$), then the cell with separate PyTorch kernels: four adds of the products, four bias adds, three sigmoids, two tanh, the multiplies. About 30 launches per cell, 400 cells.

# %%
build_and_check(0)

# %% [markdown]
# **Step 1, combined GEMMs.** The four gates' input weights are one $[4H, I]$ matrix (they already are, in nn.LSTM's storage) and the four recurrent weights one $[4H, H]$: two products of $N = 4H$ instead of eight of $N = H$. Fewer launches, and each product has four times the work to spread over the SMs.

# %%
build_and_check(1)

# %% [markdown]
# **Step 2, streams.** A CUDA **stream** is a queue of GPU work that runs in order; work on two streams may run at the same time, and an **event** recorded on one stream is a point another stream can wait for. Cell $(l, t)$ needs $(l, t-1)$ and $(l-1, t)$ only. With one stream per layer and an event after each cell, layer $l+1$ computes time $t$ while layer $l$ computes $t+1$: up to $L$ cells in flight. Outputs are preallocated on the calling stream, so no buffer is freed while another stream reads it.

# %%
build_and_check(2)

# %% [markdown]
# **Step 3, fused pointwise.** `gpulab.rnn.cells.lstm_pointwise`: one Triton kernel reads the four gate pre-activations, the bias and $c$, and writes $h$ and $c$ (fp32 math). The recurrent product accumulates onto the input product (`addmm`: $C = G_x + h W_{hh}^T$), so a cell is 2 products + 1 kernel.

# %%
build_and_check(3)

# %% [markdown]
# **Step 4, pre-transposed weights.** $W^T$ is laid out once as $[I, 4H]$, row-major, so the product is a plain NN GEMM (neither operand transposed). In 2016 this changed which cuBLAS kernel ran; in PyTorch a transposed view is passed to cuBLAS as a flag without a copy, so expect little change here: the measurement decides.

# %%
build_and_check(4)

# %% [markdown]
# **Step 5, combined input GEMMs.** The input products of a layer do not depend on the recurrence: all $T$ of them are one $[TB, I] \times [I, 4H]$ product (bias folded in), which fills the GPU. The recurrence is left with 1 product + 1 kernel per cell. A layer now needs the whole output of the layer below, so layers run one after another.

# %%
build_and_check(5)

# %% [markdown]
# **Step 6, many layers: a wavefront.** All cells with $l + t = k$ are independent; the set of them is **wavefront** $k$ (a diagonal of the layer × time grid: the word means this schedule in this lesson). Wavefront $k$ runs them together: one batched input product (layers $\ge 1$), one batched recurrent product, one pointwise launch, for $T + L - 1 = 103$ wavefronts instead of 400 cells. The state buffer is laid out so that each wavefront's inputs and outputs are contiguous slices.

# %%
build_and_check(6)

# %% [markdown]
# **Step 7, beyond the article.** Step 6 with the input and recurrent products of layers $\ge 1$ merged into one product of $K = 2H$: $[x_t ; h_{t-1}] [W_{ih} ; W_{hh}]^T$. The state buffer is interleaved, so the concatenation is a strided view, not a copy; the pointwise kernel writes $h$ straight into that view.

# %%
build_and_check(7)

# %% [markdown]
# **Step 8, beyond the article.** Step 6 with its two products per wavefront on two streams. They read only what the previous wavefront wrote, so they are independent; at the article's size each alone is $L \times [B, 4H]$ = 4 × 64 × 2048 outputs, about 64 tiles of 128 × 128 (each half empty: $B = 64$ rows) for 132 SMs, so half the GPU idles during each. On two streams they overlap, and the pointwise kernel adds the two parts (its `gates2` argument), so no extra add is launched. Eagerly the stream fork and join are host work; in a CUDA graph they become edges and cost nothing. Prediction: in fp32, where those products are most of the time, up to ~2x less GEMM time per wavefront; in fp16/bf16, where a wavefront is latency-bound (its time set by a chain of short dependent kernels, each waiting for the one before, not by its bytes or FLOPs), little change.

# %%
build_and_check(8)

# %% [markdown]
# ## 4. Eager and graphed
#
# Run eagerly, every launch of a step (over ten thousand per forward for step 0, a few hundred for the wavefront) costs the host microseconds, and a GPU that finishes each small kernel faster than the host can launch the next waits. A CUDA graph records the whole forward once and replays it with one launch: what is left is the GPU's own time. `ladder.capture` warms the step up on a side stream (compiling the Triton kernel, letting cuBLAS choose its kernels), captures one call, and replays it; the inputs must stay at the same addresses.

# %%
print(inspect.getsource(ladder.CapturedStep))

# %% [markdown]
# The live ladder on this machine. On CPU these are interpreter timings: they show the code runs, not how fast a GPU is (the interpreter runs each Triton launch as numpy code, so the fused steps look *slower* here).

# %%
# NBVAL_IGNORE_OUTPUT
live, fig = ladder.benchmark(dtypes=[torch.float32])
if runtime.on_gpu():
    plt.show()
else:
    plt.close(fig)

# %% [markdown]
# ## 5. The H100 ladder
#
# The stored run of `python -m gpulab bench 03` on an H100: the article's problem (4 layers, hidden 512, batch 64, 100 steps, forward), fp32 with TF32 off, fp16 and bf16; every step eagerly and graphed, and cuDNN (`torch.nn.LSTM` after `flatten_parameters()`), each checked against float64 before it was timed.

# %%
try:
    stored = bench.load("03", gpu="h100")
except FileNotFoundError:
    stored = []
    print("no stored H100 results yet")
if stored:
    print(f"{stored[0].device}, {stored[0].date}, torch {stored[0].torch}, triton {stored[0].triton}\n")
    print(ladder.ladder_table(stored))
    print()
    print("\n".join(ladder.targets(stored)))

# %%
if stored:
    ladder.plot_ladder(stored)
    plt.show()
    fig, axes = plt.subplots(1, 2, figsize=(17, 5))
    for ax, dt in zip(axes, ("float32", "float16")):
        ladder.plot_roofline(stored, dtype=dt, mode="graph", ax=ax)
    fig.tight_layout()
    plt.show()

# %% [markdown]
# ## 6. What the measurements mean
#
# - **Eagerly**, each step is worth what it saves in launches. Steps 0 → 1 cut 8 products and ~20 elementwise kernels per cell to 2 and 11 to 16 (more in fp16 and bf16, whose unfused cell casts to fp32 first); step 3 replaces the pointwise kernels by one; step 5 takes one product per cell out of the recurrence; the wavefront (6-8) runs $T + L - 1$ wavefronts instead of $T L$ cells. Streams (step 2) add event records and waits, which are host work too (what they cost eagerly is printed below).
# - **Graphed**, launch costs vanish and the GPU's time remains: the number of kernels in the dependency chain, and how well each small product fills 132 SMs. The wavefront batches $L$ layers' products into one, which turns 4 products, each on about an eighth of the GPU (16 tiles of 128 × 128), into 1 product on about half of it, and step 8 runs the input and recurrent products side by side to fill the other half (what each step gained, graphed, is printed below).
# - **Against cuDNN, mode for mode**: cuDNN's persistent kernels run the recurrence with few launches, and a CUDA graph sheds cuDNN's launch costs too; so the cell below compares the fastest step with cuDNN in the same mode, graphed against graphed (device time) and eager against eager (wall time, what a training loop pays), and the floor set by the compute roof. The verdict, mode for mode, is printed below it; cuDNN's few launches are the case for lesson 6's single kernel. A step can also get slower in a graph (a capture fixes its allocations and turns stream forks and joins into graph edges); the cell lists any that did.
#
# What remains between the best step and the hardware: the floor below is the problem's FLOPs at the measured (or spec) compute roof of the dtype — IEEE fp32 on the FMA units, fp16/bf16 on the tensor cores. The weights (four layers of $2 \cdot 4 \cdot 512 \cdot 512$ values: about 34 MB in fp32, half that in fp16) fit in the H100's 50 MB L2, so after the first wavefront the bytes come from L2, not HBM: the per-step HBM bound of section 1 is pessimistic. What is left is latency: about 103 dependent wavefronts, each a few kernels whose products have $M = 64$ rows — too few to fill the tensor cores — plus the time each kernel takes to start and drain. Removing it needs what lesson 6 builds: one persistent kernel that keeps the weights on chip and synchronises across the sequence, instead of one launch per wavefront.

# %%
if not stored:
    print("no stored H100 results yet: run `python -m gpulab bench 03` on an H100")
print(ladder.same_mode_summary(stored))  # eager on wall clock (what a loop pays), graphed on device time
slower = ladder.slower_graphed(stored)
print("steps slower graphed than eager:", ", ".join(f"{dt} step {s}" for dt, s, _, _ in slower) or "none in this run")
for dt in dict.fromkeys(r.dtype for r in stored):
    graphed = [best for d, mode, best, _ in ladder.same_mode(stored) if d == dt and mode == "graph"]
    floor = ladder.math_floor_ms(dt)
    if graphed and floor:
        above = graphed[0].ms / floor
        print(f"{dt}: the best graphed step is {above:.1f}x above the compute-roof floor ({floor:.2f} ms)")
if stored:
    pairs = ladder.same_mode(stored)
    speed = {(dt, mode): ladder.mode_ms(cud) / ladder.mode_ms(best) for dt, mode, best, cud in pairs}
    graph = [v for (_, mode), v in speed.items() if mode == "graph"]
    eager = [v for (_, mode), v in speed.items() if mode == "eager"]
    fp32_8 = [best.params["step"] for dt, mode, best, _ in pairs if (dt, mode) == ("float32", "graph")]
    claims.show(claims.claim(
        "Graphed (device time), the best step beats cuDNN in every dtype ({g_lo:.2f}x to {g_hi:.2f}x its speed; in "
        "fp32 it is step {s8}); eagerly (wall time), cuDNN's few launches win by far (the best step reaches "
        "{e_lo:.2f}x to {e_hi:.2f}x cuDNN's speed).",
        holds=lambda g_lo, e_hi, **_: g_lo > 1 and e_hi < 1, g_lo=min(graph), g_hi=max(graph),
        e_lo=min(eager), e_hi=max(eager), s8=fp32_8[0] if fp32_8 else "-",
    ))  # fmt: skip
    steps_ = {}
    for r in stored:
        if r.status == "ok" and r.params.get("step") != "cuDNN":
            steps_.setdefault((r.dtype, r.params["mode"]), {})[r.params["step"]] = r
    dts_ = sorted({dt for dt, _ in steps_})
    gain_ = {(dt, m, k): steps_[dt, m][k - 1].ms / steps_[dt, m][k].ms for (dt, m) in steps_ for k in range(1, 9)
             if {k - 1, k} <= steps_[dt, m].keys()}  # fmt: skip
    streams_ = [steps_[dt, "eager"][2].wall_ms / steps_[dt, "eager"][1].wall_ms for dt in dts_]
    top_ = {dt: max(range(1, 9), key=lambda k: gain_.get((dt, "graph", k), 0)) for dt in dts_}
    wave_ = [gain_[dt, "graph", 6] for dt in dts_]
    eight_ = [gain_[dt, "graph", 8] for dt in dts_]
    claims.show(claims.claim(
        "Eagerly (wall time), step 2's streams take {lo:.2f}x to {hi:.2f}x step 1's time over the {n} dtypes: their "
        "events cost as much as the overlap saves, or more. Graphed (device time), the largest single gain in each "
        "dtype comes from fewer kernels per cell ({top}); the wavefront (step 6) then gains {w_lo:.2f}x to {w_hi:.2f}x "
        "over step 5, and step 8 runs at {e_lo:.2f}x to {e_hi:.2f}x step 7's speed.",
        holds=lambda lo, w_lo, **_: lo > 0.9 and all(k in (1, 3) for k in top_.values()) and w_lo > 1, lo=min(streams_),
        hi=max(streams_), n=len(dts_), top=", ".join(f"{dt} step {k}, {gain_[dt, 'graph', k]:.1f}x" for dt, k in
                                                     top_.items()),
        w_lo=min(wave_), w_hi=max(wave_), e_lo=min(eight_), e_hi=max(eight_),
    ))  # fmt: skip
