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
# # Exercises 9 — Data parallelism by hand
#
# Two tasks that go with the lesson *Scaling out: the capstone on several GPUs*. Write your code where it says
# `# YOUR CODE HERE` (delete the `raise NotImplementedError()`), then run the `# GRADER` cell below it: it tests your
# code on fresh cases and raises with a message if something is wrong.
#
# Grade the whole notebook from a terminal with
#
# ```
# make grade NB=exercises/09_distributed.ipynb
# ```
#
# Everything runs on CPU in a few seconds: the grader forks 2 processes that talk through gloo.

# %%
import torch
import torch.distributed as dist

import gpulab  # first: decides GPU vs CPU interpreter before any kernel is defined
from gpulab.course import grading_distributed as grading

torch.set_num_threads(1)


# %% [markdown]
# ## Task 1: average the gradients yourself
#
# DDP does one thing to your training step: after the backward pass it replaces every parameter's gradient by the
# mean over the ranks. Write `average_gradients(model, world_size)` that does the same with `torch.distributed`
# (imported as `dist`): its `all_reduce` with the `SUM` operation sums a tensor over all ranks *in place* (every rank
# ends with the sum); do it for every parameter with a gradient, then turn the sum into the mean.
#
# The grader runs your function on 2 ranks, each after a backward on its half of a batch, and compares the result
# with one process that took the whole batch.
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# Which parameters have nothing to reduce?
# A frozen or unused parameter has `.grad` None: loop over `model.parameters()` and skip those.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Where does `dist.all_reduce` leave its result?
# In its argument (it returns nothing useful): reduce `p.grad` itself with `op=dist.ReduceOp.SUM`, then divide it in
# place by `world_size` (each rank's gradient is already a mean over its own slice of the batch).
# </details>

# %% tags=["solution"]
def average_gradients(model, world_size):
    ### BEGIN SOLUTION
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)  # in place: every rank now holds the sum
            p.grad /= world_size  # each rank's loss was a mean over its slice, so the mean of the g_r is the answer
    ### END SOLUTION


# %%
# GRADER: averaging gradients by hand
grading.grade_average_gradients(average_gradients)


# %% [markdown]
# Why the mean and not the sum: each rank's loss is the *mean* over its $B/N$ strings, so its gradient $g_r$ is a
# mean too, and the gradient of the mean over all $B$ strings is $\frac{1}{N}\sum_r g_r$. Summing would multiply the
# learning rate by $N$. DDP does exactly this, but per bucket of gradients, on a second CUDA stream, while the backward
# pass of earlier layers is still running; your loop waits for the whole backward first.
#
# ## Task 2: the bytes of a ring all-reduce
#
# Write `ring_bytes_per_gpu(nbytes, world_size)`: how many bytes each GPU *sends* in a ring all-reduce of a buffer of
# `nbytes` over `world_size` GPUs (a reduce-scatter, then an all-gather, as the lesson's first section describes
# them).
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# Count one phase first: how many hops, and how big is each chunk? Then remember there are two phases.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Each phase passes one chunk per hop, around a ring of `world_size` GPUs.
# A chunk is `nbytes / world_size`; a phase takes `world_size - 1` hops; the all-reduce is both phases.
# </details>

# %% tags=["solution"]
def ring_bytes_per_gpu(nbytes, world_size):
    ### BEGIN SOLUTION
    return 2 * (world_size - 1) / world_size * nbytes
    ### END SOLUTION


# %%
# GRADER: bytes of a ring all-reduce
grading.grade_ring_bytes(ring_bytes_per_gpu)

# %% [markdown]
# Each of the two phases takes $N-1$ hops of $G/N$ bytes, so a GPU sends $2\frac{N-1}{N}G$: $G$ at $N = 2$, and
# never more than $2G$ however many GPUs share the work. So by this count the all-reduce's traffic per GPU hardly
# grows from 2 GPUs of one node to 8: the link's bandwidth, not the number of GPUs, decides its time.
