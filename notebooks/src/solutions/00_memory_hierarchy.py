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
# # Exercises 0 — The memory hierarchy
#
# Three short tasks that go with `notebooks/00_memory_hierarchy.ipynb`. Write your code where it says `# YOUR CODE HERE` (delete the `raise NotImplementedError()`), then run the `# GRADER` cell below it: it tests your code on fresh random inputs and raises with a message if something is wrong.
#
# Grade the whole notebook from a terminal with
#
# ```
# make grade NB=exercises/00_memory_hierarchy.ipynb
# ```
#
# Everything runs on CPU (Triton's interpreter) as well as on a GPU.

# %%
import torch

import gpulab  # first: decides GPU vs CPU interpreter before any kernel is defined
from gpulab import hardware
from gpulab.course import grading

import triton  # isort: skip
import triton.language as tl  # isort: skip


# %% [markdown]
# ## Task 1: a masked copy kernel
#
# Write `copy_kernel(src_ptr, dst_ptr, n, BLOCK)`: program `p` copies elements `[p*BLOCK, (p+1)*BLOCK)` of `src` to `dst`. The grid has `cdiv(n, BLOCK)` programs, so the last block is ragged: lanes whose offset is `>= n` must neither load nor store. The grader launches your kernel for n = 1, 17, 1000, 1024, 4097 and three block sizes, with `dst` a view into a larger poisoned buffer, and fails if anything is missing or anything past `n` was written.
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# Each program handles one block of `BLOCK` consecutive elements; `tl.program_id(0)` says which block, and
# `tl.arange(0, BLOCK)` gives the lanes' positions inside it.
# </details>
#
# <details><summary>Hint 2</summary>
#
# The offsets of program `p` are `p * BLOCK + tl.arange(0, BLOCK)`; a lane is real only if its offset is `< n`.
# </details>
#
# <details><summary>Hint 3</summary>
#
# Give the same mask to **both** `tl.load(src_ptr + offs, mask=...)` and `tl.store(dst_ptr + offs, values, mask=...)`:
# a masked load alone still lets the store write past `n`, which the poisoned buffer shows.
# </details>

# %% tags=["solution"]
@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    ### BEGIN SOLUTION
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)
    ### END SOLUTION


# %%
# GRADER: masked copy kernel
grading.grade_copy_kernel(copy_kernel)


# %% [markdown]
# ## Task 2: which level serves a working set?
#
# A kernel reads a working set of `working_set_bytes` over and over from every SM (like the sweep in the lesson). To first order it is served by one SM's L1 if it fits there (`gpu.l1_per_sm` bytes), else by the L2 if it fits there (`gpu.l2_bytes`), else by HBM. "Fits" includes "exactly fills". `gpu` is a `gpulab.hardware.GPUSpec`. Return `"L1"`, `"L2"` or `"HBM"`.
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# Check the levels from the smallest and fastest outwards: the first level that holds the whole working set serves it.
# </details>
#
# <details><summary>Hint 2</summary>
#
# "Fits" is `<=`, not `<`: a working set of exactly `gpu.l1_per_sm` bytes is served by L1. And compare with ONE SM's
# L1 (every SM reads the whole set), not with the L1 of the whole chip.
# </details>

# %% tags=["solution"]
def which_level(working_set_bytes: int, gpu: hardware.GPUSpec) -> str:
    ### BEGIN SOLUTION
    if working_set_bytes <= gpu.l1_per_sm:
        return "L1"
    if working_set_bytes <= gpu.l2_bytes:
        return "L2"
    return "HBM"
    ### END SOLUTION


# %%
# GRADER: which level serves a working set
grading.grade_which_level(which_level)

# %%
for name in ("H100", "A100", "T4"):
    print(f"8 MB working set on {name:4s}: {which_level(8 << 20, hardware.spec(name))}")


# %% [markdown]
# ## Task 3: the bandwidth of a copy
#
# A copy of `n_elements` of `dtype` took `ms` milliseconds. Return the achieved bandwidth in GB/s (1 GB = 1e9 bytes), counting every byte the copy must move. (`torch.empty(0, dtype=dtype).element_size()` gives the bytes per element.)
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# Bandwidth is bytes moved divided by time. Which bytes does a copy move: only the ones it reads?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Every element is read once and written once: $2 \cdot n \cdot s$ bytes ($s$ bytes per element). Convert the time to
# seconds (`ms * 1e-3`) and the bytes to GB (divide by `1e9`, not by $2^{30}$).
# </details>

# %% tags=["solution"]
def copy_gbps(n_elements: int, dtype: torch.dtype, ms: float) -> float:
    ### BEGIN SOLUTION
    itemsize = torch.empty(0, dtype=dtype).element_size()
    return 2 * n_elements * itemsize / (ms * 1e-3) / 1e9
    ### END SOLUTION


# %%
# GRADER: copy bandwidth
grading.grade_copy_bandwidth(copy_gbps)

# %%
# Apply it to the stored H100 run of PyTorch's own copy of 1 GiB of fp32 (device time): the run of the HBM ceiling,
# the one record of the copies that lesson 0 shows.
from gpulab import roofline
from gpulab.course import claims

peer = next(r for r in roofline.ceilings("H100").records if r.case == "HBM: torch copy_ (peer)")
gbps = copy_gbps(peer.shape[0], torch.float32, peer.ms)
print(f"torch copy_ of {peer.shape[0]:,} fp32 elements: {peer.ms:.3f} ms (device time) on the {peer.device}")
spec = hardware.spec("H100")
print(f"= {gbps:,.0f} GB/s, {gbps / spec.hbm_gbps:.0%} of the {spec.hbm_gbps:,.0f} GB/s spec")
claims.show(claims.claim(
    "Even PyTorch's own copy stays **{under:.0%} under** the spec-sheet bandwidth in the stored run.",
    holds=lambda under: under > 0, under=1 - gbps / spec.hbm_gbps,
))  # fmt: skip

# %% [markdown]
# ## Question
#
# Name one reason why no kernel reaches 100% of the spec-sheet bandwidth, not even PyTorch's copy above.
#
# ### BEGIN SOLUTION
# The spec is the raw pin rate of the HBM stacks. Real traffic pays for DRAM refresh, row activations and bank conflicts, for switching the bus between reads and writes (a copy does both), and for the memory controller's scheduling, so even the best streaming kernels stay some way below it.
# ### END SOLUTION
