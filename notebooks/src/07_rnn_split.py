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
# # Lesson 7 — One head over many SMs
#
# **What you will learn**
# - why one LSTM head of 768 units, cuDNN's dense `nn.LSTM(768, 768)`, cannot run as lesson 6's kernel, counted;
# - the **split kernel**: the head's units spread over about a hundred programs on as many SMs, which exchange $h_t$ through the L2 cache and meet at a **grid barrier** every step, forward and backward;
# - the step's budget, taken apart with the kernel's own clock;
# - the shipped split forward, version 6, written in Gluon with its slice of $R$ in registers, and how it compares with cuDNN on the same problem;
# - what a training loop adds to the kernels, and where a step of one head of 768 still waits.
#
# It builds on lesson 6 (the persistent kernel, SASS, stall sampling, CUDA graphs). Without a GPU the kernels run in Triton's interpreter on tiny problems; the H100 records are read from `benchmarks/07_rnn_split/`.

# %%
# NBVAL_IGNORE_OUTPUT
import dataclasses
import math

import matplotlib.pyplot as plt
import torch

import gpulab  # first: decides GPU vs CPU interpreter before any kernel is defined
from gpulab import bench, check, hardware, rnn, runtime
from gpulab.course import claims, palette, shown
from gpulab.rnn.fused import gluon_tiles, plan, split_tiling, stepwise, tiling
from gpulab.rnn.fused import split as split_fwd
from gpulab.rnn.fused import split_backward as split_bwd
from gpulab.rnn.fused import split_gluon as v6
from gpulab.rnn.fused.measure import benchmark as rnn_bench
from gpulab.rnn.fused.measure import split_report, versions_report

print(f"kernels run in {runtime.MODE} mode on {runtime.device}; torch {torch.__version__}")

# %% [markdown]
# ## 1. Count: one head of 768 and one SM
#
# Lesson 6's kernel keeps a head's $R$, four gates of $DH \times DH$, in one SM's shared memory. For one head of 768 in bf16:

# %%
DH, e = 768, 2
smem = hardware.spec("H100").smem_per_block
padded = runtime.dot_block(DH)  # the tile side Triton uses: the next power of two
print(
    f"R of one head: 4 x {DH}^2 x {e} B = {4 * DH * DH * e:,} B = {4 * DH * DH * e / 1e6:.1f} MB "
    f"= {4 * DH * DH * e // 1024} KiB"
)
print(f"as lesson 6's tile R_all, padded to {padded}: 4 x {padded}^2 x {e} B = {4 * padded * padded * e // 1024} KiB")
print(
    f"one H100 SM: {smem // 1024} KiB of shared memory per block, "
    f"{hardware.spec('H100').registers_per_sm * 4 // 1024} KiB of registers"
)
try:
    tiling.fused_tiling(16, 1, DH, "lstm", torch.bfloat16, gpu="H100")
except ValueError as exc:
    print("\none SM:", exc)

# %% [markdown]
# The same $R$ appears above as 4.7 MB (decimal megabytes), as 4608 KiB (binary kilobytes, $1024$ bytes each) and, in the one-SM kernel's message, as `R_all (8192 KB)`: Triton's tiles have power-of-two sides, so that kernel would hold the head padded from 768 to 1024 units, zeros included. Either way it is twenty or more times what one SM holds. A split kernel holds slices of 768 rows without that padding.
#
# ## 2. The split kernel
#
# **Split the head over $P$ programs, one per SM, each holding a slice of $R$** (as FlashRNN's CUDA kernel does):
#
# - **By output units.** Program $p$ owns `block_u` units $U_p$, all four gates: $\text{pre}_{t,p} = h_{t-1} R_p^\top + Wx_{t,p} + b_p$. It needs the *whole* $h_{t-1}$.
# - **Exchange through L2.** Each program writes its units of $h_t$ to global memory; the others read them back from the L2 cache, the one memory all SMs share. A trip to L2 and back takes several hundred nanoseconds.
# - **Meet at a grid barrier.** No program may read $h_t$ before every program has written its part. A **grid barrier** is a point that every program of the launch must reach before any goes on; here an atomic counter in global memory that each program adds to and then polls.
#
# This Triton kernel is **version 5** (v5) of lesson 6's ladder; its backward is **b3**.
#
# **Predict.** The chooser's estimate (`plan.explain`) counts, for each tiling, the registers and shared memory per program and an estimated step: a few L2 round trips plus the product, not FLOPs. **Occupancy** is how many programs an SM holds at once; here each program needs its own SM, and all of them must be resident together:

# %%
print(plan.explain(16, 1, DH, "lstm", torch.bfloat16, gpu="H100"))

# %% [markdown]
# The chosen tiling's estimate, to compare with the measurements of section 4:

# %%
chosen = split_tiling.split_tiling(16, 1, DH, "lstm", torch.bfloat16, gpu="H100")
print(
    f"chosen: {chosen.programs} programs of {chosen.block_u} units, {chosen.num_warps} warps, {chosen.exchange} "
    f"exchange; estimated step {chosen.score:.0f} ns, {chosen.score * 1024 / 1e6:.2f} ms for T = 1024"
)

# %% [markdown]
# **Build and check** in the interpreter: head dim 300 over 5 programs of 64 units, forward and backward against float64. Triton's interpreter runs programs one after another, so there the kernel runs one launch per step, and the launch boundary is the barrier:

# %%
B_, T_, DH_ = 2, 3, 300
gen = torch.Generator().manual_seed(0)
Wx_, R_, b_, s_ = (
    torch.randn(*shape, generator=gen) * sc
    for shape, sc in (
        ((B_, T_, 4, 1, DH_), 1.0),
        ((4, 1, DH_, DH_), 0.5 / DH_**0.5),
        ((4, 1, DH_), 1.0),
        ((2, B_, 1, 1, DH_), 1.0),
    )
)
few = lambda direction: dataclasses.replace(
    split_tiling.split_tiling(B_, 1, DH_, "lstm", torch.bfloat16, gpu="H100", direction=direction),
    block_u=64,
    split=math.ceil(DH_ / 64),
    programs=math.ceil(DH_ / 64),
)
inputs_ = [t.to(runtime.device) for t in (Wx_, R_, b_, s_)]
out_, last_, gates_ = split_fwd.split_rnn_forward(*inputs_, function="lstm", save_gates=True, tiling=few("forward"))
d_out_ = torch.randn(out_.shape, generator=gen).to(runtime.device)
grads_ = split_bwd.split_rnn_gradients(d_out_, gates_, out_, inputs_[3], inputs_[1], "lstm", tiling=few("backward"))
ref_in = [t.detach().double().requires_grad_() for t in inputs_]
ref_out, ref_last = rnn.flashrnn(*ref_in, function="lstm", backend="vanilla")
ref_grads = torch.autograd.grad((ref_out * d_out_.double()).sum(), ref_in)
check.assert_close(out_, ref_out, dtype=torch.float32, name="states_all")
check.assert_close(last_, ref_last, dtype=torch.float32, name="states_last")
for name, got, want in zip(("dWx", "dR", "db", "d_states"), grads_, ref_grads):
    check.assert_close(got, want, dtype=torch.float32, name=name)
print(
    f"{math.ceil(DH_ / 64)} programs per head: the forward's states and all four gradients match float64 "
    "within fp32's tolerance"
)

# %% [markdown]
# ## 3. The grid barrier and the exchange
#
# **The barrier.** A program arrives with an atomic add of *release* order (every store it made before, its part of $h_t$, is visible to any program that sees the add), then spins on loads of the counter with *acquire* order (nothing it reads after the spin is read before it). One barrier per step is enough because each step's $h$ has its own slot in the output, so nothing is overwritten while someone still reads it (exercise 7, task 1). The counter is never reset: each launch reads its starting value once, so replays of a CUDA graph keep working.
#
# **Everyone resident, or no launch.** A program waiting for one that has not started would wait forever, so the launch is **cooperative**: the driver starts the grid only if all of it fits on the GPU at once.
#
# **The backward** is the forward transposed, $dh_{t-1}[k] = \sum_{g,j} dG_t[g,j]\,R[g,j,k]$: program $p$ runs its units' cell backward and gets $dG_t[:, U_p]$. Two ways to finish the product:
#
# - *exchange $dG_t$*: every program reads all of $dG_t$, four values per unit, four times the bytes of $h$;
# - *exchange partial sums of $dh$* (what ships): program $p$ holds $R[:, U_p, :]$, pushes its share $dG_t[:, U_p]\,R[:, U_p, :]$ (a $B \times DH$ tile) to a two-slot ring in L2 and, after the barrier, reads and adds the $P$ shares of its own units: as many bytes as the forward reads.
#
# The backward kernel alone, both exchanges, on the H100 (device time):

# %%
try:
    bwd_rows = split_report.load_split("h100", record="partials")
except FileNotFoundError as exc:
    bwd_rows = []
    print(exc)
if bwd_rows:
    print(split_report.backward_table(shown.partials_now(bwd_rows)))

# %% [markdown]
# ## 4. Measure the split forward, and take its step apart
#
# The split kernel against cuDNN's dense `nn.LSTM` (fp16; it also computes the input product), head dims 256 to 1024, from the split probe's run:

# %%
try:
    split_rows = split_report.load_split("h100")
except FileNotFoundError as exc:
    split_rows = []
    print(exc)
if split_rows:
    split_rows, _ = shown.split_now(split_rows)
    print(shown.banner("07", "split") + ".\n")
    print(split_report.split_table(split_rows))
    print(split_report.step_budget(split_rows, 768))
    split_report.plot_split(split_rows)  # a step at head dim 768 per tiling, with and without its barrier
    plt.show()
    ratio = {}
    for dh_ in sorted({r["DH"] for r in split_rows if r.get("kind") == "time" and "DH" in r}):
        a, b = (split_report.time_row(split_rows, c_, dh_) for c_ in ("fused split (chosen)", "cuDNN nn.LSTM float16"))
        if a and b and a.get("wall_ms") and b.get("wall_ms"):
            ratio[dh_] = a["wall_ms"] / b["wall_ms"]
    small, large = min(ratio), [d for d in ratio if d > min(ratio)]
    claims.show(claims.claim(
        "Forward, eager wall clock: at head dim {small} the split kernel takes {r_small:.2f}x cuDNN fp16's time; "
        "from {first} to {last} units, {lo:.2f}x to {hi:.2f}x.",
        holds=lambda r_small, lo, **_: r_small < 1.1 and lo > 1.1, small=small, r_small=ratio[small],
        first=min(large), last=max(large), lo=min(ratio[d] for d in large), hi=max(ratio[d] for d in large),
    ))  # fmt: skip
try:
    run06 = bench.load("06", gpu="h100")
except FileNotFoundError:
    run06 = []
fwd_768 = {(r.params.get("backend"), r.dtype): r for r in run06 if r.status == "ok" and r.params.get("pass") == "fwd"
           and r.params.get("mode") == "eager" and (r.params.get("B"), r.params.get("NH"), r.params.get("DH")) ==
           (16, 1, 768)}  # fmt: skip
ours768, cud768 = fwd_768.get(("fused", "bfloat16")), fwd_768.get(("cuDNN nn.LSTM (dense)", "float16"))
if ours768 and cud768:
    print(
        f"one head of 768, B = 16, forward, lesson 6's run (the record): split kernel version 5 {ours768.ms:.2f} ms "
        f"device, {ours768.wall_ms:.2f} ms wall; cuDNN fp16 {cud768.ms:.2f} / {cud768.wall_ms:.2f} ms"
    )
    claims.show(claims.claim(
        "The estimate said {est:.0f} ns per step; version 5 takes {meas:.0f} ns (device time / T), {r:.2f}x the "
        "estimate: the estimate counts round trips and bytes, and the stamps below show what it leaves out.",
        holds=lambda est, meas, r: meas > est and abs(r - meas / est) < 1e-9, est=chosen.score,
        meas=ours768.ms * 1e6 / 1024, r=ours768.ms * 1e6 / 1024 / chosen.score,
    ))  # fmt: skip

# %% [markdown]
# A profiler times whole kernels; this one runs 1024 steps in one launch. So the kernel **stamps its own clock** (`gpulab.rnn.fused.clocks`, under a compile-time flag, so the kernel that normally runs is unchanged): one thread per program reads the SM's cycle counter once each value of the step has arrived (its inputs, $h_{t-1}$, the product, the cell, the stores, the barrier passed). A stamp waits for its value, so the stamped step is longer than the unstamped one: the parts are a budget, not a profile. Besides the counter barrier the run timed three other exchanges: **tagged** words (each 8-byte word holds two values of $h$ and the step's tag, as the low-latency "LL" protocol of NVIDIA's library for communication between GPUs does, so a reader's load is also its barrier), a **flag** per program, and **hinted** words (tagged 32-bit words, with a counter added *without* a release fence, the instruction that waits until the program's earlier stores are visible, as a hint of when to look). One head of 768, B = 16 (`python -m gpulab bench 07 steps`):

# %%
try:
    step_rows = split_report.load_split("h100", record="steps")
except FileNotFoundError as exc:
    step_rows = []
    print(exc)
if step_rows:
    print(split_report.parts_table(step_rows))
    print()
    print(split_report.exchange_table(step_rows))
    fwd_parts = {r["exchange"]: r for r in step_rows if r.get("kind") == "parts" and r.get("direction") == "forward"}
    bar_ = fwd_parts["barrier"]
    wait_ = bar_["parts"]["exchange"] + bar_["parts"]["barrier"]
    times_ = {x: split_report.exchange_row(step_rows, x) for x in ("barrier", "tagged", "flags", "hinted")}
    claims.show(claims.claim(
        "In the barrier kernel's stamped forward step ({step:.0f} ns), loading $h_{{t-1}}$ and the barrier take "
        "{wait:.0f} ns ({share:.0%}), the product {prod:.0f} ns and the cell {cell:.0f} ns. Of the other exchanges, "
        "tagged words ({tag:.2f} ms) and flags ({fl:.2f} ms) take longer than the counter ({bar:.2f} ms), hinted words "
        "less ({hin:.2f} ms, device time). Version 5, the split forward wherever version 6 (section 5) does not apply, "
        "takes hinted words for this head ({entry}).",
        holds=lambda share, tag, fl, bar, hin, entry, **_: share > 0.5 and tag > bar and fl > bar and hin < bar
        and entry.startswith("hinted"),
        entry=", ".join(map(str, split_tiling.MEASURED_EXCHANGE.get(("forward", "lstm", 768), ("none",)))),
        step=bar_["step_ns"], wait=wait_, share=wait_ / bar_["step_ns"], prod=bar_["parts"]["product"],
        cell=bar_["parts"]["pointwise"], tag=times_["tagged"]["ms"], fl=times_["flags"]["ms"],
        bar=times_["barrier"]["ms"], hin=times_["hinted"]["ms"],
    ))  # fmt: skip

# %% [markdown]
# **What the product waits for.** Triton feeds both operands of the tensor cores from shared memory with `ldmatrix` (the instruction that loads a tile from shared memory into the tensor cores' register layout) at every step, and each warp multiplies all of $h$ $[16, 768]$ by its columns of the program's slice of $R$, so every warp reads all of $h$ again. The bytes per step of each timed tiling, from its compiled loop, at the SM's 128 bytes of shared memory per clock:

# %%
try:
    hinted_rows = split_report.load_split("h100", record="hinted")
    smem_ = split_report.smem_rows(split_report.load_sass(), hinted_rows)
    print(split_report.smem_table(smem_))
except (FileNotFoundError, ValueError) as exc:
    smem_ = []
    print(exc)
if smem_:
    h4_ = {(r["exchange"], r["warps"]): r for r in smem_}["hinted", 4]
    claims.show(claims.claim(
        "In the hinted kernel the `ldmatrix` loads alone move {kb:.0f} KB per step, {ns:.0f} ns at 128 bytes per "
        "clock, of a stamped product of {p:.0f} ns: the product waits for shared memory, not for the tensor cores.",
        holds=lambda kb, ns, p: 0.5 < ns / p <= 1, kb=h4_["ldsm_bytes"] / 1024, ns=h4_["ldsm_ns"], p=h4_["product_ns"],
    ))  # fmt: skip

# %% [markdown]
# ## 5. Version 6: the split forward in Gluon, $R$ in registers
#
# **Gluon** is Triton's lower-level dialect in which the kernel states every tile's layout (where each value lives among the threads and registers) instead of leaving it to the compiler. Version 6 (`gpulab.rnn.fused.split_gluon`) uses that to change where $R$ and $h$ live:
#
# - program $p$'s slice $R_p$ ($4U$ rows: the four gates of its $U$ units, $D$ columns) is loaded **once into registers**, already in the tensor cores' operand layout, and stays there for the whole sequence;
# - the $W$ warps split the product's **depth** $D$, not its rows: warp $s$ holds columns $s K_c \ldots (s+1) K_c - 1$ of $R_p$ ($K_c = D / W$) and loads only that chunk of $h_{t-1}$ from L2, in 16-byte rows (a full 32-byte L2 sector, the unit in which the L2 cache moves data, per pair of rows), turned into the operand layout through a few KB of shared memory;
# - the $W$ partial products meet in shared memory, where each thread adds the partials of its own elements before the cell.
#
# Transposed, so that the program's units are the product's rows and the batch its columns:
#
# $$\mathrm{pre}_p^\top = \sum_{s=0}^{W-1} R_p[:, \text{chunk } s]\; h_{t-1}[:, \text{chunk } s]^\top \qquad [4U, B]$$
#
# **Count** the registers. At one head of 768 with $U = 8$ units and $W = 4$ warps a warp's chunk of $R_p$ is $32 \times 192$ bf16 values; a Gluon tile's sides are powers of two, so a chunk of 192 is held as two tiles:

# %%
v6_cfg = v6.v6_config(DH)
print(f"{v6_cfg}: {v6_cfg.programs(16, 1, DH)} programs at B = 16")
print(f"registers per thread: {v6.register_estimate(DH, v6_cfg)} (at most 255)")
print(f"a warp's chunk of {DH // v6_cfg.warps} as tiles of {gluon_tiles.k_pieces(DH // v6_cfg.warps)}")

# %% [markdown]
# **Check.** Gluon has no CPU interpreter, so the kernel itself cannot run here. `v6.schedule_reference` does its arithmetic program by program and chunk by chunk (each warp's partial product, their sum, the cell) in float64 and must equal the LSTM; and the compiler, told about an H100, shows what it made of the step (no GPU needed). The backward's version 6, **b4** (`gpulab.rnn.fused.split_gluon_backward`), transposes the share's product the same way, $\text{share}_p^\top = R_p^\top \, dG_t[:, U_p]^\top$, with $R_p^\top$ in registers:

# %%
v6_x = rnn_bench.problem_inputs(3, 5, 2, 64, torch.float32)
v6_out, _, _ = v6.schedule_reference(*v6_x, cfg=v6.v6_config(64, block_u=8, warps=4))
v6_ref = rnn.flashrnn(*(t.double() for t in v6_x), function="lstm", backend="vanilla")
v6_err = check.assert_close(v6_out, v6_ref[0], rtol=1e-12, name="states_all")
print(f"version 6's schedule (2 heads of 64, 8 programs each, 4 chunks per program) equals the LSTM: {v6_err <= 1e-12}")
try:
    v6_sass = versions_report.load_v6_sass()
    v5_sass = split_report.load_sass()
    print(versions_report.compiled_split_table(v5_sass, [r for r in v6_sass if r["kernel"] == "split forward"]))
except FileNotFoundError as exc:
    v6_sass = []
    print(exc)
if v6_sass:
    v5_row = next(r for r in v5_sass if r["exchange"] == "hinted")
    v6_row = next(r for r in v6_sass if r["block_u"] == 8 and r["warps"] == 4)
    claims.show(claims.claim(
        "Compiled for the H100, version 6's step issues the same {hmma} tensor-core instructions per warp as version "
        "5's, reads through `ldmatrix` only its own chunk of h, and moves {kb:.0f} KB of shared memory per program "
        "instead of {kb5:.0f} KB, with {regs} registers per thread and {spills} spill instructions (stores of values "
        "that do not fit the registers to local memory) in the step.",
        holds=lambda hmma, hmma5, kb, kb5, regs, spills: hmma == hmma5 and kb < kb5 / 2 and regs <= 255 and spills == 0,
        hmma=v6_row["hmma"], hmma5=v5_row["hmma"], spills=v6_row["spills"], regs=v6_row["registers"],
        kb=sum(v6_row["shared_bytes"].values()) * v6_row["warps"] / 1024,
        kb5=sum(v5_row["shared_bytes"].values()) * v5_row["warps"] / 1024,
    ))  # fmt: skip

# %% [markdown]
# **Measure.** The clock stamps of version 6 beside version 5's hinted kernel, and with $h$ loaded straight into the operand layout (two bf16 values per load, so every 32-byte L2 sector arrives half used) instead of in 16-byte rows:

# %%
try:
    v6_parts = versions_report.load_v6_parts("h100")
except FileNotFoundError as exc:
    v6_parts = []
    print(exc)
if v6_parts:
    print(versions_report.v6_parts_table(v6_parts))
    pp_ = {(r.params.get("version"), r.params.get("h_loads"), r.params.get("block_u"), r.params.get("early_arrive"))
           : r for r in v6_parts}  # fmt: skip
    co_, op_, v5p_ = pp_["v6", "coalesced", 8, True], pp_["v6", "operand", 8, True], pp_["v5", None, None, None]
    arrive = lambda r: r.params["parts"]["inputs"] + r.params["parts"]["exchange"]  # noqa: E731
    part = lambda r, k: r.params["parts"][k]  # noqa: E731
    claims.show(claims.claim(
        "Read in 16-byte rows, h arrives in {c:.0f} ns per step instead of {o:.0f}. With R in registers the product "
        "takes {p6:.0f} ns per step against version 5's {p5:.0f}; what is left is the exchange: the release of h's "
        "stores, the wait for the others and h's trip back are {share:.0%} of version 6's step.",
        holds=lambda c, o, p6, p5, share: c < o / 2 and p6 < p5 / 2 and share > 0.6, c=arrive(co_), o=arrive(op_),
        p6=part(co_, "product"), p5=part(v5p_, "product"),
        share=(part(co_, "stores") + part(co_, "barrier") + arrive(co_)) / part(co_, "step_ns"),
    ))  # fmt: skip

# %% [markdown]
# **Eight rows per program.** Every program reads all of $h_{t-1}$ for its batch rows at every step, so what one SM takes in, not the L2's total bandwidth, sets $h$'s arrival. Two tiles of 8 rows, each program 16 units in 8 warps, keep 96 programs at $B = 16$ and halve those bytes, the product and the cell per program. That is the shipped tiling (`plan.V6_TILES`); b4 runs in 8-row tiles too. The run that measures it, each kernel checked first, beside cuDNN's fp16 `nn.LSTM` in the same run:

# %%
try:
    r8_ = {r.case: r for r in versions_report.load_v6_rows8("h100") if r.status == "ok"}
except FileNotFoundError as exc:
    r8_ = {}
    print(exc)
if r8_:
    print("\n".join(f"{c_:62s} {r.ms:7.3f} ms  wall {r.wall_ms:7.3f}" for c_, r in r8_.items()))
    f16_, f8_ = (r8_[f"v6 gluon {t} B16 1x768 saving gates"] for t in ("bu8 w4 rows16", "bu16 w8 rows8"))
    ship_ = r8_["flashrnn fused v6 plan's tiles fwd+bwd as called B16 1x768"]
    cf_, cfb_ = r8_["cuDNN fp16 forward B16 dense 768"], r8_["cuDNN fp16 fwd+bwd B16 dense 768"]
    claims.show(claims.claim(
        "In 8-row tiles the forward takes {f8:.3f} ms of device time ({f8w:.3f} wall) against {f16:.3f} in 16-row "
        "tiles; $h_{{t-1}}$ arrives in {h8:.0f} ns per step instead of {h16:.0f}. cuDNN's fp16 forward takes {cf:.3f} "
        "({cfw:.3f} wall): the shipped forward takes {rf:.2f}x its wall time. Forward and backward as a training loop "
        "calls them through `flashrnn`, with the plan's tiles, take {w:.3f} ms of wall time against cuDNN's "
        "{cw:.3f} ({r:.2f}x cuDNN's time).",
        holds=lambda f8, f16, h8, h16, w, cw, **_: f8 < f16 and h8 < h16 and w < cw, f8=f8_.ms, f8w=f8_.wall_ms,
        f16=f16_.ms, h8=f8_.params["parts"]["inputs"], h16=f16_.params["parts"]["inputs"], cf=cf_.ms,
        cfw=cf_.wall_ms, rf=f8_.wall_ms / cf_.wall_ms, w=ship_.wall_ms, cw=cfb_.wall_ms, r=ship_.wall_ms / cfb_.wall_ms,
    ))  # fmt: skip
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for i, (who, fwd_, fb_) in enumerate((("split", f8_, ship_), ("cudnn", cf_, cfb_))):
        label = "gpulab split (version 6 + b4)" if who == "split" else "cuDNN nn.LSTM (fp16, dense)"
        ax.bar([i * 0.4, 1 + i * 0.4], [fwd_.wall_ms, fb_.wall_ms], width=0.38, color=palette.color(who), label=label)
    ax.set_xticks([0.2, 1.2], ["forward", "forward+backward (as a loop calls it)"])
    ax.set(ylabel="ms (eager wall clock)", title="LSTM, one head of 768, B = 16, T = 1024")
    ax.legend()
    plt.show()

# %% [markdown]
# ## 6. The recurrence as a training loop calls it
#
# A kernel's device time is what a CUDA graph reaches; a training loop also pays Python, autograd (PyTorch's recording of the forward and replay of its gradients) and one launch per kernel. `python -m gpulab bench 07 called` times the recurrence as a loop calls it (`p.grad = None`, forward, `out.sum().backward()`), replayed from a CUDA graph, through `torch.cuda.make_graphed_callables` (PyTorch's capture of a forward and its backward as two graphs, for a shape that repeats) and more, for lesson 6's problem (B 16, T 1024, 12 heads of 64) and a tiny one (B 1, T 4, 2 heads of 64). `host ms`: the host's own time per step:

# %%
try:
    called_rows = split_report.load_split("h100", record="called")
except FileNotFoundError as exc:
    called_rows = []
    print(exc)
if called_rows:
    print(split_report.called_table(called_rows))
    mode_ = {(r["problem"], r["mode"]): r for r in called_rows if r.get("kind") == "called" and "ms" in r}
    loop_, graph_, tiny_ = mode_["main", "loop"], mode_["main", "graph"], mode_["tiny", "loop"]
    claims.show(claims.claim(
        "Lesson 6's problem: the loop's step takes {loop:.2f} ms of wall time, {r:.3f}x its CUDA graph's {graph:.2f} "
        "ms, with the host's own time per step at {host:.2f} ms: the host keeps ahead of the GPU, barely. The tiny "
        "problem's kernels take {kern:.3f} ms of device time and its step {tiny:.3f} ms of wall time: there the "
        "step is Python, autograd and launches.",
        holds=lambda r, host, loop, kern, tiny, **_: r < 1.1 and host < loop and kern < 0.1 * tiny,
        loop=loop_["wall_ms"], graph=graph_["wall_ms"], r=loop_["wall_ms"] / graph_["wall_ms"], host=loop_["host_ms"],
        kern=mode_["tiny", "graph"]["ms"], tiny=tiny_["wall_ms"],
    ))  # fmt: skip

# %% [markdown]
# ## 7. Where the step of one head of 768 waits
#
# After version 6 most of a step is the exchange (section 5's stamps): the release (the stores, a fence, the add to the counter), the wait, then $h_t$'s trip from L2. Five switches of version 6 and b4 went after that time, each set both ways in one run (one head of 768, device time, forward unless named):
#
# - **tagged**: readiness in $h$'s own words instead of the counter (each value beside its step's tag in a 32-bit word);
# - **poll**: every thread polls the counter with an acquire load, instead of one thread;
# - **prefetch**: b4 loads the next step's saved inputs during the current step's wait;
# - **late**: the forward issues its next inputs after its arrival at the barrier (8-row tiles);
# - **group**: a barrier per head and batch tile instead of one for the grid (B = 32, two batch tiles).

# %%
loads_ = {
    "tagged": lambda: versions_report.load_v6_switch("h100", "tagged"),
    "poll": lambda: versions_report.load_v6_switch("h100", "poll"),
    "prefetch": lambda: versions_report.load_v6_switch("h100", "prefetch"),
    "late": lambda: versions_report.load_v6_switch("h100", "late"),
    "group": lambda: versions_report.load_v6_switch("h100", "barrier"),
}
pairs_ = {  # switch -> (case without it, case with it)
    "tagged": ("v6 gluon counter rows8 B16 1x768 saving gates", "v6 gluon tagged rows8 B16 1x768 saving gates"),
    "poll": ("v6 gluon poll atomic B16 1x768 saving gates", "v6 gluon poll load B16 1x768 saving gates"),
    "prefetch": ("b4 gluon prefetch off B16 1x768", "b4 gluon prefetch on B16 1x768"),
    "late": ("v6 gluon late off B16 1x768 saving gates", "v6 gluon late on B16 1x768 saving gates"),
    "group": ("v6 gluon barrier grid B32 1x768 saving gates", "v6 gluon barrier group B32 1x768 saving gates"),
}
switch_ = {}
for name, load in loads_.items():
    try:
        cases_ = {r.case: r for r in load() if r.status == "ok"}
        switch_[name] = tuple(cases_[k].ms for k in pairs_[name])
    except FileNotFoundError as exc:
        print(exc)
print(f"{'switch':9s} {'without ms':>10s} {'with ms':>8s}  ratio")
for name, (off, on) in switch_.items():
    print(f"{name:9s} {off:10.3f} {on:8.3f}  {on / off:.3f}")
if len(switch_) == len(pairs_):
    kept = [n for n, (off, on) in switch_.items() if on < off]
    claims.show(claims.claim(
        "Of the five, {kept} shortened the step and ship (late inputs only in tiles of at most 8 rows); tagged words "
        "and every thread polling lengthened it "
        "({t:.2f}x and {p:.2f}x the time): every program reads all of $h$, so tagged words double the bytes each SM "
        "takes in, and an early poll asks the L2 for them again, while the counter is one word.",
        holds=lambda kept, t, p: set(kept.split(", ")) == {"prefetch", "late", "group"} and t > 1 and p > 1,
        kept=", ".join(kept), t=switch_["tagged"][1] / switch_["tagged"][0],
        p=switch_["poll"][1] / switch_["poll"][0],
    ))  # fmt: skip

# %% [markdown]
# ## 8. A batch too large to stay on chip
#
# Everything above keeps $R$ on chip and every program resident. At $B = 256$ one head of 1024 would need 16 batch tiles of 16 rows, 64 programs each: 1,024 programs, far past the 132 SMs; the split kernels could only run it as launches of fewer rows, one after another, each $T$ steps long. But at such a batch the step's product is a real matrix product (a **GEMM**, general matrix multiply, of sizes $M \times K$ by $K \times N$),
#
# $$G_t = W x_t + b + h_{t-1} R^\top, \qquad [B, 4\,DH] = [B, DH] \times [DH, 4\,DH],$$
#
# $2 \cdot B \cdot DH \cdot 4DH$ FLOP per step (2.1 GFLOP at $B = 256$, $DH = 1024$; $W x_t$ is one GEMM over all steps beforehand), and the tensor cores (the SM's matrix units) can be fed from L2, which holds $R$ (8 MB in 16 bits; an H200's L2 is 50 MB) between steps. So `gpulab.rnn.fused.stepwise` gives up residency: **one launch per step** of a tiled GEMM whose **epilogue** (the code each program runs on its output tile before storing it) is the cell. Program $(m, u)$ owns 64 batch rows and a tile of units with all four gates, so one product of $N = 4 \times$ units feeds its cells; it writes $h_t$, and the next launch reads it: launches on one CUDA **stream** (the GPU's queue of work) run in order, so no barrier is needed. The backward is a GEMM of the same kind, transposed, $dh_{t-1} = dG_t R$: $[B, 4\,DH] \times [4\,DH, DH]$, reducing over $K = 4\,DH$, with the cell's backward as its epilogue. In the interpreter, the forward against float64 (the tests check every gradient too):

# %%
g_ = torch.Generator().manual_seed(0)
B_, T_, DH_ = 5, 6, 32
wx_, r_ = torch.randn(B_, T_, 4, 1, DH_, generator=g_), torch.randn(4, 1, DH_, DH_, generator=g_) * 0.5 / DH_**0.5
b_, s0_ = torch.randn(4, 1, DH_, generator=g_), torch.randn(2, B_, 1, 1, DH_, generator=g_)
out_, _, _ = stepwise.step_rnn_forward(*(t.to(runtime.device) for t in (wx_, r_, b_, s0_)), save_gates=False)
ref_, _ = rnn.flashrnn(wx_.double(), r_.double(), b_.double(), s0_.double(), function="lstm", backend="vanilla")
print(f"{T_} steps, one launch each: states match float64: {check.relative_error(out_, ref_) < 1e-5}")
for B_, DH_ in ((16, 1024), (64, 1024), (256, 1024), (64, 1536)):
    t_ = stepwise.step_tiles(B_, DH_)
    print(f"B {B_:3d}, one head of {DH_}: plan '{plan.plan_kind(B_, 1, DH_, 'lstm', torch.float16, True)}'"
          + (f", {math.prod(t_.grid(B_, 1, DH_))} programs of {t_.block_m} rows x {t_.block_u} units"
             if plan.steps_apply(B_, 1, DH_, "lstm", torch.float16, True) else ""))  # fmt: skip

# %% [markdown]
# The plan takes the stepwise kernels only where no split takes the whole batch (`plan.steps_apply`; at one head of 1536 even 64 rows are past what the split kernels hold), and only up to a step of 3 GFLOP (`FusedConfig.cublas_from_gflop`, set from the lab's measurements): past it (one head of 1536 at $B = 256$: 4.8) a step's product is large enough for cuBLAS (NVIDIA's GEMM library), and each step runs as a cuBLAS product and a **pointwise kernel** (one that updates each element on its own, here the cell) (`plan.steps_on_cublas`). The drop-in grid (`python -m gpulab bench 06 lstm-grid`: `gpulab.rnn.LSTM` against cuDNN's fp16 `nn.LSTM` over a grid of sizes, forward and backward, $T = 256$, one head) where the stepwise kernels run, `ms` on the device clock and `wall` on the eager wall clock per call:

# %%
try:
    grid_ = bench.load("06", path=bench.current("06", "lstm-grid", "h200"))
    print(shown.banner("06", "lstm-grid", "h200") + ".\n")
except FileNotFoundError as exc:
    grid_ = []
    print(exc)
big_ = {}
for r in grid_:
    p_ = r.params
    if p_.get("kind") == "grid" and r.status == "ok" and r.provider in ("gpulab fp16", "cuDNN fp16"):
        if plan.steps_apply(p_["B"], 1, p_["H"], "lstm", torch.float16, True) and not plan.steps_on_cublas(
                p_["B"], 1, p_["H"]):  # fmt: skip
            big_.setdefault((p_["H"], p_["layers"], p_["B"]), {})[r.provider] = r
if big_:
    print(f"{'hidden':>6s} {'layers':>6s} {'B':>4s} {'gpulab ms':>9s} {'wall':>7s} {'cuDNN ms':>9s} {'wall':>7s}")
    for (H_, L_, B_), v_ in sorted(big_.items()):
        g, c = v_["gpulab fp16"], v_["cuDNN fp16"]
        print(f"{H_:6d} {L_:6d} {B_:4d} {g.ms:9.2f} {g.wall_ms:7.2f} {c.ms:9.2f} {c.wall_ms:7.2f}")
    ratios_ = [v_["gpulab fp16"].wall_ms / v_["cuDNN fp16"].wall_ms for v_ in big_.values()]
    dev_ = [v_["gpulab fp16"].ms / v_["cuDNN fp16"].ms for v_ in big_.values()]
    g1_, c1_ = big_[1024, 1, 256]["gpulab fp16"], big_[1024, 1, 256]["cuDNN fp16"]
    claims.show(claims.claim(
        "On the wall clock gpulab's time is between {lo:.2f}x and {hi:.2f}x cuDNN's at these {n} points; on the "
        "device clock between {dlo:.2f}x and {dhi:.2f}x. At hidden 1024 (one layer, $B = 256$) a step, forward and "
        "backward launches and their share of the input products, takes {g:.0f} microseconds of device time "
        "against cuDNN's {c:.0f}: near cuDNN's step, not past it. Keeping $R$ resident while $h$ streams through "
        "(a persistent GEMM: one launch for every step, its programs meeting at a grid barrier) is what would go "
        "further.",
        holds=lambda lo, hi, dlo, dhi, n, g, c: n == 6 and 0.5 < lo <= hi < 1.5 and dlo > 0.8 and 0.8 < g / c < 1.3,
        lo=min(ratios_), hi=max(ratios_), dlo=min(dev_), dhi=max(dev_), n=len(big_),
        g=g1_.ms * 1000 / g1_.params["T"], c=c1_.ms * 1000 / c1_.params["T"],
    ))  # fmt: skip

# %% [markdown]
# ## 9. What it means
#
# A head that does not fit one SM becomes about a hundred programs that meet every step. Lesson 6's kernel was a chain of a product, a cell and a store; here each step adds a release, a wait and a trip of $h$ through L2, each a round trip of hundreds of nanoseconds, and no amount of FLOPs shortens them. The versions moved the time from the product (version 6: $R$ in registers, $h$ read once per warp's chunk) to the exchange, which is now most of the step; the measurements above say where the shipped kernel stands against cuDNN on both clocks.
#
# The next step would keep $h$ on chip. **Thread-block clusters** (Hopper) group up to 16 programs (8 in a portable launch) that may read each other's shared memory, **distributed shared memory** (DSMEM), and wait at a cluster barrier in hardware; a head spread over one cluster would exchange $h$ without L2. Triton 3.6 has no cluster barrier for them.
#
# **Exercise** (`exercises/07_rnn_split.ipynb`): the split kernel's exchange and barrier, written as programs that meet at a grid barrier.
