"""The recurrent cells: their math as ``@triton.jit`` functions, PyTorch twins, and a fused LSTM pointwise kernel.

One LSTM step, for gate pre-activations ``i, f, z, o`` (each ``x_t W_g^T + h_{t-1} U_g^T + b_g``):

    i' = sigmoid(i)   f' = sigmoid(f)   z' = tanh(z)   o' = sigmoid(o)
    c_t = f' * c_{t-1} + i' * z'
    h_t = o' * tanh(c_t)

The gate order is nn.LSTM's: i (input), f (forget), g (= z, the cell input), o (output).

Shapes (B batch, G = 4 gates, NH heads, DH head dim): gates ``[B, 4, NH, DH]``, state ``c`` ``[B, NH, DH]``,
outputs ``h`` and ``c`` ``[B, NH, DH]``. nn.LSTM's gates ``[B, 4H]`` are the NH = 1, DH = H view: ``gates.view(B, 4,
1, H)``. Lesson 6 adds heads (block-diagonal recurrent weights) and reuses this layout unchanged.

Everything is computed in fp32, whatever the storage dtype: the cell is about 10 FLOPs per hidden unit and memory
bound, so fp32 arithmetic costs nothing, and fp16/bf16 arithmetic would be wrong in Triton's interpreter anyway.
``tanh`` is :func:`gpulab.triton_ops.tanh`, ``2 * sigmoid(2x) - 1``, so that the same code runs compiled and
interpreted.

:func:`lstm_pointwise` replaces the ~10 elementwise launches of an unfused cell (adds, three sigmoids, two tanh,
multiplies, the bias add) by one kernel that reads the four gate pre-activations, the bias and ``c`` once and writes
``h`` and ``c`` once.

Lesson 6 adds the GRU and Elman cells and the *backward* of each cell, all on fp32 blocks of gate
pre-activations (the layout and gate order of :mod:`gpulab.rnn.functions`):

    gru_cell(g, r, z, n, h) -> h'          r' = sigmoid(r), z' = sigmoid(z), n' = tanh(n + r' * g),
                                           h' = z' * h + (1 - z') * n'
    elman_cell(g) -> h'                    h' = tanh(g)
    lstm_cell_backward(i, f, z, o, c_prev, dh, dc) -> (di, df, dz, do, dc_prev)
    gru_cell_backward(g, r, z, n, h_prev, dh) -> (dg, dr, dz, dn, dh_prev through the cell only)
    elman_cell_backward(g, dh) -> dg

The backward functions take the same pre-activations as the forward (the forward saves them) and return the
gradients of the pre-activations, dG. ``dh`` there is the total gradient reaching h_t (from the output and from
step t + 1); the part of dh_{t-1} that flows through R is ``sum_g dG_g R_g``, which the time loop adds.
Every fused and alternating kernel calls these functions, so there is one definition of each cell's math.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import hardware, runtime
from gpulab.rnn.functions import get_function
from gpulab.triton_ops import tanh

_require_tensor = runtime.require_tensor

__all__ = [
    "lstm_cell",
    "lstm_activations",
    "gru_cell",
    "elman_cell",
    "lstm_cell_backward",
    "lstm_gate_grads",
    "gru_cell_backward",
    "elman_cell_backward",
    "cell_step_torch",
    "lstm_cell_torch",
    "lstm_pointwise_kernel",
    "lstm_pointwise",
    "lstm_pointwise_reference",
]


@triton.jit
def lstm_cell(i, f, z, o, c):
    """One LSTM cell update on fp32 blocks: returns (h, c). Inputs are gate *pre-activations* and the old c."""
    i = tl.sigmoid(i)
    f = tl.sigmoid(f)
    z = tanh(z)
    o = tl.sigmoid(o)
    c_new = f * c + i * z
    h_new = o * tanh(c_new)
    return h_new, c_new


@triton.jit
def lstm_activations(i, f, z, o):
    """The gate activations of :func:`lstm_cell` alone, (sigmoid(i), sigmoid(f), tanh(z), sigmoid(o)): for kernels
    that save them for the backward (:mod:`gpulab.rnn.fused.forward`)."""
    return tl.sigmoid(i), tl.sigmoid(f), tanh(z), tl.sigmoid(o)


@triton.jit
def gru_cell(g, r, z, n, h):
    """One GRU cell update on fp32 blocks (flashrnn's gate order): returns the new h.

    g = R_0 h + b_0 (PyTorch's W_hn h + b_hn), r and z the reset/update pre-activations, n = Wx_2 + b_3.
    """
    r = tl.sigmoid(r)
    z = tl.sigmoid(z)
    n = tanh(n + r * g)
    return z * h + (1.0 - z) * n


@triton.jit
def elman_cell(g):
    """One Elman cell update: h' = tanh(g) for the pre-activation g = Wx + R h + b."""
    return tanh(g)


@triton.jit
def lstm_cell_backward(i, f, z, o, c_prev, dh, dc):
    """Backward of :func:`lstm_cell`: pre-activations i, f, z, o, the old c, the gradients reaching h_t and c_t.

    Returns the pre-activation gradients (di, df, dz, do) and the gradient reaching c_{t-1}:
    dc_t += dh * o' * (1 - tanh(c_t)^2); di = dc_t z' i'(1 - i'); df = dc_t c_{t-1} f'(1 - f');
    dz = dc_t i' (1 - z'^2); do = dh tanh(c_t) o'(1 - o'); dc_{t-1} = dc_t f'.
    """
    i = tl.sigmoid(i)
    f = tl.sigmoid(f)
    z = tanh(z)
    o = tl.sigmoid(o)
    c = f * c_prev + i * z  # recomputed: cheaper than saving c_t in fp32
    return lstm_gate_grads(i, f, z, o, c_prev, tanh(c), dh, dc)


@triton.jit
def lstm_gate_grads(i, f, z, o, c_prev, tc, dh, dc):
    """The rest of :func:`lstm_cell_backward` once the activations are known: gates i' f' z' o' (after sigmoid /
    tanh), the old c and ``tc = tanh(c_t)``. Shared with the fused kernel's fast-activation variant."""
    dc = dc + dh * o * (1.0 - tc * tc)
    di = dc * z * i * (1.0 - i)
    df = dc * c_prev * f * (1.0 - f)
    dz = dc * i * (1.0 - z * z)
    do = dh * tc * o * (1.0 - o)
    return di, df, dz, do, dc * f


@triton.jit
def gru_cell_backward(g, r, z, n, h_prev, dh):
    """Backward of :func:`gru_cell`: returns (dg, dr, dz, dn) and the part of dh_{t-1} that skips R (dh z')."""
    r = tl.sigmoid(r)
    z = tl.sigmoid(z)
    nn = tanh(n + r * g)
    dz = dh * (h_prev - nn) * z * (1.0 - z)
    dn = dh * (1.0 - z) * (1.0 - nn * nn)
    dr = dn * g * r * (1.0 - r)
    dg = dn * r
    return dg, dr, dz, dn, dh * z


@triton.jit
def elman_cell_backward(g, dh):
    """Backward of :func:`elman_cell`: dg = dh (1 - tanh(g)^2)."""
    t = tanh(g)
    return dh * (1.0 - t * t)


def cell_step_torch(function, wx, ry, b, states):
    """One time step of ``function`` in PyTorch, in the inputs' dtype (the vanilla backend's cell).

    wx [B, G_w, NH, DH], ry [B, G_r, NH, DH] (= R h_{t-1} per gate), b [G_b, NH, DH], states [S, B, NH, DH];
    returns the new states [S, B, NH, DH]. Same math as the ``@triton.jit`` cells and flashrnn's vanilla backend.
    Shapes that do not match are refused (no broadcasting), naming the tensor and the shape it needs.
    """
    fn = get_function(function)
    runtime.require_tensor("wx", wx, shape=(None, fn.gates_w, None, None), device_check=False)
    B, _, NH, DH = wx.shape
    runtime.require_tensor("ry", ry, shape=(B, fn.gates_r, NH, DH), device_check=False)
    runtime.require_tensor("b", b, shape=(fn.gates_b, NH, DH), device_check=False)
    runtime.require_tensor("states", states, shape=(fn.states, B, NH, DH), device_check=False)
    function = fn.name
    if function == "lstm":
        i, f, z, o = (wx + ry + b).unbind(1)
        c = torch.sigmoid(f) * states[1] + torch.sigmoid(i) * torch.tanh(z)
        return torch.stack((torch.sigmoid(o) * torch.tanh(c), c))
    if function == "gru":
        g = ry[:, 0] + b[0]
        r = torch.sigmoid(wx[:, 0] + ry[:, 1] + b[1])
        z = torch.sigmoid(wx[:, 1] + ry[:, 2] + b[2])
        n = torch.tanh(wx[:, 2] + b[3] + r * g)
        return (z * states[0] + (1 - z) * n).unsqueeze(0)
    return torch.tanh(wx[:, 0] + ry[:, 0] + b[0]).unsqueeze(0)  # elman


def lstm_cell_torch(i, f, z, o, c):
    """The PyTorch twin of :func:`lstm_cell`: same signature, fp32 math; returns fp32 (h, c)."""
    for name, t in (("f", f), ("z", z), ("o", o), ("c", c)):
        runtime.same_shape("i", i, name, t)
    i, f, z, o, c = (t.float() for t in (i, f, z, o, c))
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(z)
    h_new = torch.sigmoid(o) * torch.tanh(c_new)
    return h_new, c_new


@triton.jit
def lstm_pointwise_kernel(
    gates_ptr,
    gates2_ptr,
    bias_ptr,
    c_ptr,
    h_out_ptr,
    c_out_ptr,
    M,
    rows_per_bias,
    rows_per_group,
    stride_hg,
    stride_hr,
    HAS_BIAS: tl.constexpr,
    HAS_GATES2: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Program (n, b) handles hidden units [b*BLOCK, (b+1)*BLOCK) of row n (M = NH*DH units per row).

    gates[n, g, m] (and gates2, when given, added to it) is at n*4M + g*M + m (contiguous [N, 4, NH, DH]);
    bias[r, g, m] at r*4M + g*M + m with r = n // rows_per_bias (one bias per layer when several layers are
    batched); c and c_out at n*M + m.
    h_out[n, m] is at (n // rows_per_group)*stride_hg + (n % rows_per_group)*stride_hr + m: contiguous
    (stride_hr = M, one group), or a strided view such as lesson 3's interleaved state buffer.
    """
    n = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M
    g = gates_ptr + n.to(tl.int64) * 4 * M + offs
    i = tl.load(g, mask=mask).to(tl.float32)
    f = tl.load(g + M, mask=mask).to(tl.float32)
    z = tl.load(g + 2 * M, mask=mask).to(tl.float32)
    o = tl.load(g + 3 * M, mask=mask).to(tl.float32)
    if HAS_GATES2:  # a second part of the pre-activations, same layout (e.g. input and recurrent products)
        g2 = gates2_ptr + n.to(tl.int64) * 4 * M + offs
        i += tl.load(g2, mask=mask).to(tl.float32)
        f += tl.load(g2 + M, mask=mask).to(tl.float32)
        z += tl.load(g2 + 2 * M, mask=mask).to(tl.float32)
        o += tl.load(g2 + 3 * M, mask=mask).to(tl.float32)
    if HAS_BIAS:
        b = bias_ptr + (n // rows_per_bias).to(tl.int64) * 4 * M + offs
        i += tl.load(b, mask=mask).to(tl.float32)
        f += tl.load(b + M, mask=mask).to(tl.float32)
        z += tl.load(b + 2 * M, mask=mask).to(tl.float32)
        o += tl.load(b + 3 * M, mask=mask).to(tl.float32)
    c = tl.load(c_ptr + n.to(tl.int64) * M + offs, mask=mask).to(tl.float32)
    h_new, c_new = lstm_cell(i, f, z, o, c)
    h_row = (n // rows_per_group).to(tl.int64) * stride_hg + (n % rows_per_group).to(tl.int64) * stride_hr
    tl.store(h_out_ptr + h_row + offs, h_new.to(h_out_ptr.dtype.element_ty), mask=mask)
    tl.store(c_out_ptr + n.to(tl.int64) * M + offs, c_new.to(c_out_ptr.dtype.element_ty), mask=mask)


def _bias_rows(bias, n: int, nh: int, dh: int, device_check: bool = True) -> int:
    """How many of the N rows share each bias: ``bias`` must be a floating-point [4, NH, DH] (all N rows) or
    [L, 4, NH, DH] with N divisible by L (L >= 1; row n takes bias n // (N // L)); else an error naming ``bias``."""
    _require_tensor("bias", bias, device_check=device_check)
    if not bias.is_floating_point():
        raise ValueError(f"bias has dtype {bias.dtype}; pass a floating-point bias, e.g. bias.float().")
    lb = bias.unsqueeze(0) if bias.dim() == 3 else bias
    if lb.dim() != 4 or tuple(lb.shape[1:]) != (4, nh, dh) or lb.shape[0] < 1 or n % lb.shape[0] != 0:
        raise ValueError(
            f"bias must be [4, NH, DH] = {(4, nh, dh)} or [L, 4, NH, DH] with N={n} divisible by L, got "
            f"{tuple(bias.shape)}."
        )
    return n // lb.shape[0]


def lstm_pointwise_reference(gates, c, bias=None, gates2=None):
    """float64 reference of :func:`lstm_pointwise`: returns float64 (h, c) of shape [N, NH, DH]. Takes the same
    shapes of ``gates``, ``c``, ``bias`` and ``gates2``, and refuses the same ``bias`` with the same error."""
    runtime.require_tensor("gates", gates, ndim=4, shape=(None, 4, None, None), device_check=False)
    n, _, nh, dh = gates.shape
    runtime.require_tensor("c", c, shape=(n, nh, dh), device_check=False)
    if gates2 is not None:
        runtime.same_shape("gates", gates, "gates2", gates2)
    g = gates.detach().double()
    if gates2 is not None:
        g = g + gates2.detach().double()
    if bias is not None:
        rows_per_bias = _bias_rows(bias, n, nh, dh, device_check=False)
        b = bias.detach().double()
        g = g + (b.unsqueeze(0) if b.dim() == 3 else b).repeat_interleave(rows_per_bias, dim=0)
    i, f, z, o = g.unbind(1)
    c_new = torch.sigmoid(f) * c.detach().double() + torch.sigmoid(i) * torch.tanh(z)
    return torch.sigmoid(o) * torch.tanh(c_new), c_new


def lstm_pointwise(gates, c, bias=None, h_out=None, c_out=None, gates2=None):
    """Fused LSTM pointwise update: returns ``(h, c)``.

    gates: [N, 4, NH, DH] pre-activations (gate order i, f, z, o), contiguous.
    gates2: optional second part of the pre-activations, like ``gates``, added to it inside the kernel (so two
    products computed concurrently need no separate add).
    c: [N, NH, DH] cell state (any float dtype; keep it fp32 across steps for accuracy).
    bias: optional [4, NH, DH] (shared by all rows) or [L, 4, NH, DH] with N divisible by L (row n uses bias
    n // (N // L): one bias per layer when L layers of N // L rows are batched).
    h_out: optional [N, NH, DH] output in the gates' dtype (default: new), or a strided [G, R, NH*DH] view with
    G*R = N and unit stride along the last dimension (row n goes to h_out[n // R, n % R]).
    c_out: optional, default new like ``c``; ``c_out=c`` updates the state in place (each element is read
    before it is written by the same lane).
    """
    _require_tensor("gates", gates)
    _require_tensor("c", c)
    hardware.require_dtype("gates", gates.dtype)
    if gates.dim() != 4 or gates.shape[1] != 4:
        raise ValueError(
            f"gates must be [N, 4, NH, DH] (nn.LSTM's [N, 4H] is gates.view(N, 4, 1, H)), got {tuple(gates.shape)}."
        )
    n, _, nh, dh = gates.shape
    if tuple(c.shape) != (n, nh, dh):
        raise ValueError(f"c must be [N, NH, DH] = {(n, nh, dh)} to match gates, got {tuple(c.shape)}.")
    if not c.is_floating_point() or c.dtype == torch.float64:
        raise ValueError(f"c has dtype {c.dtype}; use float32 (recommended), float16 or bfloat16.")
    for name, t in (("gates", gates), ("c", c)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous, got strides {t.stride()}; pass {name}.contiguous().")
    if gates2 is not None:
        _require_tensor("gates2", gates2)
        if gates2.shape != gates.shape or gates2.dtype != gates.dtype or not gates2.is_contiguous():
            raise ValueError(
                f"gates2 must be a contiguous tensor like gates ({tuple(gates.shape)}, {gates.dtype}), "
                f"got {tuple(gates2.shape)} {gates2.dtype}."
            )
    rows_per_bias = 1
    if bias is not None:
        rows_per_bias = _bias_rows(bias, n, nh, dh)
        if not bias.is_contiguous():
            raise ValueError(f"bias must be contiguous, got strides {bias.stride()}; pass bias.contiguous().")
    h_out = torch.empty((n, nh, dh), dtype=gates.dtype, device=gates.device) if h_out is None else h_out
    _require_tensor("h_out", h_out)
    if not h_out.is_floating_point():
        raise ValueError(f"h_out has dtype {h_out.dtype}; h is written as floats: pass a floating-point h_out (e.g. "
                         f"in the gates' dtype, {gates.dtype}) or none.")  # fmt: skip
    c_out = torch.empty_like(c) if c_out is None else c_out
    grouped = isinstance(h_out, torch.Tensor) and h_out.dim() == 3 and h_out.shape[0] * h_out.shape[1] == n
    grouped = grouped and h_out.shape[2] == nh * dh and h_out.stride(2) == 1
    grouped = grouped and (tuple(h_out.shape) != (n, nh, dh) or not h_out.is_contiguous())
    if grouped:  # a strided [G, R, M] view (G*R = N rows): where the wavefront steps write h directly
        rows_per_group, stride_hg, stride_hr = h_out.shape[1], h_out.stride(0), h_out.stride(1)
        _require_tensor("h_out", h_out)
    else:
        rows_per_group, stride_hg, stride_hr = max(n, 1), 0, nh * dh
    for name, t, dt in (
        (("h_out", h_out, None), ("c_out", c_out, c.dtype)) if not grouped else (("c_out", c_out, c.dtype),)
    ):
        _require_tensor(name, t)
        if tuple(t.shape) != (n, nh, dh) or not t.is_contiguous() or (dt is not None and t.dtype != dt):
            raise ValueError(
                f"{name} must be a contiguous [N, NH, DH] = {(n, nh, dh)} tensor"
                + (f" of dtype {dt}" if dt is not None else "")
                + f", got {tuple(t.shape)} {t.dtype}."
            )
    m = nh * dh
    if n == 0 or m == 0:
        return h_out, c_out
    block = min(runtime.next_power_of_2(m), 1024)
    grid = (n, triton.cdiv(m, block))
    lstm_pointwise_kernel[grid](
        gates,
        gates2 if gates2 is not None else gates,
        bias if bias is not None else gates,
        c,
        h_out,
        c_out,
        m,
        rows_per_bias,
        rows_per_group,
        stride_hg,
        stride_hr,
        HAS_BIAS=bias is not None,
        HAS_GATES2=gates2 is not None,
        BLOCK=block,
        num_warps=4 if block <= 512 else 8,
    )
    return h_out, c_out
