"""Probe (not a lesson benchmark): where gpulab.rnn.LSTM loses to cuDNN at large batches, by backend and pass.

For each (H, B) point, one layer, T 256, fp16: forward only and forward+backward on both clocks, for the fused
backend (what ships), the alternating backend (cuBLAS per step + one pointwise kernel) and cuDNN nn.LSTM fp16.
Writes JSONL to $OUT/probe-lstm-large.jsonl. Usage: python scripts/probe_lstm_large.py [H:B ...]
"""

import sys
import time

import torch
from probe_log import emitter
from torch import nn

from gpulab import bench
from gpulab.rnn.fused import plan
from gpulab.rnn.fused.measure.lstm_grid import check_against_torch, step_of
from gpulab.rnn.module import LSTM

POINTS = [tuple(map(int, a.split(":"))) for a in sys.argv[1:]] or [
    (768, 256),
    (1024, 256),
    (1536, 64),
    (1536, 256),
    (1024, 64),
    (256, 16),
    (512, 16),
]
T = 256
emit = emitter("probe-lstm-large")
t0 = time.perf_counter()


def fwd_of(module, x):
    def step():
        with torch.no_grad():
            module(x)

    return step


for H, B in POINTS:
    if time.perf_counter() - t0 > 400:
        emit(H=H, B=B, status="skipped: budget")
        continue
    torch.manual_seed(0)
    x = torch.randn(B, T, H, device="cuda", dtype=torch.float16, requires_grad=True)
    for backend in ("fused", "alternating"):
        try:
            m = LSTM(H, H, batch_first=True, backend=backend).to("cuda", torch.float16)
            status = check_against_torch(m, x, f"H{H} B{B} {backend}")
            kind = plan.plan_kind(B, 1, H, "lstm", torch.float16, training=True) if backend == "fused" else None
            for what, step in (("fwd", fwd_of(m, x)), ("fwdbwd", step_of(m, x, [x, *m.parameters()]))):
                r = bench.measure(step, lesson="06", case=f"H{H} B{B} {backend} {what}", warmup_ms=25, rep_ms=100)
                emit(H=H, B=B, provider=backend, what=what, ms=r.ms, wall_ms=r.wall_ms, check=status, plan=kind)
        except Exception as exc:  # noqa: BLE001
            emit(H=H, B=B, provider=backend, status=f"{type(exc).__name__}: {exc}"[:300])
    ref = nn.LSTM(H, H, batch_first=True).to("cuda", torch.float16)
    xc = x.detach().requires_grad_()
    for what, step in (("fwd", fwd_of(ref, xc)), ("fwdbwd", step_of(ref, xc, [xc, *ref.parameters()]))):
        r = bench.measure(step, lesson="06", case=f"H{H} B{B} cudnn {what}", warmup_ms=25, rep_ms=100)
        emit(H=H, B=B, provider="cuDNN fp16", what=what, ms=r.ms, wall_ms=r.wall_ms)
emit(device=torch.cuda.get_device_name(), torch=torch.__version__, total_s=time.perf_counter() - t0)
