"""Run one fused RNN kernel twice at lesson 5's problem (for `ncu --launch-skip 1 --launch-count 1`).

Usage: PYTHONPATH=. python scripts/rnn_ncu.py forward|train|backward
"""

import sys

import torch

from gpulab.rnn.fused import backward as fused_backward
from gpulab.rnn.fused import forward as fused_forward
from gpulab.rnn.fused.measure.benchmark import problem_inputs

which = sys.argv[1]
# timed as in use: on a GPU outputs are not NaN-filled first unless GPULAB_POISON=1 (gpulab.runtime.POISON)
Wx, R, b, s0 = problem_inputs(16, 1024, 12, 64, torch.bfloat16)
out, last, gates = fused_forward.fused_rnn_forward(Wx, R, b, s0, "lstm", save_gates=True)
d_out, d_last = torch.randn_like(out), torch.randn_like(s0)
torch.cuda.synchronize()
for _ in range(2):
    if which == "forward":
        fused_forward.fused_rnn_forward(Wx, R, b, s0, "lstm", save_gates=False)
    elif which == "train":
        fused_forward.fused_rnn_forward(Wx, R, b, s0, "lstm", save_gates=True)
    else:
        fused_backward.fused_rnn_backward(d_out, gates, out, s0, R, "lstm", d_last=d_last)
torch.cuda.synchronize()
