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
# # Lesson 0 — The GPU memory hierarchy
#
# **What you will learn**
# - the levels of a GPU's memory (registers, shared memory / L1, L2, HBM), how big and how fast each is, and how SMs and warps use them;
# - why *moving data*, not arithmetic, decides the speed of most kernels — counted with one number, the ridge point;
# - how to write, check and time a first Triton kernel (a masked copy), and how to measure bandwidth against working-set size to *see* the caches.
#
# **How this notebook runs.** On a machine without a GPU (CI, most laptops) every kernel runs in Triton's CPU interpreter at small sizes: correct, but slow, so the timings it prints are interpreter timings. The measurements that matter were taken on an NVIDIA H100 with `python -m gpulab bench 00` and are stored under `benchmarks/00_memory_hierarchy/`; section 4 shows them. On a GPU the same cells run the kernels at full size.

# %%
# NBVAL_IGNORE_OUTPUT
import inspect

import matplotlib.pyplot as plt
import torch

import gpulab  # first: decides GPU vs CPU interpreter before any kernel is defined
from gpulab import bench, check, hardware, memory, roofline, runtime
from gpulab.course import claims

import triton  # isort: skip
import triton.language as tl  # isort: skip

print(f"kernels run in {runtime.MODE} mode on {runtime.device}; torch {torch.__version__}, triton {triton.__version__}")

# %% [markdown]
# ## 1. The hierarchy
#
# A GPU is a set of **streaming multiprocessors** (SMs; 132 on an H100). Each SM runs many **warps** of 32 threads at once and switches between them every cycle, so while one warp waits for memory another computes. A Triton **program** (a CUDA thread block) runs on one SM from start to end; the **grid** of programs is spread over all SMs.
#
# Data lives at four levels; the closer to the arithmetic units, the smaller and faster:
#
# | level | where | H100 capacity | latency (order of magnitude) | who manages it |
# |---|---|---|---|---|
# | registers | per thread | 64 K × 4 B = 256 KB per SM | 1 cycle | the compiler |
# | shared memory / L1 | per SM | 256 KB per SM (up to 228 KB as shared memory) | ~30 cycles | you (shared) / hardware (L1) |
# | L2 | one per chip, all SMs | 50 MB | ~250 cycles | hardware |
# | HBM | off-chip DRAM | 80 GB, 3.35 TB/s | ~600 cycles | you (`torch.empty`) |
#
# A kernel whose work is $F$ FLOPs (floating-point operations: additions, multiplications) and which must move $Q$ bytes between HBM and the chip cannot run faster than
#
# $$ t \;\ge\; \max\left(\frac{F}{P_\text{peak}},\; \frac{Q}{B_\text{HBM}}\right). $$
#
# It is **memory-bound** when $Q/B_\text{HBM}$ is the larger term, i.e. when its **arithmetic intensity** $I = F/Q$ is below the GPU's **ridge point** $P_\text{peak}/B_\text{HBM}$. On an H100 that is $989\,\text{TFLOP/s} \,/\, 3.35\,\text{TB/s} \approx 295$ FLOPs per byte for fp16 work on the **tensor cores** (the units that multiply small blocks of matrices; lesson 1). (**fp32** is the 4-byte float, **fp16** and **bf16** two 2-byte ones: bf16 keeps fp32's exponent range with fewer mantissa bits.) A vector add does 1 FLOP per 12 bytes. Most of what a sequence model does between its big matrix products (softmax, layer norm, activations, the LSTM's gate pointwise) has intensity far below the ridge point: its speed is set by bytes, and the lessons that follow are about moving fewer of them.

# %%
memory.plot_hierarchy("H100")
plt.show()

# %%
h100 = hardware.spec("H100")
regs, l1 = h100.registers_per_sm * 4 * h100.sm_count, h100.l1_per_sm * h100.sm_count
claims.show(claims.claim(
    "Summed over the chip, the register file ({r}) and the L1 ({l}) each hold {fr:.0%} of what the L2 holds ({l2}), "
    "but split into {sms} private pieces, one per SM.",
    holds=lambda fr, fl, **_: 0.5 < fl < 1 and abs(fr - fl) < 0.05, r=memory.human_bytes(regs),
    l=memory.human_bytes(l1), l2=memory.human_bytes(h100.l2_bytes), fr=regs / h100.l2_bytes, fl=l1 / h100.l2_bytes,
    sms=h100.sm_count,
))  # fmt: skip

# %% [markdown]
# Keeping data in the registers and shared memory of the SM that uses it (**tiling**: cutting the work into blocks small enough to stay there) is what FlashAttention (lesson 4) and FlashRNN (lesson 6) are about.
#
# Kernels in this course never hard-code a GPU: they read a `GPUSpec` from `gpulab.hardware`, so a tile choice can be checked on CPU for any GPU in this table. The last column is the ridge point.

# %%
print(hardware.spec_table())

# %%
memory.plot_ridge_points()
plt.show()

# %% [markdown]
# The GPU this notebook runs on, as the driver describes it (empty without a CUDA device):

# %%
# NBVAL_IGNORE_OUTPUT
hardware.live_properties() or "no CUDA device here: kernels run in the Triton interpreter"

# %% [markdown]
# ## 2. A first kernel: copy
#
# **Count first.** Copying $N$ elements of $s$ bytes reads $Ns$ and writes $Ns$ bytes and does no arithmetic: $I = 0$. The best possible time is $2Ns / B_\text{HBM}$; for 1 GiB of fp32 on an H100 that is $2.15\,\text{GB} / 3.35\,\text{TB/s} = 0.64$ ms.
#
# **The Triton model.** A kernel is written for *one program*. `tl.program_id(0)` says which one; `tl.arange(0, BLOCK)` is a vector of `BLOCK` lanes, which Triton spreads over the program's threads (each thread gets a few contiguous elements, so loads are wide and **coalesced**: the 32 threads of a warp read neighbouring addresses, which the hardware merges into a few wide memory transactions). Program $p$ handles elements $[pB, (p+1)B)$. When $N$ is not a multiple of $B$ the last block is ragged: its lanes past $N$ must neither load nor store, which is what the **mask** does.

# %%
print(inspect.getsource(memory.copy_kernel.fn))

# %% [markdown]
# `memory.copy` is the thin wrapper: it validates its input (a clear error instead of a wrong answer), allocates the output and launches `cdiv(N, BLOCK)` programs. We check it the way every kernel in the course is checked: fresh random inputs, odd sizes, the output *poisoned* with NaN first so that an element the kernel never writes cannot pass, compared with a float64 reference by relative error.

# %%
for n in (1, 17, 1000, 4097):
    src = check.random_tensor(n)
    out = check.poisoned(n)
    memory.copy(src, out)
    check.assert_close(out, memory.copy_reference(src.double()), name="copy")
    print(f"n = {n:5d}: copy matches the reference, every element written")


# %% [markdown]
# What does the mask prevent? Here is the same kernel without it, launched on a view `dst` of the first $n$ elements of a larger poisoned buffer. Everything past $n$ belongs to someone else — and the unmasked kernel overwrites it (in CUDA this is silent memory corruption or an illegal-address crash, depending on luck).

# %%
@triton.jit
def copy_kernel_unmasked(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs))  # no mask: the last block runs past n


n, block = 1000, 256
src_buf = check.random_tensor(n + block)  # src has room too, so the stray loads stay in our own memory
guard = check.poisoned(n + block)
copy_kernel_unmasked[(triton.cdiv(n, block),)](src_buf[:n], guard[:n], n, BLOCK=block)
overwritten = int((~torch.isnan(guard[n:])).sum())
print(f"unmasked kernel, n = {n}, {triton.cdiv(n, block)} blocks of {block}:")
print(f"{overwritten} elements written past the end of dst")

# %% [markdown]
# ## 3. Bandwidth against working set
#
# How fast data arrives depends on where it is. To see each level we need a kernel that reads a working set of $W$ bytes **many times within one launch**: if $W$ fits in a cache, every read after the first is served by it.
#
# `memory.sweep_kernel` cuts the working set into $C = \lceil n / B \rceil$ chunks of $B$ elements. $P$ programs run $T$ steps each; at step $i$ program $p$ reads chunk
#
# $$ c(p, i) = (p + iP) \bmod C $$
#
# and adds it to a running sum. At every step the grid reads $P$ consecutive chunks, so the grid as a whole marches through the working set over and over: the same chunk comes back after the whole working set has been read, a **reuse distance** of $W$ bytes. With $P$ coprime to $C$ every program visits every chunk too, so each SM's own reuse distance is also $W$. Prediction:
#
# - $W \le$ one SM's L1 (256 KB on an H100): reads hit L1 — tens of TB/s over the chip;
# - $W \le$ L2 (50 MB): reads hit L2 — several times HBM;
# - larger: every read comes from HBM — at best 3.35 TB/s.
#
# Bandwidth is bytes read over time, $B = PTBs / t$. Each program stores its sum, so no load can be optimised away — and the sums give us something to check.

# %%
print(inspect.getsource(memory.sweep_kernel.fn))

# %% [markdown]
# The schedule for $P = 3$ programs over $C = 5$ chunks, 5 steps each (rows are programs, columns steps). Every row visits every chunk, and every column (one step of the grid) reads consecutive chunks:

# %%
schedule = memory.chunk_schedule(5, 3, 5)
print(schedule)
assert all(set(row) == set(range(5)) for row in schedule.tolist()), "a program misses a chunk"
print("every program visits every chunk")

# %% [markdown]
# Check the kernel against the float64 reference of the same access pattern, including ragged working sets whose last chunk is partial (sizes 1, 17, one chunk, one chunk + 1, ...):

# %%
x = memory.sweep_data(3 * 4096 + 5)  # positive random data: well-conditioned sums
for n in (1, 17, 4096, 4097, 3 * 4096 + 5):
    plan = memory.sweep_plan(n, bytes_to_read=64 * 1024, block=4096, programs=3)
    sums = memory.working_set_sweep(x, n, plan["programs"], plan["iters"], block=4096)
    ref = memory.sweep_reference(x, n, plan["programs"], plan["iters"], block=4096)
    check.assert_close(sums, ref, rtol=1e-4, name="sweep sums")
    steps = f"{plan['programs']} programs x {plan['iters']:2d} steps"
    print(f"n = {n:6d}: {steps} read {plan['bytes']:7d} bytes; sums match")

# %% [markdown]
# Which level should serve each working set on an H100, to first order (`hardware.cache_level`)?

# %%
sizes = [1 << k for k in range(14, 33)]
for level in ("L1", "L2", "HBM"):
    ws = [memory._human_bytes(w) for w in sizes if hardware.cache_level(w, "H100") == level]
    print(f"{level:4s}: {ws[0]:>7s} .. {ws[-1]}")

# %% [markdown]
# Now run the sweep here. On a GPU this is the real measurement (16 KB to 4 GB); on CPU it runs in the interpreter from 16 KB to 1 MB, where it only shows that the code path works (every size checked against float64; the interpreter's timings say nothing about a memory system).

# %%
# NBVAL_IGNORE_OUTPUT
live = memory.measure_sweep()
if runtime.on_gpu():
    print(bench.table(live, columns=("working_set_bytes", "level", "ms", "gbps")))
    memory.plot_sweep(live, title=f"Live sweep on {live[0].device}")
    plt.show()
else:
    print(bench.interpreter_summary(live, against="float64"))

# %% [markdown]
# ## 4. Measured on an H100
#
# The stored run: `python -m gpulab bench 00` on an NVIDIA H100 80GB HBM3 (result file and figure in `benchmarks/00_memory_hierarchy/`). Besides the sweep it times the copy kernel from section 2 and PyTorch's own device copy (`Tensor.copy_`) on the same 1 GiB. Every time in the table is **device time** (`ms`: the GPU's own clock, read with CUDA events around the kernels), not **wall time** (`wall_ms`: the host's clock, launch costs included). Lesson 1's run times the same two copies again for its HBM ceiling, and this lesson shows that one record of them (below), so the table lists the sweep. Its last two columns come from the compiler: `registers` per thread, and `spills`, values that did not fit in registers and went to slow off-chip memory (none here).

# %%
stored = bench.load("00", gpu="h100")
print(f"{stored[0].device}, torch {stored[0].torch}, triton {stored[0].triton}, measured {stored[0].date}\n")
sweep = [r for r in stored if r.case == "working-set sweep"]
print(bench.table(sweep, columns=("case", "working_set_bytes", "level", "ms", "gbps", "registers", "spills")))

# %%
memory.plot_sweep(sweep, title=f"Bandwidth vs working set, {stored[0].device}")
plt.show()

# %%
spec = hardware.spec("H100")
by_level = {lvl: [r.gbps for r in sweep if r.params["level"] == lvl] for lvl in ("L1", "L2")}
hbm = [r.gbps for r in sweep if r.params["working_set_bytes"] >= 4 * spec.l2_bytes]  # well past L2: pure HBM
plateau, ceiling = roofline.read_plateau(sweep), roofline.hbm_ceiling("H100")
copies = roofline.ceilings("H100").records  # the HBM ceiling's run (lesson 1): the one record of the copies
copy_k = next(r for r in copies if r.case == "HBM: copy kernel (gpulab)")
copy_t = next(r for r in copies if r.case == "HBM: torch copy_ (peer)")
print(f"L1 range : {min(by_level['L1']) / 1e3:5.1f} to {max(by_level['L1']) / 1e3:5.1f} TB/s")
print(f"L2 range : {min(by_level['L2']) / 1e3:5.1f} to {max(by_level['L2']) / 1e3:5.1f} TB/s")
print(f"HBM (W >= 4x L2): {min(hbm) / 1e3:5.2f} to {max(hbm) / 1e3:5.2f} TB/s, read only")
print(plateau.describe("read-only plateau"))
print(ceiling.describe("HBM ceiling (every later lesson uses this one)"))
print(f"copy, 1 GiB fp32: gpulab kernel {copy_k.gbps / 1e3:.2f} TB/s, torch copy_ {copy_t.gbps / 1e3:.2f} TB/s "
      f"(ratio {copy_k.gbps / copy_t.gbps:.2f}); predicted floor {2 * 2**30 / (spec.hbm_gbps * 1e9) * 1e3:.2f} ms, "
      f"measured {copy_k.ms:.2f} ms")

# %%
claims.show(claims.claim(
    "Working sets that fit L2 are read **{lo:.1f} to {hi:.1f} times faster** than HBM's read-only plateau.",
    holds=lambda lo, hi: lo > 1.5, lo=min(by_level["L2"]) / plateau.gbps, hi=max(by_level["L2"]) / plateau.gbps,
))
claims.claim(
    "Two HBM figures, one ceiling: the sweep only *reads*, and its plateau ({p:.2f} TB/s, {pf:.0%} of the spec) is "
    "above the **HBM ceiling** the roofline of lesson 1 and every later lesson use, a copy that reads and writes "
    "({c:.2f} TB/s, {cf:.0%}; `roofline.hbm_ceiling()`).",
    holds=lambda p, c, **_: p > c, p=plateau.gbps / 1e3, pf=plateau.fraction, c=ceiling.gbps / 1e3,
    cf=ceiling.fraction,
)

# %% [markdown]
# ## 5. Counting the bytes, not only modelling them
#
# The bandwidths above divide the bytes a copy *must* move (read $n$ elements, write $n$) by its time. Did the kernel move exactly those? Two counters answer it. In the interpreter, `gpulab.traffic.count` wraps every `tl.load` and `tl.store` and adds up the bytes each program touches (masked-off lanes excluded). On a GPU, Nsight Compute (NVIDIA's kernel profiler, `ncu`) counts the bytes that really crossed the DRAM interface (`bash scripts/ncu_traffic.sh`, stored under `benchmarks/io_traffic/`).

# %%
from gpulab import traffic

n = 1000  # not a multiple of the block: the last program's masked lanes must not count
src = torch.randn(n, device=runtime.device)
dst = torch.empty_like(src)
if runtime.INTERPRET:
    with traffic.count(src=src, dst=dst) as counted:
        memory.copy(src, dst, block=256)
    src_read, dst_written = counted.by_tensor["src"].loaded, counted.by_tensor["dst"].stored
    print(f"copy of {n} fp32 in {len(counted.per_program)} programs: loaded {counted.loaded:,} B, stored "
          f"{counted.stored:,} B (the fewest: {4 * n:,} B each way)")
    print(f"src read {src_read:,} B, dst written {dst_written:,} B")
else:
    print("on a GPU the interpreter's counter does not run: Nsight Compute counts the bytes (next cell)")

# %%
try:
    io_records = traffic.stored("00")
except FileNotFoundError as exc:
    io_records = []
    print(exc)
for r in io_records:
    rp = r.params
    print(f"{r.case} on {r.device}: DRAM read {rp['dram_read'] / 1e6:.1f} MB + written {rp['dram_write'] / 1e6:.1f} MB "
          f"against the fewest {r.bytes / 1e6:.1f} MB: {(rp['dram_read'] + rp['dram_write']) / r.bytes:.2f}x")

# %% [markdown]
# The counted bytes are the modelled ones: the copy reads every element once and writes it once, nothing more. (On the GPU the write count can fall a little short: the last lines written may still sit in L2 when the kernel ends and reach DRAM later.) Lessons 4 and 6 use the same two counters on kernels where the difference between counted and fewest bytes *is* the lesson.

# %% [markdown]
# ## What the measurements mean

# %%
l1_ = sorted((r.params["working_set_bytes"], r.gbps / 1e3) for r in sweep if r.params["level"] == "L1")
l2_ = sorted((r.params["working_set_bytes"], r.gbps / 1e3) for r in sweep if r.params["level"] == "L2")
l2_low = min(l2_, key=lambda wb: wb[1])
claims.show(claims.claim(
    "- **Three regimes, as predicted.** Working sets up to about one SM's L1 are read at {a:.0f} to {b:.0f} TB/s; "
    "up to the L2 size at {c:.1f} to {d:.1f} TB/s, from L2; beyond it, every byte comes from HBM and the read-only "
    "sweep settles on its plateau ({p:.2f} TB/s, printed above beside the HBM ceiling that lesson 1's roofline uses).",
    holds=lambda a, b, c, d, p: a > d and c > p, a=min(v for _, v in l1_), b=max(v for _, v in l1_),
    c=min(v for _, v in l2_), d=max(v for _, v in l2_), p=plateau.gbps / 1e3,
))
claims.show(claims.claim(
    "- **The edges are soft.** L1 bandwidth falls from {a:.0f} TB/s at {wa} to {b:.0f} TB/s at {wb} (part of that "
    "space is reserved as shared memory, and several programs share an SM), and the L2 plateau slopes down from "
    "{c:.1f} TB/s at {wc} to {d:.1f} TB/s at {wd}, well before 50 MB: the H100's L2 is built from two partitions, and "
    "the larger the working set the more of it sits in the far one, and the sooner lines are evicted before reuse.",
    holds=lambda a, b, c, d, **_: a > b and c > d and l2_low[0] < 50e6, a=l1_[0][1], wa=memory.human_bytes(l1_[0][0]),
    b=l1_[-1][1], wb=memory.human_bytes(l1_[-1][0]), c=l2_[0][1], wc=memory.human_bytes(l2_[0][0]), d=l2_low[1],
    wd=memory.human_bytes(l2_low[0]),
))
claims.show(claims.claim(
    "- **A ten-line kernel runs at PyTorch's copy rate.** The masked copy moves 1 GiB at {r:.2f}x the rate of "
    "PyTorch's own copy in the same run and takes {m:.2f} ms against the spec sheet's floor of {f:.2f} ms (the HBM "
    "ceiling's run, lesson 1). For memory-bound code the goal is not clever arithmetic but *not moving bytes twice*: "
    "every later lesson's speed-up (fused pointwise kernels, FlashAttention, FlashRNN) comes from keeping data in the "
    "upper rows of the first figure.",
    holds=lambda r, m, f: r >= 0.95 and m < 1.25 * f, r=copy_k.gbps / copy_t.gbps, m=copy_k.ms,
    f=2 * 2**30 / (spec.hbm_gbps * 1e9) * 1e3,
))  # fmt: skip

# %% [markdown]
# **Exercises:** `exercises/00_memory_hierarchy.ipynb` — write the masked copy kernel yourself, predict the cache level for a working set, and compute a copy's bandwidth. Grade your work with `make grade NB=exercises/00_memory_hierarchy.ipynb`.
