"""The parameter gradients of every Triton backend, from the gate gradients dG: batched products, no recurrence.

Once a backend's reverse-time loop has written dG [B, T, G_b, NH, DH] (the gradients of the gate
pre-activations), what is left needs no time loop:

    dR[g, n] = sum_{b, t} dG[b, t, g, n]^T h_{t-1}[b, n]   per gate one batched product over the heads (K = B*T)
    db       = sum_{b, t} dG[b, t]                            the same product: h_{t-1} gets a column of ones
    dWx      = dG (its input gates)                           no work at all: the same tensor

Used by the ``alternating`` backend (:func:`parameter_grads`, after its loop) and by the ``fused`` backend
(:func:`gate_products` piece by piece beside its kernel, :mod:`gpulab.rnn.backends.fused.backward`).
"""

from __future__ import annotations

import torch

from gpulab.rnn.functions import get_function

__all__ = ["PAD", "previous_h_ones", "gate_products", "split_products", "parameter_grads"]


PAD = 8  # h_{t-1} gets a column of ones and 7 of zeros: db comes out of the dR product, rows stay 16-byte aligned


def previous_h_ones(out, states, time_major=False):
    """[h_{t-1}, 1, 0 ...] for every step: [B, T, NH, DH + PAD] ([T, B, ...] if ``time_major``), h_{-1} = the initial
    h. The column of ones makes ``dG^T @ it`` give db beside dR."""
    _, B, T, NH, DH = out.shape
    h = torch.zeros((T, B, NH, DH + PAD) if time_major else (B, T, NH, DH + PAD), dtype=out.dtype, device=out.device)
    steps = h if time_major else h.transpose(0, 1)  # [T, B, ...] view either way
    steps[0, :, :, :DH] = states[0, :, 0]
    steps[1:, :, :, :DH] = out[0, :, :-1].transpose(0, 1)
    h[..., DH] = 1
    return h


def gate_products(dg_rows, h_rows):
    """sum over rows of dG^T [h, 1, 0...] per gate and head: [G_b, NH, DH, DH + PAD] in fp32 (column DH is db).

    ``dg_rows`` [K, G_b, NH, DH] and ``h_rows`` [K, NH, DH + PAD] are views (K = the batch and time rows); per gate
    one batched product over the heads reads dG where it lies (as a matrix per head, [DH, K] with leading
    dimension G_b * NH * DH): no copy."""
    K, G_b, NH, DH = dg_rows.shape
    h = h_rows.transpose(0, 1)  # [NH, K, DH + PAD]
    out = torch.empty(G_b, NH, DH, DH + PAD, dtype=dg_rows.dtype, device=dg_rows.device)
    for g in range(G_b):
        torch.bmm(dg_rows[:, g].permute(1, 2, 0), h, out=out[g])
    return out.float()


def split_products(prod, fn, dtype):
    """(dR, db) in ``dtype`` from :func:`gate_products`'s sums."""
    DH = prod.shape[2]
    return prod[fn.r_gates, :, :, :DH].to(dtype).contiguous(), prod[..., DH].to(dtype).contiguous()


def parameter_grads(dG, out, states, function):
    """(dWx, dR, db) from the gate gradients dG [B, T, G_b, NH, DH] (any strides with B*T mergeable), in dG's dtype.

    dR[g, n, j, k] = sum_{b,t} dG[b, t, g, n, j] h_{t-1}[b, n, k]: per gate one batched product over the heads with
    K = B*T (fp32 accumulation), reading dG where it lies. The same product gives db: h_{t-1} carries an extra column
    of ones, so column DH of the result is sum_{b,t} dG (no separate pass over dG). dWx = the input gates of dG.
    """
    fn = get_function(function)
    B, T, G_b, NH, DH = dG.shape
    h = previous_h_ones(out, states)
    prod = gate_products(dG.reshape(B * T, G_b, NH, DH), h.view(B * T, NH, DH + PAD))
    dR, db = split_products(prod, fn, dG.dtype)
    return dG[:, :, fn.w_gates], dR, db
