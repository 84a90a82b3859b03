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
# # Lesson 6 — A fused RNN on one SM
#
# **What you will learn**
# - why an LSTM's recurrence is **latency-bound**, its time set by a chain of $T$ tiny dependent steps waiting for each other, not by its FLOPs or bytes;
# - three backends of the `flashrnn` interface (Pöppel et al., *FlashRNN*, 2024), each checked against float64: a PyTorch loop, a product plus a fused kernel per step, and **one persistent Triton kernel** that keeps $R$ on chip;
# - that kernel built in four small versions, each with what it changed and what it measured; its backward; when a head fits on one SM; `gpulab.rnn.LSTM`, a module like `nn.LSTM`;
# - how the shipped kernel compares with the peers of the same problem on an H100.
#
# Without a GPU the kernels run in Triton's CPU interpreter on tiny problems: checked, not timed. The H100 measurements are read from `benchmarks/06_fused_rnn/`. Lesson 7 takes one head that is too large for one SM.
#
# *Words used below.* An **SM** (streaming multiprocessor) is one of the GPU's 132 cores (on the H100): it has its own registers, shared memory (on-chip scratch space its threads share, up to 227 KB per block of threads) and tensor cores (units that do small matrix products). A Triton **program** is one block of threads on one SM, its threads grouped in **warps** of 32 that issue together. A **persistent kernel** is one launch whose programs stay on their SMs for the whole job, here all $T$ steps, instead of one launch per step.

# %%
# NBVAL_IGNORE_OUTPUT
import inspect
import logging

import matplotlib.pyplot as plt
import torch

import gpulab  # first: decides GPU vs CPU interpreter before any kernel is defined
from gpulab import bench, check, hardware, rnn, roofline, runtime
from gpulab.course import claims, listing, palette, shown
from gpulab.rnn.backends import alternating, vanilla
from gpulab.rnn.fused import backward as fused_backward
from gpulab.rnn.fused import forward as fused_forward
from gpulab.rnn.fused import tiles, tiling, versions
from gpulab.rnn.fused.measure import rows_report, versions_report
from gpulab.rnn.functions import FUNCTIONS

# the flashrnn package imports torch's C++ extension builder, which warns on a machine without CUDA: not our concern
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
from flashrnn import flashrnn as flashrnn_pkg  # the reference package (its vanilla backend runs on CPU)

print(f"kernels run in {runtime.MODE} mode on {runtime.device}; torch {torch.__version__}")

# %% [markdown]
# ## 1. Count: a recurrence is a chain
#
# An LSTM step, with the input projections $Wx_t$ computed for all $t$ beforehand, recurrent weights $R$ and bias $b$:
#
# $$ [i\ f\ z\ o]_t = Wx_t + R\, h_{t-1} + b, \qquad c_t = \sigma(f) \odot c_{t-1} + \sigma(i) \odot \tanh(z), \qquad h_t = \sigma(o) \odot \tanh(c_t). $$
#
# Step $t$ needs $h_{t-1}$: the $T$ steps are a chain. The lesson's problem: batch $B = 16$, $T = 1024$ steps, hidden size 768 as 12 **heads** of 64 (below), bf16. A step's floors, if only FLOPs or only bytes mattered:

# %%
B, T, NH, DH, e = 16, 1024, 12, 64, 2  # the lesson's problem, bf16 (2 bytes per element)
H = NH * DH
step_flops = 2 * B * 4 * NH * DH * DH
r_bytes = 4 * NH * DH * DH * e
io_bytes = (4 * B * H + 2 * B * H) * e  # Wx_t in, h_t and c_t out
c = roofline.ceilings("H100")
print(f"per step: {step_flops / 1e6:.1f} MFLOP, R = {r_bytes / 1e3:.0f} KB, Wx_t + h_t + c_t = {io_bytes / 1e3:.0f} KB")
flops_per_ns, bytes_per_ns = c.compute("bf16") * 1e3, c.bandwidth("HBM")  # TFLOP/s and GB/s, per nanosecond
print(f"compute floor (bf16 tensor cores, {c.compute('bf16'):.0f} TFLOP/s): {step_flops / flops_per_ns:6.1f} ns/step")
print(f"memory floor, R on chip         ({c.bandwidth('HBM'):.0f} GB/s): {io_bytes / bytes_per_ns:6.1f} ns/step")
print(f"memory floor, R read every step: {(io_bytes + r_bytes) / bytes_per_ns:6.1f} ns/step")
print(f"whole sequence (T = {T}) at the R-on-chip memory floor: {T * io_bytes / bytes_per_ns / 1e3:.0f} us")

# %% [markdown]
# On lesson 1's roofline the recurrence stays memory-bound on paper, with a floor of tens of microseconds for the sequence. The roofline does not see **latency**: a step is a chain (load $h$, a small product, the activations, a store) that the next step waits for, and separate kernels add a launch each. The goal is **the shortest chain per step**.
#
# ### The flashrnn interface, and heads
#
# `gpulab.rnn.flashrnn(Wx, R, b, states, function, backend)` takes the package's layouts: `Wx` $[B, T, G_w, NH, DH]$, `R` $[G_r, NH, DH, DH]$ (`R[g, n, j, k]`: unit $k$ of $h$ to unit $j$ of gate $g$), `b` $[G_b, NH, DH]$, initial `states` $[S, B, 1, NH, DH]$; it returns all states $[S, B, T, NH, DH]$ and the last ones. **Heads make $R$ block-diagonal**: $NH = 1$ is `nn.LSTM`'s dense `weight_hh`; with $NH$ heads, units of one head never read another head's $h$, so there are $NH$ times fewer weights, and one program can keep one head's $R$ on chip. The check: the per-head product equals one block-diagonal matrix:

# %%
nh, dh = 4, 8
R_demo = torch.randn(4, nh, dh, dh)
dense = torch.zeros(4 * nh * dh, nh * dh)  # nn.LSTM's weight_hh layout: rows (gate, unit), columns: units of h
for g in range(4):
    for n in range(nh):
        dense[g * nh * dh + n * dh:g * nh * dh + (n + 1) * dh, n * dh:(n + 1) * dh] = R_demo[g, n]
x = torch.randn(3, nh * dh)
ry = torch.einsum("gnjk,bnk->bgnj", R_demo, x.view(3, nh, dh)).reshape(3, -1)
check.assert_close(ry, x.double() @ dense.double().T, name="block-diagonal product")
print(f"R per head and gate == one block-diagonal [4H, H] matrix: {(dense != 0).float().mean():.0%} of it nonzero")
print(f"{'function':8s} {'G_w':>4s} {'G_r':>4s} {'G_b':>4s} {'S':>3s}  gates       states")
for f in FUNCTIONS.values():
    print(f"{f.name:8s} {f.gates_w:4d} {f.gates_r:4d} {f.gates_b:4d} {f.states:3d}  {','.join(f.gate_names):11s} "
          f"{','.join(f.state_names)}")

# %% [markdown]
# **Predict.** The three backends below spend a step differently. Counted from their code (forward, bf16, elements read and written per step; $R = 4\,NH\,DH^2$):

# %%
BH = B * H
traffic = {  # (launches per step, elements per step), counted from each backend's code
    "vanilla": (13, BH + 4 * NH * DH * DH + 4 * BH + (27 + 19) * BH),  # a batched product, then ~12 elementwise ops
    "alternating": (2, BH + 4 * NH * DH * DH + 4 * BH + (4 + 4) * BH + 2 * BH + 2 * BH * 2 + 3 * BH),
    "fused": (1 / T, 4 * BH + 2 * BH + 4 * NH * DH * DH / T),
}
fig, ax = plt.subplots(figsize=(7, 2.6))
for i, (name, (launches, elements)) in enumerate(traffic.items()):
    ax.barh(i, elements * e / 1e3, color=palette.color(name))
    ax.text(elements * e / 1e3 * 1.1, i, f"{'1/T' if name == 'fused' else launches} launches per step", va="center")
ax.set(yticks=range(3), yticklabels=[palette.style(n)["label"] for n in traffic], xscale="log", xlim=(50, 3e4),
       xlabel="KB read and written per step (counted, log scale)", title="one forward step, three backends")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 2. The `vanilla` backend: the time loop in PyTorch
#
# The baseline and, in float64, the reference for every kernel below: per step one batched product over heads, then the cell in PyTorch operations:

# %%
print(inspect.getsource(vanilla.vanilla_forward))


# %% [markdown]
# It computes what the `flashrnn` package computes (the forward and every gradient, three cells), and with one head it is `torch.nn.LSTM`:

# %%
def inputs(function, B, T, NH, DH, seed=0, dtype=torch.float32):
    '''Random (Wx, R, b, states) in flashrnn's layouts; R scaled so the recurrence is well-conditioned.'''
    f = FUNCTIONS[function]
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape, sc=1.0: (torch.randn(*shape, generator=g, dtype=torch.float64) * sc).to(runtime.device, dtype)
    R = r(f.gates_r, NH, DH, DH, sc=0.5 / DH**0.5)
    return r(B, T, f.gates_w, NH, DH), R, r(f.gates_b, NH, DH), r(f.states, B, 1, NH, DH)


for function in ("lstm", "gru", "elman"):
    leaves = [t.cpu().requires_grad_() for t in inputs(function, B=3, T=5, NH=2, DH=7)]
    ours = rnn.flashrnn(*leaves, function=function, backend="vanilla")
    theirs = flashrnn_pkg(*leaves, function=function, backend="vanilla", dtype="float32")
    g_ours = torch.autograd.grad(ours[0].sum() + 2 * ours[1].sum(), leaves)
    g_theirs = torch.autograd.grad(theirs[0].sum() + 2 * theirs[1].sum(), leaves)
    for name, a, r_ in zip(["states", "last", "dWx", "dR", "db", "dstates"], ours + g_ours, theirs + g_theirs):
        check.assert_close(a, r_.double(), dtype=torch.float32, name=name, context=function)
    print(f"{function:5s}: gpulab vanilla == flashrnn package vanilla (states, last states, dWx, dR, db, dstates)")

torch.manual_seed(0)
lstm = torch.nn.LSTM(5, 8).double()
x = torch.randn(6, 3, 5, dtype=torch.float64)  # [T, B, I]
y_ref, (h_ref, c_ref) = lstm(x)
Wx = (x.transpose(0, 1) @ lstm.weight_ih_l0.T).view(3, 6, 4, 1, 8)
out, last = rnn.flashrnn(Wx, lstm.weight_hh_l0.view(4, 1, 8, 8), (lstm.bias_ih_l0 + lstm.bias_hh_l0).view(4, 1, 8),
                         function="lstm", backend="vanilla")
check.assert_close(out[0, :, :, 0].transpose(0, 1), y_ref, name="y")
check.assert_close(last[1, :, 0, 0], c_ref[0], name="c_n")
print("NH = 1: flashrnn(vanilla) == torch.nn.LSTM (outputs and final c, float64)")

# %% [markdown]
# ## 3. The `alternating` backend: one product, one fused kernel per step
#
# What cuDNN-style RNNs do: per step a batched product $h_{t-1} R^\top$ (cuBLAS), then **one** Triton kernel for $+\,Wx_t + b$ and the cell. Two launches per step, $R$ read every step, $h$ through memory; any head size runs.

# %%
listing.show(alternating.alternating_rnn_forward)
for function in ("lstm", "gru", "elman"):
    for (b_, t_, nh_, dh_) in [(1, 1, 1, 16), (3, 4, 2, 16), (2, 3, 1, 24)]:
        args = inputs(function, b_, t_, nh_, dh_, seed=1)
        ref = rnn.flashrnn(*(a.double() for a in args), function=function, backend="vanilla")
        got = rnn.flashrnn(*args, function=function, backend="alternating")
        check.assert_close(got, ref, dtype=torch.float32, name="states", context=f"{function} {b_, t_, nh_, dh_}")
    print(f"{function:5s}: alternating == float64 vanilla (B, T, NH, DH) in (1,1,1,16), (3,4,2,16), (2,3,1,24)")

# %% [markdown]
# ## 4. The fused forward in four versions
#
# One program per (head, batch tile) runs **all $T$ steps**: a persistent kernel that loads its head's $R$ once. It is built in four versions (`gpulab/rnn/fused/versions/`), each one change on the one before; the fourth is the package's `fused` forward.
#
# **v1: $R$ on chip as four tiles $R_g^\top$**, four products per step; $h$, $c$ stay in registers, in fp32 (exercise 6, task 2 writes its loop). The kernel:

# %%
listing.show(versions.v1_per_gate.v1_kernel, max_lines=45)

# %% [markdown]
# **v2: all gates in one tile.** $R_\text{all}^\top$ $[DH, 4\,DH]$ holds the four gates side by side, so one product per step gives every gate (exercise 6, task 3). In the tensor cores' output layout a thread already holds all four gates of its units, so taking the gates apart costs no data movement. The step:

# %%
listing.show(tiles.lstm_step_all_gates)

# %% [markdown]
# **v3: the input two steps ahead.** Step $t+2$'s $Wx$ is loaded during step $t$, as 32-bit words (two bf16 values each), the loop unrolled by two so that each step of a pair loads into its own variable. What it changes in v2's time loop (`-` removed, `+` added):

# %%
listing.diff(versions.v2_all_gates.v2_kernel, versions.v3_prefetch.v3_kernel, context=0)

# %% [markdown]
# **v4: one-instruction activations**, the package's kernel. In bf16 and fp16 the activations use the GPU's approximate $\tanh$ (one instruction, error about 5e-4, far below bf16's rounding), and $\sigma(x) = \tfrac12 + \tfrac12\tanh(x/2)$ has its ½ folded into $R$, $Wx$ and $b$ once (exact: a power of two). It also runs the GRU and the Elman cell and saves the gates for training. Its prologue loads $R$ once; masks handle batch rows past $B$ and head dims that are not a power of two ($R$ is padded with zeros, so padded columns never reach a real unit):

# %%
listing.show(tiles.load_r)
listing.show(fused_forward.fused_forward_kernel, max_lines=40)

# %% [markdown]
# **Check** each version against float64 (two batch tiles, odd $T$ for v3's unrolled loop), then the package's kernel for the three cells:

# %%
for v in ("v1", "v2", "v3", "v4"):
    for (b_, t_, nh_, dh_) in [(3, 3, 2, 16), (17, 2, 1, 32)]:
        args = inputs("lstm", b_, t_, nh_, dh_, seed=4)
        ref = rnn.flashrnn(*(a.double() for a in args), function="lstm", backend="vanilla")
        got = versions.run_version(v, *args)
        check.assert_close(got[0], ref[0], dtype=torch.float32, name="states_all", context=f"{v} B={b_} T={t_}")
    print(f"{v}: == float64 at (B, T, NH, DH) = (3, 3, 2, 16) and (17, 2, 1, 32)")
for function in ("lstm", "gru", "elman"):
    for (b_, t_, nh_, dh_) in [(1, 1, 1, 16), (3, 4, 2, 16), (2, 3, 1, 24)]:
        args = inputs(function, b_, t_, nh_, dh_, seed=2)
        ref = rnn.flashrnn(*(a.double() for a in args), function=function, backend="vanilla")
        with torch.no_grad():
            got = rnn.flashrnn(*args, function=function, backend="fused")
        check.assert_close(got, ref, dtype=torch.float32, name="states", context=f"{function} {b_, t_, nh_, dh_}")
    print(f"{function:5s}: fused forward == float64 vanilla (B, T, NH, DH) in (1,1,1,16), (3,4,2,16), (2,3,1,24)")

# %% [markdown]
# ## 5. The fused backward: a recurrence in reverse time
#
# Walk the step backwards with the saved activations $i' = \sigma(i)$, $f' = \sigma(f)$, $z' = \tanh(z)$, $o' = \sigma(o)$; $\delta h_t$, $\delta c_t$ are the gradients reaching $h_t$, $c_t$:
#
# $$ \delta c_t \mathrel{+}= \delta h_t \, o' (1 - \tanh^2 c_t), \qquad
# \delta o = \delta h_t \tanh(c_t)\, o'(1-o'), \qquad \delta i = \delta c_t\, z'\, i'(1-i'), $$
# $$ \delta f = \delta c_t\, c_{t-1}\, f'(1-f'), \qquad \delta z = \delta c_t\, i'(1 - z'^2), $$
# $$ \delta c_{t-1} = \delta c_t\, f' + \tfrac{\partial L}{\partial c_{t-1}}\Big|_\text{out}, \qquad \delta h_{t-1} = \sum_g \delta G_{t,g}\, R_g + \tfrac{\partial L}{\partial h_{t-1}}\Big|_\text{out}. $$
#
# A chain over $t = T-1, \dots, 0$ again, one product $\delta G_t\,R_\text{all}$ per step (exercise 6, task 4). The rest has no chain: the kernel writes $\delta G$, and then
#
# $$ dR_{g,n} = \sum_{b,t} \delta G_{b,t,g,n}^\top\, h_{t-1,b,n}, \qquad db = \sum_{b,t} \delta G_{b,t}, \qquad dWx = \delta G. $$
#
# Three choices shape it. The forward saves the gate *activations* in fp16 (finer than bf16 near 1, where $1 - \sigma$ must keep its digits), so the backward recomputes one $\tanh$ per unit instead of five. $dR$ is not summed in the kernel: it would need $4 \cdot DH^2$ more fp32 values per program on chip. Instead the reverse-time kernel runs in pieces (the last 7/8 of the sequence, then the first 1/8), and the products of $dR$ and $db$ over a finished piece run on a second CUDA stream beside the next piece, summed in a fixed order so every run gives the same bits. $\delta G$ is stored in $Wx$'s layout, so $dWx$ *is* $\delta G$ and autograd copies nothing.

# %%
listing.show(rnn.cells.lstm_gate_grads)
listing.show(fused_backward.fused_backward_kernel, max_lines=30)
listing.show(fused_backward.fused_rnn_gradients, max_lines=30)

# %% [markdown]
# Every gradient of both Triton backends against float64 autograd:

# %%
for function in ("lstm", "gru", "elman"):
    for (b_, t_, nh_, dh_) in [(1, 2, 1, 16), (3, 4, 2, 16)]:
        args = inputs(function, b_, t_, nh_, dh_, seed=3)
        S = FUNCTIONS[function].states
        w_all = check.random_tensor(S, b_, t_, nh_, dh_, seed=4, dtype=torch.float64)
        w_last = check.random_tensor(S, b_, 1, nh_, dh_, seed=5, dtype=torch.float64)
        ref_leaves = [a.double().requires_grad_() for a in args]
        out, last = rnn.flashrnn(*ref_leaves, function=function, backend="vanilla")
        ref = torch.autograd.grad((out * w_all).sum() + (last * w_last).sum(), ref_leaves)
        for backend in ("alternating", "fused"):
            leaves = [a.clone().requires_grad_() for a in args]
            out, last = rnn.flashrnn(*leaves, function=function, backend=backend)
            got = torch.autograd.grad((out * w_all.float()).sum() + (last * w_last.float()).sum(), leaves)
            for name, g_, r_ in zip(("dWx", "dR", "db", "dstates"), got, ref):
                check.assert_close(g_, r_, dtype=torch.float32, name=name, context=f"{backend} {function}")
    print(f"{function:5s}: dWx, dR, db, dstates of alternating and fused == float64 vanilla")

# %% [markdown]
# ## 6. Does it fit? Tiling as a small integer problem
#
# `gpulab.rnn.fused.tiling` poses the question as FlashRNN's "ConstrINT" does: integer unknowns (`block_b` batch rows per program, `num_warps`, $R$ on chip or re-read), constraints from the GPU's spec (registers, shared memory) and an estimated time per step to minimise (exercise 6, task 5 counts the shared memory). The lesson's problem on the H100:

# %%
print(tiling.explain(16, 12, 64, "lstm", torch.bfloat16, gpu="H100"))

# %% [markdown]
# **Eight rows per program.** The chooser takes 8 batch rows per program, not 16: twice the programs, each with half the activations. Count a step's special-function work: each unit needs five (three sigmoids as $\tanh$, the cell input's $\tanh$, $\tanh(c)$), and an SM completes 16 of them per clock, so 16 rows of 64 units spend at least $16 \cdot 64 \cdot 5 / 16 = 320$ clocks per step in them. The tensor cores multiply 16 rows at a time and pad 8 rows to 16, so 8 rows cost the same product but half the activations, on SMs that sit idle anyway (12 heads × 2 tiles is 24 of 132). The H100, each kernel checked first, both clocks (device: CUDA events; wall: the eager wall clock per call):

# %%
try:
    rows_rec = rows_report.load("rows")
    print(rows_report.rows_table([r for r in rows_rec if r.params.get("NH") == 12 and r.params.get("B") == 16]))
except FileNotFoundError as exc:
    rows_rec = []
    print(exc)
if rows_rec:
    f16, f8 = (rows_report.pick(rows_rec, "forward", 16, 12, 64, bb) for bb in (16, 8))
    c16, c8 = (rows_report.pick(rows_rec, "fwd+bwd as called", 16, 12, 64, bb) for bb in (16, 8))
    claims.show(claims.claim(
        "At B = 16 with 12 heads of 64 the forward takes {f8:.3f} ms at 8 rows per program against {f16:.3f} ms at 16 "
        "({g:.2f}x the time, device time), and forward and backward as a training loop calls them {c8:.3f} ms of "
        "wall time against {c16:.3f}.",
        holds=lambda f8, f16, c8, c16, **_: f8 < f16 and c8 < c16, f8=f8.ms, f16=f16.ms, g=f8.ms / f16.ms,
        c8=c8.wall_ms, c16=c16.wall_ms,
    ))  # fmt: skip

# %% [markdown]
# Where $R$ fits, GPU by GPU: hidden 768 split into heads of 16 to 256 (bf16, or fp16 where the GPU has none), forward and backward. $R$ per head grows as $DH^2$; at $DH = 256$ it is $4 \cdot 256^2 \cdot 2$ bytes = 512 KB, more than twice an H100 SM's shared memory:

# %%
head_dims = (16, 32, 64, 128, 256)
print(f"{'GPU':28s}" + "".join(f"{'DH=' + str(d):>9s}" for d in head_dims))
for name, spec in hardware.SPECS.items():
    dt, cells_ = (torch.bfloat16 if spec.has_bf16 else torch.float16), []
    for d in head_dims:
        try:
            fits = [tiling.fused_tiling(16, 768 // d, d, "lstm", dt, gpu=spec, direction=w).r_on_chip
                    for w in ("forward", "backward")]  # fmt: skip
            cells_.append("on chip" if all(fits) else "re-read")
        except ValueError:
            cells_.append("-")
    print(f"{name[:28]:28s}" + "".join(f"{t:>9s}" for t in cells_))
print("on chip: R stays in shared memory; re-read: R read every step; '-': no fit (lesson 7 splits the head)")

# %% [markdown]
# ## 7. `gpulab.rnn.LSTM`: a module like `nn.LSTM`
#
# One input product for all steps, then `flashrnn`. With one head it is `nn.LSTM` (`LSTM.from_torch` copies the weights); with several it is a smaller, block-diagonal model:

# %%
torch.manual_seed(0)
ref = torch.nn.LSTM(6, 16, num_layers=2)
x = check.random_tensor(4, 2, 6, seed=6)  # [T, B, I]
ours = rnn.LSTM.from_torch(ref.to(runtime.device), backend="fused")
print(ours)
y, (h_n, c_n) = ours(x)
y_ref, (h_r, c_r) = ref.cpu().double()(x.cpu().double())
for name, a, r_ in (("y", y, y_ref), ("h_n", h_n, h_r), ("c_n", c_n, c_r)):
    check.assert_close(a, r_, dtype=torch.float32, name=name)
y.sum().backward()
y_ref.sum().backward()
check.assert_close(ours.weight_hh_l1.grad, ref.weight_hh_l1.grad, dtype=torch.float32, name="dR, layer 1")
check.assert_close(ours.weight_ih_l0.grad, ref.weight_ih_l0.grad, dtype=torch.float32, name="dW_ih layer 0")
print("gpulab.rnn.LSTM (fused, 1 head, 2 layers) == nn.LSTM in float64: outputs, final states, gradients")
heads = rnn.LSTM(6, 32, num_heads=2, backend="fused")
print(f"2 heads of 16: recurrent weights {tuple(heads.recurrent_l0.shape)} = {heads.recurrent_l0.numel()} "
      f"(dense nn.LSTM(6, 32): {4 * 32 * 32})")

# %% [markdown]
# ## 8. Measure: the versions, then the peers
#
# **The versions** on the H100 (`python -m gpulab bench 06 versions`, one run; `ms`: device time, `wall ms` and `gain` over the previous version: eager wall clock). The one-head rows (v5, cuDNN) belong to lesson 7:

# %%
try:
    version_rows = versions_report.load_versions("h100")
except FileNotFoundError as exc:
    version_rows = []
    print(exc)
if version_rows:
    version_rows, _ = shown.versions_now(version_rows)
    print(shown.banner("06", "versions") + ".\n")
    print(versions_report.versions_table(version_rows))
    wall_ = {(r.params["version"], r.params.get("direction", "forward")): r.wall_ms for r in version_rows}
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for names, what, st in ((("v1", "v2", "v3", "v4"), "forward", "-"), (("b1", "b2"), "forward+backward", "--")):
        xs = [n for n in names if (n, what) in wall_]
        ax.plot(xs, [wall_[n, what] for n in xs], **palette.style("fused", label=f"gpulab fused, {what}", linestyle=st))
        for n in xs:
            ax.annotate(f"{wall_[n, what]:.2f}", (n, wall_[n, what]), textcoords="offset points", xytext=(0, 6))
    ax.set(ylim=(0, 1.2 * max(wall_.values())), ylabel="ms per sequence (eager wall clock)", xlabel="version",
           title="LSTM, B = 16, T = 1024, 12 heads of 64, bf16: each version on the one before")
    ax.legend()
    plt.show()

# %% [markdown]
# **Why the versions gain.** Two tools explain the table, and they need a few words. Triton compiles a kernel to **PTX** (NVIDIA's portable assembly); **ptxas** turns PTX into **SASS**, the GPU's machine code, which `python -m gpulab.rnn.fused.measure.sass` counts without a GPU. In SASS, **HMMA** (`MMA` in the table) is a tensor-core multiply-add; **MUFU** a special-function instruction (`tanh`, `exp`), one per value; **LDG/STG** and **LDS/STS** are loads and stores of global memory (HBM, through the L2 cache) and of shared memory, `.128` marking 16 bytes per thread (`STS.128`); **BAR** is a barrier of the program's warps (groups of 32 threads). Nsight Compute's **stall sampling** records why waiting warps wait: `long_sb` a global load, `short_sb` shared memory or MUFU, `wait` a fixed latency, `selected` issuing. Each version's time loop, per step and warp, then its stalls:

# %%
try:
    sass_ = {r["version"]: r for r in versions_report.load_sass(64)}
    print(versions_report.sass_table(list(sass_.values())))
    profile_ = versions_report.load_profile("h100")
    prof_ = profile_.get("versions", {})
    print(versions_report.profile_table(profile_))
except FileNotFoundError as exc:
    sass_, prof_ = {}, {}
    print(exc)

# %%
fwd_wall = {v: wall_.get((v, "forward")) for v in ("v1", "v2", "v3", "v4")} if version_rows else {}
if {"v1", "v2", "v3", "v4"} <= sass_.keys() & prof_.keys() and all(fwd_wall.values()):
    instr = [sass_[v]["instructions"] for v in ("v1", "v2", "v3")]
    long_ = [prof_[v]["stalls"].get("long_sb", 0.0) for v in ("v1", "v2", "v3")]
    hot_ = [prof_[v]["top"][0]["sass"].split()[0] for v in ("v1", "v2")]
    claims.show(claims.claim(
        "v1, v2 and v3 issue about as many instructions per step ({i1:.0f}, {i2:.0f}, {i3:.0f}) but take {t1:.2f}, "
        "{t2:.2f} and {t3:.2f} ms (wall clock): they gain by waiting less. The share of stall samples on a global "
        "load (`long_sb`) goes from {a:.0%} to {b:.0%} to {c:.0%}; in v1 and v2 the hottest instruction (`{h}`) stores "
        "the step's input to shared memory, stalled on its global load, and v3's prefetch takes that wait out of the "
        "loop. v4 does less work instead: `MUFU` goes from {m3:.0f} to {m4:.0f} per step and the instructions from "
        "{i3:.0f} to {i4:.0f}; what remains is the chain (`wait` and `short_sb`, {w:.0%} of v4's samples).",
        holds=lambda a, b, c, t1, t3, w, m3, m4, i3, i4, **_: a > b > c and t1 > 2 * t3 and w > 0.5 and m4 <= m3 / 2
        and i4 < i3 / 2 and max(instr) < 1.05 * min(instr) and all(h.startswith("STS") for h in hot_),
        i1=instr[0], i2=instr[1], i3=instr[2], i4=sass_["v4"]["instructions"], t1=fwd_wall["v1"], t2=fwd_wall["v2"],
        t3=fwd_wall["v3"], a=long_[0], b=long_[1], c=long_[2], h=hot_[0], m3=sass_["v3"]["mufu"],
        m4=sass_["v4"]["mufu"], w=prof_["v4"]["stalls"].get("wait", 0.0) + prof_["v4"]["stalls"].get("short_sb", 0.0),
    ))  # fmt: skip

# %% [markdown]
# **The peers** (`python -m gpulab bench 06`, one run): every backend, the `flashrnn` package's Triton kernel (`triton_fused`, the same algorithm), cuDNN's dense `nn.LSTM` beside `gpulab.rnn.LSTM`, and sweeps over batch and head dim. `ms` is device time; `ns/step` and TFLOP/s are computed from it. A **CUDA graph** records a sequence of launches once and replays it without the host, so `alternating` in a graph pays no launch costs, only its two kernels per step. The `flashrnn` package's Triton backward did not compile with Triton 3.6 in this run, and its CUDA kernels do not build on CUDA 13 (their records hold the errors):

# %%
try:
    stored = bench.load("06", gpu="h100")
except FileNotFoundError:
    stored = []
    print("no stored H100 results yet: run `python -m gpulab bench 06` on an H100")
if stored:
    print(f"{stored[0].device}, {stored[0].date}, torch {stored[0].torch}, triton {stored[0].triton}\n")


def pick(backend, pass_="fwd", mode="eager", sweep="main", dtype=None, B=16):
    '''The stored record of one implementation (None if it was not measured or failed).'''
    for r in stored:
        p = r.params
        if (p.get("backend"), p.get("pass"), p.get("mode"), p.get("sweep")) == (backend, pass_, mode, sweep):
            if r.ms == r.ms and (dtype is None or r.dtype == dtype) and p.get("B") == B:
                return r
    return None


if stored:
    for pass_ in ("fwd", "fwd+bwd"):
        fused = pick("fused", pass_)
        print(f"--- {pass_}: gpulab fused {fused.ms:.3g} ms device ({fused.params['ns_per_step']:.0f} ns per step)")
        for name, r in (("gpulab alternating, eager", pick("alternating", pass_)),
                        ("gpulab alternating, CUDA graph", pick("alternating", pass_, "graph")),
                        ("gpulab vanilla", pick("vanilla", pass_)),
                        ("flashrnn triton_fused", pick("flashrnn triton_fused", pass_)),
                        ("gpulab.rnn.LSTM, 12 heads", pick("gpulab.rnn.LSTM (fused)", pass_, sweep="dense")),
                        ("cuDNN nn.LSTM, dense 768", pick("cuDNN nn.LSTM (dense)", pass_, sweep="dense",
                                                           dtype="float16"))):  # fmt: skip
            print(f"  {name:32s} " + ("not measured or failed" if r is None else
                                      f"{r.ms:9.3g} ms = {r.ms / fused.ms:6.2f}x fused's time ({r.dtype})"))

# %% [markdown]
# Over the batch: a step of each backend in ns, device time, with section 1's memory floor per step:

# %%
step_floor_ns = io_bytes / c.bandwidth("HBM")  # section 1: R on chip, the memory floor per step at B = 16, in ns
if stored:
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for backend, mode, key in (("fused", "eager", "fused"), ("alternating", "graph", "alternating")):
        rs = sorted((r.params["B"], r.params["ns_per_step"]) for r in stored if r.ms == r.ms
                    and r.params.get("NH") == 12
                    and (r.params.get("backend"), r.params.get("pass"), r.params.get("mode")) == (backend, "fwd", mode)
                    and r.params.get("sweep") in ("main", "batch"))  # fmt: skip
        ax.plot(*zip(*rs), **palette.style(key, label=f"{palette.style(key)['label']} ({mode})"))
    ax.axhline(step_floor_ns, **palette.style("model", label="memory floor at B = 16 (section 1)", marker=None))
    ax.set(xscale="log", yscale="log", xlabel="batch B", ylabel="ns per step (device time)",
           title="LSTM forward, 12 heads of 64, bf16, T = 1024")
    ax.set_xticks([1, 4, 16, 64], ["1", "4", "16", "64"])
    ax.legend()
    plt.show()

# %%
if stored:
    fb_ = {r.params["B"]: r for r in stored if r.params.get("backend") == "fused" and r.params.get("pass") == "fwd"
           and r.params.get("NH") == 12 and r.params.get("sweep") in ("main", "batch") and r.status == "ok"}
    fused_, graph_, fl_ = pick("fused"), pick("alternating", "fwd", "graph"), pick("flashrnn triton_fused")
    lo, hi = min(fb_), max(fb_)
    claims.show(
        claims.claim(
            "**Latency-bound, as predicted**: at B = 16 a step takes {x:.0f} times section 1's memory floor, and "
            "{rows}x the batch rows (B = {lo} to {hi}) cost {grow:.2f}x the time per step (device time).",
            holds=lambda x, grow, rows, **_: x > 5 and grow < 2 <= rows,
            x=fb_[16].params["ns_per_step"] / step_floor_ns,
            rows=hi // lo, lo=lo, hi=hi, grow=fb_[hi].params["ns_per_step"] / fb_[lo].params["ns_per_step"],
        ),
        claims.claim(
            "**One launch instead of $2T$, $R$ read once**: `alternating` takes {r:.1f}x the fused kernel's time "
            "even in a CUDA graph, and the `flashrnn` package's Triton kernel {f:.2f}x (forward, 12 heads of 64, "
            "device time).",
            holds=lambda r, f: r > 2 and f > 1, r=graph_.ms / fused_.ms, f=fl_.ms / fused_.ms,
        ),
    )  # fmt: skip

# %%
if stored:
    heads_ = pick("gpulab.rnn.LSTM (fused)", "fwd", sweep="dense")
    c16_, cbf_ = (pick("cuDNN nn.LSTM (dense)", "fwd", sweep="dense", dtype=d) for d in ("float16", "bfloat16"))
    claims.show(claims.claim(
        "**cuDNN is a different problem here**: its `nn.LSTM` with hidden 768 is one dense head, twelve times the "
        "recurrent FLOPs. `gpulab.rnn.LSTM` with 12 heads, input product included as in cuDNN, takes {h:.2f}x the "
        "time of cuDNN's dense fp16 LSTM (forward, device time); cuDNN's bf16 path takes {fb:.1f}x its fp16 path's "
        "time on this H100. Whether the smaller model learns as well is lesson 8's question; the same problem as "
        "cuDNN, one head of 768, is lesson 7's.",
        holds=lambda h, fb: h < 1 and fb > 2, h=heads_.ms / c16_.ms, fb=cbf_.ms / c16_.ms,
    ))  # fmt: skip

# %% [markdown]
# ## 9. What it means
#
# The fused kernel moves about the fewest bytes: it reads $R$ and $Wx$ once and writes the states once. Its time is the chain: per step, the product, the activations and the trip of $h$ through shared memory back into the product's layout, one after another, on 24 of 132 SMs. The batch sweep shows that chain: more rows fill the tiles and hardly lengthen the step. Version by version the gains came from waiting less (v2, v3) and doing less per step (v4), each found by counting instructions and sampling stalls, not by counting FLOPs.
#
# A head of 256 or more does not fit one SM, and the dense LSTM of cuDNN is one head of 768. **Lesson 7** splits such a head over many SMs, which must then meet at every step.
#
# **Exercises** (`exercises/06_fused_rnn.ipynb`): the GRU cell as a Triton function, the forward's time loop (v1), all gates in one product (v2), one reverse-time step of the backward, whether a head fits on one SM, and the bytes of $R$ per forward.
