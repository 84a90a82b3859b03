"""The parameter gradients of every Triton backend, from the gate gradients dG: batched products, no recurrence.

Once a backend's reverse-time loop has written dG [B, T, G_b, NH, DH] (the gradients of the gate
pre-activations), what is left needs no time loop:

    dR[g, n] = sum_{b, t} dG[b, t, g, n]^T h_{t-1}[b, n]   per head one product over K = B*T rows
    db       = sum_{b, t} dG[b, t]                            one reduction (fp32 accumulation)
    dWx      = dG (its input gates)                           no work at all: the same tensor

In one pass (:func:`parameter_grads`: the ``alternating`` backend, and the ``fused`` one for a sequence it does not
cut), or piece by piece in time (:func:`gate_products`, summed in fp32 beside the fused backward kernel on a second
stream, :mod:`gpulab.rnn.backends.fused.backward`), where h_{t-1} gets a column of ones so that one product per
piece gives db too.
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


def parameter_grads(dG, out, states, function, time_major=False):
    """(dWx, dR, db) from the gate gradients dG [B, T, G_b, NH, DH] ([T, B, ...] if ``time_major``; B and T
    mergeable into one row dimension), in dG's dtype, in one pass: the products of a sequence that is not cut.

    dR[g, n, j, k] = sum_{b,t} dG[b, t, g, n, j] h_{t-1}[b, n, k]: one product per head over the K = B*T rows
    (fp32 accumulation); db = sum_{b,t} dG (fp32 accumulation); dWx = the input gates of dG (a view, no copy).
    Few launches: h_{t-1} is one concatenation, the products one einsum, db one reduction.
    """
    fn = get_function(function)
    B, T = out.shape[1], out.shape[2]
    G_b, NH, DH = dG.shape[2:]
    if time_major:  # h_{t-1} [T, B, NH, DH]: the initial h, then h_0 .. h_{T-2}
        h = torch.cat((states[0].transpose(0, 1), out[0, :, : T - 1].transpose(0, 1)))
    else:  # [B, T, NH, DH]
        h = torch.cat((states[0], out[0, :, : T - 1]), dim=1)
    rows = dG.reshape(B * T, G_b, NH, DH)
    dR = torch.einsum("kgnj,knm->gnjm", rows[:, fn.r_gates], h.reshape(B * T, NH, DH)).contiguous()
    db = rows.sum(0, dtype=torch.float32).to(dG.dtype)
    dWx = dG[:, :, fn.w_gates] if not time_major else dG.transpose(0, 1)[:, :, fn.w_gates]
    return dWx, dR, db
