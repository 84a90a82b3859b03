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
# # Exercises 3 — The cuDNN 5 LSTM optimization ladder
#
# Five tasks that go with `notebooks/03_cudnn_ladder.ipynb`. Write your code where it says `# YOUR CODE HERE` (delete the `raise NotImplementedError()`), then run the `# GRADER` cell below it: it tests your code on fresh random LSTMs against `torch.nn.LSTM` in float64 and raises with a message if something is wrong.
#
# Grade the whole notebook from a terminal with
#
# ```
# make grade NB=exercises/03_cudnn_ladder.ipynb
# ```
#
# Everything runs on CPU (Triton's interpreter) as well as on a GPU.

# %%
import math

import torch

import gpulab  # first: decides GPU vs CPU interpreter before any kernel is defined
from gpulab.course import grading_ladder as grading
from gpulab.rnn import cells, ladder

import triton  # isort: skip
import triton.language as tl  # isort: skip


# %% [markdown]
# ## Task 1: step 1, combined GEMMs
#
# Write `step1(x, weights, state=None)`: a multi-layer LSTM forward with **two** matrix products per cell. `weights` is a `gpulab.rnn.LSTMWeights`: per layer `weights.w_ih[l]` is $[4H, I_l]$ (the four gates' rows i, f, z, o stacked), `weights.w_hh[l]` is $[4H, H]$, `weights.bias[l]` is $[4H]$. `x` is $[T, B, I]$, `state` is `(h0, c0)` of shape $[L, B, H]$ or None (zeros). Return `(y, (h_n, c_n))` like `nn.LSTM`: `y` $[T, B, H]$ is the last layer's $h_t$ for every $t$, `h_n` and `c_n` $[L, B, H]$ the final states.
#
# Use `ladder.lstm_cell_torch(i, f, z, o, c)` (or write the cell yourself); `gates.chunk(4, dim=1)` splits $[B, 4H]$ into the four gates. The grader counts your matrix products: at most 2 per cell.
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# Two loops: over layers outside, over time inside. Layer $l$'s input sequence is layer $l-1$'s outputs (layer 0's is
# `x`), and each layer starts from its own slice of the initial state, `h0[l]`, `c0[l]`.
# </details>
#
# <details><summary>Hint 2</summary>
#
# One cell is `gates = x_t @ w_ih[l].t() + h @ w_hh[l].t() + bias[l]` ($[B, 4H]$, two products for all four gates),
# then `h, c = ladder.lstm_cell_torch(*gates.chunk(4, dim=1), c)`.
# </details>
#
# <details><summary>Hint 3</summary>
#
# Collect each layer's $h_t$ in a list and `torch.stack` it: that $[T, B, H]$ tensor is the next layer's input and,
# after the last layer, `y`. The last $h$ and $c$ of every layer, stacked, are `h_n` and `c_n`.
# </details>

# %% tags=["solution"]
def step1(x, weights, state=None):
    ### BEGIN SOLUTION
    n_l, (n_t, b, _) = weights.num_layers, x.shape
    shape = (n_l, b, weights.hidden_size)
    h0, c0 = state if state is not None else (x.new_zeros(shape), x.new_zeros(shape))
    inp, h_n, c_n = x, [], []
    for layer in range(n_l):
        h, c, out = h0[layer], c0[layer], []
        for t in range(n_t):
            gates = inp[t] @ weights.w_ih[layer].t() + h @ weights.w_hh[layer].t() + weights.bias[layer]
            h, c = ladder.lstm_cell_torch(*gates.chunk(4, dim=1), c)
            out.append(h)
        inp = torch.stack(out)
        h_n.append(h)
        c_n.append(c)
    return inp, (torch.stack(h_n), torch.stack(c_n))
    ### END SOLUTION


# %%
# GRADER: step 1: combined GEMMs
grading.grade_combined_gemm(step1)


# %% [markdown]
# ## Task 2: the fused pointwise kernel
#
# Write `pointwise_kernel(gates_ptr, c_ptr, h_out_ptr, c_out_ptr, M, BLOCK)`. `gates` is $[N, 4, M]$ contiguous (pre-activations in the order i, f, z, o: gate $g$ of row $n$ starts at `gates_ptr + n*4*M + g*M`), `c` is $[N, M]$ in fp32. Program $(n, b)$ handles units $[b \cdot \text{BLOCK}, (b+1) \cdot \text{BLOCK})$ of row $n$: load the four gates and $c$, compute in fp32 (`.to(tl.float32)`), and store $h$ (in `h_out`'s dtype: `.to(h_out_ptr.dtype.element_ty)`) and the new $c$. The last block is ragged: mask it.
#
# You may call `cells.lstm_cell(i, f, z, o, c)`, the course's `@triton.jit` cell math, which returns `(h, c)`.
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# Start from the masked copy of lesson 0: a 2-D grid, `n = tl.program_id(0)` the row and
# `offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)` the units, masked with `offs < M`.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Gate $g$ of row $n$ is at `gates_ptr + n * 4 * M + g * M + offs`; $c$ of row $n$ at `c_ptr + n * M + offs`. Convert
# every load with `.to(tl.float32)` before the cell.
# </details>
#
# <details><summary>Hint 3</summary>
#
# Store $h$ converted to the output's dtype, `h.to(h_out_ptr.dtype.element_ty)`, and the new $c$ in fp32, both with the
# same mask as the loads.
# </details>

# %% tags=["solution"]
@triton.jit
def pointwise_kernel(gates_ptr, c_ptr, h_out_ptr, c_out_ptr, M, BLOCK: tl.constexpr):
    ### BEGIN SOLUTION
    n = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M
    g = gates_ptr + n * 4 * M + offs
    i = tl.load(g, mask=mask).to(tl.float32)
    f = tl.load(g + M, mask=mask).to(tl.float32)
    z = tl.load(g + 2 * M, mask=mask).to(tl.float32)
    o = tl.load(g + 3 * M, mask=mask).to(tl.float32)
    c = tl.load(c_ptr + n * M + offs, mask=mask).to(tl.float32)
    h, c = cells.lstm_cell(i, f, z, o, c)
    tl.store(h_out_ptr + n * M + offs, h.to(h_out_ptr.dtype.element_ty), mask=mask)
    tl.store(c_out_ptr + n * M + offs, c, mask=mask)
    ### END SOLUTION


# %%
# GRADER: fused LSTM pointwise kernel
grading.grade_pointwise_kernel(pointwise_kernel)


# %% [markdown]
# ## Task 3: the wavefront schedule (step 6)
#
# A stack of $L$ LSTM layers over $T$ steps is a grid of $L \times T$ cells. Cell $(l, t)$ needs $(l, t-1)$, its
# own layer's previous state, and $(l-1, t)$, its input from the layer below. Steps 0 to 5 run the cells one at a
# time; step 6 runs every cell that is ready at once, as one batched product and one pointwise launch per *wave*.
# Write `schedule(layers, steps) -> list of waves`, each wave a list of cells `(layer, t)`, in the order the waves
# run. The grader checks the structure on random stacks and the article's 4 x 100: every cell exactly once, both
# dependencies of each cell in earlier waves, and the fewest waves possible.
#
# <details><summary>Hint 1</summary>
#
# Draw the grid for $L = 3$, $T = 5$ and mark which cells are ready after the first wave, the second, ... Which
# cells become ready together, and what do their coordinates have in common?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Wave $k$ holds the cells with $l + t = k$, for $k = 0, \ldots, L + T - 2$: layers from $\max(0, k - T + 1)$ to
# $\min(L - 1, k)$, each at $t = k - l$.
# </details>

# %% tags=["solution"]
def schedule(layers, steps):
    ### BEGIN SOLUTION
    # cells with the same layer + t are independent: each needs only cells with layer + t one smaller
    return [
        [(layer, k - layer) for layer in range(max(0, k - steps + 1), min(layers, k + 1))]
        for k in range(layers + steps - 1)
    ]
    ### END SOLUTION


# %%
# GRADER: wavefront schedule
grading.grade_wavefront(schedule)

# %%
waves = schedule(4, 100)
print(f"the article's stack: {len(waves)} waves instead of {4 * 100} cells one by one; the widest holds "
      f"{max(map(len, waves))} cells")

# %% [markdown]
# ## Task 4: step 2, streams and events
#
# Step 1 runs the $L \times T$ cells one after another. But cell $(l, t)$ needs only $(l, t-1)$ and $(l-1, t)$:
# layer $l+1$ can compute step $t$ while layer $l$ computes step $t+1$. Write
# `step2(x, weights, state, cuda) -> (y, (h_n, c_n))`, step 1 (same arguments and result) with **one CUDA stream per
# layer**, written against `cuda`, which is `torch.cuda` on a GPU: `cuda.Stream()`, `with cuda.stream(s):` (work
# issued inside goes to `s`), `cuda.current_stream()`, `e = cuda.Event(); e.record(s)`, `s.wait_event(e)`,
# `s.wait_stream(other)`. Work on a stream runs in the order it was issued; work on two streams in any order, unless
# a wait orders it. `state` is `(h0, c0)`.
#
# On CPU the grader passes a stand-in (`gpulab.course.fake_cuda.FakeCuda`) that issues your ops as a GPU would and
# then runs the streams in the worst order your waits allow, so a missing wait reads a result that is not there yet
# (NaN). It checks the values, that the calling stream waits for the layers' streams before it uses their results,
# that each layer has a stream, and that your waits allow the shortest schedule the dependencies permit (a wait for
# more than a cell needs serializes the layers). On a GPU it also runs your function on `torch.cuda`.
#
# <details><summary>Hint 1: what to wait for</summary>
#
# One event per cell, recorded on its layer's stream right after the cell: `done[l][t]`. Before cell $(l, t)$, layer
# $l$'s stream waits for `done[l-1][t]` only ($(l, t-1)$ is on its own stream, already in order). Issue the cells in
# time-major order (`for t: for l:`) so that every event exists when its wait is issued: a wait on an event not
# recorded yet waits for nothing.
# </details>
#
# <details><summary>Hint 2: where the results live</summary>
#
# Allocate each layer's outputs `ys[l] = x.new_empty(T, B, H)` up front on the calling stream, and have every side
# stream wait for it first (`s.wait_stream(main)`); each cell writes `ys[l][t].copy_(h)`. At the end the calling stream
# waits for every side stream (`main.wait_stream(s)`) before it stacks `h_n` and copies `y`.
# </details>

# %% tags=["solution"]
def step2(x, weights, state, cuda):
    ### BEGIN SOLUTION
    n_l, (n_t, b, _) = weights.num_layers, x.shape
    h0, c0 = state
    main = cuda.current_stream()
    streams = [cuda.Stream() for _ in range(n_l)]
    ys = [x.new_empty(n_t, b, weights.hidden_size) for _ in range(n_l)]  # on the calling stream
    for s in streams:
        s.wait_stream(main)  # the side streams start after the inputs and outputs exist
    cs = [c0[layer] for layer in range(n_l)]
    done = [[None] * n_t for _ in range(n_l)]  # done[l][t]: recorded after cell (l, t)
    for t in range(n_t):  # time-major: every event is recorded before the wait that needs it is issued
        for layer in range(n_l):
            s = streams[layer]
            with cuda.stream(s):
                if layer > 0:
                    s.wait_event(done[layer - 1][t])  # the input from below; (l, t-1) is in order on s
                inp = x[t] if layer == 0 else ys[layer - 1][t]
                h = h0[layer] if t == 0 else ys[layer][t - 1]
                gates = inp @ weights.w_ih[layer].t() + h @ weights.w_hh[layer].t() + weights.bias[layer]
                h_new, cs[layer] = ladder.lstm_cell_torch(*gates.chunk(4, dim=1), cs[layer])
                ys[layer][t].copy_(h_new)
                done[layer][t] = cuda.Event()
                done[layer][t].record(s)
    for s in streams:
        main.wait_stream(s)  # join: the calling stream reads the layers' results only after them
    return ys[-1].clone(), (torch.stack([y[-1] for y in ys]), torch.stack(cs))
    ### END SOLUTION


# %%
# GRADER: step 2: streams and events
grading.grade_streams(step2)


# %% [markdown]
# ## Task 5: the forward in a CUDA graph
#
# Run eagerly, every ladder step pays the host for its launches: each of the thousands of small kernels of a forward
# costs the host a few microseconds. A CUDA graph records the kernels of one call once and replays them all with one launch,
# on the same memory. Write `graphed(fn, example, cuda) -> replay`: capture `fn(example)` once (`fn` is one ladder
# forward, `x` $[T, B, I] \to y$) and return `replay(x)`, which runs the captured forward on a new input `x` (same
# shape) and returns its output. `cuda` is `torch.cuda` on a GPU (`cuda.CUDAGraph()`, `with cuda.graph(g):`,
# `g.replay()`, streams as in task 4).
#
# On CPU the grader passes the stand-in of task 4, whose capture records the ops without running them and whose
# replay runs them on the tensors captured, as a GPU's does. It checks the outputs for new inputs and the method: a
# warm-up on a side stream before the capture (as PyTorch requires), one capture for all calls, `fn` never run
# eagerly after it. On a GPU the real capture is graded the same way.
#
# <details><summary>Hint 1: static memory</summary>
#
# A graph replays its kernels on the addresses it captured: the input it reads is the tensor you passed during the
# capture, and its output is the tensor the capture returned. So keep a static input (`static_x = example.clone()`),
# capture `static_y = fn(static_x)`, and on each call copy the new input in before replaying.
# </details>
#
# <details><summary>Hint 2: the warm-up</summary>
#
# Before capturing, run `fn(static_x)` once or twice on a side stream (`s = cuda.Stream()`,
# `s.wait_stream(cuda.current_stream())`, `with cuda.stream(s): ...`, then `cuda.current_stream().wait_stream(s)`):
# libraries initialize lazily (cuBLAS workspaces, Triton compiles), which must not happen inside a capture.
# </details>

# %% tags=["solution"]
def graphed(fn, example, cuda):
    ### BEGIN SOLUTION
    static_x = example.clone()  # the graph reads this tensor at every replay
    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    with cuda.stream(side):  # warm-up outside the capture: lazy initializations happen here
        for _ in range(2):
            fn(static_x)
    cuda.current_stream().wait_stream(side)
    graph = cuda.CUDAGraph()
    with cuda.graph(graph):
        static_y = fn(static_x)  # recorded, not run: its values come with each replay

    def replay(x):
        static_x.copy_(x)
        graph.replay()
        return static_y  # overwritten by the next replay: clone it to keep it

    return replay
    ### END SOLUTION


# %%
# GRADER: CUDA graph: capture once, replay
grading.grade_graphed(graphed)

# %% [markdown]
# ## What the two steps saved
#
# Step 1 cut the products per cell from 8 to 2 (and the additions that summed them); step 3, your kernel of task 2, cut the pointwise launches from about 20 to 1. Each step of the ladder builds on the one before, so what a step saved is the time of the step before it minus its own. Before reading on, guess which saved more time on the H100, run eagerly and captured in a CUDA graph. The lesson's stored run (4 layers x 100 steps = 400 cells per forward) says:

# %%
from gpulab import bench
from gpulab.course import claims

try:
    runs = {(r.params["step"], r.params["mode"], r.dtype): r for r in bench.load("03", gpu="h100")}
except FileNotFoundError:
    runs = {}
DTYPES = ("float32", "float16", "bfloat16")
CLOCK = {"eager": ("wall_ms", "wall time per call"), "graph": ("ms", "device time")}  # as the lesson reads them
if all((s, m, d) in runs for s in range(4) for m in CLOCK for d in DTYPES):
    saved = {}
    for mode, (field, clock) in CLOCK.items():
        for d in DTYPES:
            t = [getattr(runs[s, mode, d], field) for s in range(4)]
            saved[mode, d] = (t[0] - t[1], t[2] - t[3])
            print(f"{mode:5s} {d:8s} ({clock}): combined GEMMs saved {saved[mode, d][0]:6.1f} ms per forward, "
                  f"the fused pointwise kernel {saved[mode, d][1]:6.1f} ms")
    eager_fused = [d for d in DTYPES if saved["eager", d][1] > saved["eager", d][0]]
    claims.show(claims.claim(
        "Captured in a graph (device time), the combined GEMMs (6 fewer products per cell) saved **more** than the "
        "fused pointwise kernel (about 19 fewer launches per cell) in every dtype, at least {low:.1f} times as much. "
        "Run eagerly (wall time per call), the fused kernel saved more in {n} of the {m} dtypes{which}.",
        holds=lambda low, **_: low > 1, n=len(eager_fused), m=len(DTYPES),
        which=f" ({', '.join(eager_fused)})" if eager_fused else "",
        low=min(a / b if b > 0 else math.inf for (mode, _), (a, b) in saved.items() if mode == "graph"),
    ))  # fmt: skip
else:
    print("(no stored H100 run of the ladder: `python -m gpulab bench 03` on an H100 makes it)")

# %% [markdown]
# ## Question
#
# Explain the graph verdict above: why can removing 6 products per cell save more time than removing about 19 launches? And why does the eager clock not rank the two steps the same way in every dtype?
#
# ### BEGIN SOLUTION
# Launches are not the unit of cost; what each kernel costs is. In a graph the host's cost is gone and each kernel costs its GPU time along the dependency chain: a product of only $B = 64$ rows cannot fill the GPU, yet it reads its weight matrix ($512 \times 512$ fp32 per gate and input, 1 MiB) and runs a prologue and epilogue for its few tiles, and each product brings an addition that the combined GEMMs remove with it; an elementwise kernel over $64 \times 512$ values is a single short pass. So a removed product takes far more GPU time with it than a removed elementwise kernel. Run eagerly, the host issues every kernel and its time per launch is what both steps save: the fusion removes more launches, each cuBLAS call (heuristics, workspace) costs the host more than an elementwise launch, and in half precision the unfused cell also casts its five inputs to fp32 (five more kernels, no-ops in fp32). With host costs of both kinds in play, and step 3 measured against step 2's streams, the ranking depends on the dtype and on the run's wall-clock noise, as the table shows; one run does not settle it.
# ### END SOLUTION
