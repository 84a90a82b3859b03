"""Lesson 3: the cuDNN 5 LSTM optimization ladder, rebuilt one measured step at a time.

Appleyard, *Optimizing Recurrent Neural Networks in cuDNN 5* (NVIDIA blog, 2016) took a 4-layer LSTM (hidden 512,
minibatch 64, 100 steps, forward only) from 349 to 3898 GFLOP/s on an M40 (11.1x) in a ladder of optimizations.
This module rebuilds that ladder: every step is a small function computing the *same* multi-layer LSTM forward
(``step_n(x, weights, state=None) -> (y, (h_n, c_n))``, exactly nn.LSTM's interface), each changing one thing:

    step 0  baseline: per cell 8 products (4 gates x input and recurrent) and ~20 elementwise kernels
    step 1  combined GEMMs: the 4 input weights as one [4H, I] matrix, the 4 recurrent ones as one: 2 products
    step 2  streams: one CUDA stream per layer, events for the (layer l-1, t) -> (layer l, t) dependency
    step 3  fused pointwise: one Triton kernel (bias, sigmoids, tanh, c and h updates) instead of ~20 launches
    step 4  pre-transposed weights: W^T laid out once as [I, 4H] so every product reads it row-major
    step 5  combined input GEMMs: each layer's input projection for all T steps in one [T*B, I] x [I, 4H] product
    step 6  many layers: a wavefront over (layer, time); each wavefront's layers in one batched product
    step 7  (beyond the article) step 6 with [x_t ; h_{t-1}] x [W_ih ; W_hh]^T: one K = 2H batched product for
            the input and recurrent products of layers >= 1, read from an interleaved state buffer
    step 8  (beyond the article) step 6 with each wavefront's input and recurrent products on two streams, so
            together they fill the SMs that each leaves idle; the pointwise kernel adds the two parts

and every step runs **eagerly** and **captured in a CUDA graph** (:func:`capture`; CUDA graphs came with CUDA 10,
after the article: graph mode is itself beyond it). Eagerly, every step is bound by kernel launches from Python
(a 64 x 2048 x 512 product is microseconds of GPU work and about as long to launch); a graph replays the
whole forward with one launch, so what is left is GPU time: kernels, their count, and their dependencies.

The math (gate order of nn.LSTM; i, f, z, o pre-activations):

    [i f z o] = x_t W_ih^T + h_{t-1} W_hh^T + b_ih + b_hh        ([B, 4H])
    c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(z),   h_t = sigmoid(o) tanh(c_t)

FLOPs (the course's convention, :func:`gpulab.roofline.lstm_sequence`): the gate products only,
``2 * B * 4H * (I_l + H)`` per cell, ``T * L`` cells: for the article's problem 4 * 100 * 2 * 64 * 2048 * 1024 =
107 GFLOP. Bytes: a per-step implementation reads the weights of every cell from memory (they fit in the H100's L2,
but the count is the HBM model of lesson 1): ``T * L * (weights + state)``.

Conventions: x is [T, B, I] ([B, T, I] if ``weights.batch_first``), y is [T, B, H], h_n and c_n [L, B, H].
The cell state c is kept in fp32 between steps in every step (h in the weights' dtype, because it feeds the next
product); c_n is returned in the weights' dtype, as nn.LSTM does. fp32 products must not use TF32 when compared with
cuDNN in fp32: :func:`no_tf32` turns it off and restores the flags.

The reference: :func:`lstm_reference`, the same equations in float64 (and ``torch.nn.LSTM`` on float64 copies in the
tests and the benchmark).
"""

from __future__ import annotations

import torch

from gpulab import hardware, runtime
from gpulab.rnn.cells import lstm_cell_torch, lstm_pointwise
from gpulab.rnn.weights import LSTMWeights

__all__ = [
    "STEPS",
    "BEYOND_ARTICLE",
    "step0_baseline",
    "step1_combined_gemm",
    "step2_streams",
    "step3_fused_pointwise",
    "step4_pretransposed",
    "step5_combined_input_gemm",
    "step6_wavefront",
    "step7_wavefront_concat",
    "step8_wavefront_two_streams",
    "run_step",
    "lstm_reference",
    "lstm_cell_torch",
]


# ----------------------------------------------------------------------------------------------------------------
# Inputs, state, outputs


def _prepare(x, w, state, reference=False):
    """Validate; return x as [T, B, I], h0 [L, B, H] in the weights' dtype and c0 [L, B, H] in fp32
    (float64 with ``reference``, which also admits float64 inputs)."""
    if not isinstance(w, LSTMWeights):
        raise ValueError(
            f"weights must be gpulab.rnn.LSTMWeights, got {type(w).__name__}; use gpulab.rnn.from_torch_lstm(module)."
        )
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor, got {type(x).__name__}.")
    layout = "[B, T, I] (batch_first)" if w.batch_first else "[T, B, I]"
    if x.dim() != 3:
        raise ValueError(
            f"x must have rank 3, {layout}, got shape {tuple(x.shape)}; add a batch dimension for a single sequence."
        )
    if x.shape[-1] != w.input_size:
        raise ValueError(f"x has input size {x.shape[-1]} (last dimension), expected {w.input_size} from the weights.")
    if x.dtype != w.dtype:
        raise ValueError(
            f"x is {x.dtype} but the weights are {w.dtype}; convert one: x.to({w.dtype}) or weights.to({x.dtype})."
        )
    if not reference:
        hardware.require_dtype("x", x.dtype)
    if x.device != w.device:
        raise ValueError(f"x is on {x.device} but the weights are on {w.device}; move x with x.to(weights.device).")
    x = x.transpose(0, 1) if w.batch_first else x
    t, b = x.shape[0], x.shape[1]
    if t == 0 or b == 0:
        raise ValueError(f"x must have at least one time step and one sequence, got shape {tuple(x.shape)}.")
    shape = (w.num_layers, b, w.hidden_size)
    c_dtype = torch.float64 if reference else torch.float32
    if state is None:
        h0 = torch.zeros(shape, dtype=x.dtype, device=x.device)
        c0 = torch.zeros(shape, dtype=c_dtype, device=x.device)
    else:
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise ValueError("state must be a pair (h0, c0) of [L, B, H] tensors, like nn.LSTM's hx.")
        h0, c0 = state
        for name, s in (("h0", h0), ("c0", c0)):
            if not isinstance(s, torch.Tensor) or tuple(s.shape) != shape:
                got = tuple(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__
                raise ValueError(f"{name} must be a [L, B, H] = {shape} tensor, got {got}.")
        h0, c0 = h0.to(x.dtype).contiguous(), c0.to(c_dtype).contiguous()
    return x.contiguous(), h0, c0


def _finish(y, h_n, c_n, w):
    """nn.LSTM's return value: (y, (h_n, c_n)), y batch-first if the module was; c_n in the weights' dtype."""
    y = y.transpose(0, 1) if w.batch_first else y
    return y, (h_n, c_n.to(w.dtype))


def _unfused_cell(i, f, z, o, c, dtype):
    """The cell with PyTorch ops, one kernel each (~12 launches): what steps 0-2 do after their products."""
    h, c = lstm_cell_torch(i, f, z, o, c)
    return h.to(dtype), c


# ----------------------------------------------------------------------------------------------------------------
# Streams and events (no-ops on CPU)

_STREAMS: list = []


def _side_streams(n):
    """n CUDA streams, created once and reused (None on CPU)."""
    if not runtime.on_gpu():
        return [None] * n
    while len(_STREAMS) < n:
        _STREAMS.append(torch.cuda.Stream())
    return _STREAMS[:n]


def _current_stream():
    return torch.cuda.current_stream() if runtime.on_gpu() else None


def _record(s):
    """An event recorded on stream s now (None on CPU)."""
    if s is None:
        return None
    e = torch.cuda.Event()
    e.record(s)
    return e


def _wait(s, event):
    if s is not None and event is not None:
        s.wait_event(event)


def _fork(streams, parent):
    for s in streams:
        if s is not None and parent is not None:
            s.wait_stream(parent)


def _join(parent, streams):
    for s in streams:
        if s is not None and parent is not None:
            parent.wait_stream(s)


# ----------------------------------------------------------------------------------------------------------------
# Derived weight layouts, built once per LSTMWeights and cached on it (not part of any timed call); rebuilt when the
# weights change (LSTMWeights.derived keys the cache on the source tensors' versions)

_LAYOUTS = {
    "w_ih_t": lambda w: tuple(m.t().contiguous() for m in w.w_ih),  # step 4+: [I_l, 4H] row-major
    "w_hh_t": lambda w: tuple(m.t().contiguous() for m in w.w_hh),
    # [L, 4, 1, H]: the pointwise kernel's per-layer bias
    "bias_g": lambda w: torch.stack(w.bias).view(w.num_layers, 4, 1, w.hidden_size).contiguous(),
    "w_hh_t_stacked": lambda w: torch.stack(_layout(w, "w_hh_t")).contiguous(),  # step 6: [L, H, 4H]
    "w_ih_t_stacked": lambda w: _stacked(_layout(w, "w_ih_t")[1:]),  # step 6: layers 1.. [L-1, H, 4H]
    # step 7: layers 1.. [L-1, 2H, 4H] = [W_ih^T ; W_hh^T]
    "w_cat_t_stacked": lambda w: _stacked(
        [torch.cat([a, b]) for a, b in zip(_layout(w, "w_ih_t")[1:], _layout(w, "w_hh_t")[1:])]
    ),
}


def _stacked(mats):
    return torch.stack(mats).contiguous() if mats else None


def _layout(w, key):
    return w.derived(key, lambda: _LAYOUTS[key](w))


# ----------------------------------------------------------------------------------------------------------------
# The ladder


def step0_baseline(x, weights, state=None):
    """Step 0: per cell, 8 matrix products (4 gates x {input, recurrent}), then the cell with separate kernels."""
    x, h0, c0 = _prepare(x, weights, state)
    hid = weights.hidden_size
    inp, h_n, c_n = x, [], []
    for layer in range(weights.num_layers):
        w_gates = weights.w_ih[layer].split(hid)  # four [H, I] blocks: i, f, z, o
        u_gates = weights.w_hh[layer].split(hid)  # four [H, H] blocks
        b_gates = weights.bias[layer].split(hid)
        h, c, out = h0[layer], c0[layer], []
        for t in range(x.shape[0]):
            pre = [inp[t] @ w_gates[g].t() + h @ u_gates[g].t() + b_gates[g] for g in range(4)]
            h, c = _unfused_cell(*pre, c, x.dtype)
            out.append(h)
        inp = torch.stack(out)
        h_n.append(h)
        c_n.append(c)
    return _finish(inp, torch.stack(h_n), torch.stack(c_n), weights)


def step1_combined_gemm(x, weights, state=None):
    """Step 1: the four gates' weights as one matrix: 2 products per cell ([B, I] x [I, 4H] and [B, H] x [H, 4H])."""
    x, h0, c0 = _prepare(x, weights, state)
    inp, h_n, c_n = x, [], []
    for layer in range(weights.num_layers):
        w_ih, w_hh, bias = weights.w_ih[layer], weights.w_hh[layer], weights.bias[layer]
        h, c, out = h0[layer], c0[layer], []
        for t in range(x.shape[0]):
            gates = inp[t] @ w_ih.t() + h @ w_hh.t() + bias  # [B, 4H]
            h, c = _unfused_cell(*gates.chunk(4, dim=1), c, x.dtype)
            out.append(h)
        inp = torch.stack(out)
        h_n.append(h)
        c_n.append(c)
    return _finish(inp, torch.stack(h_n), torch.stack(c_n), weights)


def step2_streams(x, weights, state=None):
    """Step 2: step 1 with one stream per layer; cell (l, t) waits for an event of cell (l-1, t) only.

    So layer l+1 at time t runs while layer l computes t+1: up to L cells in flight. Outputs are preallocated on
    the calling stream and written in place, so no tensor is freed while another stream still reads it.
    """
    x, h0, c0 = _prepare(x, weights, state)
    n_t, n_l, bias = x.shape[0], weights.num_layers, weights.bias
    ys = [torch.empty(n_t, *h0.shape[1:], dtype=x.dtype, device=x.device) for _ in range(n_l)]
    cs = [None] * n_l
    parent, streams = _current_stream(), _side_streams(n_l)
    _fork(streams, parent)
    done = [[None] * n_t for _ in range(n_l)]  # done[l][t]: event after cell (l, t)
    for t in range(n_t):  # issue in time-major order, so every stream has work queued early
        for layer in range(n_l):
            with runtime.stream(streams[layer]):
                if layer > 0:
                    _wait(streams[layer], done[layer - 1][t])
                inp = x[t] if layer == 0 else ys[layer - 1][t]
                h = h0[layer] if t == 0 else ys[layer][t - 1]
                c = c0[layer] if t == 0 else cs[layer]
                gates = inp @ weights.w_ih[layer].t() + h @ weights.w_hh[layer].t() + bias[layer]
                h_new, cs[layer] = _unfused_cell(*gates.chunk(4, dim=1), c, x.dtype)
                ys[layer][t].copy_(h_new)
                done[layer][t] = _record(streams[layer])
    _join(parent, streams)
    return _finish(ys[-1], torch.stack([y[-1] for y in ys]), torch.stack(cs), weights)


def step3_fused_pointwise(x, weights, state=None):
    """Step 3: step 2 with the fused pointwise kernel (bias add included): per cell 2 products + 1 kernel.

    The recurrent product accumulates onto the input product (``addmm``: C = gx + h W_hh^T), so no separate add.
    """
    x, h0, c0 = _prepare(x, weights, state)
    n_t, n_l, b, hid = x.shape[0], weights.num_layers, x.shape[1], weights.hidden_size
    bias = _layout(weights, "bias_g")
    ys = [torch.empty(n_t, b, hid, dtype=x.dtype, device=x.device) for _ in range(n_l)]
    cs = [c0[layer].clone() for layer in range(n_l)]  # fp32 state, updated in place by the kernel
    parent, streams = _current_stream(), _side_streams(n_l)
    _fork(streams, parent)
    done = [[None] * n_t for _ in range(n_l)]
    for t in range(n_t):
        for layer in range(n_l):
            with runtime.stream(streams[layer]):
                if layer > 0:
                    _wait(streams[layer], done[layer - 1][t])
                inp = x[t] if layer == 0 else ys[layer - 1][t]
                h = h0[layer] if t == 0 else ys[layer][t - 1]
                gates = torch.addmm(inp @ weights.w_ih[layer].t(), h, weights.w_hh[layer].t())
                lstm_pointwise(
                    gates.view(b, 4, 1, hid), cs[layer].view(b, 1, hid), bias[layer],
                    h_out=ys[layer][t].view(b, 1, hid), c_out=cs[layer].view(b, 1, hid),
                )  # fmt: skip
                done[layer][t] = _record(streams[layer])
    _join(parent, streams)
    return _finish(ys[-1], torch.stack([y[-1] for y in ys]), torch.stack(cs), weights)


def step4_pretransposed(x, weights, state=None):
    """Step 4: step 3 with the weights stored transposed once ([I, 4H] and [H, 4H], row-major), not per call."""
    x, h0, c0 = _prepare(x, weights, state)
    n_t, n_l, b, hid = x.shape[0], weights.num_layers, x.shape[1], weights.hidden_size
    w_ih_t, w_hh_t, bias = _layout(weights, "w_ih_t"), _layout(weights, "w_hh_t"), _layout(weights, "bias_g")
    ys = [torch.empty(n_t, b, hid, dtype=x.dtype, device=x.device) for _ in range(n_l)]
    cs = [c0[layer].clone() for layer in range(n_l)]
    parent, streams = _current_stream(), _side_streams(n_l)
    _fork(streams, parent)
    done = [[None] * n_t for _ in range(n_l)]
    for t in range(n_t):
        for layer in range(n_l):
            with runtime.stream(streams[layer]):
                if layer > 0:
                    _wait(streams[layer], done[layer - 1][t])
                inp = x[t] if layer == 0 else ys[layer - 1][t]
                h = h0[layer] if t == 0 else ys[layer][t - 1]
                gates = torch.addmm(inp @ w_ih_t[layer], h, w_hh_t[layer])
                lstm_pointwise(
                    gates.view(b, 4, 1, hid), cs[layer].view(b, 1, hid), bias[layer],
                    h_out=ys[layer][t].view(b, 1, hid), c_out=cs[layer].view(b, 1, hid),
                )  # fmt: skip
                done[layer][t] = _record(streams[layer])
    _join(parent, streams)
    return _finish(ys[-1], torch.stack([y[-1] for y in ys]), torch.stack(cs), weights)


def step5_combined_input_gemm(x, weights, state=None):
    """Step 5: each layer's input products for all T steps in one [T*B, I] x [I, 4H] product (bias folded in);
    the recurrence is then 1 product + 1 pointwise kernel per cell. A layer needs the whole output of the layer
    below, so layers run one after another (the streams of step 2 have nothing left to overlap)."""
    x, h0, c0 = _prepare(x, weights, state)
    n_t, b, hid = x.shape[0], x.shape[1], weights.hidden_size
    w_ih_t, w_hh_t = _layout(weights, "w_ih_t"), _layout(weights, "w_hh_t")
    inp, h_n, c_n = x, [], []
    for layer in range(weights.num_layers):
        gx = torch.addmm(weights.bias[layer], inp.view(n_t * b, -1), w_ih_t[layer]).view(n_t, b, 4 * hid)
        y = torch.empty(n_t, b, hid, dtype=x.dtype, device=x.device)
        h, c = h0[layer], c0[layer].clone()
        for t in range(n_t):
            gates = gx[t].addmm_(h, w_hh_t[layer])  # in place: gx[t] is used once
            lstm_pointwise(
                gates.view(b, 4, 1, hid), c.view(b, 1, hid), h_out=y[t].view(b, 1, hid), c_out=c.view(b, 1, hid)
            )
            h = y[t]
        inp = y
        h_n.append(h)
        c_n.append(c)
    return _finish(inp, torch.stack(h_n), torch.stack(c_n), weights)


def _wavefront_range(k, n_t, n_l):
    """Layers active in wavefront k (cells (l, t) with l + t = k): a contiguous range lo..hi."""
    return max(0, k - n_t + 1), min(n_l - 1, k)


def step6_wavefront(x, weights, state=None):
    """Step 6: a wavefront schedule. Cell (l, t) needs (l, t-1) and (l-1, t), so all cells with l + t = k are
    independent: wavefront k runs them together, as one batched input product (layers >= 1), one batched
    recurrent product and one pointwise launch, for T + L - 1 wavefronts instead of T * L cells.

    Buffers: s[k, l] = h of the cell (l, k-1-l), the output of wavefront k-1; s[l, l] = h0[l]. So wavefront k
    reads its recurrent inputs s[k, lo:hi+1] and inputs from below s[k, lo-1:hi] and writes s[k+1, lo:hi+1]: all
    contiguous. Layer 0's input products are one product for all T steps (step 5), copied into its gate slots.
    """
    x, h0, c0 = _prepare(x, weights, state)
    n_t, b, hid, n_l = x.shape[0], x.shape[1], weights.hidden_size, weights.num_layers
    n_k = n_t + n_l - 1
    w_hh_t, w_ih_t_rest = _layout(weights, "w_hh_t_stacked"), _layout(weights, "w_ih_t_stacked")
    bias = _layout(weights, "bias_g")
    s = torch.empty(n_k + 1, n_l, b, hid, dtype=x.dtype, device=x.device)
    for layer in range(n_l):
        s[layer, layer] = h0[layer]
    c = c0.clone()  # [L, B, H] fp32
    gates = torch.empty(n_k, n_l, b, 4 * hid, dtype=x.dtype, device=x.device)
    gx0 = (x.view(n_t * b, -1) @ _layout(weights, "w_ih_t")[0]).view(n_t, b, 4 * hid)
    gates[:n_t, 0].copy_(gx0)
    for k in range(n_k):
        lo, hi = _wavefront_range(k, n_t, n_l)
        a = max(lo, 1)
        if a <= hi:  # input products of layers a..hi: h of layer l-1 at the same t
            torch.bmm(s[k, a - 1 : hi], w_ih_t_rest[a - 1 : hi], out=gates[k, a : hi + 1])
        g = gates[k, lo : hi + 1].baddbmm_(s[k, lo : hi + 1], w_hh_t[lo : hi + 1])  # + recurrent products
        n = hi - lo + 1
        lstm_pointwise(
            g.view(n * b, 4, 1, hid), c[lo : hi + 1].view(n * b, 1, hid), bias[lo : hi + 1],
            h_out=s[k + 1, lo : hi + 1].view(n * b, 1, hid), c_out=c[lo : hi + 1].view(n * b, 1, hid),
        )  # fmt: skip
    y = s[n_l : n_l + n_t, n_l - 1]  # cell (L-1, t) wrote s[L + t, L-1]
    h_n = torch.stack([s[layer + n_t, layer] for layer in range(n_l)])
    return _finish(y, h_n, c, weights)


def step7_wavefront_concat(x, weights, state=None):
    """Step 7 (beyond the article): step 6 with the input and recurrent products of layers >= 1 merged into one
    product of K = 2H: [x_t ; h_{t-1}] x [W_ih^T ; W_hh^T]. The state buffer is interleaved, s[k, :, l] = h of
    layer l (shape [K+1, B, L, H]), so the concatenation [h^{l-1}_t ; h^l_{t-1}] is s[k, :, l-1:l+1] viewed as
    [B, 2H] with row stride L*H: no copy. One product per wavefront instead of two for layers >= 1 (layer 0 keeps
    its own recurrent product, its input projection being precomputed for all T).
    """
    x, h0, c0 = _prepare(x, weights, state)
    n_t, b, hid, n_l = x.shape[0], x.shape[1], weights.hidden_size, weights.num_layers
    n_k = n_t + n_l - 1
    w_cat, w_hh0 = _layout(weights, "w_cat_t_stacked"), _layout(weights, "w_hh_t")[0]
    bias = _layout(weights, "bias_g")
    s = torch.empty(n_k + 1, b, n_l, hid, dtype=x.dtype, device=x.device)
    for layer in range(n_l):
        s[layer, :, layer] = h0[layer]
    c = c0.clone()
    gates = torch.empty(n_k, n_l, b, 4 * hid, dtype=x.dtype, device=x.device)
    gx0 = (x.view(n_t * b, -1) @ _layout(weights, "w_ih_t")[0]).view(n_t, b, 4 * hid)
    gates[:n_t, 0].copy_(gx0)
    kstride, row = b * n_l * hid, n_l * hid
    for k in range(n_k):
        lo, hi = _wavefront_range(k, n_t, n_l)
        if lo == 0:  # layer 0: its input part is already in its gate slot
            gates[k, 0].addmm_(s[k, :, 0], w_hh0)
        a = max(lo, 1)
        if a <= hi:  # layers a..hi: one batched product with K = 2H over overlapping [B, 2H] views
            xh = s.as_strided((hi - a + 1, b, 2 * hid), (hid, row, 1), k * kstride + (a - 1) * hid)
            torch.bmm(xh, w_cat[a - 1 : hi], out=gates[k, a : hi + 1])
        n = hi - lo + 1
        h_out = s[k + 1, :, lo : hi + 1].transpose(0, 1)  # [n, B, H] view, strides (H, L*H, 1): written in place
        lstm_pointwise(
            gates[k, lo : hi + 1].view(n * b, 4, 1, hid), c[lo : hi + 1].view(n * b, 1, hid), bias[lo : hi + 1],
            h_out=h_out, c_out=c[lo : hi + 1].view(n * b, 1, hid),
        )  # fmt: skip
    y = s[n_l : n_l + n_t, :, n_l - 1]
    h_n = torch.stack([s[layer + n_t, :, layer] for layer in range(n_l)])
    return _finish(y, h_n, c, weights)


def step8_wavefront_two_streams(x, weights, state=None):
    """Step 8 (beyond the article): step 6 with the two products of each wavefront on two streams.

    The input products (layers >= 1, from h of layer l-1 at time t) and the recurrent products (from h of layer l
    at t-1) read only what the previous wavefront wrote, so they are independent. At the article's size each alone
    is L x [B, 4H] = 4 x 64 x 2048 outputs, about 64 tiles for 132 SMs: half the GPU idles. On two streams they
    overlap, and the pointwise kernel adds the two parts (``gates2``), so no separate add is launched. In a CUDA
    graph the fork and join of the streams become graph edges and cost nothing at replay.
    """
    x, h0, c0 = _prepare(x, weights, state)
    n_t, b, hid, n_l = x.shape[0], x.shape[1], weights.hidden_size, weights.num_layers
    n_k = n_t + n_l - 1
    w_hh_t, w_ih_t_rest = _layout(weights, "w_hh_t_stacked"), _layout(weights, "w_ih_t_stacked")
    bias = _layout(weights, "bias_g")
    s = torch.empty(n_k + 1, n_l, b, hid, dtype=x.dtype, device=x.device)
    for layer in range(n_l):
        s[layer, layer] = h0[layer]
    c = c0.clone()
    g_in = torch.zeros(n_k, n_l, b, 4 * hid, dtype=x.dtype, device=x.device)  # input parts (side stream)
    g_rec = torch.empty(n_k, n_l, b, 4 * hid, dtype=x.dtype, device=x.device)  # recurrent parts (this stream)
    gx0 = (x.view(n_t * b, -1) @ _layout(weights, "w_ih_t")[0]).view(n_t, b, 4 * hid)
    g_in[:n_t, 0].copy_(gx0)
    main, (side,) = _current_stream(), _side_streams(1)
    for k in range(n_k):
        lo, hi = _wavefront_range(k, n_t, n_l)
        a = max(lo, 1)
        if a <= hi:
            _fork([side], main)  # the side stream may read s[k] only after the last wavefront wrote it
            with runtime.stream(side):
                torch.bmm(s[k, a - 1 : hi], w_ih_t_rest[a - 1 : hi], out=g_in[k, a : hi + 1])
        torch.bmm(s[k, lo : hi + 1], w_hh_t[lo : hi + 1], out=g_rec[k, lo : hi + 1])
        if a <= hi:  # join only what was forked: a graph capture refuses a wait on work outside the capture
            _join(main, [side])
        n = hi - lo + 1
        lstm_pointwise(
            g_rec[k, lo : hi + 1].view(n * b, 4, 1, hid), c[lo : hi + 1].view(n * b, 1, hid), bias[lo : hi + 1],
            h_out=s[k + 1, lo : hi + 1].view(n * b, 1, hid), c_out=c[lo : hi + 1].view(n * b, 1, hid),
            gates2=g_in[k, lo : hi + 1].view(n * b, 4, 1, hid),
        )  # fmt: skip
    y = s[n_l : n_l + n_t, n_l - 1]
    h_n = torch.stack([s[layer + n_t, layer] for layer in range(n_l)])
    return _finish(y, h_n, c, weights)


STEPS = {
    0: ("baseline: 8 products + ~20 elementwise kernels per cell", step0_baseline),
    1: ("combined GEMMs: 2 products per cell", step1_combined_gemm),
    2: ("streams: one per layer, events between layers", step2_streams),
    3: ("fused pointwise: 1 Triton kernel per cell", step3_fused_pointwise),
    4: ("pre-transposed weights", step4_pretransposed),
    5: ("combined input GEMMs: one product per layer for all T", step5_combined_input_gemm),
    6: ("many layers: wavefront, batched products per wavefront", step6_wavefront),
    7: ("beyond: wavefront, one K=2H product for x and h", step7_wavefront_concat),
    8: ("beyond: wavefront, input and recurrent products on two streams", step8_wavefront_two_streams),
}
"""Step number -> (what it changes, function). Steps 0-6 are the article's; 7 is beyond it."""

BEYOND_ARTICLE = (7, 8)


def run_step(n, x, weights, state=None):
    """Run ladder step ``n`` (a key of :data:`STEPS`): returns ``(y, (h_n, c_n))`` like ``nn.LSTM``."""
    if n not in STEPS:
        raise ValueError(f"n={n!r} is not a ladder step; steps are {sorted(STEPS)}.")
    return STEPS[n][1](x, weights, state)


def lstm_reference(x, weights, state=None):
    """float64 reference: the same equations, one cell at a time, on float64 copies. Returns float64 outputs."""
    if not isinstance(weights, LSTMWeights):
        _prepare(x, weights, state)  # the same error as every step's
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}.")
    w = weights.to(dtype=torch.float64)
    x64 = x.detach().double()
    if state is not None:
        state = tuple(s.detach().double() for s in state)
    xt, h0, c0 = _prepare(x64, w, state, reference=True)
    inp, h_n, c_n = xt, [], []
    for layer in range(w.num_layers):
        h, c, out = h0[layer], c0[layer], []
        for t in range(xt.shape[0]):
            i, f, z, o = (inp[t] @ w.w_ih[layer].t() + h @ w.w_hh[layer].t() + w.bias[layer]).chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(z)
            h = torch.sigmoid(o) * torch.tanh(c)
            out.append(h)
        inp = torch.stack(out)
        h_n.append(h)
        c_n.append(c)
    y = inp.transpose(0, 1) if w.batch_first else inp
    return y, (torch.stack(h_n), torch.stack(c_n))
