"""Probe (not a lesson benchmark): the stepwise kernels (one launch per step, the step's GEMM with the cell as its
epilogue) against the split kernels' launches of fewer rows, at the drop-in grid's large batches.

Part 1, tiles: for each point (one layer, T 256, fp16), forward and forward+backward of ``flashrnn``'s fused loops
with the stepwise kernels at several tiles, each checked first against the float32 ``alternating`` backend on the
first 32 steps. Part 2, the module: ``gpulab.rnn.LSTM`` forward+backward with ``FusedConfig(large_batch='steps')``
(the stepwise kernels where the on-chip kernels cannot take the batch) and ``'launches'`` (launches of fewer rows),
each checked against ``nn.LSTM`` first, and cuDNN ``nn.LSTM`` fp16, both clocks. Writes
$OUT/probe-lstm-stepwise.jsonl. Part 'wide': more tiles at B 256 (one wave of programs), then the module at H1536 B256.
Usage: python scripts/probe_lstm_stepwise.py [tiles|wide|module|all] [seconds]
"""

import sys
import time

import torch
from probe_log import emitter
from torch import nn

from gpulab import bench, check
from gpulab.rnn import flashrnn
from gpulab.rnn.backends.autograd import TritonRNN
from gpulab.rnn.fused import plan
from gpulab.rnn.fused.config import FusedConfig
from gpulab.rnn.fused.measure.lstm_grid import check_against_torch, step_of
from gpulab.rnn.fused.stepwise import StepTiles, step_rnn_forward, step_rnn_gradients, step_tiles
from gpulab.rnn.module import LSTM

PART = sys.argv[1] if len(sys.argv) > 1 else "all"
BUDGET = float(sys.argv[2]) if len(sys.argv) > 2 else 400.0
T = 256
TILE_POINTS = [(1024, 256), (1536, 64), (768, 256), (1536, 256), (1024, 64)]
TILES = [
    StepTiles(64, 16, 64, 4, 3),
    StepTiles(64, 32, 64, 4, 3),
    StepTiles(128, 32, 64, 8, 3),
    StepTiles(32, 16, 64, 4, 3),
]
WIDE_POINTS = [(1536, 256), (768, 256), (1024, 256)]
WIDE_TILES = [  # part 'wide': tiles that run a step's programs in one wave at B 256
    StepTiles(64, 32, 64, 4, 4),
    StepTiles(64, 64, 64, 4, 3),
    StepTiles(64, 64, 64, 8, 3),
    StepTiles(128, 32, 64, 8, 2),
    StepTiles(128, 16, 64, 4, 3),
    StepTiles(64, 32, 128, 4, 2),
    StepTiles(64, 32, 64, 8, 3),
    StepTiles(64, 32, 32, 4, 5),
]
MODULE_POINTS = [(H, L, B) for H, B in ((768, 256), (1024, 256), (1536, 64), (1536, 256)) for L in (1, 2)]
VARIANTS = (("steps", FusedConfig(large_batch="steps")), ("launches", FusedConfig(large_batch="launches")))
ALTERNATING = "alternating" in sys.argv  # also time backend='alternating' (a cuBLAS product per step)
emit = emitter("probe-lstm-stepwise")
t0 = time.perf_counter()


def left() -> bool:
    return time.perf_counter() - t0 < BUDGET


def inputs(B, H, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s, sc=1.0: (torch.randn(*s, generator=g) * sc).to("cuda", torch.float16)  # noqa: E731
    return r(B, T, 4, 1, H), r(4, 1, H, H, sc=0.5 / H**0.5), r(4, 1, H), r(2, B, 1, 1, H, sc=0.5)


def time_tiles(H, B, leaves, cfg, default):
    """One tile config at one point: checked on 32 steps against float32 ``alternating``, then timed."""
    Wx, R, b, s0 = leaves
    name = f"tiles H{H} B{B} {cfg.block_m}x{cfg.block_u}x{cfg.block_k} w{cfg.warps} s{cfg.stages} one dot"

    def fwd(*a, **k):
        return step_rnn_forward(*a, tiles=cfg, **k)

    def bwd(*a, **k):
        return step_rnn_gradients(*a, tiles=cfg, **k)

    try:
        short = [Wx.detach()[:, :32], R.detach(), b.detach(), s0.detach()]
        got = TritonRNN.apply(*short, "lstm", fwd, None)[0]
        want = flashrnn(*[t.float() for t in short], function="lstm", backend="alternating")[0]
        err = check.relative_error(got.double(), want.double())
        status = "ok" if err < 2e-2 and torch.isfinite(got).all() else f"error {err:.3g}"

        def forward():
            with torch.no_grad():
                TritonRNN.apply(Wx, R, b, s0, "lstm", fwd, None)

        def train():
            for t in leaves:
                t.grad = None
            out, last = TritonRNN.apply(*leaves, "lstm", fwd, bwd)
            out.sum().backward()

        f = bench.measure(forward, lesson="06", case="probe", warmup_ms=25, rep_ms=100)
        tr = bench.measure(train, lesson="06", case="probe", warmup_ms=25, rep_ms=150)
        emit(case=name, H=H, B=B, T=T, tiles=cfg.__dict__, default=default, check=status, fwd_ms=f.ms,
             fwd_wall_ms=f.wall_ms, ms=tr.ms, wall_ms=tr.wall_ms)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - recorded, the next runs
        emit(case=name, status=f"{type(exc).__name__}: {exc}"[:300])


def tiles_part(points, candidates):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for H, B in points:
        leaves = [t.requires_grad_() for t in inputs(B, H)]
        for tiles in [None, *candidates]:
            if not left():
                emit(case=f"tiles H{H} B{B}", status="skipped: budget")
                return
            time_tiles(H, B, leaves, tiles or step_tiles(B, H, 1, sms), tiles is None)


def module_part(points=MODULE_POINTS):
    for H, L, B in points:
        name = f"module H{H} L{L} B{B}"
        if not left():
            emit(case=name, status="skipped: budget")
            continue
        torch.manual_seed(0)
        x = torch.randn(B, T, H, device="cuda", dtype=torch.float16, requires_grad=True)
        m = LSTM(H, H, L, batch_first=True, backend="fused").to("cuda", torch.float16)
        ref = nn.LSTM(H, H, L, batch_first=True).to("cuda", torch.float16)
        xc = x.detach().requires_grad_()
        try:
            ours = step_of(m, x, [x, *m.parameters()])
            for label, config in VARIANTS:
                with plan.config_as(config):
                    kind = plan.plan_kind(B, 1, H, "lstm", torch.float16, True)
                    try:
                        status = check_against_torch(m, x, f"{name} {label}")
                    except AssertionError as exc:
                        status = f"failed: {exc}"[:300]
                    r = bench.measure(ours, lesson="06", case="probe", warmup_ms=25, rep_ms=150)
                emit(case=name, H=H, L=L, B=B, T=T, provider=f"gpulab fp16 {label}", kind=kind, check=status,
                     ms=r.ms, wall_ms=r.wall_ms)  # fmt: skip
            if ALTERNATING:
                alt = LSTM(H, H, L, batch_first=True, backend="alternating").to("cuda", torch.float16)
                alt.load_state_dict(m.state_dict())
                r = bench.measure(step_of(alt, x, [x, *alt.parameters()]), lesson="06", case="probe", warmup_ms=25,
                                  rep_ms=150)  # fmt: skip
                emit(case=name, H=H, L=L, B=B, T=T, provider="gpulab fp16 alternating", ms=r.ms, wall_ms=r.wall_ms)
            r = bench.measure(step_of(ref, xc, [xc, *ref.parameters()]), lesson="06", case="probe", warmup_ms=25,
                              rep_ms=150)  # fmt: skip
            emit(case=name, H=H, L=L, B=B, T=T, provider="cuDNN fp16", ms=r.ms, wall_ms=r.wall_ms)
        except Exception as exc:  # noqa: BLE001 - recorded, the next point runs
            emit(case=name, status=f"{type(exc).__name__}: {exc}"[:300])


if PART in ("tiles", "all"):
    tiles_part(TILE_POINTS, TILES)
if PART == "wide":
    tiles_part(WIDE_POINTS, WIDE_TILES)
    module_part([(1536, 1, 256), (1536, 2, 256)])  # 'launches' there: alternating
if PART in ("module", "all"):
    module_part()
if PART == "module1":  # one layer only
    module_part([p for p in MODULE_POINTS if p[1] == 1])
emit(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=__import__("triton").__version__,
     total_s=time.perf_counter() - t0, date=time.strftime("%Y-%m-%d"))  # fmt: skip
