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
# # Exercises 8 — State tracking: the data, the evaluation and the training step
#
# Three tasks that go with the capstone lesson, *State tracking: LSTM vs Transformer*. Write your code where it says `# YOUR CODE HERE` (delete the `raise NotImplementedError()`), then run the `# GRADER` cell below it: it tests your code on fresh random sizes and seeds, and on hand-made models whose right answers are known, and raises with a message if something is wrong.
#
# Grade the whole notebook from a terminal with
#
# ```
# make grade NB=exercises/08_state_tracking.ipynb
# ```
#
# Everything runs on CPU in a few seconds.

# %%
import torch

import gpulab  # first: decides GPU vs CPU interpreter before any kernel is defined
from gpulab import tasks
from gpulab.course import grading_tasks as grading

torch.set_num_threads(1)  # tiny models: one thread is fastest and steady on a busy machine


# %% [markdown]
# ## Task 1: the parity data generator
#
# Write `parity(batch, length, generator)`: `batch` random bit strings of `length` bits, each bit 0 or 1 with probability 1/2, and their **running** parity. Return `(x, y)`, both int64 tensors of shape `[batch, length]`, where
#
# $$ y_{b,t} = x_{b,0} \oplus x_{b,1} \oplus \dots \oplus x_{b,t} \qquad (\text{the number of ones in } x_{b, 0..t} \bmod 2). $$
#
# So `y[:, -1]` is the parity of the whole string, and every earlier position is the parity of a prefix: one string of length $T$ gives $T$ training labels. Draw every random number from `generator` (a seeded `torch.Generator`; torch's random functions take it as `generator=`), so that a seed fixes the data.
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# Which torch function draws random integers, and is its upper bound included?
# `torch.randint(low, high, size, generator=...)` draws from `low` to `high - 1`.
# </details>
#
# <details><summary>Hint 2</summary>
#
# Count first: the XOR of a prefix is its number of ones, mod 2.
# The counts of every prefix at once are a cumulative sum along the string (`torch.cumsum` along `dim=1`); no Python
# loop is needed.
# </details>

# %% tags=["solution"]
def parity(batch, length, generator=None):
    ### BEGIN SOLUTION
    x = torch.randint(0, 2, (batch, length), generator=generator)
    y = torch.cumsum(x, dim=1) % 2
    return x, y
    ### END SOLUTION


# %%
# GRADER: parity data generator
grading.grade_parity(parity)

# %%
x, y = parity(3, 12, torch.Generator().manual_seed(0))
print("x =", x.tolist())
print("y =", y.tolist())


# %% [markdown]
# ## Task 2: the evaluation loop
#
# Write `evaluate(model, task, length, samples=512, batch_size=256, seed=1234)`: the fraction of `samples` fresh strings of `length` tokens whose **final** state the model predicts correctly.
#
# - `model(x)` takes tokens `x` `[B, T]` and returns logits `[B, T, C]`, one prediction of the state per position; the model's answer for a whole string is the class of highest logit at its last position, to be compared with the string's final state;
# - `task` is a `gpulab.tasks.Task`: its method `sample(batch, length, generator=None, device=None)` returns `(x, y)` like your `parity`;
# - draw all strings from one generator seeded with `seed`, on the model's device, in batches of at most `batch_size` (the last one may be smaller);
# - evaluate in eval mode without gradients, and leave the model in the mode it was in;
# - return a Python float in [0, 1].
#
# Hints, opened one at a time only when you are stuck:
#
# <details><summary>Hint 1</summary>
#
# What must you remember before switching the model to eval mode, so you can switch it back?
# `model.training` (a bool) says its mode: keep it, call `model.eval()`, restore with `model.train(was_training)`;
# loop inside `with torch.no_grad():`, on `next(model.parameters()).device`.
# </details>
#
# <details><summary>Hint 2</summary>
#
# How many strings go in the last batch?
# Loop while fewer than `samples` strings were seen, each batch `b = min(batch_size, samples - seen)`, all drawn from
# the one generator made before the loop (a new generator per batch would repeat the same strings).
# </details>
#
# <details><summary>Hint 3</summary>
#
# Only the last position answers for the whole string.
# Count `(model(x)[:, -1].argmax(-1) == y[:, -1]).sum()` per batch and return `correct / seen` as a float.
# </details>

# %% tags=["solution"]
def evaluate(model, task, length, samples=512, batch_size=256, seed=1234):
    ### BEGIN SOLUTION
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    was_training = model.training
    model.eval()
    correct, seen = 0, 0
    with torch.no_grad():
        while seen < samples:
            b = min(batch_size, samples - seen)
            x, y = task.sample(b, length, generator=gen, device=device)
            correct += int((model(x)[:, -1].argmax(-1) == y[:, -1]).sum())
            seen += b
    model.train(was_training)
    return correct / seen
    ### END SOLUTION


# %%
# GRADER: evaluation loop
grading.grade_evaluate(evaluate)


# %% [markdown]
# ## Task 3: the training step
#
# Write `train_step(model, optimizer, x, y) -> float`: one step of training on a batch of tokens `x` $[B, T]$ with
# their states `y` $[B, T]$. The model returns logits $[B, T, C]$, one prediction of the state per position, and the
# loss is the cross-entropy of the state at **every** position (a string of $T$ tokens gives $T$ labelled prefixes,
# which is what lets the model learn a state update rather than a lookup of whole strings). Then the step itself:
# gradients, one optimizer step. Return the loss before the step as a Python float.
#
# The grader checks the method on two steps in a row against the same steps done its own way (so gradients left over
# from the first step show in the second), then trains a fresh LSTM with your step for 150 steps on strings of 10
# bits and tests it on **held-out strings of 40 bits**: at least 95% of their final states must be right.
#
# <details><summary>Hint 1</summary>
#
# Which shapes does `torch.nn.functional.cross_entropy` accept?
# Logits $[N, C]$ and classes $[N]$: flatten the batch and time dimensions together
# (`logits.reshape(-1, logits.shape[-1])`, `y.reshape(-1)`).
# </details>
#
# <details><summary>Hint 2</summary>
#
# What does `backward()` do to a `.grad` left over from the previous step?
# It adds to it: call `optimizer.zero_grad()` before it, then `optimizer.step()` after it, and return `loss.item()`
# (a tensor would keep the step's whole graph alive in a list of losses).
# </details>

# %% tags=["solution"]
def train_step(model, optimizer, x, y):
    ### BEGIN SOLUTION
    logits = model(x)  # [B, T, C]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()
    ### END SOLUTION


# %%
# GRADER: training step
grading.grade_train_step(train_step)


# %% [markdown]
# ## Put them together
#
# Train a small LSTM (the `vanilla` PyTorch backend of `gpulab.rnn.LSTM`) on strings of 16 bits with `gpulab.tasks.train`, then measure it with your `evaluate` on strings up to four times longer than any it has seen.

# %%
def my_parity(batch, length, generator=None, device=None):
    x, y = parity(batch, length, generator)
    return x.to(device or "cpu"), y.to(device or "cpu")


task = tasks.Task("my parity", "parity of a bit string, your generator", 2, 2, my_parity)
model = tasks.make_model("LSTM", task, seed=0, d_model=32, num_heads=1, num_layers=1, backend="vanilla")
log = tasks.train(model, task, steps=400, batch_size=32, length=16, lr=3e-3, seed=0)
print(f"trained on strings of 16 bits: {log.steps} steps, final loss below 0.01: {log.final_loss < 0.01}")
for n in (16, 32, 64):
    print(f"length {n:2d}: final-state accuracy 100%: {evaluate(model, task, n, samples=256) == 1.0}")

# %%
from gpulab.course import claims
from gpulab.tasks import spread

found = spread.stored_search("h100")  # the lesson's search: both models tuned alike, three seeds at each pick
if found:
    sp = spread.spread(found)  # (task, model) -> {length: (median, lowest seed, highest seed, seeds)}
    train = spread.search_records(found)[0].params["train_length"]
    lstm, trans = sp["parity", "LSTM"], sp["parity", "Transformer"]
    longer = [n for n in trans if n > train]
    claims.show(claims.claim(
        "In the lesson's stored H100 search every seed of the LSTM is exact on parity at every tested length, up to "
        "{x}x its training length; every seed of the Transformer, tuned by the same search, is near chance (50%) on "
        "every longer string: {worst:.0%} to {best:.0%} at {lengths} tokens.",
        holds=lambda best, **_: all(v[1] == 1.0 for v in lstm.values()) and best < 0.6,
        x=max(longer) // train, lengths=", ".join(map(str, longer)),
        worst=min(trans[n][1] for n in longer), best=max(trans[n][2] for n in longer),
    ))  # fmt: skip
else:
    print("(no stored H100 search of the capstone: `python -m gpulab bench 08 search` on an H100 makes it)")

# %% [markdown]
# ## Question
#
# The LSTM reads one bit per step and only has to keep one bit of state. The cell above shows what the lesson's Transformer does with longer strings. RoPE is defined at every length, so what is missing? Why is a longer string still out of the Transformer's reach?
#
# ### BEGIN SOLUTION
# RoPE makes scores depend on relative distance, but the computation a fixed-depth Transformer has learned is not a loop: to get parity it must count the ones in the whole prefix (averaging attention over up to t positions) and map that count to odd/even. At longer lengths the average is over more positions (its resolution shrinks as 1/t, so the count's parity cannot be read off a value it never saw), relative distances beyond the training length were never trained, and the model has no step that is repeated once per token. In theory a fixed-depth Transformer computes functions in TC^0, which cannot express the word problems of non-solvable groups such as S_5 at all (Merrill et al., 2024), and parity needs precision that grows with length; an RNN applies the same state update once per token, which is exactly the task's structure, so it generalizes to any length.
# ### END SOLUTION
