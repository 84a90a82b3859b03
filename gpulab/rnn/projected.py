"""The LSTM with projections (``torch.nn.LSTM(..., proj_size=P)``), as a PyTorch loop any device and dtype runs.

Per step (gate order i, f, g, o; Wx already holds x W_ih^T + b_ih + b_hh):

    (i, f, g, o) = Wx_t + h_{t-1} W_hh^T        W_hh [4H, P]: the recurrence reads the projected h
    c_t = sigma(f) c_{t-1} + sigma(i) tanh(g)
    h_t = W_hr (sigma(o) tanh(c_t))              W_hr [P, H]

The recurrent product is [B, P] x [P, 4H] and the projection [B, H] x [H, P] each step: gpulab's recurrent kernels
hold a square DH x DH block per gate and head, so this loop is the path for ``proj_size > 0`` on every backend.
"""

from __future__ import annotations

import torch

__all__ = ["projected_lstm"]


def projected_lstm(wx, w_hh, w_hr, h0=None, c0=None):
    """wx [B, T, 4H], w_hh [4H, P], w_hr [P, H], h0 [B, P], c0 [B, H] (default zeros) -> (h [B, T, P], c [B, T, H])."""
    B, T, G = wx.shape
    H, P = G // 4, w_hr.shape[0]
    h = wx.new_zeros(B, P) if h0 is None else h0
    c = wx.new_zeros(B, H) if c0 is None else c0
    hs, cs = [], []
    for t in range(T):
        i, f, g, o = (wx[:, t] + h @ w_hh.T).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = (torch.sigmoid(o) * torch.tanh(c)) @ w_hr.T
        hs.append(h)
        cs.append(c)
    return torch.stack(hs, 1), torch.stack(cs, 1)
