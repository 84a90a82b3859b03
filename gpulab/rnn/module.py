"""``gpulab.rnn.LSTM``: a multi-head, multi-layer LSTM module in the shape of ``torch.nn.LSTM``, on gpulab's kernels.

Each layer does what FlashRNN's benchmarks do:

    Wx = x W_ih^T                                 one dense product over all steps at once (cuBLAS)
    h, c = flashrnn(Wx, R, b, (h0, c0), "lstm")   the recurrence, block-diagonal over NH heads, with ``backend``

Parameters per layer l (gate order i, f, z, o = nn.LSTM's i, f, g, o):

- ``weight_ih_l{l}`` [4H, I_l] (I_0 = input_size, else H), as nn.LSTM's;
- ``recurrent_l{l}`` [4, NH, DH, DH] (flashrnn's R; with NH = 1 it is nn.LSTM's ``weight_hh`` viewed [4, 1, H, H]);
- ``bias_l{l}`` [4, NH, DH] (nn.LSTM's ``bias_ih + bias_hh``). With ``bias=False`` it is no parameter but a zero
  buffer the backends read, outside ``parameters()`` and ``state_dict()``: nothing can train it or load a bias into it.

Backends (the ``backend`` attribute may be changed at any time):

- ``"fused"`` (default): one persistent Triton kernel per layer and direction of time (GPU; on CPU it runs in
  Triton's interpreter, correct but slow: use ``"vanilla"`` to train on CPU);
- ``"alternating"``: per step a batched product + a Triton pointwise kernel (any head dim);
- ``"vanilla"``: a PyTorch loop; runs anywhere, any dtype (float64 too).

With ``num_heads=1`` the module computes exactly ``torch.nn.LSTM``, and takes its arguments in its order
(``LSTM(4, 8, 2)`` has 2 layers; ``num_heads`` and ``backend`` are keywords only), the same inputs (batched or one
unbatched [T, I] sequence, ``hx=(h0, c0)``, a batch of 0) and gives the same outputs; :meth:`LSTM.from_torch` builds
one from an ``nn.LSTM`` through lesson 3's :func:`gpulab.rnn.from_torch_lstm`. Dropout between layers, bidirectional
and projected LSTMs are not supported: ``dropout``, ``bidirectional`` and ``proj_size`` are accepted at their
defaults only.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from gpulab import dtypes, hardware, runtime
from gpulab.rnn.api import backend_name, flashrnn
from gpulab.rnn.weights import check_lstm_module, float_dtype, from_torch_lstm

__all__ = ["LSTM"]


class LSTM(nn.Module):
    """``LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, *, num_heads=1, backend="fused")``.

    ``forward(x, hx=None)``: x [T, B, I] ([B, T, I] if ``batch_first``) or one unbatched sequence [T, I]; ``hx``
    ``(h0, c0)`` each [num_layers, B, H] ([num_layers, H] unbatched; default zeros); returns ``(output [T, B, H]
    (or [B, T, H], or [T, H]), (h_n, c_n))`` with h_n, c_n [num_layers, B, H] ([num_layers, H]), like
    ``torch.nn.LSTM``. ``hidden_size`` must be divisible by ``num_heads``; each head has its own DH x DH recurrent
    block per gate (DH = hidden_size // num_heads).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
        *,
        num_heads: int = 1,
        backend: str = "fused",
    ):
        super().__init__()
        self.input_size = runtime.positive_int("input_size", input_size)
        self.hidden_size = runtime.positive_int("hidden_size", hidden_size)
        self.num_layers = runtime.positive_int("num_layers", num_layers)
        self.bias = runtime.strict_bool("bias", bias)
        self.batch_first = runtime.strict_bool("batch_first", batch_first)
        _refuse_unsupported(dropout, bidirectional, proj_size)
        self.num_heads = runtime.positive_int("num_heads", num_heads)
        if hidden_size % num_heads:
            raise ValueError(
                f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}; each head gets "
                "hidden_size // num_heads units: pick a divisor."
            )
        self.head_dim = hidden_size // num_heads
        self.backend = backend_name(backend)
        kw = {
            "device": None if device is None else runtime.as_device(device),
            "dtype": None if dtype is None else float_dtype(dtype),
        }
        nh, dh = num_heads, self.head_dim
        for layer in range(num_layers):
            i_l = input_size if layer == 0 else hidden_size
            self.register_parameter(f"weight_ih_l{layer}", nn.Parameter(torch.empty(4 * hidden_size, i_l, **kw)))
            self.register_parameter(f"recurrent_l{layer}", nn.Parameter(torch.empty(4, nh, dh, dh, **kw)))
            if self.bias:
                self.register_parameter(f"bias_l{layer}", nn.Parameter(torch.empty(4, nh, dh, **kw)))
            else:  # the backends add a b: zeros, converted with the module (.to, .double) but never trained or saved
                self.register_buffer(f"bias_l{layer}", torch.zeros(4, nh, dh, **kw), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.LSTM's initialisation: every weight uniform in [-1/sqrt(H), 1/sqrt(H)] (bias: the sum of two such)."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        with torch.no_grad():
            for name, p in self.named_parameters():
                p.uniform_(-bound, bound)
                if name.startswith("bias"):
                    p.add_(torch.empty_like(p).uniform_(-bound, bound))

    def flatten_parameters(self) -> None:
        """Does nothing: ``torch.nn.LSTM`` packs its weights into one cuDNN buffer, these need no packing. Here so
        that code written for ``torch.nn.LSTM`` runs unchanged."""

    def layer_weights(self, layer: int):
        """(weight_ih [4H, I_l], R [4, NH, DH, DH], b [4, NH, DH]) of one layer (b: a zero buffer if ``bias=False``)."""
        return (
            getattr(self, f"weight_ih_l{layer}"),
            getattr(self, f"recurrent_l{layer}"),
            getattr(self, f"bias_l{layer}"),
        )

    def forward(self, x, hx=None):
        layout = "[T, B, I] ([B, T, I] with batch_first=True) or unbatched [T, I]"
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor {layout}, got {type(x).__name__}.")
        if x.dim() not in (2, 3):
            raise ValueError(f"x must be {layout}, got shape {tuple(x.shape)}.")
        dtype = self.weight_ih_l0.dtype
        if not x.is_floating_point():
            raise ValueError(
                f"x has dtype {x.dtype}; an LSTM takes floating-point input in its parameters' dtype: convert it "
                f"with x.to({dtype})."
            )
        if x.dtype != dtype:  # as nn.LSTM: no silent cast between the input's and the module's dtypes
            raise ValueError(
                f"x has dtype {x.dtype} but the module's parameters are {dtype}; convert one: x.to({dtype}) or "
                f"module.to({x.dtype})."
            )
        if self.backend != "vanilla" and dtype not in (torch.float32, torch.float16):
            _check_backend_dtype(self.backend, dtype)
        unbatched = x.dim() == 2
        xb = x.unsqueeze(0) if unbatched else x if self.batch_first else x.transpose(0, 1)  # [B, T, I]
        B, T, I = xb.shape
        if I != self.input_size:
            raise ValueError(f"x has {I} features but input_size={self.input_size}.")
        if T == 0:
            time = ("dimension 0 of an unbatched [T, I]" if unbatched else "dimension 1 of [B, T, I] (batch_first=True)"
                    if self.batch_first else "dimension 0 of [T, B, I] (batch_first=False)")  # fmt: skip
            raise ValueError(
                f"x has shape {tuple(x.shape)}: 0 time steps (T is {time}); an LSTM needs T >= 1, as torch.nn.LSTM "
                "does: pass at least one step."
            )
        state = self._initial_state(hx, B, unbatched, dtype)
        H, nh, dh, L = self.hidden_size, self.num_heads, self.head_dim, self.num_layers
        h_n, c_n = [], []
        inp = xb
        for layer in range(L):
            w_ih, R, b = self.layer_weights(layer)
            wx = torch.nn.functional.linear(inp, w_ih).view(B, T, 4, nh, dh)
            s0 = None
            if state is not None:
                s0 = torch.stack((state[0][layer], state[1][layer])).view(2, B, 1, nh, dh)
            if B == 0:  # nothing to run (flashrnn and its kernels take B >= 1); nn.LSTM returns empty outputs
                all_states, last = _empty_batch(wx, R, b, s0)
            else:
                all_states, last = flashrnn(wx, R, b, s0, "lstm", self.backend, dtype=wx.dtype)
            inp = all_states[0].reshape(B, T, H)
            h_n.append(last[0].reshape(B, H))
            c_n.append(last[1].reshape(B, H))
        # [num_layers, B, H]; one layer: views of the kernel's last states (a stack would be two more launches)
        h_n, c_n = (torch.stack(h_n), torch.stack(c_n)) if L > 1 else (h_n[0].unsqueeze(0), c_n[0].unsqueeze(0))
        if unbatched:
            return inp[0], (h_n[:, 0], c_n[:, 0])
        out = inp if self.batch_first else inp.transpose(0, 1)
        return out, (h_n, c_n)

    def _initial_state(self, hx, B: int, unbatched: bool, dtype):
        """``hx`` checked: None, or ``(h0, c0)`` each [num_layers, B, H] (given [num_layers, H] for unbatched x)."""
        if hx is None:
            return None
        L, H = self.num_layers, self.hidden_size
        shape, layout = ((L, H), "[num_layers, H] (x is unbatched)") if unbatched else ((L, B, H), "[num_layers, B, H]")
        if not isinstance(hx, (tuple, list)) or len(hx) != 2:
            if isinstance(hx, (tuple, list)):
                got = f"a {type(hx).__name__} of {len(hx)}"
            elif isinstance(hx, torch.Tensor):
                got = f"one Tensor of shape {tuple(hx.shape)}"
            else:
                got = f"a {type(hx).__name__}"
            raise ValueError(f"hx must be a pair (h0, c0) of {layout} tensors, as nn.LSTM's hx; got {got}.")
        for name, t in zip(("h0", "c0"), hx):
            runtime.require_tensor(f"hx's {name}", t, shape=shape, device_check=False)
            if t.dtype != dtype:
                raise ValueError(f"hx's {name} has dtype {t.dtype} but the module's parameters are {dtype}; "
                                 f"pass it as {name}.to({dtype}).")  # fmt: skip
        return tuple(t.unsqueeze(1) for t in hx) if unbatched else tuple(hx)

    @classmethod
    def from_torch(cls, module: nn.LSTM, backend: str = "fused", dtype=None, device=None) -> LSTM:
        """An :class:`LSTM` (num_heads = 1) with a copy of the weights of ``module`` (read by lesson 3's
        ``from_torch_lstm``): the same function, now run by ``backend``.

        Refused with a ValueError: anything but an ``nn.LSTM``, ``bidirectional=True``, ``proj_size > 0``, and
        ``dropout > 0`` (this module has no dropout between layers, so it would not train the same function).
        """
        check_lstm_module(module)
        if module.dropout:
            raise ValueError(
                f"module has dropout={module.dropout}; gpulab.rnn.LSTM has no dropout between layers. Build the "
                "nn.LSTM with dropout=0 (or set module.dropout = 0 to read it for inference only)."
            )
        backend = backend_name(backend)
        w = from_torch_lstm(module, dtype=dtype, device=device)
        out = cls(
            w.input_size,
            w.hidden_size,
            num_layers=w.num_layers,
            bias=bool(module.bias),
            batch_first=w.batch_first,
            device=w.device,
            dtype=w.dtype,
            num_heads=1,
            backend=backend,
        )
        H = w.hidden_size
        with torch.no_grad():
            for layer in range(w.num_layers):
                w_ih, R, b = out.layer_weights(layer)
                w_ih.copy_(w.w_ih[layer])
                R.copy_(w.w_hh[layer].view(4, 1, H, H))
                if out.bias:
                    b.copy_(w.bias[layer].view(4, 1, H))
        return out

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, num_heads={self.num_heads}, num_layers={self.num_layers}, "
            f"batch_first={self.batch_first}, backend={self.backend!r}" + ("" if self.bias else ", bias=False")
        )


def _refuse_unsupported(dropout, bidirectional, proj_size) -> None:
    """nn.LSTM's ``dropout``, ``bidirectional`` and ``proj_size``, accepted at their defaults (so that nn.LSTM's
    arguments pass), refused otherwise: this module has none of the three."""
    dropout = runtime.finite_float("dropout", dropout, minimum=0.0, maximum=1.0)
    if dropout:
        raise ValueError(f"dropout={dropout} is not supported: gpulab.rnn.LSTM has no dropout between layers; use "
                         "dropout=0.0 (or an nn.Dropout on the output).")  # fmt: skip
    if runtime.strict_bool("bidirectional", bidirectional):
        raise ValueError("bidirectional=True is not supported: gpulab.rnn.LSTM runs forward in time only; use "
                         "bidirectional=False (or run a second LSTM on x.flip(0) and concatenate).")  # fmt: skip
    if runtime.nonnegative_int("proj_size", proj_size):
        raise ValueError(f"proj_size={proj_size} is not supported: gpulab.rnn.LSTM has no projection of h; use "
                         "proj_size=0 (or an nn.Linear on the output).")  # fmt: skip


def _check_backend_dtype(backend: str, dtype: torch.dtype) -> None:
    """A ValueError unless the Triton ``backend`` takes ``dtype`` on this device (float64 never; bf16 not in Triton's
    CPU interpreter, which computes it wrongly, nor on a GPU without it), saying what it takes and the fix."""
    here = tuple(d for d in (torch.float32, torch.float16, torch.bfloat16) if d in hardware.supported_dtypes())
    if dtype in here:
        return
    where = "on CPU (Triton's interpreter)" if runtime.INTERPRET else "on this GPU"
    if dtype == torch.bfloat16:
        where += ", whose bfloat16 arithmetic is wrong" if runtime.INTERPRET else ", which has no bfloat16"
    raise ValueError(
        f"x and the module's parameters are {dtype}, which backend={backend!r} does not take {where}: it takes "
        f"{dtypes.names_of(here)}. Fix: backend='vanilla' (a PyTorch loop, any float dtype, float64 too: set "
        "module.backend = 'vanilla'), or convert both: module.float() and x.float()."
    )


def _empty_batch(wx, R, b, s0):
    """Batch 0: empty ``(states_all [2, 0, T, NH, DH], states_last [2, 0, 1, NH, DH])`` that still depend on every
    input, so that a backward gives each a gradient (zeros, as nn.LSTM's) without launching anything."""
    B, T, _, nh, dh = wx.shape
    tie = wx.sum() + R.sum() + b.sum() + (0 if s0 is None else s0.sum())
    out = wx.new_zeros((2, B, T, nh, dh)) + 0 * tie
    return out, out[:, :, -1:]
