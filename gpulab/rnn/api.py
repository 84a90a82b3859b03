"""``gpulab.rnn.flashrnn``: one entry point, drop-in compatible with the ``flashrnn`` package, three backends.

Layouts (flashrnn's defaults; B batch, T time, G gates, NH heads, DH head dim, S states):

- ``Wx`` [B, T, G_w, NH, DH]: the input projections, precomputed (e.g. ``x @ W^T`` viewed per gate and head);
- ``R`` [G_r, NH, DH, DH]: block-diagonal recurrent weights, ``R[g, n, j, k]`` maps unit k of head n's previous
  h to unit j of gate g (so ``Ry[b, g, n, j] = sum_k R[g, n, j, k] h[b, n, k]``, i.e. ``h_n @ R[g, n]^T``, and
  nn.LSTM's ``weight_hh`` [4H, H] is ``R`` with NH = 1 viewed as [4, 1, H, H]);
- ``b`` [G_b, NH, DH]; optional initial ``states`` [S, B, 1, NH, DH] (default zeros);
- returns ``(states_all [S, B, T, NH, DH], states_last [S, B, 1, NH, DH])``; ``states_all[0]`` is h.

Gate counts per function are in :mod:`gpulab.rnn.functions`. ``dtype`` is the compute dtype (flashrnn's names
'float32', 'float16', 'bfloat16', or a torch dtype; default: Wx's dtype): the inputs are cast to it (autograd flows
back through the cast) and the outputs come in it; Triton kernels multiply in it and accumulate in fp32.

Backends (``backend=``), each a module of its own:

- ``"vanilla"`` (:mod:`gpulab.rnn.backends.vanilla`): a PyTorch time loop; any device and float dtype (float64 too: the
  reference);
- ``"alternating"`` (:mod:`gpulab.rnn.backends.alternating`): per step one batched product over heads + one Triton
  pointwise kernel; no on-chip limit on the head dim;
- ``"fused"`` (:mod:`gpulab.rnn.fused`): one persistent Triton kernel for the whole sequence (and one for the
  backward); fastest, needs R of a head on chip, on one SM or split over several (:mod:`gpulab.rnn.fused.plan`
  chooses, or says why neither fits).

The Triton backends run on gpulab's device (a GPU, or the CPU interpreter at small sizes: fp32 and fp16 there).

A small problem called again and again with one shape (a few steps, a small batch) costs the host's work, not the
GPU's: PyTorch's autograd, a few launches and gpulab's checks around kernels of microseconds. There the step can be
captured: ``step = torch.cuda.make_graphed_callables(lambda *x: flashrnn(*x)[0], (Wx, R, b, states))`` runs the
forward and the backward as two CUDA graphs inside an autograd Function (inputs copied into its buffers unless they
are the same tensors, outputs reused from call to call); its gradients equal the eager step's bit for bit
(``tests/rnn/test_rnn_host_path.py``, on a GPU), and ``python -m gpulab bench 07 called`` times it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpulab import dtypes, hardware, runtime
from gpulab.rnn import ops
from gpulab.rnn.backends.alternating import alternating_forward
from gpulab.rnn.backends.vanilla import vanilla_forward
from gpulab.rnn.functions import FUNCTIONS, RNNFunction, get_function
from gpulab.rnn.fused.plan import fused_forward

__all__ = ["flashrnn", "BACKENDS", "backend_name", "check_inputs", "zero_states"]

BACKENDS: dict[str, Callable] = {
    "vanilla": vanilla_forward,
    "alternating": alternating_forward,
    "fused": fused_forward,
}
"""backend name -> its function ``(Wx, R, b, states, function) -> (states_all, states_last)``, inputs validated and
in the compute dtype."""

_FLASHRNN_NAMES = {"cuda": "alternating", "cuda_fused": "fused", "triton_fused": "fused", "vanilla_fwbw": "vanilla"}


def backend_name(backend, name: str = "backend") -> str:
    """``backend`` if it names one of :data:`BACKENDS`, else a ValueError naming the argument and the choices (and
    the corresponding gpulab backend for the ``flashrnn`` package's names)."""
    if isinstance(backend, str) and backend in BACKENDS:
        return backend
    hint = ""
    if isinstance(backend, str) and backend in _FLASHRNN_NAMES:
        hint = f" (flashrnn's {backend!r} corresponds to {name}={_FLASHRNN_NAMES[backend]!r} here)"
    raise ValueError(f"{name}={backend!r} is not supported; use one of {', '.join(map(repr, BACKENDS))}{hint}.")


def _shape(name, t, expected, meaning):
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must be {meaning} = {tuple(expected)}, got {tuple(t.shape)}.")


def check_inputs(Wx, R, b, states, function, backend, dtype):
    """Validate flashrnn's arguments; return ``(RNNFunction, backend, compute dtype)`` or raise naming the argument."""
    fn: RNNFunction = get_function(function)
    backend = backend_name(backend)
    for name, t in (("Wx", Wx), ("R", R), ("b", b)) + ((("states", states),) if states is not None else ()):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}.")
        if not t.is_floating_point():
            raise ValueError(f"{name} has dtype {t.dtype}; pass floating-point tensors.")
        if t.device != Wx.device:
            raise ValueError(f"{name} is on {t.device} but Wx is on {Wx.device}; put all inputs on one device.")
        if backend != "vanilla":
            runtime.require_tensor(name, t)
    if Wx.dim() != 5:
        raise ValueError(
            f"Wx must be [B, T, G_w, NH, DH] (5-dimensional), got shape {tuple(Wx.shape)}; a dense input "
            "projection [B, T, G*H] is Wx.view(B, T, G, NH, H // NH)."
        )
    B, T, gw, nh, dh = Wx.shape
    if gw != fn.gates_w:
        match = [name for name, f in FUNCTIONS.items() if f.gates_w == gw]
        fix = f"; for {gw} gates pass function={match[0]!r}" if match else ""
        raise ValueError(
            f"Wx has {gw} gates (dim 2) but {fn.name} takes G_w = {fn.gates_w} input gates: give Wx "
            f"[B, T, {fn.gates_w}, NH, DH]{fix}."
        )
    if min(B, T, nh, dh) < 1:
        raise ValueError(f"Wx {tuple(Wx.shape)} is empty; B, T, NH and DH must be at least 1.")
    _shape("R", R, (fn.gates_r, nh, dh, dh), f"[G_r, NH, DH, DH] for {fn.name} and Wx {tuple(Wx.shape)}")
    _shape("b", b, (fn.gates_b, nh, dh), f"[G_b, NH, DH] for {fn.name}")
    if states is not None:
        _shape("states", states, (fn.states, B, 1, nh, dh), f"[S, B, 1, NH, DH] for {fn.name}")
    cdt = Wx.dtype if dtype is None else dtypes.as_dtype(dtype)
    if backend != "vanilla":
        hardware.require_dtype("dtype", cdt, allowed=(torch.float32, torch.float16, torch.bfloat16))
    elif not cdt.is_floating_point:
        raise ValueError(f"dtype={dtype!r} is not a floating-point dtype.")
    return fn, backend, cdt


_CHECKED: dict = {}  # input signature -> check_inputs' answer: the checks read only what the signature holds


def _signature(Wx, R, b, states, function, backend, dtype):
    """What :func:`check_inputs` looks at (each tensor's class, shape, dtype and device, and the other arguments),
    or None when an argument cannot be a dict key (then the checks run and say what is wrong)."""
    try:
        key = (function, backend, dtype)
        for t in (Wx, R, b) if states is None else (Wx, R, b, states):
            key += (t.__class__, t.shape, t.dtype, t.device)
        hash(key)
        return key
    except (AttributeError, TypeError):
        return None


_ZEROS: dict = {}  # (shape, dtype, device) -> a zero initial state the Triton backends only read


def zero_states(shape, dtype, device, backend):
    """Zero initial states: made once per shape and kept for the Triton backends, whose loops only read them (one
    allocation and one fill less per call); new zeros where the tensor must be the caller's own: the ``vanilla``
    loop, a traced call (``torch.compile``), a CUDA graph being captured (its fill would run only on replay)."""
    if backend == "vanilla" or torch.compiler.is_compiling():
        return torch.zeros(shape, dtype=dtype, device=device)
    key = (shape, dtype, device)
    zeros = _ZEROS.get(key)
    if zeros is None:
        zeros = torch.zeros(shape, dtype=dtype, device=device)
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return zeros
        if len(_ZEROS) >= 64:
            _ZEROS.clear()
        _ZEROS[key] = zeros
    return zeros


def flashrnn(Wx, R, b, states=None, function="lstm", backend="fused", dtype=None):
    """Run a recurrent ``function`` ('lstm', 'gru', 'elman') over the sequence with ``backend``.

    Shapes, index conventions, dtypes and backends: see the module docstring. Returns
    ``(states_all [S, B, T, NH, DH], states_last [S, B, 1, NH, DH])``. Differentiable with respect to Wx, R, b and
    states with every backend.
    """
    # the cache of checked signatures serves eager calls; traced (torch.compile), the checks run once at trace time
    key = None if torch.compiler.is_compiling() else _signature(Wx, R, b, states, function, backend, dtype)
    checked = _CHECKED.get(key) if key is not None else None
    if checked is None:
        checked = check_inputs(Wx, R, b, states, function, backend, dtype)
        if key is not None:
            if len(_CHECKED) >= 256:
                _CHECKED.clear()
            _CHECKED[key] = checked
    fn, backend, cdt = checked
    B, T, _, nh, dh = Wx.shape
    if states is None:
        states = zero_states((fn.states, B, 1, nh, dh), cdt, Wx.device, backend)
    Wx, R, b, states = (t.to(cdt) for t in (Wx, R, b, states))
    if backend != "vanilla" and torch.compiler.is_compiling():  # torch.compile: the custom ops, opaque to the tracer
        return ops.rnn_op(Wx, R, b, states, fn.name, backend)
    return BACKENDS[backend](Wx, R, b, states, fn.name)
