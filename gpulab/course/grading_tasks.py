"""Graders for exercise 6 (state tracking): the parity data generator and the evaluation loop.

Each runs the learner's function on fresh random sizes and seeds, compares with :mod:`gpulab.tasks` and hand-made
models whose right answers are known, and raises AssertionError with a message that says what to fix. On success it
prints one deterministic line (nbval compares it)."""

from __future__ import annotations

import torch

from gpulab import runtime, tasks
from gpulab.course.grading import fresh_rng, grader, require_callable


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@grader("parity data generator")
def grade_parity(parity, cases=5):
    """``parity(batch, length, generator) -> (x, y)``: x [batch, length] int64 random bits drawn with
    ``generator``, y [batch, length] int64 with ``y[:, t]`` the parity of ``x[:, : t + 1]``."""
    require_callable("parity", parity)
    cases = runtime.integer("cases", cases, minimum=2)  # two fixed sizes, then random ones
    rng, _ = fresh_rng()
    sizes = [(1, 1), (3, 17)] + [(rng.randint(1, 9), rng.randint(2, 48)) for _ in range(cases - 2)]
    for batch, length in sizes:
        seed = rng.randrange(2**31)
        where = f"parity({batch}, {length}, generator seeded with {seed})"
        out = parity(batch, length, _gen(seed))
        if not isinstance(out, (tuple, list)) or len(out) != 2 or not all(isinstance(t, torch.Tensor) for t in out):
            raise AssertionError(f"{where} returned {type(out).__name__}; return a pair of tensors (x, y).")
        x, y = out
        for name, t in (("x", x), ("y", y)):
            if tuple(t.shape) != (batch, length):
                raise AssertionError(
                    f"{where}: {name} has shape {tuple(t.shape)}, expected (batch, length) = {(batch, length)}."
                )
            if t.dtype != torch.long:
                raise AssertionError(
                    f"{where}: {name} has dtype {t.dtype}; use int64 (torch.long), what "
                    "nn.Embedding and cross_entropy take."
                )
        if not bool(((x == 0) | (x == 1)).all()):
            raise AssertionError(
                f"{where}: x has values {sorted(set(x.flatten().tolist()))[:6]}; bits are 0 or 1 "
                "(torch.randint(0, 2, ...): the upper bound is exclusive)."
            )
        want = tasks.parity_labels(x)
        if not torch.equal(y, want):
            b, t = (y != want).nonzero()[0].tolist()
            hint = ""
            if torch.equal(y, want[:, -1:].expand_as(y)):
                hint = " You gave the parity of the whole string at every position; y is the *running* parity."
            elif bool((y[:, 0] == 0).all()) and torch.equal(y[:, 1:], want[:, :-1]):
                hint = " Your labels are shifted by one: y[:, t] includes x[:, t] itself."
            raise AssertionError(
                f"{where}: y[{b}, {t}] = {int(y[b, t])} but the parity of x[{b}, :{t + 1}] = "
                f"{x[b, : t + 1].tolist()} is {int(want[b, t])}.{hint} (A cumulative sum mod 2 is the running parity.)"
            )
        x2, _ = parity(batch, length, _gen(seed))
        if not torch.equal(x, x2):
            raise AssertionError(
                f"{where}: two calls with generators seeded alike gave different strings; draw "
                "every random number from `generator` (torch.randint(..., generator=generator))."
            )
    seed = rng.randrange(2**31)
    x1, _ = parity(256, 64, _gen(seed))
    x2, _ = parity(256, 64, _gen(seed + 1))
    if torch.equal(x1, x2):
        raise AssertionError("generators with different seeds gave the same strings; use `generator` for the draw.")
    if not 0.45 < float(x1.float().mean()) < 0.55 or bool((x1 == x1[:1]).all()):
        raise AssertionError(
            f"over 256 x 64 bits, {float(x1.float().mean()):.1%} are ones and rows may repeat; each "
            "bit must be an independent fair coin."
        )
    return f"{len(sizes)} random sizes: labels, dtypes, seeding and fair bits"


class _HandMade(torch.nn.Module):
    """A model whose answers are known: ``"oracle"`` (the true states), ``"wrong_last"`` (true except at the last
    position), ``"zero"`` (always state 0) or ``"random"`` (random logits). Records every call."""

    def __init__(self, task, mode, seed=0):
        super().__init__()
        self.task, self.mode = tasks.get_task(task), mode
        self.weight = torch.nn.Parameter(torch.zeros(1))  # so that next(model.parameters()) works
        self.gen, self.calls = _gen(seed), []

    def forward(self, x):
        if self.task.name == "parity":
            y = tasks.parity_labels(x)
        else:
            y = torch.cumsum(x, 1) % self.task.classes
        if self.mode == "wrong_last":
            y[:, -1] = (y[:, -1] + 1) % self.task.classes
        if self.mode == "zero":
            y = torch.zeros_like(y)
        logits = torch.nn.functional.one_hot(y, self.task.classes).float()
        if self.mode == "random":
            logits = torch.randn(logits.shape, generator=self.gen)
        self.calls.append(
            {"x": x.clone(), "logits": logits, "training": self.training, "grad": torch.is_grad_enabled(), "y": y}
        )
        return logits + 0 * self.weight

    def expected(self):
        """Final-state accuracy over everything the model saw."""
        right = sum(int((c["logits"][:, -1].argmax(-1) == self._truth(c["x"])).sum()) for c in self.calls)
        return right / sum(c["x"].shape[0] for c in self.calls)

    def _truth(self, x):
        return tasks.parity_labels(x)[:, -1] if self.task.name == "parity" else x.sum(1) % self.task.classes


@grader("evaluation loop")
def grade_evaluate(evaluate):
    """``evaluate(model, task, length, samples=512, batch_size=256, seed=1234) -> float``: the fraction of ``samples``
    fresh strings whose final state the model predicts, in eval mode, without gradients, in batches."""
    require_callable("evaluate", evaluate)
    rng, _ = fresh_rng()
    tried = 0
    for name in ("parity", "modsum5"):
        task = tasks.get_task(name)
        length, samples, batch = rng.randint(3, 40), rng.randint(50, 300), rng.randint(16, 64)
        seed = rng.randrange(2**31)
        where = f"evaluate(model, {name!r}, length={length}, samples={samples}, batch_size={batch}, seed={seed})"

        oracle = _HandMade(task, "oracle")
        acc = evaluate(oracle, task, length, samples=samples, batch_size=batch, seed=seed)
        if not isinstance(acc, (float, int)) or isinstance(acc, bool):
            raise AssertionError(
                f"{where} returned {type(acc).__name__}; return a Python float (e.g. correct / "
                "total, with int(...) or .item() on tensor counts)."
            )
        if not oracle.calls:
            raise AssertionError(f"{where} never called the model.")
        shapes = [tuple(c["x"].shape) for c in oracle.calls]
        if sum(s[0] for s in shapes) != samples or any(s[0] > batch for s in shapes):
            raise AssertionError(
                f"{where}: the model saw batches of shapes {shapes[:4]}...; evaluate exactly "
                f"{samples} strings in batches of at most {batch} (the last batch is smaller)."
            )
        if any(s[1] != length for s in shapes):
            raise AssertionError(
                f"{where}: the model saw strings of lengths {sorted({s[1] for s in shapes})}, expected {length}."
            )
        if any(c["training"] for c in oracle.calls):
            raise AssertionError(f"{where}: the model was in training mode; call model.eval() before evaluating.")
        if any(c["grad"] for c in oracle.calls):
            raise AssertionError(f"{where}: gradients were being recorded; wrap the loop in `with torch.no_grad():`.")
        if not oracle.training:
            raise AssertionError(
                f"{where}: the model was left in eval mode; restore the mode it was in "
                "(was = model.training ... model.train(was))."
            )
        if abs(acc - 1.0) > 1e-12:
            raise AssertionError(
                f"{where}: a model that is always right got {acc!r}, expected 1.0; count "
                "argmax(logits[:, -1]) == y[:, -1] over all samples and divide by samples."
            )

        wrong_last = _HandMade(task, "wrong_last")
        acc = evaluate(wrong_last, task, length, samples=samples, batch_size=batch, seed=seed)
        if abs(acc) > 1e-12:
            raise AssertionError(
                f"{where}: a model right everywhere except at the last position got {acc!r}, "
                "expected 0.0; only the final state (position -1) counts."
            )

        for mode in ("zero", "random"):
            model = _HandMade(task, mode, seed=rng.randrange(2**31))
            acc = evaluate(model, task, length, samples=samples, batch_size=batch, seed=seed)
            want = model.expected()
            if abs(acc - want) > 1e-12:
                raise AssertionError(
                    f"{where}: a model predicting {mode} states got {acc!r}; on the strings it "
                    f"was given its final-state accuracy is {want!r}."
                )
        first = _HandMade(task, "zero")
        evaluate(first, task, length, samples=samples, batch_size=batch, seed=seed)
        again = _HandMade(task, "zero")
        evaluate(again, task, length, samples=samples, batch_size=batch, seed=seed)
        if not all(torch.equal(a["x"], b["x"]) for a, b in zip(first.calls, again.calls)):
            raise AssertionError(
                f"{where}: two calls with the same seed drew different strings; draw them from a "
                "torch.Generator seeded with `seed` (torch.Generator().manual_seed(seed))."
            )
        other = _HandMade(task, "zero")
        evaluate(other, task, length, samples=samples, batch_size=batch, seed=seed + 1)
        if all(torch.equal(a["x"], b["x"]) for a, b in zip(first.calls, other.calls)):
            raise AssertionError(f"{where}: different seeds drew the same strings; seed the generator with `seed`.")
        tried += 1
    return f"{tried} tasks x 6 hand-made models: final state, batches, eval mode, no gradients, seeds"
