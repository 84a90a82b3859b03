"""The split backward that exchanges partial sums of dh, every fitting tiling timed beside the chooser's pick, and
(same run, same inputs) the version that exchanged dG, when present as ``scripts/_old_sb.py`` (ignored by git:
``git show 39d1c54:gpulab/rnn/fused/split_backward.py > scripts/_old_sb.py``, and carried to the device);
then forward+backward of one head of 768 through
``flashrnn`` beside cuDNN (``nn.LSTM``, fp16 and bf16, dense, with its input product), both clocks.

    python scripts/probe_split_backward.py   (a GPU; writes $OUT/split_backward.jsonl when OUT is set: stored as
                                             benchmarks/05_fused_rnn/split/<gpu>-<date>-partials.jsonl)

The kernel sweep is device time (``triton.testing.do_bench`` median) of the reverse-time kernel alone; each
candidate's dG and d(initial states) are compared with the pick's. The forward+backward rows carry ``ms`` (device)
and ``wall_ms`` (eager, calls back to back, one synchronize).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import triton

import gpulab  # noqa: F401
from gpulab import check
from gpulab.bench import timing
from gpulab.rnn import flashrnn
from gpulab.rnn.fused import split as S
from gpulab.rnn.fused import split_backward as SB
from gpulab.rnn.fused import split_tiling

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import _old_sb as OLD  # the dG-exchange kernel, for the same-run comparison
except ImportError:
    OLD = None

OUT = os.environ.get("OUT")
T, DT = 1024, torch.bfloat16
rows = []


def emit(**rec):
    rows.append(rec)
    print(json.dumps(rec), flush=True)


def inputs(B, NH, DH, dt=DT):
    g = torch.Generator(device="cuda").manual_seed(B + NH + DH)
    r = lambda *s, sc=1.0: (torch.randn(*s, device="cuda", generator=g) * sc).to(dt)  # noqa: E731
    return r(B, T, 4, NH, DH), r(4, NH, DH, DH, sc=0.5 / DH**0.5), r(4, NH, DH, sc=0.1), r(2, B, 1, NH, DH)


def sweep(B, NH, DH):
    Wx, R, b, s0 = inputs(B, NH, DH)
    pick = split_tiling.split_tiling(B, NH, DH, "lstm", DT, direction="backward")
    fwd = split_tiling.split_tiling(B, NH, DH, "lstm", DT, direction="forward")
    out, last, gates = S.split_rnn_forward(Wx, R, b, s0, "lstm", True, fwd)
    d_out = torch.randn_like(out)
    want = SB.split_rnn_backward(d_out, gates, out, s0, R, "lstm", pick)
    runs = [("partials", c) for c in split_tiling.split_candidates(B, NH, DH, "lstm", DT, direction="backward")]
    if OLD is not None:  # the dG exchange at the tilings its chooser allowed (2, 4 and 8 warps of 16 units)
        runs += [("exchange dG", split_tiling.SplitTiling(16, 16, pick.block_k, pick.chunks, w, -(-DH // 16),
                                                         NH * -(-DH // 16) * -(-B // 16), 0, 0, 1, 0.0, True))
                 for w in (2, 4)]  # fmt: skip
    for kernel, c in runs:
        if not c.fits:
            continue
        rec = dict(kind="candidate", kernel=kernel, B=B, NH=NH, DH=DH, block_u=c.block_u, block_b=c.block_b,
                   warps=c.num_warps, programs=c.programs, chosen=kernel == "partials" and c == pick,
                   est_ms=c.score * T * 1e-6, regs_est=c.registers_per_thread, smem_est=c.shared_bytes)  # fmt: skip
        mod = SB if kernel == "partials" else OLD
        try:
            f = lambda c=c, mod=mod: mod.split_rnn_backward(d_out, gates, out, s0, R, "lstm", c)  # noqa: E731
            got = f()
            rec["err_dG"] = float(check.relative_error(got[0].float(), want[0].float()))
            rec["err_ds0"] = float(check.relative_error(got[1].float(), want[1].float()))
            rec["ms"] = triton.testing.do_bench(f, warmup=10, rep=60)
        except Exception as exc:  # noqa: BLE001
            rec["error"] = f"{type(exc).__name__}: {exc}"[:300]
        emit(**rec)


def training(B, NH, DH):
    """Forward+backward of the recurrence (gradients of all four inputs), ours and cuDNN's dense LSTM of one head."""
    Wx, R, b, s0 = (t.requires_grad_() for t in inputs(B, NH, DH))

    def ours():
        o, la = flashrnn(Wx, R, b, s0, function="lstm", backend="fused")
        return torch.autograd.grad((o, la), (Wx, R, b, s0), (torch.ones_like(o), torch.ones_like(la)))

    cases = {"gpulab fused": ours}
    H = NH * DH
    for dt in (torch.float16, torch.bfloat16):
        m = torch.nn.LSTM(H, H).to("cuda", dt)
        m.flatten_parameters()
        x = torch.randn(T, B, H, device="cuda", dtype=dt, requires_grad=True)

        def dense(m=m, x=x):
            y, (h, c) = m(x)
            return torch.autograd.grad(y.sum() + h.sum() + c.sum(), [x, *m.parameters()])

        cases[f"cuDNN nn.LSTM {str(dt)[6:]} (dense, with the input product)"] = dense
    for name, f in cases.items():
        f()
        torch.cuda.synchronize()
        dev = timing.time_callable(f, warmup_ms=50, rep_ms=300)
        wall = timing.wall_time(f, warmup_ms=50, rep_ms=300)
        emit(kind="fwd+bwd", B=B, NH=NH, DH=DH, case=name, ms=dev.median_ms, wall_ms=wall.median_ms)


print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, flush=True)
emit(kind="env", device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
     date=time.strftime("%Y-%m-%d"), what="scripts/probe_split_backward.py")  # fmt: skip
SHAPES = ((16, 1, 768), (32, 1, 768), (32, 4, 192), (16, 1, 512), (16, 1, 1024), (16, 1, 256))
for shape in SHAPES[: int(os.environ.get("SHAPES", len(SHAPES)))]:
    sweep(*shape)
training(16, 1, 768)
for key in sorted({(r["B"], r["NH"], r["DH"]) for r in rows if r["kind"] == "candidate"}):
    mine = [r for r in rows if r["kind"] == "candidate" and (r["B"], r["NH"], r["DH"]) == key and "ms" in r]
    new = [r for r in mine if r["kernel"] == "partials"]
    if new:
        best = min(new, key=lambda r: r["ms"])
        pick = [round(r["ms"], 3) for r in new if r["chosen"]]
        old = [(r["warps"], round(r["ms"], 3)) for r in mine if r["kernel"] != "partials"]
        print(f"{key}: best {best['ms']:.3f} ms (block_u {best['block_u']}, block_b {best['block_b']}, "
              f"{best['warps']} warps); pick {pick}; exchange dG {old}")  # fmt: skip
if OUT:
    with open(os.path.join(OUT, "split_backward.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
