"""Training, evaluation and throughput of a state-tracking model: a standard PyTorch loop, nothing special.

- :func:`train`: AdamW on the cross-entropy of the state at *every* position (a string of length T gives T
  labelled prefixes), fresh seeded strings every step, gradient clipping, optional progress bar and time limit;
- :func:`evaluate`: accuracy of the answer for the *whole* string, the state after the last token, on fresh seeded
  strings of one length, the model in eval mode without gradients (a wrong final state is a failure even if every
  earlier prediction was right; chance is 1 / classes);
- :func:`accuracy_vs_length`: :func:`evaluate` at several lengths, the lesson's plot;
- :func:`train_step_throughput`: tokens per second of a whole training step (forward, backward, AdamW), timed with
  :func:`gpulab.bench.measure`.
"""

from __future__ import annotations

import dataclasses
import math
import time

import torch
import torch.nn.functional as F

from gpulab import bench, runtime
from gpulab.tasks.data import get_task

__all__ = ["TrainLog", "model_device", "train", "evaluate", "accuracy_vs_length", "train_step_throughput"]


def _require_model(model) -> torch.nn.Module:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
    return model


def _optional_callable(name: str, value):
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, got {type(value).__name__} {value!r}.")
    return value


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (CPU for a model without parameters)."""
    _require_model(model)
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


@dataclasses.dataclass
class TrainLog:
    """What :func:`train` did: the loss of every step, steps run, wall-clock seconds, tokens seen."""

    losses: list
    steps: int
    seconds: float
    tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")

    @property
    def final_loss(self) -> float:
        """Mean loss of the last 10% of steps (one step's loss is noisy)."""
        tail = self.losses[-max(1, len(self.losses) // 10) :]
        return sum(tail) / len(tail) if tail else float("nan")


def _loss(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


def learning_rate(step: int, steps: int, lr: float, schedule: str = "constant", warmup: int = 0) -> float:
    """The rate at ``step`` (0-based) of ``steps``: linear warmup over ``warmup`` steps, then constant or cosine."""
    steps = runtime.positive_int("steps", steps)
    step = runtime.integer("step", step, minimum=0, maximum=steps - 1)
    lr = runtime.finite_float("lr", lr, positive=True)
    runtime.one_of("schedule", schedule, ("constant", "cosine"))
    warmup = runtime.nonnegative_int("warmup", warmup)
    factor = min(1.0, (step + 1) / warmup) if warmup else 1.0
    if schedule == "cosine":
        factor *= 0.5 * (1.0 + math.cos(math.pi * step / steps))
    return lr * factor


def train(
    model: torch.nn.Module,
    task,
    *,
    steps: int = 300,
    batch_size: int = 64,
    length: int = 16,
    lr: float = 3e-3,
    weight_decay: float = 0.01,
    clip: float = 1.0,
    seed: int = 0,
    progress=None,
    max_seconds: float | None = None,
    schedule: str = "constant",
    warmup: int = 0,
) -> TrainLog:
    """Train ``model`` on ``task`` (a :class:`gpulab.tasks.Task` or its name) with AdamW for ``steps`` steps of
    ``batch_size`` fresh strings of ``length`` tokens, drawn from a generator seeded with ``seed``.

    The loss is the cross-entropy of the state at every position. ``progress`` wraps the step loop (e.g.
    ``tqdm.auto.tqdm``); ``max_seconds`` stops early (the log says how many steps ran). The model is trained in its
    own dtype on its own device. Returns a :class:`TrainLog`.

    ``schedule``: ``"constant"`` (``lr`` throughout) or ``"cosine"`` (``lr`` decayed to 0 over ``steps`` on a half
    cosine, the usual choice: a large rate early, a small one to settle at the end); ``warmup`` steps ramp the rate
    up linearly from ``lr / warmup`` first.
    """
    _require_model(model)
    task = get_task(task)
    steps = runtime.positive_int("steps", steps)
    batch_size, length = runtime.positive_int("batch_size", batch_size), runtime.positive_int("length", length)
    lr = runtime.finite_float("lr", lr, positive=True)
    weight_decay = runtime.finite_float("weight_decay", weight_decay, minimum=0.0)
    clip = None if clip is None else runtime.finite_float("clip", clip, minimum=0.0)
    seed = runtime.integer("seed", seed)
    _optional_callable("progress", progress)
    if max_seconds is not None:
        max_seconds = runtime.finite_float("max_seconds", max_seconds, positive=True)
    runtime.one_of("schedule", schedule, ("constant", "cosine"))
    warmup = runtime.nonnegative_int("warmup", warmup)
    device = model_device(model)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    model.train()
    losses, done = [], 0
    loop = progress(range(steps)) if progress is not None else range(steps)
    t0 = time.perf_counter()
    for step in loop:
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, steps, lr, schedule, warmup)
        x, y = task.sample(batch_size, length, generator=gen, device=device)
        loss = _loss(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
        done += 1
        if hasattr(loop, "set_postfix") and done % 25 == 0:
            loop.set_postfix(loss=f"{losses[-1]:.3f}")
        if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
            break
    runtime.synchronize()
    return TrainLog(losses, done, time.perf_counter() - t0, done * batch_size * length)


def evaluate(model: torch.nn.Module, task, length: int, samples: int = 512, batch_size: int = 256, seed: int = 1234):
    """Fraction of ``samples`` fresh strings of ``length`` tokens (seeded with ``seed``) whose *final* state the model
    predicts correctly: ``argmax(model(x)[:, -1]) == y[:, -1]``. Runs in eval mode without gradients, in batches of
    at most ``batch_size``, and leaves the model in the mode it was in. Returns a float in [0, 1]."""
    _require_model(model)
    task = get_task(task)
    length, samples = runtime.positive_int("length", length), runtime.positive_int("samples", samples)
    batch_size, seed = runtime.positive_int("batch_size", batch_size), runtime.integer("seed", seed)
    device = model_device(model)
    gen = torch.Generator().manual_seed(seed)
    was_training = model.training
    model.eval()
    correct, seen = 0, 0
    try:
        with torch.no_grad():
            while seen < samples:
                b = min(batch_size, samples - seen)
                x, y = task.sample(b, length, generator=gen, device=device)
                prediction = model(x)[:, -1].argmax(-1)
                correct += int((prediction == y[:, -1]).sum())
                seen += b
    finally:
        model.train(was_training)
    return correct / seen


def accuracy_vs_length(model, task, lengths, samples: int = 512, batch_size: int = 256, seed: int = 1234) -> dict:
    """``{length: evaluate(model, task, length, ...)}`` for every length in ``lengths``."""
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__iter__"):
        raise TypeError(f"lengths must be a list of positive integers, got {type(lengths).__name__} {lengths!r}.")
    lengths = [runtime.positive_int(f"lengths[{i}]", n) for i, n in enumerate(lengths)]
    if not lengths:
        raise ValueError("lengths is empty; give at least one string length to evaluate at.")
    seed = runtime.integer("seed", seed)
    return {n: evaluate(model, task, n, samples, batch_size, seed + n) for n in lengths}


def train_step_throughput(
    model, task, batch_size: int, length: int, case: str = "train step", params: dict | None = None
) -> bench.Result:
    """Time one whole training step (forward, backward, AdamW) with :func:`gpulab.bench.measure`; the Result's
    ``params`` carry ``tokens_per_s`` (= batch_size * length / step time) and everything in ``params``."""
    _require_model(model)
    task = get_task(task)
    batch_size, length = runtime.positive_int("batch_size", batch_size), runtime.positive_int("length", length)
    if params is not None and not isinstance(params, dict):
        raise TypeError(f"params must be a dict or None, got {type(params).__name__}.")
    device = model_device(model)
    x, y = task.sample(batch_size, length, generator=torch.Generator().manual_seed(0), device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()

    def step():
        loss = _loss(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    r = bench.measure(
        step,
        lesson="06",
        case=case,
        dtype=next(model.parameters()).dtype,
        shape=[batch_size, length],
        warmup_ms=200.0 if runtime.on_gpu() else 0.0,
        rep_ms=500.0 if runtime.on_gpu() else 50.0,
        **(params or {}),
    )
    r.params["tokens_per_s"] = batch_size * length / (r.ms * 1e-3)
    return r
