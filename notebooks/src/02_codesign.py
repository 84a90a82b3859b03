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
# # Lesson 2 — GEMM shapes and hardware co-design
#
# **What you will learn**
# - why two matrix products with (almost) the same FLOP count can run about five times apart on the same GPU: **alignment**, **tile quantization** and **wave quantization**;
# - a model of GEMM time on a given GPU — a memory roof, a compute roof, and those three shape effects — that predicts time and throughput for any $(M, N, K)$, dtype and GPU in the spec table;
# - to build a fixed-tile matrix product in Triton, check it against float64, and use it to *see* waves, which cuBLAS hides by changing its tiles;
# - to check a model configuration (GPT-2, Pythia, GPT-NeoX, a multi-head LSTM) against the sizing rules of Anthony et al., *The Case for Co-Designing Model Architectures with Hardware* (2024), and find the nearest compliant sizes.
#
# **How this notebook runs.** The model is pure arithmetic and runs anywhere. On a machine without a GPU the Triton kernel runs in the CPU interpreter at small sizes and the "measurements" time the interpreter and the CPU, not a GPU. The measurements that matter were taken on an NVIDIA H100 with `python -m gpulab bench 02` and are stored under `benchmarks/02_codesign/`; section 9 shows them beside the model.

# %%
# NBVAL_IGNORE_OUTPUT
import dataclasses
import inspect

import matplotlib.pyplot as plt
import torch

import gpulab  # first: decides GPU vs CPU interpreter before any kernel is defined
from gpulab import bench, check, codesign, hardware, roofline, runtime
from gpulab.course import claims, palette

import triton  # isort: skip

print(f"kernels run in {runtime.MODE} mode on {runtime.device}; torch {torch.__version__}, triton {triton.__version__}")

# %% [markdown]
# ## 1. Count: what a GEMM must do
#
# $C = AB$ with $A \in \mathbb{R}^{M\times K}$, $B \in \mathbb{R}^{K\times N}$ does $F = 2MNK$ FLOPs (a multiply-add is two) and must move at least $Q = s\,(MK + KN + MN)$ bytes for $s$-byte elements: each operand read once, the output written once. Lesson 0's roofline bound is
#
# $$ t \;\ge\; \max\left(\frac{F}{P_\text{peak}},\; \frac{Q}{B_\text{HBM}}\right). $$
#
# For $M = N = 8192$, $K = 4096$ in bf16, $F/Q$ (printed below) is far beyond the H100's ridge point: compute-bound. The tensor-core peak is 989 TFLOP/s; the best cuBLAS kernels sustain a fraction of it, so the model uses $P = \phi_p\,P_\text{peak}$ with $\phi_p$ = `codesign.PEAK_FRACTION`, read, like the two alignment penalties of section 2, from this lesson's newest stored H100 run by `codesign.model_constants()` (printed below with the record and the cases they come from; a clone without records gets typed fallbacks, each with its source, and the same lines say so) and $B = \phi_m\,B_\text{HBM}$ with $\phi_m$ = `codesign.memory_fraction()`, the fraction of the spec that lesson 0's read-only sweep reached, read from its newest stored record (its plateau, printed below with its record; the roofline's HBM ceiling, a copy that also writes, is printed beside it; the model uses the read-only plateau).

# %%
spec = hardware.spec("H100")
p = codesign.gemm_time(8192, 8192, 4096, dtype="bfloat16", gpu="H100", tile=None)
print(f"F = {p.flops:.3e} FLOPs, Q = {p.bytes / 1e6:.0f} MB, F/Q = {p.flops / p.bytes:.0f} FLOP/byte; "
      f"ridge point {hardware.ridge_point(spec, 'bfloat16'):.0f}")
print(p.explain())
print(codesign.model_constants().describe())
print(roofline.stored_read_plateau("H100").describe("memory_fraction() is the read-only plateau:"))
print(roofline.hbm_ceiling("H100").describe("beside it, the HBM ceiling of the roofline:"))

# %% [markdown]
# Three lines of that explanation are about the *shape*. The rest of the lesson takes them one at a time.
#
# ## 2. Alignment: 4095 is not 4096
#
# A GEMM kernel for Hopper (the H100's architecture) copies tiles of $A$ and $B$ into shared memory with **TMA** (the tensor memory accelerator, a copy engine that moves a whole tile per instruction) and multiplies them with **wgmma** (warpgroup matrix multiply-accumulate: four warps issue one tensor-core product of a tile together). Both want every row of every operand to start on a **16-byte boundary**. In the row-major layout torch uses, the row lengths of $A$, $B$ and $C$ are $K$ and $N$ — so $K \cdot s$ and $N \cdot s$ must be multiples of 16 bytes: 8 elements of bf16 or fp16, 4 of fp32. ($M$ is a row *count*; it can be anything.)
#
# If they are not, cuBLAS has to fall back to kernels that load with narrower instructions. On the H100 (bf16, $M = N = 8192$) the cell below prints what the stored run measured at $K = 4095$ and $K = 4097$, one element more or less than $K = 4096$. The model's penalty for rows that are only 2-byte aligned, `codesign.MISALIGNED_PENALTY`, is read from those cases of the stored run. Rows that are 4- or 8-byte aligned ($K = 4092, 4094, 4098, 4100$) fall on a middle path, `codesign.PARTIALLY_ALIGNED_PENALTY`, read from those cases:
#
# $$ e_\text{align} = \frac{1}{\text{penalty}(K s, N s)} \times \frac{K}{B_K \lceil K / B_K \rceil}, \qquad \text{penalty} = \begin{cases} 1 & \text{both rows 16-byte aligned} \\ \pi_{4,8} & \text{4- or 8-byte aligned} \\ \pi_2 & \text{2-byte aligned} \end{cases} $$
#
# The second factor is the smaller penalty for a $K$ that is aligned but not a multiple of the K-step $B_K$ = 128 bytes (64 bf16 elements): the last step of the K loop is partly empty but costs a whole step. That is why "multiples of 64" is the usual advice, and "multiples of 8" the hard rule.

# %%
ks = list(range(4032, 4161))
preds = [codesign.gemm_time(8192, 8192, k, tile=None) for k in ks]
ax = codesign.plot_prediction(ks, preds, label="model (cuBLAS tiles)", xlabel="K", ls="none", marker="o", ms=3)
try:
    k_sweep = {r.params["x"]: r for r in bench.load("02", gpu="h100") if r.params.get("sweep") == "K"}
except FileNotFoundError:
    k_sweep = {}
near = [k for k in (4092, 4094, 4095, 4096, 4097) if k in k_sweep]
if near:
    ax.scatter(near, [k_sweep[k].tflops for k in near], zorder=3,
               **palette.style("torch", label="stored H100 run, torch.matmul (cuBLAS)"))  # fmt: skip
ax.set_ylim(0, 800)
ax.set_title("8192 x 8192 x K in bf16: predicted TFLOP/s around K = 4096")
ax.legend()
plt.show()

# %%
print(f"model: pi_2 = MISALIGNED_PENALTY = {codesign.MISALIGNED_PENALTY:.2f}, "
      f"pi_4,8 = PARTIALLY_ALIGNED_PENALTY = {codesign.PARTIALLY_ALIGNED_PENALTY:.2f}, "
      f"PEAK_FRACTION = {codesign.PEAK_FRACTION:.2f}, memory_fraction() = {codesign.memory_fraction():.2f}")
if k_sweep.get(4096):
    top = k_sweep[4096]
    print(f"stored run ({top.device}, {top.date}): K = 4096 at {top.tflops:.0f} TFLOP/s "
          f"= {top.tflops / hardware.spec('H100').tensor_tflops['bfloat16']:.0%} of the spec peak")
    for k in (k for k in near if k != 4096):
        r = k_sweep[k]
        print(f"  K = {k}: {r.tflops:5.0f} TFLOP/s, {top.tflops / r.tflops:.2f}x slower than K = 4096")
    if {4095, 4097} <= k_sweep.keys():
        claims.show(claims.claim(
            "On the H100, one element of $K$ more or less (4095, 4097) makes the 8192-square GEMM "
            "**{a:.1f} and {b:.1f} times slower** than at $K = 4096$ (device time, the stored run).",
            holds=lambda a, b: min(a, b) > 2, a=k_sweep[4095].ms / top.ms, b=k_sweep[4097].ms / top.ms,
        ))  # fmt: skip
print()
print(f"{'K':>5s}  {'misaligned':>10s}  {'e_align':>7s}  {'last K-step':>11s}  {'ms':>6s}  {'TFLOP/s':>7s}")
for k in (4088, 4092, 4094, 4095, 4096, 4097, 4100, 4104, 4160):
    q = codesign.gemm_time(8192, 8192, k, tile=None)
    print(f"{k:5d}  {'/'.join(q.misaligned) or '-':>10s}  {q.alignment_efficiency:7.3f}  {q.k_fill:11.1%}  "
          f"{q.ms:6.3f}  {q.tflops:7.0f}")

# %% [markdown]
# Read this way, the model is fitted to the cases of the K sweep its constants come from; the test of the model is every other shape: the aligned $K$ that are not multiples of 64, the head dimensions and the waves. Section 9 compares each measurement with the prediction stored beside it when it ran, made with the constants of that time, not refitted to it. A model is a hypothesis: where it is wrong, the measurement says so.
#
# ## 3. Tile quantization: partial tiles cost whole tiles
#
# A GEMM kernel cuts $C$ into tiles of $t_m \times t_n$; one program (thread block) computes one tile, looping over $K$. When $M$ or $N$ is not a multiple of the tile, the edge tiles are partly empty — masked, but they take as long as full ones:
#
# $$ e_\text{tile} = \frac{MN}{\lceil M/t_m\rceil t_m \cdot \lceil N/t_n\rceil t_n}. $$
#
# Left: a $200 \times 300$ output in $128 \times 128$ tiles does 61% useful work. Right: $1536 \times 1472$ is 96% useful — but see the colours.

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
codesign.plot_tiles(200, 300, (128, 128), ax=axes[0])
codesign.plot_tiles(1536, 1472, (128, 128), ax=axes[1], gpu="H100")
plt.show()

# %% [markdown]
# ## 4. Wave quantization: the last wave runs nearly empty
#
# The $T$ tiles are handed to the SMs — 132 on an H100 — in **waves**: with one tile per SM at a time, $W = \lceil T / \text{SMs}\rceil$ waves, and the last may leave most SMs idle. On the right above, $12 \times 12 = 144$ tiles make 2 waves: 132 tiles, then 12 tiles on 12 SMs while 120 SMs wait. The fraction of SM slots doing work is
#
# $$ e_\text{wave} = \frac{T}{W \cdot \text{SMs}}, \qquad T = \text{batch}\cdot\lceil M/t_m\rceil\lceil N/t_n\rceil . $$
#
# Since every wave takes the same time, time is a **staircase** in $N$ and throughput a **saw-tooth**. Here for the tile the Triton kernel of section 6 uses on the GPU ($128 \times 256$), and for the model of cuBLAS, which picks the best of three large tiles per shape (`tile=None`) and so has more, smaller steps:

# %%
ns = range(1024, 8448 + 1, 64)
fig, axes = plt.subplots(1, 2, figsize=(13, 4))
for metric, ax in zip(("ms", "tflops"), axes):
    codesign.plot_wave_staircase(1536, 4096, ns, tile=(128, 256), ax=ax, metric=metric)
    codesign.plot_prediction(ns, [codesign.gemm_time(1536, n, 4096, tile=None) for n in ns], ax=ax,
                             label="model, cuBLAS (best of 3 tiles)", metric=metric, xlabel="N", ls="--",
                             color=palette.color("torch"))  # fmt: skip
    ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 5. The whole model
#
# All three effects lower the compute roof. Misalignment lowers the memory roof too: a misaligned shape runs a different, slower kernel whose narrow loads cannot reach full bandwidth (the head-dimension sweep shows it: section 7 predicts it and section 9 measures it):
#
# $$ t = \max\left(\frac{F}{P\,e_\text{align}\,e_\text{tile}\,e_\text{wave}},\; \frac{Q \cdot \text{penalty}}{B}\right) $$
#
# `codesign.gemm_time(m, n, k, dtype, gpu, batch, tile)` returns a record with the prediction and every factor; `codesign.relative_throughput(...)` is the predicted TFLOP/s as a fraction of the best the GPU sustains (1.0 = an ideal shape). The three pieces:

# %%
for fn in (codesign.alignment_efficiency, codesign.tile_quantization, codesign.wave_quantization):
    print(inspect.getsource(fn))

# %%
for gpu in ("H100", "A100", "L4"):
    r = {k: codesign.relative_throughput(8192, 8192, k, gpu=gpu, tile=None) for k in (4095, 4096)}
    w = codesign.gemm_time(1536, 1408, 4096, gpu=gpu, tile=(128, 128))
    print(f"{gpu:5s}: relative throughput K=4096 {r[4096]:.2f}, K=4095 {r[4095]:.2f}; "
          f"1536 x 1408 in 128x128 tiles = {w.tiles} tiles on {w.sm_count} SMs -> {w.waves} wave(s), "
          f"e_wave = {w.wave_efficiency:.2f}")

# %% [markdown]
# The same shape is one perfect wave on an H100 (132 SMs) and two badly filled ones on an A100 (108 SMs): shape rules are rules *for a GPU*.
#
# ## 6. A fixed-tile matmul in Triton
#
# cuBLAS picks a different kernel (tile, split of $K$, ...) for almost every shape, which smooths its wave staircase. To see the waves themselves we need a kernel whose tile never changes: `codesign.matmul_fixed_tile_kernel`. One program per $B_M \times B_N$ output tile; a loop over $K$ in steps of $B_K$, accumulating `tl.dot` products in fp32; masks for the ragged edges in $M$, $N$ and the $K$ tail (masked loads read zeros, which add nothing).

# %%
print(inspect.getsource(codesign.matmul_fixed_tile_kernel.fn))

# %% [markdown]
# The wrapper `codesign.matmul_fixed_tile` validates its inputs, launches a grid of $\lceil M/B_M\rceil \times \lceil N/B_N\rceil$ programs and passes `input_precision` from `runtime.dot_precision` (IEEE products for fp32). Checked against a float64 reference at awkward sizes, into a *poisoned* output (NaN everywhere), so a tile the grid misses cannot pass:

# %%
for m, n, k in ((1, 1, 1), (17, 17, 17), (33, 20, 19), (100, 37, 70)):
    a, b = check.random_tensor(m, k), check.random_tensor(k, n)
    out = check.poisoned(m, n)
    codesign.matmul_fixed_tile(a, b, out, block_m=16, block_n=32, block_k=16)
    err = check.assert_close(out, codesign.matmul_reference(a, b), name="C")
    grid = (triton.cdiv(m, 16), triton.cdiv(n, 32))
    assert err < 1e-6
    print(f"{m:3d} x {n:3d} x {k:3d}: grid {grid}, every element written, matches float64 (relative error < 1e-6)")

# %% [markdown]
# On the GPU the sweep uses $B_M \times B_N \times B_K = 128 \times 256 \times 64$, 8 warps, **3 stages** (buffers in shared memory, so the tiles of $A$ and $B$ for the next K-steps load while the current ones multiply) — the first configuration in the list of Triton's matmul tutorial for **autotuning** (timing each configuration on each shape and keeping the best). With all three stages buffered its shared memory is $3 \times (128 \times 64 + 64 \times 256) \times 2$ bytes = 144 KB, more than half of an SM's 228 KB, so each SM runs one tile at a time: one tile per SM per wave, as the model assumes. (The stored results record the compiled kernel's shared memory, so section 9 can check this.)
#
# ## 7. Predictions for the H100 sweeps
#
# Before measuring, write down what the model expects for the three sweeps `python -m gpulab bench 02` runs (bf16):
#
# 1. **K sweep**: $8192 \times 8192 \times K$ for $K$ from 4032 to 4160, through `torch.matmul`;
# 2. **head dimension**: the attention scores $QK^\top$ of 256 (batch $\times$ heads) sequences of 2048 tokens, head dimension $d \in \{60, 64, 72, 80, 96, 100, 128\}$ — a batched GEMM $2048 \times 2048 \times d$;
# 3. **waves**: $1536 \times N \times 4096$ for $N$ from 1024 to 8448 in steps of 128, with `torch.matmul` and the fixed-tile kernel.

# %%
print("K sweep, 8192 x 8192 x K, cuBLAS model")
for k in (4032, 4064, 4088, 4092, 4094, 4095, 4096, 4097, 4098, 4100, 4104, 4128, 4160):
    q = codesign.gemm_time(8192, 8192, k, tile=None)
    print(f"  K = {k}: {q.ms:6.3f} ms {q.tflops:5.0f} TFLOP/s  ({'misaligned' if q.misaligned else 'aligned'})")
print("\nQ K^T, 256 x (2048 x 2048 x d)")
for d in (60, 64, 72, 80, 96, 100, 128):
    q = codesign.gemm_time(2048, 2048, d, batch=256, tile=None)
    print(f"  d = {d:3d}: {q.ms:6.3f} ms {q.tflops:5.0f} TFLOP/s  {q.bound}-bound"
          + (f", misaligned {'/'.join(q.misaligned)}" if q.misaligned else "")
          + (f", last K-step {q.k_fill:.0%} full" if q.k_fill < 1 else ""))

# %%
predicted = {d: codesign.gemm_time(2048, 2048, d, batch=256, tile=None) for d in (60, 64, 100, 128)}
claims.claim(
    "In the model, Q·Kᵀ at the misaligned head dimensions 60 and 100 stays **{bound}-bound**, predicted {r60:.1f} and "
    "{r100:.1f} times the time at 64: misalignment lowers the *memory* roof (narrow loads), so the time grows with "
    "the FLOPs unchanged.",
    holds=lambda bound, r60, r100: bound == "memory" and min(r60, r100) > 1,
    bound="/".join(sorted({predicted[d].bound for d in (60, 100)})),
    r60=predicted[60].ms / predicted[64].ms,
    r100=predicted[100].ms / predicted[64].ms,
)

# %% [markdown]
# Two predictions worth pausing on. The attention scores are **memory-bound** for every aligned head dimension: writing the $2048 \times 2048$ score matrix per head moves far more bytes than the $2 \cdot 2048 \cdot d$ inputs, so $d = 64$ and $d = 128$ should take nearly the same time (and $d = 128$ does twice the FLOPs in it). The misaligned $d = 60$ and $d = 100$ drop to the slow kernels, and the cell below says what the model makes of them. And in the wave sweep the model expects a clean saw-tooth for the fixed tile, a busier one for cuBLAS.
#
# ## 8. Measure here

# %% [markdown]
# The same three sweeps at the sizes of this machine. On a GPU these are real measurements (bf16, full size); on CPU they are tiny fp32 problems timed through the CPU's `torch.matmul` and the Triton interpreter, compared against the model *of the H100*: they show that the code runs and is checked, not how a GPU behaves.

# %%
# NBVAL_IGNORE_OUTPUT
live = codesign.sweep_k() + codesign.sweep_head_dim() + codesign.sweep_waves()
if runtime.on_gpu():
    print(codesign.format_agreement(codesign.pair_agreement(live)))
    fig = codesign.plot_benchmark(live)
    fig.suptitle(f"Live sweeps on {torch.cuda.get_device_name()}")
    plt.show()
else:
    print(bench.interpreter_summary(live, "a float64 product"))

# %% [markdown]
# ## 9. Measured on an H100
#
# The stored run of `python -m gpulab bench 02` (result file and figure in `benchmarks/02_codesign/`): each point is the median of many timed calls, each result checked against a float64 reference first; the model's prediction is stored beside each measurement. The target: for every pair of shapes in a sweep whose measured times differ by more than 10%, the model should order them correctly in at least 90% of the pairs.

# %%
try:
    stored = bench.load("02", gpu="h100")
except FileNotFoundError:
    stored = []
    print("No stored H100 results for lesson 2 yet: run `python -m gpulab bench 02` on an H100 to make them.")
if stored:
    print(f"{stored[0].device}, torch {stored[0].torch}, triton {stored[0].triton}, measured {stored[0].date}\n")
    agreement = codesign.pair_agreement(stored)
    print(codesign.format_agreement(agreement))

# %%
if stored:
    for sweep in ("K", "head dim", "N (waves)"):
        codesign.plot_sweep(stored, sweep, title=f"{sweep} sweep on {stored[0].device}: measured vs model")
        plt.show()
else:
    print("(the measured sweeps appear here once the H100 results are stored)")

# %%
if stored:
    rows = [r for r in stored if r.params["sweep"] in ("K", "head dim")]
    columns = ("case", "x", "ms", "predicted_ms", "tflops", "predicted_tflops", "predicted_bound")
    print(bench.table(rows, columns=columns))
    k4096 = next((r for r in rows if r.params["sweep"] == "K" and r.params["x"] == 4096), None)
    if k4096 is not None:
        print(f"\npredicted_ms: the prediction stored with the run ({k4096.date}), made with the model's constants of "
              f"that time (the agreement above scores these); at K = 4096 it stored "
              f"{k4096.params['predicted_ms']:.3f} ms, and today's constants (read from this run, section 1) predict "
              f"{codesign.gemm_time(8192, 8192, 4096, tile=None).ms:.3f} ms")
    tri = [r for r in stored if "Triton" in r.params.get("impl", "")]
    if tri and tri[0].params.get("shared_bytes"):
        shared = tri[0].params["shared_bytes"]
        print(f"\nfixed-tile kernel: {shared / 1024:.0f} KB of shared memory per program -> "
              f"{spec.smem_per_sm // shared} program(s) per SM; {tri[0].registers} registers, {tri[0].spills} spills")
    head = {r.params["x"]: r for r in rows if r.params["sweep"] == "head dim"}
    if {60, 64, 100} <= head.keys():
        slow = {d: head[d].ms / head[64].ms for d in (60, 100)}
        claims.show(claims.claim(
            "Measured (device time), Q·Kᵀ at head dimension 60 and 100 took {r60:.1f} and {r100:.1f} times as long as "
            "at 64, and the model, which classifies all three **{bound}-bound**, predicted {p60:.1f} and {p100:.1f}.",
            holds=lambda r60, r100, bound, **_: min(r60, r100) > 1.5 and bound == "memory",
            r60=slow[60], r100=slow[100], p60=head[60].params["predicted_ms"] / head[64].params["predicted_ms"],
            p100=head[100].params["predicted_ms"] / head[64].params["predicted_ms"],
            bound="/".join(sorted({head[d].params["predicted_bound"] for d in (60, 64, 100)})),
        ))  # fmt: skip
    misses = agreement["misses"]
    tie = [abs(m["predicted_ms"][0] - m["predicted_ms"][1]) <= 1e-9 * max(m["predicted_ms"]) for m in misses]
    assert sum(tie) == agreement["ties"]
    print(f"\n{len(misses)} pairs the model does not order: {sum(tie)} it predicts as ties (equal times), "
          f"{len(misses) - sum(tie)} the wrong way round" + (". Those first, then a few ties:" if misses else "."))
    for miss in [m for m, t in zip(misses, tie) if not t] + [m for m, t in zip(misses, tie) if t][:4]:
        (m1, m2), (p1, p2) = miss["measured_ms"], miss["predicted_ms"]
        print(f"  {miss['sweep']}: x = {miss['x']}, measured {m1:.4g} vs {m2:.4g}, predicted {p1:.4g} vs {p2:.4g} ms")

# %% [markdown]
# ## 10. Co-design: checking model configurations
#
# Every GEMM of a transformer layer has a shape set by the model's hyperparameters — vocabulary $v$, hidden size $h$, heads $a$, sequence $s$, microbatch $b$ (the sequences one GPU processes per step), tensor-parallel degree $t$ (the number of GPUs each layer's weight matrices are split over):
#
# | GEMM | $M$ | $N$ | $K$ | batch |
# |---|---|---|---|---|
# | QKV projection | $bs$ | $3h/t$ | $h$ | 1 |
# | attention scores $QK^\top$ | $s$ | $s$ | $h/a$ | $ba/t$ |
# | attention over values | $s$ | $h/a$ | $s$ | $ba/t$ |
# | output projection | $bs$ | $h$ | $h/t$ | 1 |
# | MLP up / down | $bs$ | $4h/t$, $h$ | $h$, $4h/t$ | 1 |
# | logits | $bs$ | $v/t$ | $h$ | 1 |
#
# Anthony et al. turn the three effects into rules: **the vocabulary divisible by 64; $bs$, $h/a$ and $h/t$ divisible by a large power of two (64 here); $ba/t$ an integer; the microbatch as large as memory allows.** `codesign.check_config` applies them (the last through the model: it fails while doubling $b$ would still make the layer's GEMMs more than 5% faster per token) and proposes the nearest compliant sizes.

# %%
for name in ("GPT-2 small", "Pythia-2.8B", "GPT-NeoX-20B"):
    cfg = codesign.KNOWN_CONFIGS[name]
    print(codesign.format_checks(codesign.check_config(cfg),
                                 title=f"{name}: v={cfg.vocab}, h={cfg.hidden}, a={cfg.heads}, s={cfg.seq}, "
                                       f"b={cfg.microbatch}, t={cfg.tensor_parallel}"))
    print(f"  source: {cfg.source}\n")

# %% [markdown]
# GPT-2's vocabulary of 50257 is the classic miss (nanoGPT pads it to 50304, "the nearest multiple of 64, for efficiency"); EleutherAI padded theirs. Pythia-2.8B (GPT-3 2.7B's shape) has a head dimension of 80, GPT-NeoX-20B of 96. Is the nearest fix the best one? Ask the model for the layer's GEMM time with each compliant head count:

# %%
heads_choice = {}  # name -> (the fastest head count, fix_config's choice, {heads: (layer ms, Q K^T bound)})
for name in ("Pythia-2.8B", "GPT-NeoX-20B"):
    cfg = codesign.KNOWN_CONFIGS[name]
    a0, t = cfg.heads, cfg.tensor_parallel
    # the compliant head counts within a factor of two of the original, and the original
    options = sorted({a for a in codesign.heads_options(cfg.hidden, a0, t) if a0 / 2 <= a <= 2 * a0} | {a0})
    base, _ = codesign.layer_time(cfg)
    times = {}
    for a in options:
        t, parts = codesign.layer_time(dataclasses.replace(cfg, heads=a))
        scores = parts[1][1]
        times[a] = (t, scores.bound)
        print(f"{name:13s} a = {a:3d} (h/a = {cfg.hidden // a:3d}): layer GEMMs {t:6.2f} ms ({t / base - 1:+5.1%}); "
              f"Q K^T {scores.ms:.3f} ms, {scores.bound}-bound")
    heads_choice[name] = (min(times, key=lambda a: times[a][0]), codesign.fix_config(cfg).heads, times)
    print(f"  fix_config picks {heads_choice[name][1]} heads\n")

# %%
hidden = {n: codesign.KNOWN_CONFIGS[n].hidden for n in heads_choice}
claims.show(claims.claim(
    "In the model the nearest compliant head count is not the fastest: with attention computed as separate GEMMs, "
    "every head writes its own $s \\times s$ score matrix, so *more* heads move *more* bytes, and the "
    "**memory-bound** score GEMMs dominate the difference. The fewest heads of the window win, {a_p} for Pythia-2.8B "
    "($h/a$ = {d_p}) and {a_n} for GPT-NeoX-20B ($h/a$ = {d_n}), and `codesign.fix_config` picks them: among "
    "compliant head counts within a factor of two, the one the model predicts fastest.",
    holds=all(best == pick == min(ts) and all(b == "memory" for _, b in ts.values())
              for best, pick, ts in heads_choice.values()),
    a_p=heads_choice["Pythia-2.8B"][0], d_p=hidden["Pythia-2.8B"] // heads_choice["Pythia-2.8B"][0],
    a_n=heads_choice["GPT-NeoX-20B"][0], d_n=hidden["GPT-NeoX-20B"] // heads_choice["GPT-NeoX-20B"][0],
))  # fmt: skip

# %% [markdown]
# FlashAttention (lesson 4) never writes the scores to HBM, which changes this trade-off.
#
# The same rules apply to a **multi-head LSTM** (block-diagonal recurrence, one block per head, as in FlashRNN): the input projection is a $bs \times 4h/t \times h$ GEMM, and every time step runs a small batched GEMM of $b \times 4d \times d$ per head ($d = h/\text{heads}$). Those step GEMMs are tiny, so two more rules matter: the batch should fill whole 16-row tensor-core tiles, and one step should have enough tiles to occupy every SM.

# %%
lstm = codesign.KNOWN_CONFIGS["multi-head LSTM (example)"]
print(codesign.format_checks(codesign.check_config(lstm),
                             title=f"{lstm.name}: h={lstm.hidden}, heads={lstm.heads}, batch={lstm.batch}, "
                                   f"seq={lstm.seq}, vocab={lstm.vocab}"))
fixed = codesign.fix_config(lstm)
print(f"\nfix_config: hidden {fixed.hidden}, heads {fixed.heads}, batch {fixed.batch}, vocab {fixed.vocab}; "
      f"all rules pass: {all(c.passed for c in codesign.check_config(fixed))}")
for cfg in (lstm, fixed):
    t, parts = codesign.layer_time(cfg)
    step = parts[1][1]
    print(f"  batch {cfg.batch:4d}: {t / (cfg.batch * cfg.seq) * 1e6:7.2f} ns per token per layer; "
          f"one step: {step.tiles} tiles, {step.waves} wave(s), {step.bound}-bound")

# %%
step_shape, step = codesign.layer_time(lstm)[1][1]
weight_bytes = step_shape["batch"] * step_shape["n"] * step_shape["k"] * 2  # bf16: heads x [4d, d]
claims.show(claims.claim(
    "At batch {b} one time step moves {mb:.2f} MB, {wf:.0%} of it the recurrent weights ({h} heads of $4d \\times "
    "d$ = {n} × {k} bf16 values each), to do {mf:.1f} MFLOPs, and only {tiles} of {sms} SMs have a tile: the step "
    "is **{bound}-bound** and the GPU mostly idle.",
    holds=lambda wf, tiles, sms, bound, **_: wf > 0.8 and tiles < sms and bound == "memory", b=lstm.batch,
    mb=step.bytes / 1e6, wf=weight_bytes / step.bytes, h=step_shape["batch"], n=step_shape["n"], k=step_shape["k"],
    mf=step.flops / 1e6, tiles=step.tiles, sms=step.sm_count, bound=step.bound,
))  # fmt: skip

# %% [markdown]
# A larger batch amortises the weights over more sequences, which is why the microbatch rule asks for hundreds. A fused RNN kernel (lesson 6) attacks the same cost from the other side: it keeps the recurrent weights on chip across time steps instead of re-reading them.
#
# ## What it means
#
# - **Shape is a performance parameter.** One element of $K$ changes an 8192-square GEMM's time on the H100 (by how much: section 2's verdict, from the stored run): the 16-byte alignment of rows decides whether the fast tensor-core path runs at all. Multiples of 8 elements are the hard rule, multiples of 64 the comfortable one.
# - **Work is done in tiles and waves.** A GEMM costs whole tiles and whole waves; an extra column can add a wave that runs on 9% of the SMs. Libraries soften this by switching tiles per shape, a fixed-tile kernel shows it plainly — and the "good" sizes depend on the GPU's SM count.
# - **A three-factor model orders shapes.** Roofs plus alignment, tile and wave quantization — with rates from spec sheets and measured constants read from the stored runs (the peak fraction and both alignment penalties from this lesson's K sweep, the memory fraction from lesson 0's sweep) — predict which of two shapes is faster; section 9 reports how often it is right on the H100, and where it is not.
# - **Co-design is cheap at design time.** Padding a vocabulary, choosing a head count with $h/a$ a multiple of 64 (or 128), a microbatch that makes $bs$ a multiple of 64: none of these changes what the model can learn, all of them change how fast it trains. Checking a config takes a function call.
#
# **Exercises:** `exercises/02_codesign.ipynb` — compute tile and wave quantization, build the time model yourself, predict which shapes run fastest and compare with the H100 measurements, and fix a config the checker flags. Grade your work with `make grade NB=exercises/02_codesign.ipynb`.
