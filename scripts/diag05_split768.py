"""Diagnosis of tests/rnn/fused/test_rnn_split.py::test_persistent_split_forward_on_gpu[768-lstm] on the H100:
the chooser's tiling (hinted exchange at 768) against per-step launches, the barrier exchange on the same tiling,
the barrier tiling without the hinted entry, float64, and repeated launches."""

import sys

import torch

from gpulab import rnn, runtime
from gpulab.rnn.fused import split, split_tiling

sys.path.insert(0, "tests/rnn")
from conftest import _make_inputs  # noqa: E402

B, T, DH = 16, 64, 768
inputs = _make_inputs("lstm", B, T, 1, DH, dtype=torch.bfloat16, device=runtime.device)
ref = rnn.flashrnn(*(t.detach().double() for t in inputs), function="lstm", backend="vanilla")[0]
cfg = split_tiling.split_tiling(B, 1, DH, "lstm", torch.bfloat16)
print("chooser:", cfg)
saved = dict(split_tiling.MEASURED_EXCHANGE)
split_tiling.MEASURED_EXCHANGE.clear()
getattr(split_tiling.split_tiling, "cache_clear", lambda: None)()
cfg_b = split_tiling.split_tiling(B, 1, DH, "lstm", torch.bfloat16)
split_tiling.MEASURED_EXCHANGE.update(saved)
getattr(split_tiling.split_tiling, "cache_clear", lambda: None)()
print("without the hinted entry:", cfg_b)


def run(**kw):
    return split.split_rnn_forward(*inputs, function="lstm", save_gates=False, **kw)[0]


def rel(x):
    return ((x.double() - ref).norm() / ref.norm()).item()


outs = {
    "default": run(),
    "steps (persistent=False)": run(persistent=False),
    "cfg, barrier": run(tiling=cfg, exchange="barrier"),
    "cfg, hinted": run(tiling=cfg, exchange="hinted"),
    "cfg, steps": run(tiling=cfg, persistent=False),
    "barrier tiling": run(tiling=cfg_b),
    "barrier tiling, steps": run(tiling=cfg_b, persistent=False),
}
base = outs["default"]
for k, v in outs.items():
    print(
        f"{k:28s} equal to default: {torch.equal(v, base)}  rel err vs float64 {rel(v):.3e}  "
        f"max |diff| {(v.float() - base.float()).abs().max().item():.3e}  nan {torch.isnan(v).any().item()}"
    )
for name, kw in (
    ("default", {}),
    ("barrier tiling", dict(tiling=cfg_b)),
    ("cfg, barrier", dict(tiling=cfg, exchange="barrier")),
):
    first = run(**kw)
    bad = sum(not torch.equal(run(**kw), first) for _ in range(50))
    print(f"{name}: {bad} of 50 repeated launches differ from the first")
