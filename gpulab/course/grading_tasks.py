"""Graders for exercise 6 (state tracking): the parity data generator, the evaluation loop and the training step.

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


def _small_lstm(seed: int, d_model: int = 16):
    from gpulab.tasks.experiments import make_model  # noqa: PLC0415

    return make_model("LSTM", "parity", seed=seed, d_model=d_model, num_layers=1, device="cpu", backend="vanilla")


def _reference_step(model, opt, x, y, zero: bool = True, every_position: bool = True) -> float:
    logits = model(x)
    if every_position:
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
    else:
        loss = torch.nn.functional.cross_entropy(logits[:, -1].float(), y[:, -1])
    if zero:
        opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())


def _params(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _same(a, b) -> bool:
    return all(torch.allclose(x, y, rtol=1e-4, atol=1e-6) for x, y in zip(a, b))


@grader("training step")
def grade_train_step(train_step, steps=150, length=10, test_length=40):
    """``train_step(model, optimizer, x, y) -> float``: one training step on a batch of tokens ``x`` [B, T] and states
    ``y`` [B, T]: the cross-entropy of the state at every position (the model returns logits [B, T, classes]),
    gradients zeroed, backward, ``optimizer.step()``; returns the loss before the step as a Python float.

    The method first, on a small LSTM and AdamW against the same steps done here (two steps in a row, so gradients
    left from the first show in the second); then the outcome: a fresh LSTM trained with ``train_step`` for ``steps``
    steps on parity strings of ``length`` tokens must predict the final state of held-out strings of ``test_length``
    tokens (longer than any it was trained on) with at least 95% accuracy (:func:`gpulab.tasks.training.evaluate`).
    """
    require_callable("train_step", train_step)
    steps = runtime.positive_int("steps", steps)
    length, test_length = runtime.positive_int("length", length), runtime.positive_int("test_length", test_length)
    rng, _ = fresh_rng()
    seed = rng.randrange(1000)
    task = tasks.get_task("parity")
    mine, ref = _small_lstm(seed, 8), _small_lstm(seed, 8)
    opt_mine = torch.optim.AdamW(mine.parameters(), lr=1e-2)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    gen = _gen(seed)
    for step in range(2):
        x, y = task.sample(4, 6, generator=gen)
        before = _params(mine)
        start = {k: v.clone() for k, v in mine.state_dict().items()}
        loss = train_step(mine, opt_mine, x.clone(), y.clone())
        want = _reference_step(ref, opt_ref, x, y)
        where = f"step {step + 1} of a small LSTM (seed {seed})"
        if isinstance(loss, torch.Tensor) or not isinstance(loss, float):
            raise AssertionError(
                f"{where}: train_step returned {type(loss).__name__}; return the loss as a Python float "
                "(loss.item(): a tensor would keep the whole graph of the step alive in a list of losses)."
            )
        if _same(_params(mine), before):
            raise AssertionError(f"{where}: the parameters did not change: call optimizer.step() after backward.")
        if _same(_params(mine), _params(ref)) and abs(loss - want) <= 1e-5 * max(1.0, abs(want)):
            continue
        last_only = _small_lstm(seed, 8)
        last_only.load_state_dict(start)
        opt_last = torch.optim.AdamW(last_only.parameters(), lr=1e-2)
        if step == 0 and abs(loss - _reference_step(last_only, opt_last, x, y, every_position=False)) <= 1e-5 * max(
            1.0, abs(loss)
        ):
            raise AssertionError(
                f"{where}: your loss is the cross-entropy of the last position only; the task's loss counts the "
                "state at every position (a string of T tokens gives T labelled prefixes): flatten logits to "
                "[B*T, classes] and y to [B*T]."
            )
        if step == 1:
            raise AssertionError(
                f"{where}: the first step was right but the second is not: the gradients of the first step were "
                "still there (backward adds to .grad). Call optimizer.zero_grad() before loss.backward()."
            )
        raise AssertionError(
            f"{where}: the parameters after the step differ from one AdamW step on the cross-entropy of every "
            f"position (your loss {loss:.6g}, expected {want:.6g})."
        )
    # the outcome: train a fresh LSTM with the learner's step, test on longer strings
    from gpulab.tasks.training import evaluate  # noqa: PLC0415

    torch.manual_seed(0)
    model = _small_lstm(0, 16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = _gen(0)
    model.train()
    for _ in range(steps):
        x, y = task.sample(32, length, generator=gen)
        train_step(model, opt, x, y)
    acc = evaluate(model, task, test_length, samples=256)
    if acc < 0.95:
        raise AssertionError(
            f"after {steps} steps on strings of {length} tokens, the LSTM predicts the final state of {test_length}-"
            f"token strings with {acc:.0%} accuracy (at least 95% expected): check the loss and the order zero_grad, "
            "backward, step."
        )
    return (
        f"the method on two steps, then {steps} steps of training: at least 95% on held-out {test_length}-token strings"
    )
