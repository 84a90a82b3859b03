"""``python -m gpulab bench 06 lstm-tiles``: the multi-tile Gluon kernels where version 6's launch exceeds the SMs.

At one head of 768 with 256 rows, or of 1024 with 64 or 256 rows, version 6's one launch of the whole batch needs more
programs than an H200 has SMs, so what ships runs the forward in launches of fewer rows and the backward through b4 in
launches of fewer rows (:func:`gpulab.rnn.fused.plan.batch_rows`, :func:`gpulab.rnn.fused.plan.b4_rows`). The
multi-tile kernels (:mod:`gpulab.rnn.fused.split_gluon_tiles`, :mod:`gpulab.rnn.fused.split_gluon_backward_tiles`)
run each direction in one launch, several batch tiles per program (:func:`gpulab.rnn.fused.plan.tiles_pair`).

Every case is one layer, T 256, fp16, forward + backward of ``gpulab.rnn.LSTM`` (gradients cleared to None;
``out.sum().backward()``), timed on both clocks (``ms`` device, ``wall_ms`` eager per call, calls back to back):

- ``gpulab fp16 shipped``: the fused backend as it ships;
- ``gpulab fp16 tiles``: the same module under the ``gluon tiles`` experiment (a frozen
  :class:`gpulab.rnn.fused.config.FusedConfig` bound for the duration, :func:`gpulab.rnn.fused.experiments.trying`);
  ``params['path']`` says whether the multi-tile pair applied (``tiles``, with its tiles) or not (``shipped``);
- ``cuDNN fp16``: ``torch.nn.LSTM`` with the same weights.

Each gpulab path is first checked against an fp32 ``nn.LSTM`` with its weights (no TF32) on the first
:data:`CHECK_T` steps at the full batch: outputs, h_n, c_n, dx and every weight's gradient; a path whose check fails
leaves a record with ``status`` saying why and is not timed. On CPU (the interpreter: no Gluon) one tiny case runs
each path once; the times mean nothing.
"""

from __future__ import annotations

import contextlib
import time

import torch
from torch import nn

from gpulab import bench, hardware, runtime
from gpulab.rnn.fused import experiments, plan
from gpulab.rnn.fused.measure.lstm_grid import check_against_torch, step_of
from gpulab.rnn.module import LSTM

__all__ = ["lstm_tiles", "CASES", "T_TILES", "CHECK_T"]

CASES = ((768, 256), (1024, 64), (1024, 256))
"""(hidden, batch) of the grid's points where the split kernels' programs exceed the SMs (one head, one layer)."""
T_TILES = 256
CHECK_T = 32  # steps of the check (a drift over 256 fp16 steps says nothing about correctness)


def _path(B, H, dtype) -> dict:
    """Which loops the ``gluon tiles`` experiment binds for one layer of (B, H) here, as the plan decides it."""
    sms = hardware.live_properties().get("sm_count", 0)
    if not runtime.on_gpu() or sms < 1 or plan.v6_applies(B, 1, H, "lstm", dtype):
        return {"path": "shipped"}
    pair = plan.tiles_pair(B, 1, H, sms)
    if pair is None:
        return {"path": "shipped"}
    f, b = pair
    return {"path": "tiles", "forward_tile": [f.block_u, f.block_b, f.warps, f.tiles],
            "backward_tile": [b.block_u, b.block_b, b.warps, b.tiles]}  # fmt: skip


def _flops(B, T, H) -> float:
    return 3.0 * 2.0 * B * T * 4 * H * (H + H)  # forward + backward of the dense products, one layer


def _case(H, B, T, quick) -> list:
    dev = runtime.device
    dt = torch.float16 if runtime.on_gpu() else torch.float32
    torch.manual_seed(0)
    ours = LSTM(H, H, batch_first=True, backend="fused").to(dev, dt)
    x = torch.randn(B, T, H, device=dev, dtype=dt, requires_grad=True)
    leaves = [x, *ours.parameters()]
    params = {"B": B, "T": T, "H": H, "layers": 1, "kind": "tiles"}
    timing = dict(warmup_ms=5.0 if quick else 25.0, rep_ms=5.0 if quick else 100.0)
    out = []
    for provider, bound in (("gpulab fp16 shipped", contextlib.nullcontext),
                            ("gpulab fp16 tiles", lambda: experiments.trying("gluon tiles"))):  # fmt: skip
        label = f"H{H} B{B} {provider}"
        extra = _path(B, H, dt) if provider.endswith("tiles") else {"path": "shipped"}
        try:
            with bound():
                status = check_against_torch(ours, x, label, every_weight=True)
                r = bench.measure(step_of(ours, x, leaves), lesson="06", case=label, dtype=dt, shape=[B, T, H],
                                  flops=_flops(B, T, H), check=status, **params, **extra, **timing)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - recorded as the path's status
            if not runtime.on_gpu():
                raise
            r = bench.record(lesson="06", case=label, error=f"{type(exc).__name__}: {exc}"[:500], **params, **extra)
            r.status = f"failed: {type(exc).__name__}"
        r.provider = provider
        out.append(r)
    if runtime.on_gpu():
        ref = nn.LSTM(H, H, batch_first=True).to(dev, torch.float16)
        xc = x.detach().half().requires_grad_()
        r = bench.measure(step_of(ref, xc, [xc, *ref.parameters()]), lesson="06", case=f"H{H} B{B} cuDNN fp16",
                          dtype=torch.float16, shape=[B, T, H], flops=_flops(B, T, H), **params, **timing)  # fmt: skip
        r.provider = "cuDNN fp16"
        out.append(r)
    return out


def lstm_tiles(progress=None, quick=None, budget_s: float = 150.0):
    """The three paths at each of :data:`CASES`; ``quick`` (default: on CPU) one tiny case. A case not begun within
    ``budget_s`` seconds of the start leaves a record with status 'skipped: time budget'."""
    quick = (not runtime.on_gpu()) if quick is None else runtime.strict_bool("quick", quick)
    budget_s = runtime.finite_float("budget_s", budget_s, positive=True)
    start = time.perf_counter()
    progress = progress or (lambda it: it)
    cases, T = (((16, 2),), 3) if quick else (CASES, T_TILES)
    out = []
    for H, B in progress(cases):
        if time.perf_counter() - start > budget_s:
            r = bench.record(lesson="06", case=f"H{H} B{B}", kind="tiles", budget_s=budget_s)
            r.status = "skipped: time budget"
            out.append(r)
            continue
        out += _case(H, B, T, quick)
    plan.clear_cache()
    return out
