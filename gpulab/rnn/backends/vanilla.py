"""The ``vanilla`` backend: a PyTorch time loop, the baseline FlashRNN's speed-ups are measured against.

Per step t, for all heads at once:

    Ry_t = h_{t-1} R^T per head and gate       one batched product [NH, B, DH] x [NH, DH, G_r*DH]
    states_t = cell(Wx_t, Ry_t, b, states_{t-1})   ~10 elementwise PyTorch ops (:func:`cells.cell_step_torch`)

That is 1 + ~10 kernel launches per step, each reading and writing its operands through HBM: for T = 1024 steps
about 10^4 launches, which is why this backend is ~100x slower than one persistent kernel. Autograd records every
op, so the backward is PyTorch's (and keeps every intermediate). In float64 it is gpulab's reference.

Layouts are flashrnn's (see :func:`gpulab.rnn.flashrnn`); arithmetic happens in the inputs' dtype, like the
``flashrnn`` package's vanilla backend, whose results this one reproduces.
"""

from __future__ import annotations

import torch

from gpulab import runtime
from gpulab.rnn.cells import cell_step_torch
from gpulab.rnn.functions import get_function

__all__ = ["vanilla_forward", "recurrent_matrix"]


def recurrent_matrix(R: torch.Tensor) -> torch.Tensor:
    """R [G, NH, DH, DH] (R[g, n, j, k]: input unit k to gate unit j) as [NH, DH_k, G*DH_j] for ``h @ R``."""
    runtime.require_tensor("R", R, ndim=4, device_check=False)
    g, nh, dh, dk = R.shape
    if dk != dh:
        raise ValueError(f"R must be [G, NH, DH, DH] (square per head), got shape {list(R.shape)}: DH={dh} but {dk}.")
    return R.permute(1, 3, 0, 2).reshape(nh, dh, g * dh)


def vanilla_forward(Wx, R, b, states, function="lstm"):
    """The time loop in PyTorch: Wx [B, T, G_w, NH, DH], R [G_r, NH, DH, DH], b [G_b, NH, DH],
    states [S, B, 1, NH, DH]; returns (all states [S, B, T, NH, DH], last states [S, B, 1, NH, DH])."""
    fn = get_function(function)
    B, T, _, NH, DH = Wx.shape
    rt = recurrent_matrix(R)
    s = states[:, :, 0]  # [S, B, NH, DH]
    out = []
    for t in range(T):
        ry = torch.bmm(s[0].transpose(0, 1), rt).view(NH, B, fn.gates_r, DH).permute(1, 2, 0, 3)
        s = cell_step_torch(fn.name, Wx[:, t], ry, b, s)
        out.append(s)
    if T == 0:
        return states.new_empty((fn.states, B, 0, NH, DH)), states
    return torch.stack(out, dim=2), s.unsqueeze(2)
