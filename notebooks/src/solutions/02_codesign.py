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
# # Exercises 2 — GEMM shapes and hardware co-design
#
# Four tasks that go with `notebooks/02_codesign.ipynb`. Write your code where it says `# YOUR CODE HERE` (delete the `raise NotImplementedError()`), then run the `# GRADER` cell below it: it tests your code on fresh random cases against `gpulab.codesign` and raises with a message if something is wrong.
#
# Grade the whole notebook from a terminal with
#
# ```
# make grade NB=exercises/02_codesign.ipynb
# ```
#
# Everything here is arithmetic on a GPU description, so it runs the same on CPU and GPU. The "measure" step uses the H100 measurements stored in `benchmarks/02_codesign/` (or measures live on a GPU).

# %%
import dataclasses
import math

import torch

import gpulab  # first: decides GPU vs CPU interpreter before any kernel is defined
from gpulab import bench, codesign, dtypes, hardware, runtime
from gpulab.course import claims
from gpulab.course import grading_codesign as grading


# %% [markdown]
# ## Task 1: tile and wave quantization
#
# A GEMM kernel cuts the $M \times N$ output (of each of `batch` independent products) into tiles of `tile = (tile_m, tile_n)`, one tile per program, and the SMs run the programs in waves of `sm_count` tiles. Return
#
# - `tiles` $= \text{batch} \cdot \lceil M/t_m \rceil \cdot \lceil N/t_n \rceil$,
# - `waves` $= \lceil \text{tiles} / \text{SMs} \rceil$,
# - `tile_efficiency`: the useful area $MN$ over the area of the tiles, $\lceil M/t_m\rceil t_m \cdot \lceil N/t_n\rceil t_n$,
# - `wave_efficiency` $= \text{tiles} / (\text{waves} \cdot \text{SMs})$.
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# A ragged edge still costs a whole tile: the tile counts per dimension are ceilings, `math.ceil(m / tile_m)`.
# </details>
#
# <details><summary>Hint 2</summary>
#
# The tile efficiency's denominator is the area the tiles cover, `rows * tile_m * cols * tile_n` (per product; the
# batch cancels), and the wave efficiency divides the tiles by every slot of every wave, `waves * sm_count`.
# </details>

# %% tags=["solution"]
def quantization(m, n, tile, sm_count, batch=1):
    ### BEGIN SOLUTION
    tm, tn = tile
    rows, cols = math.ceil(m / tm), math.ceil(n / tn)
    tiles = batch * rows * cols
    waves = math.ceil(tiles / sm_count)
    return tiles, waves, (m * n) / (rows * tm * cols * tn), tiles / (waves * sm_count)
    ### END SOLUTION


# %%
# GRADER: tile and wave quantization
grading.grade_quantization(quantization)

# %%
for n in (1408, 1416):
    tiles, waves, e_tile, e_wave = quantization(1536, n, (128, 128), hardware.spec("H100").sm_count)
    print(f"1536 x {n} in 128x128 tiles on an H100: {tiles} tiles, {waves} wave(s), "
          f"tile efficiency {e_tile:.3f}, wave efficiency {e_wave:.3f}")


# %% [markdown]
# ## Task 2: the GEMM time model
#
# Build the lesson's model yourself: `predict_ms(m, n, k, dtype, gpu, tile, batch=1)` returns the predicted milliseconds of `batch` products $[M, K] \times [K, N]$.
#
# - `spec = hardware.spec(gpu)` describes the GPU: `spec.peak_tflops(dtype)`, `spec.hbm_gbps`, `spec.sm_count`. The element size $s$ of `dtype` is `torch.empty(0, dtype=dtypes.as_dtype(dtype)).element_size()`.
# - FLOPs $F = 2 \cdot \text{batch} \cdot MNK$; bytes $Q = s \cdot \text{batch} \cdot (MK + KN + MN)$.
# - alignment: the factor is `1 / codesign.alignment_penalty(k, n, dtype)` (1 when the rows of $K$ and $N$ elements are multiples of 16 bytes; the lesson explains the two measured penalties); multiply it by the fill of the last K-step, $K / (B_K \lceil K/B_K \rceil)$ with $B_K = 128 / s$ elements.
# - tile and wave efficiency from your `quantization`.
# - compute time $F / (P \cdot \phi_c \cdot e_\text{align} e_\text{tile} e_\text{wave})$ with $P$ the peak in FLOP/s and $\phi_c$ = `codesign.PEAK_FRACTION`; memory time $Q \cdot \text{penalty} / (B \cdot \phi_m)$ with $B$ in bytes/s, $\phi_m$ = `codesign.MEMORY_FRACTION` and the same alignment penalty (a misaligned shape runs a slower kernel, for its loads as well as its math). The prediction is the larger, in ms.
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# Build it in the order of the list: $F$ and $Q$ first, then the three efficiencies, then the two times; the
# prediction is `max(compute_s, memory_s) * 1e3`.
# </details>
#
# <details><summary>Hint 2</summary>
#
# The K-step fill uses $B_K = 128 / s$ *elements* (128 bytes per step): at bf16, 64. The alignment factor multiplies
# it as `1 / codesign.alignment_penalty(k, n, dtype)`, so a misaligned shape has a smaller efficiency.
# </details>
#
# <details><summary>Hint 3</summary>
#
# Units: `spec.peak_tflops(dtype) * 1e12` FLOP/s and `spec.hbm_gbps * 1e9` bytes/s give seconds; the memory time is
# multiplied by the same alignment penalty, not divided.
# </details>

# %% tags=["solution"]
def predict_ms(m, n, k, dtype="bfloat16", gpu="H100", tile=(128, 128), batch=1):
    ### BEGIN SOLUTION
    spec = hardware.spec(gpu)
    itemsize = torch.empty(0, dtype=dtypes.as_dtype(dtype)).element_size()
    flops = 2 * batch * m * n * k
    nbytes = itemsize * batch * (m * k + k * n + m * n)
    bk = 128 // itemsize
    e_align = k / (bk * math.ceil(k / bk)) / codesign.alignment_penalty(k, n, dtype)
    _, _, e_tile, e_wave = quantization(m, n, tile, spec.sm_count, batch)
    compute_s = flops / (spec.peak_tflops(dtype) * 1e12 * codesign.PEAK_FRACTION * e_align * e_tile * e_wave)
    # a misaligned shape runs a slower kernel: the penalty slows its memory traffic too
    memory_s = nbytes / (spec.hbm_gbps * 1e9 * codesign.MEMORY_FRACTION) * codesign.alignment_penalty(k, n, dtype)
    return max(compute_s, memory_s) * 1e3
    ### END SOLUTION


# %%
# GRADER: GEMM time model
grading.grade_predict_ms(predict_ms)

# %% [markdown]
# ## Task 3: predict which shape is fastest, then measure
#
# Six GEMMs in bf16 on the H100. Four have the same $8192 \times 8192$ output and nearly the same $K$; two are the $1536 \times N \times 4096$ products of the wave sweep. **Before running anything below, decide which you expect to reach the highest TFLOP/s, and which the lowest, and why.**
#
# Then write `rank_by_throughput(shapes, gpu)`: the indices of `shapes` (tuples $(M, N, K)$), highest predicted TFLOP/s first, using the lesson's model of cuBLAS, `codesign.gemm_time(m, n, k, gpu=gpu, tile=None).tflops` (bf16).
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# Compute the model's TFLOP/s of every shape first, then sort the *indices* `range(len(shapes))` by it.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Highest first: `sorted(range(len(shapes)), key=lambda i: -rate[i])` (or `reverse=True`). Return indices, not shapes.
# </details>

# %% tags=["solution"]
SHAPES = [(8192, 8192, 4095), (8192, 8192, 4096), (8192, 8192, 4104), (8192, 8192, 4092), (1536, 2816, 4096),
          (1536, 2944, 4096)]


def rank_by_throughput(shapes, gpu="H100"):
    ### BEGIN SOLUTION
    rate = [codesign.gemm_time(m, n, k, gpu=gpu, tile=None).tflops for m, n, k in shapes]
    return sorted(range(len(shapes)), key=lambda i: -rate[i])
    ### END SOLUTION


# %%
# GRADER: rank shapes by predicted throughput
grading.grade_rank(rank_by_throughput)

# %% [markdown]
# Now measure. The lesson's benchmark measured exactly these shapes on an H100 (`torch.matmul`, bf16); this cell looks them up in the stored results. On a GPU without stored results for it, it measures them live; without either, it can only show the model.

# %%
try:
    stored = bench.load("02", gpu="h100")
except FileNotFoundError:
    stored = []


def measured(shape):
    for r in stored:
        if r.shape == list(shape) and r.params.get("impl", "").startswith("torch.matmul"):
            return r.tflops, f"H100, stored {r.date}"
    if runtime.on_gpu():
        a = torch.randn(shape[0], shape[2], device="cuda", dtype=torch.bfloat16)
        b = torch.randn(shape[2], shape[1], device="cuda", dtype=torch.bfloat16)
        t = bench.time_callable(lambda: a @ b)
        return 2 * math.prod(shape) / (t.median_ms * 1e-3) / 1e12, "this GPU, live"
    return None, "no measurement stored yet"


order = rank_by_throughput(SHAPES)
print(f"{'rank':>4s}  {'shape (M, N, K)':22s} {'model TFLOP/s':>13s} {'measured':>9s}  where")
for rank, i in enumerate(order, 1):
    pred = codesign.gemm_time(*SHAPES[i], tile=None).tflops
    meas, where = measured(SHAPES[i])
    print(f"{rank:4d}  {str(SHAPES[i]):22s} {pred:13.0f} {'-' if meas is None else f'{meas:9.0f}':>9s}  {where}")


# %% [markdown]
# Did the measurement agree with your guess, and with the model? $(1536, 2816, 4096)$ is one perfect wave ($12 \times 11 = 132$ tiles of $128 \times 256$) and $(1536, 2944, 4096)$ needs a second, nearly empty one — unless cuBLAS picks another tile. The odd $K$ is only 2-byte aligned; $K = 4092$ is misaligned only to 8 bytes. What the stored run says about those two:

# %%
found = {shape: measured(shape) for shape in SHAPES}
rates = {shape: rate for shape, (rate, where) in found.items() if where.startswith("H100, stored")}
if len(rates) == len(SHAPES):
    odd, eight, aligned = (rates[8192, 8192, k] for k in (4095, 4092, 4096))
    claims.show(claims.claim(
        "Measured (device time, the stored H100 run), the odd $K = 4095$ is the **slowest** of the six shapes at "
        "{odd:.0f} TFLOP/s, {x_odd:.1f} times below $K = 4096$; $K = 4092$, 8-byte aligned, reaches {eight:.0f}: "
        "{x_eight:.1f} times below, so 8-byte alignment matters to cuBLAS too, if less.",
        holds=lambda odd, eight, x_odd, x_eight: odd == min(rates.values()) and 1.5 < x_eight < x_odd,
        odd=odd, eight=eight, x_odd=aligned / odd, x_eight=aligned / eight,
    ))  # fmt: skip
else:
    print("(no stored H100 run of these shapes: the verdict appears once `python -m gpulab bench 02` has run)")

# %% [markdown]
# ## Task 4: fix a config the checker flags
#
# `codesign.check_config(config)` applies the paper's rules to a `codesign.TransformerConfig`. Write `fix_config(config)` that returns a new config (use `dataclasses.replace`) that passes every rule while changing as little as possible:
#
# - keep `seq` and `tensor_parallel` (the data and the machine fix them);
# - pad the vocabulary *up* (tokens cannot be removed), by less than $64t$;
# - move `hidden` by at most $64t$ (a multiple of $64t$ makes $h/t$ a multiple of 64);
# - keep `heads` within a factor of two, with $h/a$ a multiple of 64 and $a$ a multiple of $t$ (`codesign.heads_options(hidden, heads, t)` lists such head counts, nearest first);
# - raise the microbatch until $bs$ is a multiple of 64, $ba/t$ an integer and the microbatch rule passes (never shrink it).
#
# The grader tries your function on random flagged configs.
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# Fix one field at a time, in the order of the list: each rule only depends on the fields fixed before it.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Round the vocabulary up to a multiple of 64 with `-(-x // m) * m`; round `hidden` to the *nearest* multiple of $64t$
# (never below $64t$). Then keep `heads` unless it breaks a rule ($h \bmod a$, $(h/a) \bmod 64$ or $a \bmod t$ not
# 0); if it does, take the first of `codesign.heads_options(hidden, heads, t)` within a factor of two of the old count.
# </details>
#
# <details><summary>Hint 3</summary>
#
# The microbatch in two steps: raise it by one until $bs \bmod 64 = 0$ and $ba \bmod t = 0$; then, while
# `all(c.passed for c in codesign.check_config(fixed))` is False (only the "as large as memory allows" rule is left),
# *double* it: doubling keeps both divisibilities, adding one can break them again.
# </details>

# %% tags=["solution"]
def fix_config(config):
    ### BEGIN SOLUTION
    t = config.tensor_parallel
    vocab = -(-config.vocab // 64) * 64
    hidden = max(64 * t, round(config.hidden / (64 * t)) * 64 * t)
    heads = config.heads
    if hidden % heads or (hidden // heads) % 64 or heads % t:
        near = [a for a in codesign.heads_options(hidden, heads, t) if heads / 2 <= a <= 2 * heads]
        heads = near[0]
    b = config.microbatch
    while (b * config.seq) % 64 or (b * heads) % t:
        b += 1
    fixed = dataclasses.replace(config, vocab=vocab, hidden=hidden, heads=heads, microbatch=b)
    while not all(c.passed for c in codesign.check_config(fixed)):
        fixed = dataclasses.replace(fixed, microbatch=2 * fixed.microbatch)  # only the microbatch rule is left
    return fixed
    ### END SOLUTION


# %%
# GRADER: fix a flagged config
grading.grade_fix_config(fix_config)

# %%
mine = codesign.TransformerConfig("my model", vocab=50277, hidden=2500, heads=20, seq=2048, microbatch=3,
                                  tensor_parallel=2)
print(codesign.format_checks(codesign.check_config(mine), title="before"))
fixed = fix_config(mine)
print(f"\nafter: vocab {fixed.vocab}, hidden {fixed.hidden}, heads {fixed.heads}, microbatch {fixed.microbatch}")
print(codesign.format_checks(codesign.check_config(fixed), title="checks"))

# %%
pythia = codesign.KNOWN_CONFIGS["Pythia-2.8B"]
layer = {a: codesign.layer_time(dataclasses.replace(pythia, heads=a))[0] for a in (20, 32, 40)}
claims.show(claims.claim(
    "For Pythia-2.8B ($h = 2560$, $a = 32$, $h/a = 80$) the nearest compliant head count is {near} ($h/a = 64$), yet "
    "the lesson's model predicts the layer's GEMMs *slower* with 40 heads than with 32 ({t40:.2f} against {t32:.2f} "
    "ms), and fastest with 20 ($h/a = 128$, {t20:.2f} ms).",
    holds=lambda near, t20, t32, t40: near == 40 and t40 > t32 > t20,
    near=codesign.heads_options(pythia.hidden, pythia.heads, pythia.tensor_parallel)[0], t20=layer[20],
    t32=layer[32], t40=layer[40],
))  # fmt: skip

# %% [markdown]
# ## Question
#
# Why does the model rank Pythia-2.8B's head counts as the cell above says? And what changes with FlashAttention?
#
# ### BEGIN SOLUTION
# Computed as separate GEMMs, attention writes (and then reads) one $s \times s$ score matrix per head and sequence: $b \cdot a \cdot s^2$ elements. Those GEMMs are memory-bound (their arithmetic intensity is about the head dimension, far below the ridge point), so their time follows the bytes, and the bytes grow with the number of heads, not with $h/a$. More, narrower heads move more bytes; fewer, wider heads move fewer, and $h/a = 128$ is aligned as well. The other GEMMs (projections, MLP) do not depend on $a$ at all. FlashAttention never writes the score matrix to HBM, so that traffic disappears; what is left is compute on tiles whose K is the head dimension, where a multiple of 64 fills the K-steps and a larger head dimension gives each tile more work per byte.
# ### END SOLUTION
