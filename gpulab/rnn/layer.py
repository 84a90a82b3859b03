"""One LSTM layer and direction of :class:`gpulab.rnn.LSTM` on a Triton backend, as one autograd op.

    Wx = x W_ih^T + b_ih                one GEMM over all steps and gates ([B*T, I] x [I, 4H]), b_ih its epilogue
    h, c = backend loops (Wx, R, b_hh)  the forward kernel; the backward kernel(s) and the parameter products

and the backward, from the gate gradients dG = dL/dWx [B*T, 4H] the backend's loops write:

    dx = dG W_ih      dW_ih = dG^T x      db_ih = db_hh = db      (db: the backend's one reduction of dG)

What this saves against the same layer built of PyTorch ops around :func:`gpulab.rnn.flashrnn` is host work: a
small call is host-bound (each aten operator, autograd node and kernel launch costs microseconds on the host while
the kernels take fewer), and there ``nn.functional.linear`` with a bias, the bias add, the reshapes and their
backward nodes were most of the operators of a step. Here the step is two GEMMs forward and backward around the
backend's launches, one autograd node, no bias kernel (b_ih is the forward GEMM's addend, as in nn.LSTM; the two
biases' gradients are one tensor, the backend's db) and no checks repeated for a signature already checked. The two
biases are not summed ahead and kept: a sum kept per version counter would miss a change that bypasses the counter
(``bias.data[H:2 * H].fill_(1.0)``, the forget-gate initialisation, or a write through ``.numpy()``).

Used where it gives the same answer as the general path: a whole-batch launch of the backend (where the fused plan
cuts a batch into launches, the general path runs), any number of heads, no projection; packed input too (its last
states are read from the outputs at each sequence's length, as on the general path). Under ``torch.compile`` the
same layer runs as the custom op :func:`gpulab.rnn.ops.lstm_layer_forward_op` (the same kernels, GEMMs and bias
gradient; the loops there are :func:`gpulab.rnn.fused.plan.problem_loops`').
"""

from __future__ import annotations

import torch

from gpulab import runtime
from gpulab.rnn import api, ops
from gpulab.rnn.backends.alternating import alternating_rnn_forward, alternating_rnn_gradients
from gpulab.rnn.fused import plan as fused_plan

__all__ = ["lstm_layer", "layer_loops"]

_LOOPS: dict = {}  # (backend, B, NH, DH, dtype, device, training) -> (run_forward, run_backward) or None
_LOOPS_CONFIG: list = [None]  # the fused config _LOOPS was chosen under (plan.config_as may bind another)
_CHECKED: set = set()  # signatures whose inputs api.check_inputs accepted


def layer_loops(backend: str, B: int, NH: int, DH: int, dtype, device, training: bool):
    """``(run_forward, run_backward or None)`` of one problem on ``backend`` ('fused' or 'alternating'), as
    :func:`gpulab.rnn.flashrnn` would run it, or None where the fused plan would cut the batch into launches (no
    launch of the whole batch fits: the general path does that). Chosen once per problem and fused config
    (:func:`gpulab.rnn.fused.plan.config_as`)."""
    if fused_plan.current_config() is not _LOOPS_CONFIG[0]:  # chosen again under another config (an identity test)
        _LOOPS.clear()
        _LOOPS_CONFIG[0] = fused_plan.current_config()
    key = (backend, B, NH, DH, dtype, device, training)
    if key in _LOOPS:
        return _LOOPS[key]
    if backend == "alternating":
        loops = (alternating_rnn_forward, alternating_rnn_gradients if training else None)
    elif fused_plan.plan_kind(B, NH, DH, "lstm", dtype, training) is None:
        loops = None
    else:
        loops = fused_plan.problem_loops(B, NH, DH, "lstm", dtype, device, training)
    if len(_LOOPS) >= 256:
        _LOOPS.clear()
    _LOOPS[key] = loops
    return loops


class _LSTMLayer(torch.autograd.Function):
    """``apply(x [B, T, I], w_ih [4H, I], b_ih [4H] or None, R, b, s0 [2, B, 1, NH, DH], (NH, DH), loops) ->
    (states_all [2, B, T, NH, DH], states_last [2, B, 1, NH, DH])``; R and b as the module holds them ([4H, H] and
    [4H], or [4, NH, DH, DH] and [4, NH, DH]), viewed here (no autograd node per view)."""

    @staticmethod
    def forward(ctx, x, w_ih, b_ih, R_param, b_param, s0, heads, loops):
        ctx.set_materialize_grads(False)
        B, T, I = x.shape
        (NH, DH), G = heads, 4
        R = R_param if R_param.dim() == 4 else R_param.view(G, NH, DH, DH)
        b = b_param if b_param.dim() == 3 else b_param.view(G, NH, DH)
        run_forward, run_backward = loops
        x2 = x.reshape(B * T, I)
        wx = (torch.mm(x2, w_ih.t()) if b_ih is None else torch.addmm(b_ih, x2, w_ih.t())).view(B, T, G, NH, DH)
        need = run_backward is not None and any(ctx.needs_input_grad[:6])
        out, last, gates = run_forward(wx, R, b, s0, "lstm", save_gates=need)
        if need:
            ctx.save_for_backward(x2, w_ih, R, s0, out, gates)
            ctx.run_backward, ctx.has_b_ih, ctx.x_shape = run_backward, b_ih is not None, x.shape
            ctx.param_shapes = R_param.shape, b_param.shape
        return out, last

    @staticmethod
    @runtime.once_differentiable  # the backward is kernels and GEMMs, not a graph: a second derivative raises
    def backward(ctx, d_out, d_last):
        x2, w_ih, R, s0, out, gates = ctx.saved_tensors
        d = torch.zeros_like(out) if d_out is None else d_out.to(out.dtype)  # the loops only read it
        d_last = None if d_last is None else d_last.to(out.dtype)
        dwx, dR, db, ds0 = ctx.run_backward(d, gates, out, s0, R, "lstm", d_last=d_last)
        need = ctx.needs_input_grad
        dG = dwx.reshape(x2.shape[0], w_ih.shape[0])  # [B*T, 4H] (dG is written in Wx's layout: a view)
        dx = torch.mm(dG, w_ih).view(ctx.x_shape) if need[0] else None
        dw = torch.mm(dG.t(), x2) if need[1] else None
        db_ih = db.view(-1).clone() if ctx.has_b_ih and need[2] else None  # its own: optimizers scale grads in place
        r_shape, b_shape = ctx.param_shapes
        dR = dR if dR.shape == r_shape else dR.view(r_shape)
        db = db if db.shape == b_shape else db.view(b_shape)
        return dx, dw, db_ih, dR, db, ds0 if need[5] else None, None, None


def lstm_layer(x, w_ih, b_ih, R, b, s0, backend: str, heads: tuple):
    """One LSTM layer and direction over ``x`` [B, T, I] on ``backend`` ('fused' or 'alternating'): ``(states_all
    [2, B, T, NH, DH], states_last [2, B, 1, NH, DH])`` as :func:`gpulab.rnn.flashrnn` returns them for ``Wx = x
    W_ih^T + b_ih`` (``b_ih`` None: none), or None where this op does not apply (the caller takes the general path:
    see the module docstring). ``heads`` = (NH, DH); R [4, NH, DH, DH] or, one head, nn.LSTM's weight_hh [4H, H];
    b [4, NH, DH] or [4H]; ``s0`` [2, B, 1, NH, DH] or None (zeros). Inputs in one dtype (the module checks that)."""
    B, T, _ = x.shape
    NH, DH = heads
    if torch.compiler.is_compiling():  # traced: the checks once, at trace time; the layer as one custom op
        s0 = api.zero_states((2, B, 1, NH, DH), x.dtype, x.device, backend) if s0 is None else s0
        R, b = R.view(4, NH, DH, DH), b.view(4, NH, DH)
        api.check_inputs(x.new_empty((B, T, 4, NH, DH)), R, b, s0, "lstm", backend, None)
        return ops.lstm_layer_op(x, w_ih, b_ih, R, b, s0, backend)
    training = torch.is_grad_enabled() and (
        x.requires_grad or w_ih.requires_grad or R.requires_grad or b.requires_grad
        or (b_ih is not None and b_ih.requires_grad) or (s0 is not None and s0.requires_grad)
    )  # fmt: skip
    loops = layer_loops(backend, B, NH, DH, x.dtype, x.device, training)
    if loops is None:
        return None
    if s0 is None:
        s0 = api.zero_states((2, B, 1, NH, DH), x.dtype, x.device, backend)
    key = (backend, x.shape, x.dtype, x.device, R.shape, R.dtype, R.device, b.device, s0.shape, s0.dtype, s0.device)
    if key not in _CHECKED:  # the checks flashrnn makes, on a Wx of the projection's shape (no data read)
        wx = x.new_empty((B, T, 4, NH, DH))
        api.check_inputs(wx, R.view(4, NH, DH, DH), b.view(4, NH, DH), s0, "lstm", backend, None)
        if len(_CHECKED) >= 256:
            _CHECKED.clear()
        _CHECKED.add(key)
    return _LSTMLayer.apply(x, w_ih, b_ih, R, b, s0, heads, loops)
