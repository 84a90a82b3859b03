"""``gpulab.rnn.LSTM``: a multi-head, multi-layer LSTM module in the shape of ``torch.nn.LSTM``, on gpulab's kernels.

Each layer does what FlashRNN's benchmarks do:

    Wx = x W_ih^T                                 one dense product over all steps at once (cuBLAS)
    h, c = flashrnn(Wx, R, b, (h0, c0), "lstm")   the recurrence, block-diagonal over NH heads, with ``backend``

Parameters per layer l (gate order i, f, z, o = nn.LSTM's i, f, g, o):

- ``weight_ih_l{l}`` [4H, I_l] (I_0 = input_size, else H), as nn.LSTM's;
- ``recurrent_l{l}`` [4, NH, DH, DH] (flashrnn's R; with NH = 1 it is nn.LSTM's ``weight_hh`` viewed [4, 1, H, H]);
- ``bias_l{l}`` [4, NH, DH] (nn.LSTM's ``bias_ih + bias_hh``; zeros and not trained if ``bias=False``).

Backends (the ``backend`` attribute may be changed at any time):

- ``"fused"`` (default): one persistent Triton kernel per layer and direction of time (GPU; on CPU it runs in
  Triton's interpreter, correct but slow: use ``"vanilla"`` to train on CPU);
- ``"alternating"``: per step a batched product + a Triton pointwise kernel (any head dim);
- ``"vanilla"``: a PyTorch loop; runs anywhere, any dtype (float64 too).

With ``num_heads=1`` the module computes exactly ``torch.nn.LSTM``; :meth:`LSTM.from_torch` builds one from an
``nn.LSTM`` through lesson 3's :func:`gpulab.rnn.from_torch_lstm`. Dropout between layers, bidirectional and
projected LSTMs are not supported.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from gpulab import dtypes, runtime
from gpulab.rnn.api import backend_name, flashrnn
from gpulab.rnn.weights import check_lstm_module, from_torch_lstm

__all__ = ["LSTM"]


class LSTM(nn.Module):
    """``LSTM(input_size, hidden_size, num_heads=1, num_layers=1, batch_first=False, backend="fused")``.

    ``forward(x, state=None)``: x [T, B, I] ([B, T, I] if ``batch_first``), state ``(h0, c0)`` each
    [num_layers, B, H] (default zeros); returns ``(output [T, B, H] (or [B, T, H]), (h_n, c_n))`` with h_n, c_n
    [num_layers, B, H], like ``torch.nn.LSTM``. ``hidden_size`` must be divisible by ``num_heads``; each head
    has its own DH x DH recurrent block per gate (DH = hidden_size // num_heads).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_heads: int = 1,
        num_layers: int = 1,
        batch_first: bool = False,
        backend: str = "fused",
        bias: bool = True,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.input_size = runtime.positive_int("input_size", input_size)
        self.hidden_size = runtime.positive_int("hidden_size", hidden_size)
        self.num_heads = runtime.positive_int("num_heads", num_heads)
        self.num_layers = runtime.positive_int("num_layers", num_layers)
        if hidden_size % num_heads:
            raise ValueError(
                f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}; each head gets "
                "hidden_size // num_heads units: pick a divisor."
            )
        self.head_dim = hidden_size // num_heads
        self.batch_first = runtime.strict_bool("batch_first", batch_first)
        self.backend = backend_name(backend)
        self.bias = runtime.strict_bool("bias", bias)
        kw = {"device": device, "dtype": None if dtype is None else dtypes.as_dtype(dtype)}
        nh, dh = num_heads, self.head_dim
        for layer in range(num_layers):
            i_l = input_size if layer == 0 else hidden_size
            self.register_parameter(f"weight_ih_l{layer}", nn.Parameter(torch.empty(4 * hidden_size, i_l, **kw)))
            self.register_parameter(f"recurrent_l{layer}", nn.Parameter(torch.empty(4, nh, dh, dh, **kw)))
            self.register_parameter(
                f"bias_l{layer}", nn.Parameter(torch.zeros(4, nh, dh, **kw), requires_grad=self.bias)
            )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.LSTM's initialisation: every weight uniform in [-1/sqrt(H), 1/sqrt(H)] (bias: the sum of two such)."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.startswith("bias"):
                    if self.bias:
                        p.uniform_(-bound, bound).add_(torch.empty_like(p).uniform_(-bound, bound))
                    else:
                        p.zero_()
                else:
                    p.uniform_(-bound, bound)

    def layer_weights(self, layer: int):
        """(weight_ih [4H, I_l], R [4, NH, DH, DH], b [4, NH, DH]) of one layer."""
        return (
            getattr(self, f"weight_ih_l{layer}"),
            getattr(self, f"recurrent_l{layer}"),
            getattr(self, f"bias_l{layer}"),
        )

    def forward(self, x, state=None):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor [T, B, I] ([B, T, I] with batch_first=True), got "
                            f"{type(x).__name__}.")  # fmt: skip
        if x.dim() != 3:
            raise ValueError(f"x must be [T, B, I] ([B, T, I] with batch_first=True), got shape {tuple(x.shape)}.")
        dtype = self.weight_ih_l0.dtype
        if x.dtype != dtype:  # as nn.LSTM: no silent cast between the input's and the module's dtypes
            raise ValueError(
                f"x has dtype {x.dtype} but the module's parameters are {dtype}; convert one: x.to({dtype}) or "
                f"module.to({x.dtype})."
            )
        xb = x if self.batch_first else x.transpose(0, 1)  # [B, T, I]
        B, T, I = xb.shape
        if I != self.input_size:
            raise ValueError(f"x has {I} features but input_size={self.input_size}.")
        H, nh, dh, L = self.hidden_size, self.num_heads, self.head_dim, self.num_layers
        if state is not None:
            if not isinstance(state, (tuple, list)) or len(state) != 2:
                got = f"a {type(state).__name__} of {len(state)}" if isinstance(state, (tuple, list)) else repr(state)
                raise ValueError(
                    f"state must be a pair (h0, c0) of [num_layers, B, H] tensors, like nn.LSTM's hx; got {got}."
                )
            h0, c0 = state
            for name, t in (("h0", h0), ("c0", c0)):
                runtime.require_tensor(f"state's {name}", t, shape=(L, B, H), device_check=False)
                if t.dtype != dtype:
                    raise ValueError(f"state's {name} has dtype {t.dtype} but the module's parameters are {dtype}; "
                                     f"pass it as {name}.to({dtype}).")  # fmt: skip
        h_n, c_n = [], []
        inp = xb
        for layer in range(L):
            w_ih, R, b = self.layer_weights(layer)
            wx = torch.nn.functional.linear(inp, w_ih).view(B, T, 4, nh, dh)
            s0 = None
            if state is not None:
                s0 = torch.stack((state[0][layer], state[1][layer])).view(2, B, 1, nh, dh)
            all_states, last = flashrnn(wx, R, b, s0, "lstm", self.backend, dtype=wx.dtype)
            inp = all_states[0].reshape(B, T, H)
            h_n.append(last[0].reshape(B, H))
            c_n.append(last[1].reshape(B, H))
        out = inp if self.batch_first else inp.transpose(0, 1)
        return out, (torch.stack(h_n), torch.stack(c_n))

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
            num_heads=1,
            num_layers=w.num_layers,
            batch_first=w.batch_first,
            backend=backend,
            bias=bool(module.bias),
            device=w.device,
            dtype=w.dtype,
        )
        H = w.hidden_size
        with torch.no_grad():
            for layer in range(w.num_layers):
                w_ih, R, b = out.layer_weights(layer)
                w_ih.copy_(w.w_ih[layer])
                R.copy_(w.w_hh[layer].view(4, 1, H, H))
                b.copy_(w.bias[layer].view(4, 1, H))
        return out

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, num_heads={self.num_heads}, num_layers={self.num_layers}, "
            f"batch_first={self.batch_first}, backend={self.backend!r}"
        )
