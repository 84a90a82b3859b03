"""State-tracking tasks, generated on the fly and seeded: parity, running sums mod m, permutation composition.

What you will learn:
- a *state-tracking* task feeds a sequence of group elements ``x_1 .. x_T`` and asks, at every position t, for their
  product ``y_t = x_t * y_{t-1}`` (the state after reading the prefix): parity is the group Z_2, a running sum mod 5
  is Z_5, composing permutations of 5 objects is S_5;
- an RNN tracks the state by construction (one update per token, any length); a Transformer of fixed depth cannot
  in general: the word problem of S_5 is NC^1-complete, beyond the TC^0 that fixed-depth attention computes
  (Merrill, Petty & Sabharwal, *The Illusion of State in State-Space Models*, 2024), and even parity (Z_2, easy in
  principle) is learned by Transformers only up to the lengths they were trained on;
- every generator takes a ``torch.Generator``, so a seed fixes the data: training, evaluation and graders see the
  same strings on every machine (the strings are drawn on CPU and moved to ``device``).

Every generator returns ``(x, y)``: tokens ``x`` [B, T] and labels ``y`` [B, T], both int64, where ``y[:, t]`` is the
state after reading ``x[:, : t + 1]``. The answer for the whole string is ``y[:, -1]``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import torch

from gpulab import runtime

__all__ = [
    "Task",
    "TASKS",
    "get_task",
    "parity",
    "modular_sum",
    "permutation_composition",
    "permutations",
    "composition_table",
    "parity_labels",
]


def _check_sizes(batch, length, generator=None) -> tuple[int, int]:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}; "
            "use torch.Generator().manual_seed(seed)."
        )
    return runtime.positive_int("batch", batch), runtime.positive_int("length", length)


def parity_labels(x: torch.Tensor) -> torch.Tensor:
    """Running parity of bit strings ``x`` [B, T]: ``y[:, t] = (x[:, 0] + ... + x[:, t]) mod 2`` (int64)."""
    runtime.require_tensor("x", x, device_check=False)
    if x.dim() != 2 or x.is_floating_point() or x.is_complex():
        raise ValueError(
            f"x must be a 2-D integer (or bool) tensor of bits [batch, length], got {x.dtype} of shape "
            f"{list(x.shape)}; for one string use x[None]."
        )
    return torch.cumsum(x.long(), dim=1) % 2


def parity(batch: int, length: int, generator: torch.Generator | None = None, device=None):
    """``batch`` random bit strings of ``length`` bits (each bit 0 or 1 with probability 1/2) and their running
    parity: ``x`` [B, T] int64 in {0, 1}, ``y[:, t] = x[:, 0] xor ... xor x[:, t]``."""
    batch, length = _check_sizes(batch, length, generator)
    x = torch.randint(0, 2, (batch, length), generator=generator)
    return x.to(device or "cpu"), parity_labels(x).to(device or "cpu")


def modular_sum(batch: int, length: int, generator: torch.Generator | None = None, device=None, modulus: int = 5):
    """Tokens uniform in {0 .. m-1}, labels the running sum mod m (the cyclic group Z_m; m = 2 is parity)."""
    batch, length = _check_sizes(batch, length, generator)
    modulus = runtime.positive_int("modulus", modulus)
    x = torch.randint(0, modulus, (batch, length), generator=generator)
    return x.to(device or "cpu"), (torch.cumsum(x, dim=1) % modulus).to(device or "cpu")


def permutations(n: int) -> list[tuple[int, ...]]:
    """The n! permutations of ``range(n)`` in lexicographic order (token k is ``permutations(n)[k]``; 0 = identity)."""
    return list(itertools.permutations(range(runtime.positive_int("n", n))))


def composition_table(n: int) -> torch.Tensor:
    """``table[a, b]`` = index of the permutation ``b ∘ a`` (first a, then b), [n!, n!] int64."""
    n = runtime.positive_int("n", n)
    perms = permutations(n)
    index = {p: i for i, p in enumerate(perms)}
    return torch.tensor([[index[tuple(b[a[i]] for i in range(n))] for b in perms] for a in perms], dtype=torch.long)


_TABLES: dict[int, torch.Tensor] = {}


def permutation_composition(batch: int, length: int, generator: torch.Generator | None = None, device=None, n: int = 5):
    """Tokens: uniform random permutations of n objects (indices into :func:`permutations`); labels: the index of
    the composition of the prefix, ``y_t = x_t ∘ y_{t-1}`` (the group S_n; n = 5 gives 120 tokens and states)."""
    batch, length = _check_sizes(batch, length, generator)
    n = runtime.positive_int("n", n)  # before the cache: 5.0 is refused whether or not n = 5 was seen
    if n not in _TABLES:
        _TABLES[n] = composition_table(n)
    table = _TABLES[n]
    x = torch.randint(0, table.shape[0], (batch, length), generator=generator)
    y = torch.empty_like(x)
    state = torch.zeros(batch, dtype=torch.long)  # the identity
    for t in range(length):  # one group product per token: exactly what an RNN does
        state = table[state, x[:, t]]
        y[:, t] = state
    return x.to(device or "cpu"), y.to(device or "cpu")


@dataclasses.dataclass(frozen=True)
class Task:
    """A state-tracking task: ``sample(batch, length, generator=None, device=None) -> (x, y)``; ``vocab`` token
    values and ``classes`` state values."""

    name: str
    description: str
    vocab: int
    classes: int
    sample: Callable

    def __call__(self, batch, length, generator=None, device=None):
        return self.sample(batch, length, generator=generator, device=device)


TASKS: dict[str, Task] = {
    "parity": Task("parity", "parity of a bit string (Z_2)", 2, 2, parity),
    "modsum5": Task("modsum5", "running sum mod 5 (Z_5)", 5, 5, modular_sum),
    "s5": Task("s5", "composition of permutations of 5 objects (S_5)", 120, 120, permutation_composition),
}


def get_task(task) -> Task:
    """A :class:`Task` or one of the names in :data:`TASKS`."""
    if isinstance(task, Task):
        return task
    if not isinstance(task, str):
        raise TypeError(
            f"task must be a gpulab.tasks.Task or one of the names {sorted(TASKS)}, got {type(task).__name__} {task!r}."
        )
    if task in TASKS:
        return TASKS[task]
    raise ValueError(f"task={task!r} is not a known task; use a gpulab.tasks.Task or one of {sorted(TASKS)}.")
