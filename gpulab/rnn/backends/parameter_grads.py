"""The parameter gradients of every Triton backend, from the gate gradients dG: batched products, no recurrence.

Once a backend's reverse-time loop has written dG [B, T, G_b, NH, DH] (the gradients of the gate
pre-activations), what is left needs no time loop:

    dR[g, n] = sum_{b, t} dG[b, t, g, n]^T h_{t-1}[b, n]   per head one product over K = B*T rows
    db       = sum_{b, t} dG[b, t]                            one reduction (fp32 accumulation)
    dWx      = dG (its input gates)                           no work at all: the same tensor

In one pass (:func:`parameter_grads`: the ``alternating`` backend, and the ``fused`` one for a sequence it does not
cut), or piece by piece in time (:func:`gate_products`, summed in fp32 beside the fused backward kernel on a second
stream, :mod:`gpulab.rnn.fused.backward`), where h_{t-1} gets a column of ones so that one product per
piece gives db too.

At a few rows (a short sequence, a small batch) the GPU's work is microseconds, and the cost is the host's: the
concatenation of h_{t-1}, the product, the reduction and the casts are six or more PyTorch launches. There
:func:`small_parameter_grads` does it all in one Triton launch (:func:`parameter_grads_kernel`: it reads h_{t-1}
where it lies, in the initial state and the outputs); :func:`parameter_grads` is its reference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import runtime
from gpulab.check import new_output
from gpulab.launch import aligned, direct_stream, keyed_launch
from gpulab.rnn.functions import get_function
from gpulab.triton_ops import dot

__all__ = [
    "PAD",
    "SMALL_ROWS",
    "previous_h_ones",
    "gate_products",
    "split_products",
    "parameter_grads",
    "parameter_grads_kernel",
    "small_parameter_grads",
    "gate_gradients_to_parameters",
]


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


def _input_gate_grads(dG, fn, time_major):
    """dWx: the input gates of dG, a [B, T, G_w, NH, DH] view (no copy)."""
    return (dG.transpose(0, 1) if time_major else dG)[:, :, fn.w_gates]


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
    return _input_gate_grads(dG, fn, time_major), dR, db


SMALL_ROWS = 2048
"""Up to this many rows K = B * T, :func:`small_parameter_grads` (one launch, each program looping over all rows);
above it the batched products of :func:`parameter_grads`, whose GEMMs split the rows over more of the GPU."""


@triton.jit
def parameter_grads_kernel(dg_ptr, out_ptr, s0_ptr, dr_ptr, db_ptr, B, T, NH,
                           DH: tl.constexpr, G_B: tl.constexpr, G_R: tl.constexpr, TIME_MAJOR: tl.constexpr,
                           BLOCK_K: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_M: tl.constexpr,
                           IS_FP32: tl.constexpr, PRECISION: tl.constexpr):  # fmt: skip
    """dR and db of one gate g and head n, units [j0, j0 + BLOCK_J) x [m0, m0 + BLOCK_M); program
    (g * NH + n, j-block, m-block):

        dR[g, n, j, m] = sum_k dG[k, g, n, j] h_{t-1}[k, n, m]     (only for g < G_R: gates that take R h)
        db[g, n, j]    = sum_k dG[k, g, n, j]                       (the m-block 0 programs)

    over the K = B * T rows k: (t, b) with k = t * B + b if ``TIME_MAJOR`` (dG [T, B, G_B, NH, DH]), else (b, t)
    with k = b * T + t (dG [B, T, G_B, NH, DH]). h_{t-1} is read where it lies: the initial state s0 [S, B, 1, NH,
    DH] (its h, index 0) at t = 0, else the outputs out [S, B, T, NH, DH] at step t - 1. fp32 accumulation.
    """
    gn, jb, mb = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    g, n = gn // NH, gn % NH
    j = jb * BLOCK_J + tl.arange(0, BLOCK_J)  # [BLOCK_J] units of the gate
    m = mb * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M] units of h_{t-1}
    rows = tl.arange(0, BLOCK_K)  # [BLOCK_K]
    K = B * T
    acc = tl.zeros([BLOCK_J, BLOCK_M], dtype=tl.float32)
    acc_b = tl.zeros([BLOCK_J], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + rows
        if TIME_MAJOR:
            t, b = k // B, k % B
        else:
            b, t = k // T, k % T
        in_k = k < K
        dg = tl.load(  # [BLOCK_K, BLOCK_J]
            dg_ptr + (k.to(tl.int64) * G_B * NH + g * NH + n)[:, None] * DH + j[None, :],
            mask=in_k[:, None] & (j < DH)[None, :],
            other=0.0,
        )
        acc_b += tl.sum(dg.to(tl.float32), axis=0)
        if g < G_R:
            first = in_k & (t == 0)
            later = in_k & (t > 0)
            m_ok = (m < DH)[None, :]
            h0 = tl.load(s0_ptr + ((b * NH + n) * DH)[:, None] + m[None, :], mask=first[:, None] & m_ok, other=0.0)
            ht = tl.load(  # [BLOCK_K, BLOCK_M]: h_{t-1} = out[0, b, t - 1, n, m]
                out_ptr + (((b * T + t - 1).to(tl.int64) * NH + n) * DH)[:, None] + m[None, :],
                mask=later[:, None] & m_ok,
                other=0.0,
            )
            acc += dot(tl.trans(dg), h0 + ht, IS_FP32, PRECISION)  # [BLOCK_J, BLOCK_K] x [BLOCK_K, BLOCK_M]
    if g < G_R:
        out = dr_ptr + ((g * NH + n) * DH + j)[:, None] * DH + m[None, :]
        tl.store(out, acc.to(dr_ptr.dtype.element_ty), mask=(j < DH)[:, None] & (m < DH)[None, :])
    if mb == 0:
        tl.store(db_ptr + (g * NH + n) * DH + j, acc_b.to(db_ptr.dtype.element_ty), mask=j < DH)


def small_parameter_grads(dG, out, states, function, time_major=False):
    """:func:`parameter_grads` in one launch (:func:`parameter_grads_kernel`), for K = B * T <= :data:`SMALL_ROWS`
    rows; same arguments and results ``(dWx, dR, db)``. ``dG``, ``out`` and ``states`` are contiguous."""
    fn = get_function(function)
    _, B, T, NH, DH = out.shape
    G_B = dG.shape[2]
    dR = new_output(fn.gates_r, NH, DH, DH, dtype=dG.dtype, device=dG.device)
    db = new_output(G_B, NH, DH, dtype=dG.dtype, device=dG.device)
    ints, dtype = (B, T, NH), dG.dtype

    def make():  # the grid and constexprs, built once per problem (keyed_launch)
        block = max(16, min(64, runtime.next_power_of_2(DH)))
        return (G_B * NH, triton.cdiv(DH, block), triton.cdiv(DH, block)), dict(
            DH=DH, G_B=G_B, G_R=fn.gates_r, TIME_MAJOR=time_major, BLOCK_K=32, BLOCK_J=block, BLOCK_M=block,
            IS_FP32=dtype == torch.float32, PRECISION=runtime.dot_precision(dtype), num_warps=4,
        )  # fmt: skip

    launch = keyed_launch((parameter_grads_kernel, fn.code, dtype, DH, G_B, bool(time_major)) + ints, make)
    tensors = (dG, out, states, dR, db)
    launch(direct_stream(dG.device) if aligned(*tensors) else None, *tensors, *ints)
    return _input_gate_grads(dG, fn, time_major), dR, db


def gate_gradients_to_parameters(dG, out, states, function, time_major=False):
    """``(dWx, dR, db)`` by the faster route for the row count: :func:`small_parameter_grads` (one launch) up to
    :data:`SMALL_ROWS` rows K = B * T, else :func:`parameter_grads`. Same arguments as both."""
    if out.shape[1] * out.shape[2] <= SMALL_ROWS:
        return small_parameter_grads(dG.contiguous(), out.contiguous(), states.contiguous(), function, time_major)
    return parameter_grads(dG, out, states, function, time_major)
