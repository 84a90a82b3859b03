"""Training, evaluation and throughput of a state-tracking model: a standard PyTorch loop, nothing special.

- :func:`train`: AdamW on the cross-entropy of the state at *every* position (a string of length T gives T
  labelled prefixes), fresh seeded strings every step, gradient clipping, optional progress bar and time limit;
- :func:`evaluate`: accuracy of the answer for the *whole* string, the state after the last token, on fresh seeded
  strings of one length, the model in eval mode without gradients (a wrong final state is a failure even if every
  earlier prediction was right; chance is 1 / classes);
- :func:`accuracy_vs_length`: :func:`evaluate` at several lengths, the lesson's plot;
- :func:`train_step_throughput`: tokens per second of a whole training step (forward, backward, AdamW), checked
  against a float64 copy of the model and timed by the :mod:`gpulab.bench` harness (:func:`gpulab.tasks.throughput`
  measures every model of the lesson's throughput table the same way).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time

import torch
import torch.nn.functional as F

from gpulab import bench, check, runtime
from gpulab.rnn.module import LSTM
from gpulab.tasks.data import get_task
from gpulab.tasks.models import CausalSelfAttention

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
    # foreach: one op per step over all parameters (PyTorch's default on CUDA, not on CPU, where the per-parameter
    # loop costs the notebook's CPU training about 6% of its time; the same parameters to the bit)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, foreach=True)
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


class _TrainStep:
    """The inputs of one throughput case: a model, its AdamW and a seeded batch, and a float64 copy of the model
    taken before any step changes its weights (the reference of the check).

    Calling it runs one whole training step (forward, backward, AdamW) and returns the forward's logits, which the
    harness checks against :meth:`expected` before it times anything. A model that cannot be built keeps its error
    and raises it when called: the harness records it as the case's status, where an error raised while making the
    inputs would end the whole run."""

    def __init__(self, build, task, batch_size: int, length: int):
        self.error = None
        try:
            self.model = build()
        except Exception as exc:  # noqa: BLE001 - raised again by the provider, so the record says why
            self.error = exc
            return
        self.reference = _float64_copy(self.model)
        self.x, self.y = get_task(task).sample(
            batch_size, length, generator=torch.Generator().manual_seed(0), device=model_device(self.model)
        )
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.model.train()

    def __call__(self) -> torch.Tensor:
        if self.error is not None:
            raise self.error
        logits = self.model(self.x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), self.y.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return logits.detach()

    def expected(self) -> torch.Tensor | None:
        """The float64 copy's logits on the same batch (None for a model that could not be built: no provider
        output to check)."""
        if self.error is not None:
            return None
        with torch.no_grad():
            return self.reference(self.x)


def _float64_copy(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` in float64 on PyTorch's own paths: every gpulab LSTM on its ``vanilla`` backend and every attention
    ``naive`` (the Triton kernels do not take float64), as lesson 6's ``dense_reference`` copies its module."""
    ref = copy.deepcopy(model).double().eval()
    for m in ref.modules():
        if isinstance(m, LSTM):
            m.backend = "vanilla"
        elif isinstance(m, CausalSelfAttention):
            m.attention = "naive"
    return ref


def _check_logits(out: torch.Tensor, expected: torch.Tensor) -> dict:
    """The logits against the float64 copy's, as lesson 6 checks its LSTM (:func:`gpulab.check.assert_close_drifting`:
    a state carried in bf16 over a long string drifts by rounding in a few elements; a wrong model is off
    everywhere). Returns the relative error for the record."""
    return {"rel_err": check.assert_close_drifting(out, expected, name="logits")}


TRAIN_STEP = "train step"
"""The provider's name in the throughput records."""


def measure_train_steps(name, cases, build, label, task, batch_size, length, dtype, params, progress=None) -> list:
    """Training throughput on the :mod:`gpulab.bench` harness: one case per model (``build(**x)`` makes it), one
    provider, :data:`TRAIN_STEP`. Every case's logits are first checked against its float64 copy (a mismatch is
    written into ``params['check']``, not raised), then every case is timed on both clocks. Each record's ``case`` is
    its ``label`` (without the benchmark's name), ``params`` carry ``tokens_per_s`` (batch_size * length / device
    time of a step) where the step ran, else ``error`` (why not), beside the x values and ``params(**x)``."""
    benchmark = bench.Benchmark(
        lesson="08",
        name=name,
        cases=cases,
        inputs=lambda **x: (_TrainStep(lambda: build(**x), task, batch_size, length),),
        providers={TRAIN_STEP: lambda step: step()},
        reference=lambda step: step.expected(),
        check=_check_logits,
        on_mismatch="record",
        dtype=dtype,
        shape=[batch_size, length],
        params=params,
        label=label,
        warmup_ms=runtime.pick(cpu=0.0, gpu=200.0),
        rep_ms=runtime.pick(cpu=50.0, gpu=500.0),
    )
    results = bench.run(benchmark, progress)
    for r in results:
        r.case = r.case.removeprefix(f"{name} ")
        if r.status == "ok":
            r.params["tokens_per_s"] = batch_size * length / (r.ms * 1e-3)
        else:
            r.params["error"] = r.status.removeprefix("failed: ")[:500]
    return results


def train_step_throughput(
    model, task, batch_size: int, length: int, case: str = "train step", params: dict | None = None
) -> bench.Result:
    """Check and time one whole training step (forward, backward, AdamW) of ``model`` on the :mod:`gpulab.bench`
    harness: its logits against a float64 copy of it first (``params['check']``), then both clocks. The Result's
    ``params`` carry ``tokens_per_s`` (= batch_size * length / device time of a step) and everything in ``params``;
    a step that cannot run is recorded with ``params['error']``."""
    _require_model(model)
    task = get_task(task)
    batch_size, length = runtime.positive_int("batch_size", batch_size), runtime.positive_int("length", length)
    if not isinstance(case, str) or not case:
        raise TypeError(f"case must be a non-empty string, got {type(case).__name__} {case!r}.")
    if params is not None and not isinstance(params, dict):
        raise TypeError(f"params must be a dict or None, got {type(params).__name__}.")
    dtype = next(model.parameters()).dtype
    (r,) = measure_train_steps(
        "training throughput", [{}], lambda: model, lambda: case, task, batch_size, length, dtype, dict(params or {})
    )
    return r
