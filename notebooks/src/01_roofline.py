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
# # Lesson 1 — The roofline
#
# **What you will learn**
# - the **roofline model**: a kernel that does $F$ FLOPs and must move $Q$ bytes is bounded by $\min(P,\ I \cdot B)$ FLOP/s, where $I = F/Q$ is its **arithmetic intensity**; below the **ridge point** $P/B$ it is memory-bound, above it compute-bound;
# - why the roofs are **hierarchical**: one memory roof per level (HBM, L2, L1) and one compute roof per precision (FP32 FMA, TF32, fp16/bf16 tensor cores);
# - how to count $F$ and $Q$ for every operation of this course — vector add, softmax, GEMM, naive and tiled attention, an LSTM step and a whole LSTM sequence — and read off, *before writing a kernel*, what will bound it;
# - how to **measure** each ceiling with a microbenchmark short enough to read, and why a kernel should be compared with the measured ceilings rather than the spec sheet.
#
# **How this notebook runs.** Sections 1 and 2 are arithmetic and run the same everywhere. Section 3 builds and checks the microbenchmarks; without a GPU they run in Triton's CPU interpreter at tiny sizes, so the numbers they print measure the interpreter, not a GPU. The ceilings that matter were measured on an NVIDIA H100 with `python -m gpulab bench 01` and stored under `benchmarks/01_roofline/`; section 4 shows them (until that file exists, the code falls back to the spec table and says so).

# %%
# NBVAL_IGNORE_OUTPUT
import inspect

import matplotlib.pyplot as plt
import torch

import gpulab  # first: decides GPU vs CPU interpreter before any kernel is defined
from gpulab import bench, check, hardware, memory, roofline, runtime
from gpulab.course import claims

print(f"kernels run in {runtime.MODE} mode on {runtime.device}")

# %% [markdown]
# ## 1. The model
#
# A kernel does $F$ floating-point operations and must move $Q$ bytes between HBM and the chip. The GPU can do at most $P$ FLOP/s and move at most $B$ bytes/s, and at best it overlaps the two, so
#
# $$ t \;\ge\; \max\!\left(\frac{F}{P},\ \frac{Q}{B}\right) \qquad\Longrightarrow\qquad \frac{F}{t} \;\le\; \min\!\left(P,\ I \cdot B\right), \qquad I = \frac{F}{Q}\ \ \text{(FLOP per byte)}. $$
#
# On log-log axes, $I \cdot B$ is a diagonal line of slope 1 and $P$ a horizontal one: the **roofline**. They meet at the **ridge point** $I^* = P / B$. A kernel to the left of it is **memory-bound**: its speed is set by bytes, and the only ways to go faster are to move fewer bytes or move them faster. A kernel to the right is **compute-bound**: its speed is set by arithmetic.
#
# **The roofs are hierarchical.** There is not one $P$ but one per kind of arithmetic unit: the FP32 **FMA** units (a fused multiply-add, $a \cdot b + c$ in one instruction, on one number per thread), and the **tensor cores**, units that multiply whole small matrix tiles per instruction, with **TF32** (fp32 inputs rounded to a 10-bit mantissa), fp16 or bf16 operands; the FMA and tensor-core roofs are an order of magnitude apart. And there is not one $B$ but one per memory level: HBM, the L2 cache, and each SM's L1 / shared memory. If a kernel's bytes come from L2 rather than HBM, the roof it is held to is $I \cdot B_\text{L2}$. For every level $\ell$ that moves $Q_\ell$ bytes, $t \ge Q_\ell / B_\ell$ — the slowest of them all sets the time:
#
# $$ t \;\ge\; \max\!\left(\frac{F}{P_\text{precision}},\ \frac{Q_\text{HBM}}{B_\text{HBM}},\ \frac{Q_\text{L2}}{B_\text{L2}},\ \frac{Q_\text{L1}}{B_\text{L1}}\right). $$
#
# The spec-sheet roofs of an H100 SXM, and the ridge point of each compute roof against HBM:

# %%
spec = roofline.Ceilings.from_spec("H100")
for roof in roofline.COMPUTE_ROOFS:
    p = spec.compute(roof)
    print(f"{roof:5s} {p:7.1f} TFLOP/s / {spec.hbm_gbps:,.0f} GB/s -> ridge point {spec.ridge(roof):5.1f} FLOP/byte")

# %%
roofline.plot([], spec)
plt.show()

# %% [markdown]
# The tensor-core roof is 15 times the FMA roof, and its ridge point is about 300 FLOPs per byte: a bf16 kernel must do 300 FLOPs for every byte it brings from HBM, or the tensor cores wait for memory. Reading the roofline is one formula, `roofline.attainable`:

# %%
print(inspect.getsource(roofline.attainable))
for i in (1 / 12, 1.0, 16.0, 295.0, 1000.0):
    print(f"I = {i:8.3f} FLOP/B -> at most {roofline.attainable(i, 989.4, 3350):7.2f} TFLOP/s "
          f"({roofline.bound(i, 989.4, 3350)}-bound)")

# %% [markdown]
# ## 2. Counting FLOPs and bytes
#
# The course's conventions (also in `gpulab.bench`): a multiply-add is **2 FLOPs**; **bytes** are the fewest an implementation of the algorithm must move through HBM — each input read once, each output written once, plus whatever intermediate the algorithm stores. Each helper in `gpulab.roofline` returns a record with `flops`, `bytes` and `intensity`; the counts below are the same ones, step by step. $s$ is the size of one element in bytes (4 for fp32, 2 for fp16/bf16).
#
# ### Vector add and softmax
#
# $z = x + y$ on $n$ elements: $F = n$, $Q = 3ns$ (read $x$ and $y$, write $z$), so $I = 1/(3s)$: $1/12$ in fp32. Softmax of an $r \times c$ matrix, one row per program kept on chip: max, subtract, exp, sum, divide — we count $F = 5rc$ — and $Q = 2rcs$ (read once, write once), $I = 5/(2s)$: 1.25 in bf16. Both sit far below every ridge point: **pointwise and reduction kernels are memory-bound on every GPU in the table**, and fusing them (never writing the intermediate) is the only real speed-up.

# %%
pointwise = [roofline.vector_add(1 << 28, "fp32")] + [roofline.softmax(8192, 8192, dt) for dt in ("fp32", "bf16")]
for op in pointwise:
    print(f"{op.name:32s} F = {op.flops:14,.0f}  Q = {op.bytes:14,.0f}  I = {op.intensity:6.4f} FLOP/B")

# %% [markdown]
# ### GEMM
#
# A **GEMM** (general matrix multiply, the BLAS name) is $C = AB$ with $A \in \mathbb{R}^{m \times k}$, $B \in \mathbb{R}^{k \times n}$: each of the $mn$ outputs is a dot product of length $k$, so $F = 2mnk$; the fewest bytes read $A$ and $B$ and write $C$: $Q = s(mk + kn + mn)$.
#
# $$ I_\text{GEMM} = \frac{2mnk}{s\,(mk + kn + mn)} \;\xrightarrow{\ m=n=k\ }\; \frac{2n}{3s}, \qquad I_\text{GEMM} \approx \frac{2m}{s} \ \text{ when } m \ll n, k. $$
#
# A large square GEMM is compute-bound (8192³ in bf16: $I \approx 2730$); a *skinny* one — a batch of 16 tokens through a 4096 × 4096 layer — has $I \approx 16$ and is memory-bound however good the kernel: it must read all of $B$ to do only 16 rows of work. Lesson 2 is about this.

# %%
print(inspect.getsource(roofline.gemm))
for m in (1, 16, 64, 256, 1024, 8192):
    op = roofline.gemm(m, 8192, 8192, "bf16")
    where = roofline.bound(op.intensity, 989.4, 3350)
    print(f"{op.name:24s} I = {op.intensity:7.1f} FLOP/B  -> {where}-bound on the H100 spec")

# %% [markdown]
# ### Attention: naive vs tiled
#
# Attention for $B$ sequences, $H$ heads, $N_q$ queries, $N_k$ keys of dimension $D$ does two GEMMs per head, $S = QK^\top$ and $O = PV$: $F = 4BHN_qN_kD$ (halved if causal). What differs is the bytes:
#
# - **naive**: three kernels, so $S$ and $P = \text{softmax}(S)$ go through HBM — $S$ written and read back, $P$ written and read back: $4BHN_qN_k$ elements on top of reading $Q, K, V$ and writing $O$. The $N^2$ term dominates: for $N_q = N_k = N$, $I_\text{naive} = \frac{ND}{s(N + D)} \to D/s$ (at most 64 in bf16 with $D = 128$, whatever $N$). Causal masking halves the FLOPs but not the bytes: the naive kernel still stores full matrices.
# - **tiled** (FlashAttention, lesson 4): scores live on chip, so $Q = s \cdot BH(2N_q + 2N_k)D$ and $I_\text{tiled} = N/s$ for $N_q = N_k = N$ — it grows with the sequence.

# %%
print(f"{'N':>6s} {'naive I':>9s} {'tiled I':>9s}   (B=1, H=1, D=128, bf16)")
for n in (256, 1024, 4096, 16384):
    naive, tiled = roofline.attention_naive(1, 1, n, n, 128, "bf16"), roofline.attention_tiled(1, 1, n, n, 128, "bf16")
    print(f"{n:6d} {naive.intensity:9.1f} {tiled.intensity:9.1f}")

# %% [markdown]
# ### LSTM: one step, and a whole sequence
#
# One step computes the four gates $[i, f, g, o] = x_t W^\top + h_{t-1} U^\top + b$ with $W \in \mathbb{R}^{4H \times I}$, $U \in \mathbb{R}^{4H \times H}$, then the pointwise update of $c$ and $h$. We count the two matrix products, $F = 2 \cdot B \cdot 4H \cdot (I + H)$ (the pointwise update, about 10 FLOPs per unit, is left out, as attention's softmax is). The step reads $x_t$, $h_{t-1}$, $c_{t-1}$, the weights and the bias, and writes $h_t$, $c_t$:
#
# $$ Q_\text{step} = s\,\big(BI + 2BH + 4H(I + H) + 4H + 2BH\big), \qquad I_\text{step} \approx \frac{2B}{s} \ \text{ for } B \ll H. $$
#
# The weights dominate, so **the batch size is the intensity**: in bf16 a step stays memory-bound until the batch is in the hundreds (the exercise works out exactly where).
#
# For a **whole sequence** of $T$ steps there are two implementations, with the same FLOPs:
# - **one kernel per step** (a loop over calls of cuBLAS (NVIDIA's matrix-multiply library)): each step is the step above — the weights and the state cross HBM $T$ times; the intensity stays that of one step;
# - **one persistent kernel** (FlashRNN, lesson 6) that keeps the weights and the state on chip for all $T$ steps: the weights are read once, $x$ once, the output sequence written once: $Q = s\,(TB(I+H) + 3BH + 4H(I+H) + 4H)$.

# %%
print(inspect.getsource(roofline.lstm_sequence))

# %%
for b in (1, 16, 64, 256, 1024):
    op = roofline.lstm_step(b, 1024, 1024, "bf16")
    print(f"{op.name:34s} I = {op.intensity:7.1f} FLOP/B")
for on_chip in (False, True):
    op = roofline.lstm_sequence(16, 1024, 1024, 1024, "bf16", weights_on_chip=on_chip)
    print(f"{op.name:70s} I = {op.intensity:7.1f} FLOP/B")

# %% [markdown]
# ### Everything on the H100's roofline
#
# The table and figure use `roofline.ceilings("h100")`: the stored measurement of the H100 if there is one, else the spec table — the first line says which. The ridge column is the ridge point of each operation's own compute roof (pointwise work runs on the FMA units, matrix products on the tensor cores of their dtype).

# %%
h100 = roofline.ceilings("h100")
ops = roofline.course_operations()
print(h100.source, "\n")
print(roofline.intensity_table(ops, h100))

# %%
roofline.plot(ops, h100, title=f"The course's operations on the {h100.device}\n{h100.source}")
plt.show()

# %%
by_name = {op.name.split(" B=")[0] + (", on chip" if "on chip" in op.name else ""): op for op in ops}
naive, tiled = by_name["attention naive"], by_name["attention tiled"]
loop, chip = by_name["LSTM seq"], by_name["LSTM seq, on chip"]
roof = {k: h100.attainable(op.intensity, "bf16", "HBM") for k, op in (("naive", naive), ("tiled", tiled))}
where = {k: roofline.bound(op.intensity, h100.compute("bf16"), h100.bandwidth("HBM")) for k, op in by_name.items()}
claims.show(claims.claim(
    "Two pairs tell the story of the course. Causal naive attention (intensity {i_n:.0f}) is **{b_n}-bound**; tiled, "
    "with the same FLOPs, it reaches {i_t:.0f} FLOP/B and is **{b_t}-bound**: its roof rises from {r_n:.0f} to "
    "{r_t:.0f} TFLOP/s, **{x:.1f}x** from moving fewer bytes. And the LSTM: a step loop at batch 16 sits at "
    "{i_l:.0f} FLOP/B, **{b_l}-bound**; keeping the weights on chip moves the sequence to {i_c:.0f} FLOP/B *against "
    "HBM*.",
    holds=lambda b_n, b_t, b_l, x, **_: (b_n, b_t, b_l) == ("memory", "compute", "memory") and x > 1,
    i_n=naive.intensity, i_t=tiled.intensity, r_n=roof["naive"], r_t=roof["tiled"], x=roof["tiled"] / roof["naive"],
    b_n=where["attention naive"], b_t=where["attention tiled"], i_l=loop.intensity, b_l=where["LSTM seq"],
    i_c=chip.intensity,
))  # fmt: skip

# %% [markdown]
# That is where the hierarchy matters. A persistent kernel still reads its weights at every step — from on-chip memory instead of HBM. Against the **L1 roof** its intensity is again the step's ~16 FLOP/B:

# %%
step = roofline.lstm_step(16, 1024, 1024, "bf16")
hbm = h100.attainable(step.intensity, "bf16", "HBM")
print(f"one step, weights from HBM: at most {hbm:6.1f} TFLOP/s")
l1 = h100.attainable(step.intensity, "bf16", "L1")
if l1 is None:
    print("weights from on-chip memory: needs the measured L1 roof (the spec table has no cache bandwidths)")
else:
    print(f"one step, weights from L1 : at most {l1:6.1f} TFLOP/s  ({l1 / hbm:.0f}x, still far below the "
          f"{h100.compute('bf16'):,.0f} TFLOP/s tensor-core roof)")

# %% [markdown]
# ## 3. Measuring the ceilings
#
# Every ceiling is measured by a microbenchmark that is checked against a float64 reference before it is timed (`roofline.measure_ceilings` runs them all; `python -m gpulab bench 01` stores the result).
#
# | roof | microbenchmark | bytes / FLOPs counted |
# |---|---|---|
# | HBM | lesson 0's masked copy kernel, 1 GiB fp32; `dst.copy_(src)` in the same run as the peer | read + written |
# | L2 | lesson 0's working-set sweep with loads marked `.cg` (cache in L2, bypass L1), 512 KB – 16 MB | read |
# | L1 (on-chip) | lesson 0's sweep unchanged, 16 – 128 KB (fits one SM's L1) | read |
# | bf16, fp16, TF32 tensor cores | `torch.matmul` (cuBLAS, NVIDIA's matrix-multiply library), 8192³ and 16384³, random inputs, two sets rotated; a separate 8192³ bf16 run is the peer | $2mnk$ |
# | FP32 FMA | a Triton kernel of register-only FMA chains (below); `torch.matmul` in IEEE fp32 beside it | 2 per FMA |
#
# **Shared memory, honestly.** Triton decides by itself what it stages through shared memory; it has no load from shared memory that a kernel can ask for. So gpulab does not claim a shared-memory bandwidth: the "on-chip" roof is the L1 read bandwidth of the L1-resident sweep, which on NVIDIA GPUs is the same SRAM as shared memory, reached through the cache path.
#
# ### The L2 kernel
#
# The same kernel as lesson 0, with one change: `cache_modifier=".cg"` on the load, so no L1 can serve it and a working set that fits the 50 MB L2 is read from L2. It has the same schedule, so lesson 0's float64 reference checks it:

# %%
print(inspect.getsource(roofline.l2_sweep_kernel.fn))

# %%
x = memory.sweep_data(3 * 4096 + 5)  # positive random data: well-conditioned sums
for n in (17, 4097, 3 * 4096 + 5):
    plan = memory.sweep_plan(n, bytes_to_read=64 * 1024, block=4096, programs=3)
    sums = roofline.l2_sweep(x, n, plan["programs"], plan["iters"], block=4096)
    check.assert_close(sums, memory.sweep_reference(x, n, plan["programs"], plan["iters"], block=4096), rtol=1e-4)
    print(f"n = {n:6d}: L2 sweep sums match the float64 reference")

# %% [markdown]
# ### The FP32 FMA kernel
#
# To reach the FMA units' peak a kernel must issue one FMA per lane per cycle and never wait: no memory traffic in the loop, and enough **independent** work that the 4-cycle latency of one FMA is hidden behind others. Each lane of `fma_kernel` runs four independent chains of $a \leftarrow a \cdot b + c$ (and each thread holds several lanes), unrolled 8 times per loop trip so the loop counter costs a small fraction of the issue slots. The final sum is stored, so the compiler cannot drop any of it.
#
# FLOPs: $2 \times 4 \text{ chains} \times 8 \text{ unroll} \times \text{iters} \times n$. With $|b| < 1$ the chains converge to $c/(1-b) = 1$, so no value overflows however long we run.

# %%
print(inspect.getsource(roofline.fma_kernel.fn))

# %%
for n, iters in ((1, 1), (17, 2), (131, 3)):
    x = check.random_tensor(roofline.FMA_CHAINS, n, distribution="uniform", scale=2.0)
    out = roofline.fma_chain(x, iters, block=64)
    steps = iters * roofline.FMA_UNROLL
    check.assert_close(out, roofline.fma_reference(x, steps), name="fma_chain")
    print(f"n = {n:3d}, {steps:2d} FMAs per chain: matches the float64 recurrence")

# %% [markdown]
# ### Tensor cores
#
# `torch.matmul` is cuBLAS, the best GEMM there is on NVIDIA hardware, so its rate on large random matrices is the practical tensor-core ceiling. For fp32 inputs PyTorch uses TF32 tensor cores only when `torch.backends.cuda.matmul.allow_tf32` is set; `measure_matmul("tf32")` sets it inside a context manager that restores your setting. Each product is checked against a float64 product of its first rows before it is timed.
#
# ### Run it here
#
# On a GPU this cell measures this machine's ceilings. Without one it runs every microbenchmark at tiny sizes in the interpreter: the numbers only show that the code path works — the source line says so.

# %%
# NBVAL_IGNORE_OUTPUT
live = roofline.measure_ceilings()
if runtime.on_gpu():
    print(live.summary())
    roofline.plot(live.records, live)
    plt.show()
else:
    print(bench.interpreter_summary(live.records))

# %% [markdown]
# ## 4. The H100's ceilings
#
# The stored run (`benchmarks/01_roofline/`): every ceiling with the spec figure beside it, and the two targets of this lesson, relative so they hold on any GPU — the HBM ceiling reaches at least 0.97× PyTorch's own device copy, and the bf16 ceiling at least 0.97× `torch.matmul` at 8192³, both timed in the same run.

# %%
print(h100.summary())
if h100.mode == "spec":
    print("\n(no stored measurement yet: these are the spec-table values; run `python -m gpulab bench 01` on the H100)")

# %%
roofline.plot(h100.records, h100)
plt.show()

# %% [markdown]
# ## 5. Lesson 0 on the roofline
#
# Lesson 0's stored H100 run, placed on these roofs. The sweep counts one add per fp32 element read, $I = 1/4$; each point is held to the roof of the level its working set fits (`params['level']`). Its copies are left out: they are the HBM ceiling above, timed again in lesson 0's run, and the ceiling's run is the one record of them. The `fraction` column is achieved over attainable; where it passes 100%, the roof a point is held to is not the whole story (the end of the lesson says why).

# %%
lesson0 = [r for r in bench.load("00", gpu="h100") if r.case == "working-set sweep"]
print(roofline.placement_table(lesson0, h100))

# %%
roofline.plot(lesson0, h100, title=f"Lesson 0 on the roofline of the {h100.device}\n{h100.source}")
plt.show()

# %% [markdown]
# The key numbers, computed from the stored run:

# %%
spec_h100 = roofline.Ceilings.from_spec("H100")
for roof in ("bf16", "fp32"):
    print(f"ridge point {roof:4s}: {h100.ridge(roof):5.0f} FLOP/byte with these ceilings, "
          f"{spec_h100.ridge(roof):5.0f} on the spec sheet")
for key in ("HBM", "bf16", "tf32", "fp32"):
    v, s = h100.value(key), spec_h100.value(key)
    unit = "GB/s" if key == "HBM" else "TFLOP/s"
    print(f"{key:4s} ceiling {v:8,.1f} {unit:7s} = {v / s:4.0%} of the spec's {s:,.1f}")
if h100.l2_gbps and h100.l1_gbps:
    print(f"L2 {h100.l2_gbps / h100.hbm_gbps:.1f}x and L1 {h100.l1_gbps / h100.hbm_gbps:.1f}x the HBM bandwidth")
claims.claim(
    "The measured bf16 ridge point ({m:.0f} FLOP/byte) is **lower** than the spec's ({s:.0f}), so slightly more "
    "kernels are compute-bound than the spec suggests.",
    holds=lambda m, s: m < s, m=h100.ridge("bf16"), s=spec_h100.ridge("bf16"),
)

# %% [markdown]
# ## What the measurements mean

# %%
frac = {key.lower(): h100.value(key) / spec_h100.value(key) for key in ("HBM", "bf16", "fp32")}
claims.show(claims.claim(
    "- **No ceiling is the spec sheet** (the fractions printed above). The HBM ceiling reaches {hbm:.0%} of the 3.35 "
    "TB/s spec — a raw pin rate that DRAM refresh, row switches and read/write turnarounds eat into, for PyTorch's "
    "copy as much as ours. The tensor cores fall further short, {bf16:.0%} of the 989 TFLOP/s spec: that figure "
    "assumes every SM at full boost clock on every cycle, while under a sustained tensor-core load the H100 lowers "
    "its clock to stay within its power limit, and even cuBLAS does not keep the tensor cores busy on every cycle. "
    "The FMA kernel, by contrast, reaches {fp32:.0%} of its spec: a chain of FMAs in registers is about the simplest "
    "work a GPU can be given, and the FP32 pipes draw far less power than the tensor cores.",
    holds=lambda hbm, bf16, fp32: bf16 < hbm < 1 and fp32 > bf16 and fp32 > 0.85, **frac,
))
if h100.l2_gbps and h100.l1_gbps:
    cached = [r for r in lesson0 if r.params.get("level") in ("L1", "L2")]
    claims.show(claims.claim(
        "- **The hierarchy is several roofs, an order of magnitude apart.** L2 delivers {l2:.1f} times and L1 {l1:.1f} "
        "times the HBM bandwidth. Lesson 0's sweep points of L1 and L2 working sets ({n} of them) sit *above* the HBM "
        "roof because their bytes came from the caches (and its smallest \"L2\" working sets above the L2 roof, "
        "because part of them still hits in L1): an intensity is only meaningful against the level that actually "
        "serves the bytes.",
        holds=lambda l2, l1, n, above: 1 < l2 < l1 and above == n > 0, l2=h100.l2_gbps / h100.hbm_gbps,
        l1=h100.l1_gbps / h100.hbm_gbps, n=len(cached), above=sum(r.gbps > h100.hbm_gbps for r in cached),
    ))  # fmt: skip
placed = [(r.params["working_set_bytes"], p) for r, p in zip(lesson0, roofline.placement(lesson0, h100))]
at_hbm = sorted((w, p.fraction) for w, p in placed if p.level == "HBM")
plateau = roofline.read_plateau(lesson0)  # lesson 0's read-only plateau, from the sweep loaded above
claims.show(claims.claim(
    "- **Above 100% of the roof, in section 5's table.** Each point is held to the roof of the level its working set "
    "is *assigned*, and some bytes came from a faster one. The {w0} working set is only {x:.2f} times the {l2} L2, "
    "so much of it is still read from L2: it runs at {f0:.0%} of the HBM roof. The larger ones do stream from HBM, "
    "and still sit at {lo:.0%} to {hi:.0%} of it, because the roof drawn is HBM's *ceiling*, a copy that reads and "
    "writes ({c:.2f} TB/s), while the sweep only reads, at lesson 0's read-only plateau ({p:.2f} TB/s).",
    holds=lambda f0, lo, hi, p, c, **_: f0 > 1.5 and 1 < lo <= hi < f0 and p > c, w0=memory.human_bytes(at_hbm[0][0]),
    x=at_hbm[0][0] / hardware.spec("H100").l2_bytes, l2=memory.human_bytes(hardware.spec("H100").l2_bytes),
    f0=at_hbm[0][1], lo=min(f for _, f in at_hbm[1:]), hi=max(f for _, f in at_hbm[1:]), c=h100.hbm_gbps / 1e3,
    p=plateau.gbps / 1e3,
))  # fmt: skip

# %% [markdown]
# - **So compare kernels with the measured roofs.** A GEMM at the measured bf16 ceiling is doing all the machine can, though it stands well below the spec; a memory-bound kernel at the measured HBM ceiling is done.
# - **For this course:** everything pointwise is memory-bound; a skinny GEMM and an LSTM step at small batch are memory-bound however good the GEMM; naive attention is memory-bound by its $N^2$ score traffic, tiled attention compute-bound. The lessons ahead are ways of moving a kernel to the right on this plot — tiling (lesson 2), fusing the LSTM's step (lesson 3), FlashAttention (lesson 4) and a persistent RNN kernel (lesson 6) — and then up to its roof.
#
# **Exercises:** `exercises/01_roofline.ipynb` — the roofline formula, the FLOPs and bytes of three kernels by hand, memory- or compute-bound, and the batch size at which an LSTM step stops being memory-bound. Grade your work with `make grade NB=exercises/01_roofline.ipynb`.
