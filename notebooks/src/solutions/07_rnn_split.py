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
# # Exercises 7 — One head over many SMs
#
# One task and a question that go with `notebooks/07_rnn_split.ipynb`. Write your code where it says `# YOUR CODE HERE` (delete the `raise NotImplementedError()`), then run the `# GRADER` cell below it: it tests your code on fresh random inputs against float64 references and raises with a message if something is wrong.
#
# Grade the whole notebook from a terminal with
#
# ```
# make grade NB=exercises/07_rnn_split.ipynb
# ```
#
# Everything runs on CPU.

# %%
import torch

import gpulab  # noqa: F401  (first: decides GPU vs CPU interpreter before any kernel is defined)
from gpulab.course import grading_rnn as grading


# %% [markdown]
# ## Task 1: the split kernel's exchange and barrier
#
# A head too large for one SM is split over $P$ programs by output units (lesson 7, sections 2 and 3): program $p$ owns $U$
# units and the rows $R_p$ of $R$ for them, and computes its units of $h_t = \tanh(h_{t-1} R^\top)$ (an Elman
# step, to keep the cell out of the way). Each unit of $h_t$ needs **all** of $h_{t-1}$, written by every program
# one step earlier: it travels through an exchange buffer in global memory, `ex` $[T + 1, DH]$ with `ex[0]` $= h_0$
# and `ex[t]` $= h_t$ (the kernel's output is its exchange buffer), and a grid barrier per step orders the writes
# before the reads.
#
# Write program $p$ as a Python generator `program(p, P, T, R_p, ex)`: each `yield` is its arrival at the grid
# barrier (it resumes once every program has arrived). Triton's interpreter runs the programs of a grid one after
# another, so a barrier cannot work there; the grader's `phase_driver` runs your programs the way the barrier
# orders them, phase by phase, in a random order within each phase, and checks the values against float64 and the
# method: where the barrier sits, how many there are, what is read from where.
#
# <details><summary>Hint 1</summary>
#
# Per step a program needs all of $h_{t-1}$, which every program wrote, and writes only its own $U$ units of $h_t$.
# Which row of `ex` holds each, and which columns of that row are program $p$'s?
# </details>
#
# <details><summary>Hint 2</summary>
#
# Ask what a reader of `ex[t]` needs: which writes must be finished before it reads, and is any slot of `ex` ever
# written twice? That decides how many barriers a step needs, and on which side of the read and the store each goes.
# </details>

# %% tags=["solution"]
def program(p, P, T, R_p, ex):
    ### BEGIN SOLUTION
    units = slice(p * R_p.shape[0], (p + 1) * R_p.shape[0])
    for t in range(1, T + 1):
        h_prev = ex[t - 1]  # all of h_{t-1}: every program wrote its units before the last barrier
        ex[t, units] = torch.tanh(h_prev @ R_p.T)  # my units of h_t
        yield  # the grid barrier: nobody reads ex[t] until every program has stored its part
    ### END SOLUTION


# %%
# GRADER: split kernel: exchange and barrier
grading.grade_split_exchange(program)

# %% [markdown]
# ## Question
#
# The split kernel's launch is *cooperative*: the driver starts it only if every program fits on the GPU at once. Why does a kernel with a grid barrier need that guarantee, and why does the CPU interpreter, which runs one program after another, run the split kernel as one launch per step instead?
#
# ### BEGIN SOLUTION
# A program at the barrier waits until every program of the launch has arrived. If the grid had more programs than fit at once, the resident ones would spin at the barrier waiting for programs that can only start when a resident one finishes, and none ever does: a deadlock. The cooperative launch refuses such a grid up front. The interpreter runs each program to its end before the next starts, so a program waiting for a later one would wait forever too; ending the launch after every step makes the launch boundary the barrier: every program has stored its part of $h_t$ before any program of the next launch reads it.
# ### END SOLUTION
