"""Probe (not a lesson benchmark): the parameter products of the fused backward in one Triton launch against cuBLAS,
where a training step is host-bound (the drop-in grid's B16 points).

The products dR, db run either as cuBLAS GEMMs (a product, two corrections and the views around them: host
operators) or as one launch of ``parameter_grads_kernel`` (``parameter_grads.one_launch`` chooses). For each point,
one layer, T 256, fp16 (and the tiny call): forward+backward of ``gpulab.rnn.LSTM`` as it ships, with
``FusedConfig(small_rows=2048)`` (cuBLAS past 2,048 rows) and with ``FusedConfig(small_rows=2**30)`` (always one
launch), each checked against ``nn.LSTM`` first, and cuDNN ``nn.LSTM`` fp16, in two interleaved rounds (the host's
noise shows as the spread between them), on both clocks. Writes JSONL to $OUT/probe-lstm-host-rows.jsonl.
Usage: python scripts/probe_lstm_host_rows.py [H:B ...]
"""

import sys
import time

import torch
from probe_log import emitter
from torch import nn

from gpulab import bench
from gpulab.rnn.fused import plan
from gpulab.rnn.fused.config import FusedConfig
from gpulab.rnn.fused.measure.lstm_grid import check_against_torch, step_of
from gpulab.rnn.module import LSTM

POINTS = [tuple(map(int, a.split(":"))) for a in sys.argv[1:]] or [
    (256, 16),
    (512, 16),
    (768, 16),
    (1024, 16),
    (256, 64),
    (768, 64),
]
T = 256
VARIANTS = (
    ("ships", plan.DEFAULT),
    ("cuBLAS past 2048 rows", FusedConfig(small_rows=2048)),
    ("one launch", FusedConfig(small_rows=2**30)),
)
emit = emitter("probe-lstm-host-rows")
t0 = time.perf_counter()


def timed(step, config):
    with plan.config_as(config):
        r = bench.measure(step, lesson="06", case="probe", warmup_ms=25, rep_ms=100)
    return r.ms, r.wall_ms


cases = [(f"H{H} B{B}", H, H, 1, B, T) for H, B in POINTS] + [("tiny B1 T4 2x64", 128, 128, 2, 1, 4)]
for name, I, H, heads, B, steps in cases:
    if time.perf_counter() - t0 > 300:
        emit(case=name, status="skipped: budget")
        continue
    torch.manual_seed(0)
    x = torch.randn(B, steps, I, device="cuda", dtype=torch.float16, requires_grad=True)
    m = LSTM(I, H, batch_first=True, num_heads=heads, backend="fused").to("cuda", torch.float16)
    ref = nn.LSTM(I, H, batch_first=True).to("cuda", torch.float16)
    xc = x.detach().requires_grad_()
    try:
        checks = {}
        for label, config in VARIANTS:
            with plan.config_as(config):
                checks[label] = check_against_torch(m, x, f"{name} {label}")
        ours = step_of(m, x, [x, *m.parameters()])
        theirs = step_of(ref, xc, [xc, *ref.parameters()])
        for rnd in (1, 2):
            for label, config in VARIANTS:
                ms, wall = timed(ours, config)
                emit(case=name, B=B, H=H, heads=heads, T=steps, provider=f"gpulab fp16 {label}", round=rnd, ms=ms,
                     wall_ms=wall, check=checks[label])  # fmt: skip
            ms, wall = timed(theirs, plan.DEFAULT)
            emit(case=name, B=B, H=H, heads=heads, T=steps, provider="cuDNN fp16", round=rnd, ms=ms, wall_ms=wall)
    except Exception as exc:  # noqa: BLE001 - recorded, the next point runs
        emit(case=name, status=f"{type(exc).__name__}: {exc}"[:300])
emit(device=torch.cuda.get_device_name(), torch=torch.__version__, total_s=time.perf_counter() - t0)
