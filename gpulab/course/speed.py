"""Speed grading: on a GPU, a graded task whose answer is a whole op is timed on a named problem against the
solution (the package's own op) and the real peer (SDPA, cuDNN ``nn.LSTM``), on both clocks, and the result is
appended to the leaderboard (``benchmarks/exercises/leaderboard.jsonl``; ``python -m gpulab leaderboard`` prints it).

Speed is graded when asked: ``python -m gpulab grade --speed NB`` (``make grade`` passes ``--speed``) sets
``GPULAB_SPEED=1`` for the notebook's kernel, and each grader of a timed task calls :func:`grade_speed` after its
correctness checks pass. On CPU it prints that speed is graded on a GPU and grades correctness only.

The timed tasks (their problems are in :data:`TASKS`):

- exercise 3, "step 1: combined GEMMs": the article's LSTM (4 layers, hidden 512, batch 64, 100 steps, fp32) against
  the ladder's step 1 and cuDNN ``nn.LSTM``;
- exercise 4, "FlashAttention forward inner loop": B 1, 16 heads of 64, N 4096, fp32, non-causal, against
  :func:`gpulab.attention.flash_attention` and SDPA;
- exercise 6, "fused LSTM forward time loop": B 16, T 1024, 16 heads of 32, fp32, against the package's fused
  forward (``flashrnn(..., backend="fused")``) and cuDNN ``nn.LSTM`` of hidden 512;
- exercise 4, "attention op: forward and backward (CS336)": CS336's leaderboard problem, B 1, N 16384, 16 heads of
  64, bf16, causal, forward and backward, against :func:`gpulab.attention.flash_attention` and SDPA's cuDNN backend
  (the peer) and its flash backend (a second peer, ``peers`` in the record).

Both clocks: ``ms`` is device time (:func:`gpulab.bench.timing.time_callable`, CUDA events), ``wall_ms`` the eager
wall time per call (:func:`gpulab.bench.timing.wall_time`, host work included).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
from collections.abc import Callable
from pathlib import Path

import torch

from gpulab import runtime

ENV = "GPULAB_SPEED"
LABEL_ENV = "GPULAB_SPEED_LABEL"
BOARD_ENV = "GPULAB_LEADERBOARD"
ROOT = Path(__file__).resolve().parents[2]
CPU_NOTE = "speed: graded on a GPU (make grade on a CUDA machine); this run grades correctness only"

__all__ = [
    "TASKS",
    "SpeedTask",
    "grade_solutions",
    "grade_speed",
    "leaderboard_path",
    "leaderboard_table",
    "records",
    "requested",
    "summary",
]


def requested() -> bool:
    """Whether this run grades speed (``GPULAB_SPEED=1``, set by ``python -m gpulab grade --speed``)."""
    return os.environ.get(ENV, "") == "1"


def leaderboard_path() -> Path:
    """The leaderboard file: ``$GPULAB_LEADERBOARD`` or ``benchmarks/exercises/leaderboard.jsonl``."""
    return Path(os.environ.get(BOARD_ENV) or ROOT / "benchmarks" / "exercises" / "leaderboard.jsonl")


@dataclasses.dataclass(frozen=True)
class SpeedTask:
    """A timed task: ``problem`` in words; ``inputs()`` builds the problem's tensors; ``answer(fn, inputs)``,
    ``solution(inputs)`` and ``peer(inputs)`` each return a zero-argument callable that runs the op once;
    ``more_peers`` maps the names of further peers to such builders; ``grad`` whether the callables run a backward
    (timed with grad mode on)."""

    problem: str
    peer_name: str
    inputs: Callable
    answer: Callable
    solution: Callable
    peer: Callable
    more_peers: dict = dataclasses.field(default_factory=dict)
    grad: bool = False


# ----------------------------------------------------------------------------------------------------------------
# exercise 4: the forward kernel as an attention op


def _attention_inputs(b=1, h=16, n=4096, d=64):
    q, k, v = (torch.randn(b, h, n, d, device=runtime.device) for _ in range(3))
    return q, k, v


def _attention_answer(kernel, inputs):
    import triton  # noqa: PLC0415

    from gpulab.triton_ops import LOG2E_F  # noqa: PLC0415

    q, k, v = inputs
    b, h, n, d = q.shape
    o = torch.empty_like(q)
    scale = LOG2E_F / math.sqrt(d)
    grid = (triton.cdiv(n, 64), b * h)

    def run():
        kernel[grid](q, k, v, o, n, n, scale, HEAD_DIM=d, BLOCK_M=64, BLOCK_N=64)
        return o

    return run


def _attention_solution(inputs):
    from gpulab.attention import flash_attention  # noqa: PLC0415

    return lambda: flash_attention(*inputs)


def _attention_peer(inputs):
    return lambda: torch.nn.functional.scaled_dot_product_attention(*inputs)


# ----------------------------------------------------------------------------------------------------------------
# exercise 3: step 1 of the ladder as an LSTM


def _ladder_inputs():
    from gpulab.rnn.ladder.benchmark import ARTICLE, make_problem  # noqa: PLC0415

    return make_problem(torch.float32, **{k: ARTICLE[k] for k in ("layers", "hidden", "batch", "seq")})


def _ladder_answer(step1, inputs):
    _, weights, x = inputs
    return lambda: step1(x, weights, None)


def _ladder_solution(inputs):
    from gpulab.rnn.ladder.steps import step1_combined_gemm  # noqa: PLC0415

    _, weights, x = inputs
    return lambda: step1_combined_gemm(x, weights)


def _ladder_peer(inputs):
    module, _, x = inputs
    return lambda: module(x)


# ----------------------------------------------------------------------------------------------------------------
# exercise 6: the fused LSTM forward's time loop


def _loop_inputs(b=16, t=1024, nh=16, dh=32):  # head dim 32: the exercise's fp32 kernel holds 4 R^T tiles
    from gpulab import check  # noqa: PLC0415

    wx = check.random_tensor(b, t, 4, nh, dh)
    r = check.random_tensor(4, nh, dh, dh, scale=0.5 / dh**0.5)
    bias = check.random_tensor(4, nh, dh, scale=0.5)
    s0 = check.random_tensor(2, b, 1, nh, dh, scale=0.5)
    lstm = torch.nn.LSTM(nh * dh, nh * dh, batch_first=True).to(runtime.device).eval()
    x = torch.randn(b, t, nh * dh, device=runtime.device)
    return wx, r, bias, s0, lstm, x


def _loop_answer(kernel, inputs):
    wx, r, bias, s0 = inputs[:4]
    b, t, _, nh, dh = wx.shape
    out = torch.empty(2, b, t, nh, dh, device=wx.device)
    last = torch.empty(2, b, 1, nh, dh, device=wx.device)
    return lambda: kernel[(nh,)](wx, r, bias, s0, out, last, b, t, nh, DH=dh, BLOCK_B=16)  # grade_lstm_loop's launch


def _loop_solution(inputs):
    from gpulab.rnn.api import flashrnn  # noqa: PLC0415

    wx, r, bias, s0 = inputs[:4]
    return lambda: flashrnn(wx, r, bias, s0, function="lstm", backend="fused")


def _loop_peer(inputs):
    lstm, x = inputs[4:]
    return lambda: lstm(x)


# ----------------------------------------------------------------------------------------------------------------
# exercise 4: the attention op, forward and backward, on CS336's problem


def _op_inputs(b=1, h=16, n=16384, d=64):
    q, k, v = (torch.randn(b, h, n, d, device=runtime.device, dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))  # fmt: skip
    return q, k, v, torch.randn(b, h, n, d, device=runtime.device, dtype=torch.bfloat16)


def _fwd_bwd(op, inputs):
    q, k, v, do = inputs
    return lambda: torch.autograd.grad(op(q, k, v), (q, k, v), do)


def _op_solution(inputs):
    from gpulab.attention import flash_attention  # noqa: PLC0415

    return _fwd_bwd(lambda q, k, v: flash_attention(q, k, v, is_causal=True), inputs)


def _sdpa(backend_name):
    def build(inputs):
        from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415

        backend = getattr(SDPBackend, backend_name)

        def op(q, k, v):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

        return _fwd_bwd(op, inputs)

    return build


TASKS = {
    "FlashAttention forward inner loop": SpeedTask(
        "B 1, 16 heads of 64, N 4096, fp32, non-causal (forward)", "SDPA",
        _attention_inputs, _attention_answer, _attention_solution, _attention_peer,
    ),
    "step 1: combined GEMMs": SpeedTask(
        "the article's LSTM: 4 layers, hidden 512, batch 64, 100 steps, fp32 (forward)", "cuDNN nn.LSTM",
        _ladder_inputs, _ladder_answer, _ladder_solution, _ladder_peer,
    ),
    "fused LSTM forward time loop": SpeedTask(
        "B 16, T 1024, 16 heads of 32, fp32 (forward, Wx given)", "cuDNN nn.LSTM (hidden 512, dense R)",
        _loop_inputs, _loop_answer, _loop_solution, _loop_peer,
    ),
    "attention op: forward and backward (CS336)": SpeedTask(
        "CS336's problem: B 1, N 16384, 16 heads of 64, bf16, causal (forward + backward)", "SDPA cuDNN",
        _op_inputs, _fwd_bwd, _op_solution, _sdpa("CUDNN_ATTENTION"),
        more_peers={"SDPA flash": _sdpa("FLASH_ATTENTION")}, grad=True,
    ),
}  # fmt: skip


def _clocks(fn, grad: bool = False) -> tuple[float, float]:
    from gpulab.bench.timing import time_callable, wall_time  # noqa: PLC0415

    with torch.enable_grad() if grad else torch.no_grad():
        return time_callable(fn).median_ms, wall_time(fn).median_ms


def _peer_clocks(build, inputs, grad: bool) -> tuple[float, float] | None:
    """A further peer's clocks, or None where it does not run here (an SDPA backend this GPU or build lacks)."""
    try:
        return _clocks(build(inputs), grad)
    except RuntimeError as exc:
        print(f"speed: a peer did not run here ({str(exc).splitlines()[0][:120]})")
        return None


def grade_speed(title: str, answer, label: str | None = None, board: Path | None = None) -> dict | None:
    """Time the answer of the task ``title`` (a key of :data:`TASKS`) on its problem against the solution and the
    peer, print the ratios and append the record to the leaderboard; None (with a note on CPU) unless speed is
    requested and a GPU is here. ``label`` names who answered (default ``$GPULAB_SPEED_LABEL`` or "learner")."""
    runtime.one_of("title", title, tuple(TASKS))
    if not requested():
        return None
    if not runtime.on_gpu():
        print(CPU_NOTE)
        return None
    task = TASKS[title]
    inputs = task.inputs()
    rows = {
        "answer": _clocks(task.answer(answer, inputs), task.grad),
        "solution": _clocks(task.solution(inputs), task.grad),
        "peer": _clocks(task.peer(inputs), task.grad),
    }
    more = {name: _peer_clocks(build, inputs, task.grad) for name, build in task.more_peers.items()}
    ms, wall = rows["answer"]
    record = {
        "task": title,
        "problem": task.problem,
        "who": label or os.environ.get(LABEL_ENV) or "learner",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "ms": ms,
        "wall_ms": wall,
        "solution_ms": rows["solution"][0],
        "solution_wall_ms": rows["solution"][1],
        "peer": task.peer_name,
        "peer_ms": rows["peer"][0],
        "peer_wall_ms": rows["peer"][1],
    }
    if task.more_peers:
        record["peers"] = {name: None if c is None else {"ms": c[0], "wall_ms": c[1]} for name, c in more.items()}
    print(
        f"speed on {record['device']}, {task.problem}: {ms:.3f} ms device, {wall:.3f} ms wall per call; "
        f"x{ms / rows['solution'][0]:.2f} the solution, x{ms / rows['peer'][0]:.2f} {task.peer_name}"
        + "".join(f", x{ms / c[0]:.2f} {name}" for name, c in more.items() if c is not None)
        + " (device clock)"
    )
    path = board or leaderboard_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
    return record


def records(path: Path | None = None) -> list[dict]:
    """The leaderboard's records, oldest first (none if there is no file yet)."""
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise runtime.ArgumentTypeError(f"path must be a file path (str or Path) or None, got {type(path).__name__}.")
    path = Path(path) if path is not None else leaderboard_path()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summary(new: list[dict], report) -> str:
    """What ``gpulab grade --speed`` prints after the graders: the records this run added, or why there are none."""
    timed = [title for title, passed, _ in report if title in TASKS]
    if not timed:
        return "speed: this notebook has no timed task (they are: " + "; ".join(TASKS) + ")."
    if not runtime.on_gpu():
        return CPU_NOTE + "."
    if not new:
        return "speed: no timed task passed its correctness checks, so none was timed."
    return "\n".join(
        f"speed  {r['task']} ({r['problem']}): {r['ms']:.3f} ms device, {r['wall_ms']:.3f} ms wall; "
        f"x{r['ms'] / r['solution_ms']:.2f} the solution, x{r['ms'] / r['peer_ms']:.2f} {r['peer']}"
        for r in new
    )


SOLUTIONS = ("03_cudnn_ladder", "04_flash_attention", "06_fused_rnn")
"""The solution notebooks with a timed task."""


def grade_solutions(root: Path | None = None) -> list[dict]:
    """Speed-grade the solution notebooks of the timed tasks (exercises 3, 4 and 6) on this GPU: each is run as
    ``python -m gpulab grade --speed`` would, labelled "solution"; returns the records added to the leaderboard
    (``benchmarks/exercises/leaderboard.jsonl``)."""
    from gpulab.course.notebooks import grade_notebook  # noqa: PLC0415

    if not runtime.on_gpu():
        raise RuntimeError("speed grading needs a CUDA GPU; " + CPU_NOTE + ".")
    root = Path(root) if root is not None else ROOT
    before = len(records())
    saved = {k: os.environ.get(k) for k in (ENV, LABEL_ENV)}
    os.environ[ENV], os.environ[LABEL_ENV] = "1", "solution"
    try:
        for name in SOLUTIONS:
            for title, passed, message in grade_notebook(root / "solutions" / f"{name}.ipynb"):
                if not passed:
                    print(f"FAIL {name}: {title}: {message}")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return records()[before:]


def leaderboard_table(path: Path | None = None) -> str:
    """The leaderboard as a text table, one block per task, fastest first (device clock)."""
    from gpulab.bench.plots import text_table  # noqa: PLC0415

    found = records(path)
    path = Path(path) if path is not None else leaderboard_path()
    if not found:
        return f"no leaderboard yet ({path}): run `python -m gpulab grade --speed NB` on a GPU."
    blocks = []
    for task in sorted({r["task"] for r in found}):
        mine = sorted((r for r in found if r["task"] == task), key=lambda r: r["ms"])
        more = sorted({name for r in mine for name in r.get("peers") or {}})  # further peers (the CS336 task)

        def ratio(r, name):
            peer = (r.get("peers") or {}).get(name)
            return f"{r['ms'] / peer['ms']:.2f}" if peer else "n/a"

        rows = [
            [r["who"], r["device"], r["date"][:16], f"{r['ms']:.3f}", f"{r['wall_ms']:.3f}",
             f"{r['ms'] / r['solution_ms']:.2f}", f"{r['ms'] / r['peer_ms']:.2f}", *(ratio(r, n) for n in more)]
            for r in mine
        ]  # fmt: skip
        heads = ["who", "device", "date (UTC)", "ms", "wall ms", "x package op", f"x {mine[0]['peer']}"]
        heads += [f"x {name}" for name in more]
        blocks.append(text_table(heads, rows, title=f"{task}: {mine[0]['problem']}"))
    return "\n\n".join(blocks)
