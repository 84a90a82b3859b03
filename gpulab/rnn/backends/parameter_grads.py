"""The parameter gradients of every Triton backend, from the gate gradients dG: batched products, no recurrence.

Once a backend's reverse-time loop has written dG [B, T, G_b, NH, DH] (the gradients of the gate
pre-activations), what is left needs no time loop:

    dR[g, n] = sum_{b, t} dG[b, t, g, n]^T h_{t-1}[b, n]   per head one product over K = B*T rows
    db       = sum_{b, t} dG[b, t]                            one reduction (fp32 accumulation)
    dWx      = dG (its input gates)                           no work at all: the same tensor

In one pass (:func:`parameter_grads`: the ``alternating`` backend, and the ``fused`` one for a sequence it does not
cut), or piece by piece in time (:func:`step_products`: one Triton launch per piece of the sequence beside the fused
backward kernel on a second stream, :mod:`gpulab.rnn.fused.backward`; it reads a piece's rows where they lie, so dG
can stay in Wx's layout and be dWx as it is). :func:`gate_products` is the cuBLAS way the pieces went before:
batched GEMMs over a piece's rows as one strided matrix (dG time-major, h_{t-1} copied time-major with a column of ones
so that one product gives db too), kept for the scripts that measured it (``notes/rnn-fused.md``).

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
    "step_products",
    "step_splits",
    "input_gate_grads",
    "one_launch",
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


def input_gate_grads(dG, fn, time_major):
    """dWx: the input gates of dG ([B, T, G_b, NH, DH], or [T, B, ...] if ``time_major``; ``fn`` an RNNFunction) as
    a [B, T, G_w, NH, DH] view (no copy)."""
    return (dG.transpose(0, 1) if time_major else dG)[:, :, fn.w_gates]


def parameter_grads(dG, out, states, function, time_major=False, db=None):
    """(dWx, dR, db) from the gate gradients dG [B, T, G_b, NH, DH] ([T, B, ...] if ``time_major``; B and T
    mergeable into one row dimension), in dG's dtype, in one pass: the products of a sequence that is not cut.

    dR[g, n, j, k] = sum_{b,t} dG[b, t, g, n, j] h_{t-1}[b, n, k]: one product per head over the K = B*T rows
    (fp32 accumulation); db = sum_{b,t} dG (fp32 accumulation), unless given (``db``: summed where dG was made);
    dWx = the input gates of dG (a view, no copy).
    No copy of h_{t-1} for one head in dG's own layout (batch-major, dG [B, T, ...]): the outputs h_t, read as B * T
    rows, are h_{t-1} of the next row, so one product pairs dG's rows 1.. with the outputs' rows ..-2 where they
    lie, and only the B rows of t = 0 were paired wrongly (with the previous batch row's last h, or not at all): a
    product over those B rows replaces it by the initial h (``dG[b, 0]^T (h_{-1}[b] - h_{T-1}[b - 1])``).
    Time-major, or with several heads, h_{t-1} is two copies into one buffer: with several heads the product first
    gathers each head's dG into a matrix whose leading dimension is the row count, and B * T - 1 rows (odd) would
    send cuBLAS to a slow kernel (the capstone's four heads of 192 on the H100 lost more than the copies cost;
    ``notes/rnn-fused.md``). db is one reduction.
    """
    fn = get_function(function)
    B, T = out.shape[1], out.shape[2]
    G_b, NH, DH = dG.shape[2:]
    rows, r = dG.reshape(B * T, G_b, NH, DH), fn.r_gates
    if time_major or NH > 1:
        h = out.new_empty((T, B, NH, DH) if time_major else (B, T, NH, DH))  # h_{t-1}, in dG's order of rows
        steps = h if time_major else h.transpose(0, 1)  # [T, B, NH, DH] either way
        steps[0] = states[0, :, 0]  # the initial h, then h_0 .. h_{T-2}
        steps[1:] = out[0, :, : T - 1].transpose(0, 1)
        dR = torch.einsum("kgnj,knm->gnjm", rows[:, r], h.reshape(B * T, NH, DH))
    else:  # one head: plain GEMMs on [rows, gates * DH] matrices (an einsum adds permutes and views around its bmm)
        G_r = fn.gates_r  # (the recurrent gates are dG's first G_r)
        dg = rows.view(B, T, G_b * DH)
        dg = dg if G_r == G_b else dg[:, :, : G_r * DH]  # [B, T, G_r DH]: dG's recurrent gates, where they lie
        h = out.reshape(out.shape[0], B * T, DH)[0]  # [B T, DH], row b T + t: h_t
        dR = torch.mm(dg.reshape(B * T, G_r * DH)[1:].t(), h[:-1])  # [G_r DH, DH]: row k with row k - 1's h
        dg0 = dg[:, 0].t()  # [G_r DH, B]: the t = 0 rows, which the shift paired with the previous row's last h
        dR.addmm_(dg0, states.reshape(-1, DH)[:B])  # + their pairs with the initial h (states[0, b, 0, 0] is row b)
        if B > 1:
            dR.addmm_(dg0[:, 1:], h.view(B, T * DH)[: B - 1, (T - 1) * DH :], alpha=-1)  # - h_{T-1} of row b - 1
        dR = dR.view(G_r, 1, DH, DH)
    if db is None:  # (a kernel that wrote dG may have summed it already: b4's ``sum_db``)
        db = rows.sum(0)  # one kernel: a 16-bit sum accumulates in fp32 and rounds once (no fp32 result to cast)
    return input_gate_grads(dG, fn, time_major), dR.contiguous(), db


SMALL_ROWS = 2048
"""Up to this many rows K = B * T, :func:`small_parameter_grads` (one launch, each program looping over all rows);
above it the batched products of :func:`parameter_grads`, whose GEMMs split the rows over more of the GPU."""


@triton.jit
def parameter_grads_kernel(dg_ptr, out_ptr, s0_ptr, dr_ptr, db_ptr, B, T, NH, T0, STEPS, ROWS_PER_SPLIT,
                           DH: tl.constexpr, G_B: tl.constexpr, G_R: tl.constexpr, TIME_MAJOR: tl.constexpr,
                           BLOCK_K: tl.constexpr, BLOCK_J: tl.constexpr, BLOCK_M: tl.constexpr,
                           IS_FP32: tl.constexpr, PRECISION: tl.constexpr):  # fmt: skip
    """dR and db of one gate g and head n over the rows of steps [T0, T0 + STEPS), units [j0, j0 + BLOCK_J) x
    [m0, m0 + BLOCK_M), rows [s * ROWS_PER_SPLIT, (s + 1) * ROWS_PER_SPLIT) of them; program (g * NH + n,
    j-block * m-blocks + m-block, s):

        dR[s, g, n, j, m] = sum_k dG[k, g, n, j] h_{t-1}[k, n, m]     (only for g < G_R: gates that take R h)
        db[s, g, n, j]    = sum_k dG[k, g, n, j]                       (the m-block 0 programs)

    over the K = B * STEPS rows k of the steps: (t, b) with k = (t - T0) * B + b if ``TIME_MAJOR`` (dG [T, B,
    G_B, NH, DH]), else (b, t) with k = b * STEPS + t - T0 (dG [B, T, G_B, NH, DH], Wx's layout): either way dG
    is read where it lies, one row of DH units at a time. h_{t-1} too: the initial state s0 [S, B, 1, NH, DH]
    (its h, index 0) at t = 0, else the outputs out [S, B, T, NH, DH] at step t - 1. fp32 accumulation; each
    split s writes its own sums (a buffer [splits, ...], summed by the caller in a fixed order: deterministic).
    """
    gn, jm, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    g, n = gn // NH, gn % NH
    m_blocks: tl.constexpr = (DH + BLOCK_M - 1) // BLOCK_M
    jb, mb = jm // m_blocks, jm % m_blocks
    j = jb * BLOCK_J + tl.arange(0, BLOCK_J)  # [BLOCK_J] units of the gate
    m = mb * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M] units of h_{t-1}
    rows = tl.arange(0, BLOCK_K)  # [BLOCK_K]
    k_lo = s * ROWS_PER_SPLIT
    k_hi = tl.minimum(B * STEPS, k_lo + ROWS_PER_SPLIT)
    acc = tl.zeros([BLOCK_J, BLOCK_M], dtype=tl.float32)
    acc_b = tl.zeros([BLOCK_J], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        k = k0 + rows
        if TIME_MAJOR:
            t, b = T0 + k // B, k % B
            row = t.to(tl.int64) * B + b  # dG's row: [T, B]
        else:
            b, t = k // STEPS, T0 + k % STEPS
            row = b.to(tl.int64) * T + t  # [B, T]
        in_k = k < k_hi
        dg = tl.load(  # [BLOCK_K, BLOCK_J]
            dg_ptr + ((row * G_B + g) * NH + n)[:, None] * DH + j[None, :],
            mask=in_k[:, None] & (j < DH)[None, :],
            other=0.0,
        )
        acc_b += tl.sum(dg.to(tl.float32), axis=0)
        # no branch in the loop (the compiler pipelines its loads): a gate without R reads no h and adds zeros
        h_rows = tl.where(  # h_{t-1}: the initial state's h at t = 0, else out[0, b, t - 1]
            t == 0, s0_ptr + (b * NH + n) * DH, out_ptr + ((b * T + t - 1).to(tl.int64) * NH + n) * DH
        )
        h = tl.load(  # [BLOCK_K, BLOCK_M]
            h_rows[:, None] + m[None, :], mask=(in_k & (g < G_R))[:, None] & (m < DH)[None, :], other=0.0
        )
        acc += dot(tl.trans(dg), h, IS_FP32, PRECISION)  # [BLOCK_J, BLOCK_K] x [BLOCK_K, BLOCK_M]
    if g < G_R:
        out = dr_ptr + (((s * G_R + g) * NH + n) * DH + j)[:, None] * DH + m[None, :]
        tl.store(out, acc.to(dr_ptr.dtype.element_ty), mask=(j < DH)[:, None] & (m < DH)[None, :])
    if mb == 0:
        tl.store(db_ptr + ((s * G_B + g) * NH + n) * DH + j, acc_b.to(db_ptr.dtype.element_ty), mask=j < DH)


def _launch_products(dG, out, states, fn, dR, db, t0, t1, time_major, splits, block_k):
    """One launch of :func:`parameter_grads_kernel` over the steps [t0, t1), its ``splits`` row ranges writing
    ``dR`` [splits, G_R, NH, DH, DH] and ``db`` [splits, G_B, NH, DH]."""
    _, B, T, NH, DH = out.shape
    G_B, dtype = dG.shape[2], dG.dtype
    # ceil divisions in plain integers: this runs on every backward, and triton.cdiv called from Python costs
    # microseconds of host time (a ConstexprFunction wrapper)
    rows = -(-B * (t1 - t0) // splits)  # ceil(B * steps / splits)
    rows_per_split = -(-rows // block_k) * block_k  # rounded up to whole BLOCK_K chunks
    ints = (B, T, NH, t0, t1 - t0, rows_per_split)

    def make():  # the grid and constexprs, built once per problem (keyed_launch)
        block = max(16, min(64, runtime.next_power_of_2(DH)))
        return (G_B * NH, triton.cdiv(DH, block) ** 2, splits), dict(
            DH=DH, G_B=G_B, G_R=fn.gates_r, TIME_MAJOR=time_major, BLOCK_K=block_k, BLOCK_J=block, BLOCK_M=block,
            IS_FP32=dtype == torch.float32, PRECISION=runtime.dot_precision(dtype), num_warps=4,
            **({} if runtime.INTERPRET else {"num_stages": 3}),
        )  # fmt: skip

    key = (parameter_grads_kernel, fn.code, dtype, dR.dtype, DH, G_B, bool(time_major), splits, block_k) + ints
    launch = keyed_launch(key, make)
    tensors = (dG, out, states, dR, db)
    launch(direct_stream(dG.device) if aligned(*tensors) else None, *tensors, *ints)


def small_parameter_grads(dG, out, states, function, time_major=False):
    """:func:`parameter_grads` in one launch (:func:`parameter_grads_kernel`), for K = B * T <= :data:`SMALL_ROWS`
    rows; same arguments and results ``(dWx, dR, db)``. ``dG``, ``out`` and ``states`` are contiguous."""
    fn = get_function(function)
    _, B, T, NH, DH = out.shape
    G_B = dG.shape[2]
    dR = new_output(fn.gates_r, NH, DH, DH, dtype=dG.dtype, device=dG.device)
    db = new_output(G_B, NH, DH, dtype=dG.dtype, device=dG.device)
    _launch_products(dG, out, states, fn, dR, db, 0, T, time_major, splits=1, block_k=32)
    return input_gate_grads(dG, fn, time_major), dR, db


STEP_ROWS = 1024
"""Rows per split of :func:`step_products` (its grid: gates x heads x unit blocks x row splits; at the lesson's
main problem, 48 x 1 x 14 programs over 7/8 of the sequence)."""


def step_splits(B, steps, rows: int | None = None) -> int:
    """How many row splits :func:`step_products` uses for ``steps`` steps of ``B`` rows, ``rows`` rows a split (None:
    :data:`STEP_ROWS`)."""
    return max(1, -(-B * steps // (STEP_ROWS if rows is None else rows)))  # ceil division (see _launch_products)


def step_products(dG, out, states, function, t0, t1, dR, db, time_major=False, rows: int | None = None):
    """The fp32 sums of dR and db over the rows of steps [t0, t1) only, by row split: ``dR`` [splits, G_R, NH, DH,
    DH] and ``db`` [splits, G_B, NH, DH] (fp32, ``splits`` = :func:`step_splits` (B, t1 - t0)) are written.
    ``dG`` [B, T, G_b, NH, DH] ([T, B, ...] if ``time_major``), ``out`` and ``states`` contiguous; the steps' rows
    are read where they lie, in either layout (no copy). The fused backward sums a finished piece of the sequence
    this way beside the kernel (:func:`gpulab.rnn.fused.backward.fused_rnn_gradients`); the caller sums the
    splits (``dR.sum(0)``). ``rows``: as for :func:`step_splits`."""
    fn = get_function(function)
    splits = step_splits(out.shape[1], t1 - t0, rows)
    _launch_products(dG, out, states, fn, dR, db, t0, t1, time_major, splits=splits, block_k=64)


HOST_BOUND_ROWS = 4096
HOST_BOUND_WORK = 768 * 768
"""Past :data:`SMALL_ROWS`, 16-bit outputs still take the one launch up to this many rows when each row's products
are at most ``HOST_BOUND_WORK`` = NH * DH^2 multiply-adds per gate (a head of 768): there a training step is
host-bound, and the cuBLAS route's operators (a product, two corrections, their views) cost the host more than the
launch adds on the device; with a larger head or more rows the launch's device time takes the gain back (measured
with ``scripts/probe_lstm_host_rows.py``; the numbers are in ``notes/rnn-fused.md``)."""


def one_launch(out, small_rows: int | None = None) -> bool:
    """Whether :func:`gate_gradients_to_parameters` takes the one-launch route for outputs ``out`` [S, B, T, NH, DH]
    (where that launch sums db beside dR anyway): up to ``small_rows`` rows K = B * T if given; else up to
    :data:`SMALL_ROWS`, and for 16-bit outputs up to :data:`HOST_BOUND_ROWS` when NH * DH^2 is at most
    :data:`HOST_BOUND_WORK`."""
    rows = out.shape[1] * out.shape[2]
    if small_rows is not None:
        return rows <= small_rows
    if rows <= SMALL_ROWS:
        return True
    return rows <= HOST_BOUND_ROWS and out.element_size() == 2 and out.shape[3] * out.shape[4] ** 2 <= HOST_BOUND_WORK


def gate_gradients_to_parameters(dG, out, states, function, time_major=False, db=None, small_rows=None):
    """``(dWx, dR, db)`` by the faster route for the row count: :func:`small_parameter_grads` (one launch) where
    :func:`one_launch` (up to ``small_rows`` rows), else :func:`parameter_grads` (which takes ``db`` as given, if it
    is). Same arguments."""
    if one_launch(out, small_rows):
        return small_parameter_grads(dG.contiguous(), out.contiguous(), states.contiguous(), function, time_major)
    return parameter_grads(dG, out, states, function, time_major, db)
