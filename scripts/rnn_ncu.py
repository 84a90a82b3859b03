"""Run one fused RNN kernel twice at the issue's size (for `ncu --launch-skip 1 --launch-count 1`).

Usage: PYTHONPATH=. python scripts/rnn_ncu.py forward|train|backward [warps]
"""

import sys

import torch

sys.path.insert(0, "scripts")
from rnn_probe2 import bwd, fwd  # noqa: E402

from gpulab.rnn import api  # noqa: E402
from gpulab.rnn.benchmark import problem_inputs  # noqa: E402

which = sys.argv[1]
warps = int(sys.argv[2]) if len(sys.argv) > 2 else 0
api.POISON = False
Wx, R, b, s0 = problem_inputs(16, 1024, 12, 64, torch.bfloat16)
out, last, gates = fwd(Wx, R, b, s0, "lstm", True, warps)
d_out, d_last = torch.randn_like(out), torch.randn_like(s0)
torch.cuda.synchronize()
for _ in range(2):
    if which == "forward":
        fwd(Wx, R, b, s0, "lstm", False, warps)
    elif which == "train":
        fwd(Wx, R, b, s0, "lstm", True, warps)
    else:
        bwd(d_out, gates, out, s0, R, "lstm", d_last, warps)
torch.cuda.synchronize()
