"""``gpulab.rnn.LSTM``: ``torch.nn.LSTM``'s drop-in (every argument, PackedSequence, its checkpoints), multi-head too.

Each layer and direction does what FlashRNN's benchmarks do:

    Wx = x W_ih^T + b_ih                          one dense product over all steps at once (cuBLAS)
    h, c = flashrnn(Wx, R, b, (h0, c0), "lstm")   the recurrence, block-diagonal over NH heads, with ``backend``

Parameters (gate order i, f, z, o = nn.LSTM's i, f, g, o; layer l, suffix ``""`` or ``"_reverse"``):

- **one head** (``num_heads=1``): exactly nn.LSTM's names, shapes and gate order, ``weight_ih_l{l}`` [4H, I_l],
  ``weight_hh_l{l}`` [4H, H] (flashrnn's R viewed [4, 1, H, H]), ``bias_ih_l{l}`` and ``bias_hh_l{l}`` [4H],
  ``weight_hr_l{l}`` [P, H] with ``proj_size=P``; so ``nn.LSTM.load_state_dict(ours.state_dict())`` and the reverse
  work. A checkpoint of the earlier one-head layout (``recurrent_l{l}``, ``bias_l{l}``) still loads, with a warning
  (:mod:`gpulab.rnn.checkpoint`).
- **several heads**: their own layout, ``weight_ih_l{l}`` [4H, I_l], ``recurrent_l{l}`` [4, NH, DH, DH] (block
  diagonal, DH = H / NH) and one ``bias_l{l}`` [4, NH, DH] (nn.LSTM's b_ih + b_hh); no ``proj_size``.

I_0 = input_size, I_l = D * (P or H) above (D = 2 if bidirectional). With ``bias=False`` the recurrence reads a zero
buffer ``bias_l{l}`` outside ``parameters()`` and ``state_dict()``: nothing can train it or load a bias into it.

As nn.LSTM: ``dropout`` acts on each layer's output but the last, in training mode only; ``bidirectional`` runs a
second recurrence on each sequence reversed within its length and concatenates [forward, reverse] features; h_n and
c_n are [num_layers * D, B, P or H] and [num_layers * D, B, H], ordered (layer 0 forward, layer 0 reverse, ...);
a ``PackedSequence`` in gives one out, each sequence's state stopping at its own length (:mod:`gpulab.rnn.packed`).
Both directions of a layer run as one recurrence (the reverse direction's heads beside the forward's, 2 NH
block-diagonal heads, one launch) where that is the faster choice: ``module.join_directions`` None (the default)
joins them except where the fused backend would have to split the joined heads over several SMs (a split launch
keeps every program resident, so twice the heads leave it fewer and narrower tiles than one direction gets: one
recurrence per direction was the faster there, ``notes/rnn-fused.md``); True or False forces either.

Backends (the ``backend`` attribute may be changed at any time):

- ``"fused"`` (default): one persistent Triton kernel per layer and direction of time (GPU; on CPU it runs in
  Triton's interpreter, correct but slow: use ``"vanilla"`` to train on CPU);
- ``"alternating"``: per step a batched product + a Triton pointwise kernel (any head dim);
- ``"vanilla"``: a PyTorch loop; runs anywhere, any dtype (float64 too).

``proj_size > 0`` runs on every backend through the PyTorch loop of :mod:`gpulab.rnn.projected` (the kernels hold
square recurrent blocks); on the Triton backends a warning says so once. So does a dtype the Triton backends do not
take here (float64 anywhere, as ``gradcheck`` wants; bfloat16 in Triton's CPU interpreter or on a GPU without it):
that call runs ``"vanilla"``, as torch.nn.LSTM would run it, with a warning once.
"""

from __future__ import annotations

import math
import numbers
import warnings

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from gpulab import dtypes, hardware, runtime
from gpulab.rnn import packed as packing
from gpulab.rnn.api import backend_name, flashrnn
from gpulab.rnn.checkpoint import convert_legacy
from gpulab.rnn.fused import plan as fused_plan
from gpulab.rnn.layer import lstm_layer
from gpulab.rnn.projected import projected_lstm
from gpulab.rnn.weights import float_dtype

__all__ = ["LSTM"]

_WARNED: set = set()  # (reason, backend) pairs already warned about in this process
_SUFFIX = ("", "_reverse")  # nn.LSTM's parameter name suffix per direction (forward, reverse in time)


class LSTM(nn.Module):
    """``LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0, bidirectional=False,
    proj_size=0, device=None, dtype=None, *, num_heads=1, backend="fused")``: torch.nn.LSTM's arguments in its order.

    ``forward(x, hx=None)``: x [T, B, I] ([B, T, I] if ``batch_first``), one unbatched sequence [T, I], or a
    ``PackedSequence``; ``hx`` ``(h0 [L*D, B, P or H], c0 [L*D, B, H])`` (without B for unbatched x; default zeros);
    returns ``(output [T, B, D*(P or H)] (or [B, T, ...], [T, ...], a PackedSequence), (h_n, c_n))`` shaped as hx,
    like ``torch.nn.LSTM``. ``hidden_size`` must be divisible by ``num_heads``; each head has its own DH x DH
    recurrent block per gate (DH = hidden_size // num_heads). Parameter layouts: see the module docstring.
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
        self.hidden_size = H = runtime.positive_int("hidden_size", hidden_size)
        self.num_layers = runtime.positive_int("num_layers", num_layers)
        self.bias = runtime.strict_bool("bias", bias)
        self.batch_first = runtime.strict_bool("batch_first", batch_first)
        self.bidirectional = runtime.strict_bool("bidirectional", bidirectional)
        self.dropout = _check_dropout(dropout, num_layers)
        self.num_heads = nh = runtime.positive_int("num_heads", num_heads)
        self.proj_size = P = _check_proj_size(proj_size, H, nh)
        if H % nh:
            raise ValueError(
                f"hidden_size={H} is not divisible by num_heads={nh}; each head gets hidden_size // num_heads units: "
                "pick a divisor."
            )
        self.head_dim = dh = H // nh
        self.backend = backend_name(backend)
        self.join_directions = None  # bidirectional: None chooses (_joins); True one recurrence, False one each
        kw = {
            "device": None if device is None else runtime.as_device(device),
            "dtype": None if dtype is None else float_dtype(dtype),
        }
        D, out_size = (2 if self.bidirectional else 1), (P or H)
        for layer in range(num_layers):
            i_l = input_size if layer == 0 else D * out_size
            for d in range(D):
                s = f"l{layer}{_SUFFIX[d]}"
                self.register_parameter(f"weight_ih_{s}", nn.Parameter(torch.empty(4 * H, i_l, **kw)))
                if nh == 1:
                    self.register_parameter(f"weight_hh_{s}", nn.Parameter(torch.empty(4 * H, out_size, **kw)))
                else:
                    self.register_parameter(f"recurrent_{s}", nn.Parameter(torch.empty(4, nh, dh, dh, **kw)))
                if self.bias and nh == 1:
                    self.register_parameter(f"bias_ih_{s}", nn.Parameter(torch.empty(4 * H, **kw)))
                    self.register_parameter(f"bias_hh_{s}", nn.Parameter(torch.empty(4 * H, **kw)))
                elif self.bias:
                    self.register_parameter(f"bias_{s}", nn.Parameter(torch.empty(4, nh, dh, **kw)))
                else:  # the backends add a b: zeros, following .to/.double but never trained or saved
                    self.register_buffer(f"bias_{s}", torch.zeros(4, nh, dh, **kw), persistent=False)
                if P:
                    self.register_parameter(f"weight_hr_{s}", nn.Parameter(torch.empty(P, H, **kw)))
        self.reset_parameters()

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    def reset_parameters(self) -> None:
        """nn.LSTM's initialisation: every weight uniform in [-1/sqrt(H), 1/sqrt(H)] (several heads' one bias: the
        sum of two such, as b_ih + b_hh)."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        with torch.no_grad():
            for name, p in self.named_parameters():
                p.uniform_(-bound, bound)
                if name.startswith("bias_l"):
                    p.add_(torch.empty_like(p).uniform_(-bound, bound))

    @property
    def all_weights(self) -> list[list[nn.Parameter]]:
        """The parameters per layer and direction, in nn.LSTM's order (``[weight_ih, weight_hh, bias_ih, bias_hh,
        weight_hr]``, those that exist; several heads: ``[weight_ih, recurrent, bias]``), as ``nn.LSTM.all_weights``."""
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    @property
    def _all_weights(self) -> list[list[str]]:
        """:attr:`all_weights`' names, as nn.LSTM's ``_all_weights`` (code written for nn.LSTM reads it, e.g. to set
        the forget-gate biases); with ``_flat_weights_names`` and ``_flat_weights``, read-only."""
        return [[name for name in self._parameters if name.endswith(f"_l{layer}{suffix}")]
                for layer in range(self.num_layers) for suffix in _SUFFIX[: self.num_directions]]  # fmt: skip

    @property
    def _flat_weights_names(self) -> list[str]:
        return [name for names in self._all_weights for name in names]

    @property
    def _flat_weights(self) -> list[nn.Parameter]:
        return [getattr(self, name) for name in self._flat_weights_names]

    def flatten_parameters(self) -> None:
        """Does nothing: ``torch.nn.LSTM`` packs its weights into one cuDNN buffer, these need no packing. Here so
        that code written for ``torch.nn.LSTM`` runs unchanged."""

    def layer_weights(self, layer: int, direction: int = 0):
        """(weight_ih [4H, I_l], b_ih [4H] or None, R [4, NH, DH, DH], b [4, NH, DH]) of one layer and direction, as
        flashrnn reads them (one head: views of nn.LSTM's weight_hh and bias_hh; b: a zero buffer if ``bias=False``).
        Not for ``proj_size > 0`` (there R is [4H, P])."""
        s, nh, dh = f"l{layer}{_SUFFIX[direction]}", self.num_heads, self.head_dim
        w_ih = getattr(self, f"weight_ih_{s}")
        if nh > 1:
            return w_ih, None, getattr(self, f"recurrent_{s}"), getattr(self, f"bias_{s}")
        R = getattr(self, f"weight_hh_{s}").view(4, 1, dh, dh)
        if not self.bias:
            return w_ih, None, R, getattr(self, f"bias_{s}")
        return w_ih, getattr(self, f"bias_ih_{s}"), R, getattr(self, f"bias_hh_{s}").view(4, 1, dh)

    def forward(self, x, hx=None):
        lengths = flat = None
        dtype = self.weight_ih_l0.dtype
        if isinstance(x, PackedSequence):
            flat = packing.flat_index(x)  # one index build and copy, for the scatter in and the gather out
            (xb, lengths), unbatched = packing.unpack(x, self.input_size, dtype, flat), False
        else:
            xb, unbatched = self._batch_major(x, dtype)
        if xb.dtype != dtype:  # as nn.LSTM: no silent cast between the input's and the module's dtypes
            raise ValueError(
                f"x has dtype {xb.dtype} but the module's parameters are {dtype}; convert one: x.to({dtype}) or "
                f"module.to({xb.dtype})."
            )
        where = self.weight_ih_l0.device
        if xb.device != where:  # as nn.LSTM: no silent move between devices either
            raise ValueError(f"x is on {xb.device} but the module's parameters are on {where}; move one: "
                             f"x.to({str(where)!r}) or module.to({str(xb.device)!r}).")  # fmt: skip
        backend = self.backend
        if backend != "vanilla" and not self.proj_size and dtype not in (torch.float32, torch.float16):
            backend = _backend_for_dtype(backend, dtype)
        if self.proj_size and self.backend != "vanilla":
            _warn_once(("proj_size", self.backend), f"gpulab.rnn.LSTM: proj_size={self.proj_size} runs through a "
                       f"PyTorch loop (gpulab.rnn.projected), not backend={self.backend!r}'s kernels, which hold "
                       "square recurrent blocks; correct, not fast.")  # fmt: skip
        B = xb.shape[0]
        state = self._initial_state(hx, B, unbatched, dtype, lengths is not None, xb.device)
        out, h_n, c_n = self._layers(xb, state, lengths, backend)
        if lengths is not None:
            return packing.repack(out, x, flat), (h_n, c_n)
        if unbatched:
            return out[0], (h_n[:, 0], c_n[:, 0])
        return (out if self.batch_first else out.transpose(0, 1)), (h_n, c_n)

    def _batch_major(self, x, dtype):
        """x checked and as [B, T, I]; and whether it was one unbatched [T, I] sequence."""
        layout = "[T, B, I] ([B, T, I] with batch_first=True) or unbatched [T, I] (or a PackedSequence)"
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor {layout}, got {type(x).__name__}.")
        if x.dim() not in (2, 3):
            raise ValueError(f"x must be {layout}, got shape {tuple(x.shape)}.")
        if not x.is_floating_point():
            raise ValueError(
                f"x has dtype {x.dtype}; an LSTM takes floating-point input in its parameters' dtype: convert it "
                f"with x.to({dtype})."
            )
        unbatched = x.dim() == 2
        xb = x.unsqueeze(0) if unbatched else x if self.batch_first else x.transpose(0, 1)  # [B, T, I]
        if xb.shape[2] != self.input_size:
            raise ValueError(f"x has shape {tuple(x.shape)}: {xb.shape[2]} features (its last dimension) but the "
                             f"module has input_size={self.input_size}; pass x with {self.input_size} features, or "
                             f"build the module with input_size={xb.shape[2]}.")  # fmt: skip
        if xb.shape[1] == 0:
            time = ("dimension 0 of an unbatched [T, I]" if unbatched else "dimension 1 of [B, T, I] (batch_first=True)"
                    if self.batch_first else "dimension 0 of [T, B, I] (batch_first=False)")  # fmt: skip
            raise ValueError(
                f"x has shape {tuple(x.shape)}: 0 time steps (T is {time}); an LSTM needs T >= 1, as torch.nn.LSTM "
                "does: pass at least one step."
            )
        return xb, unbatched

    def _layers(self, xb, state, lengths, backend: str):
        """Every layer and direction over xb [B, T, I] -> (out [B, T, D*(P or H)], h_n, c_n [L*D, B, .]), run by
        ``backend`` (the module's, or ``"vanilla"`` for a dtype its kernels do not take)."""
        B, T, _ = xb.shape
        D = self.num_directions
        rev = None if lengths is None or D == 1 else packing.reverse_index(lengths, T)
        h_n, c_n, inp = [], [], xb
        for layer in range(self.num_layers):
            if D == 2 and not self.proj_size and self._joins(inp.shape[0], inp.dtype, backend):
                s0 = None if state is None else tuple(t[2 * layer : 2 * layer + 2] for t in state)
                inp, last_h, last_c = self._both_directions(layer, inp, s0, rev, lengths, backend)
                h_n += last_h
                c_n += last_c
                if self.dropout and self.training and layer < self.num_layers - 1:
                    inp = nn.functional.dropout(inp, self.dropout, training=True)
                continue
            outs = []
            for d in range(D):
                k = layer * D + d
                x_d = inp if d == 0 else packing.time_gather(inp, rev)
                s0 = None if state is None else (state[0][k], state[1][k])
                h_all, h_last, c_last = self._direction(layer, d, x_d, s0, lengths, backend)
                outs.append(h_all if d == 0 else packing.time_gather(h_all, rev))
                h_n.append(h_last)
                c_n.append(c_last)
            inp = outs[0] if D == 1 else torch.cat(outs, dim=-1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                inp = nn.functional.dropout(inp, self.dropout, training=True)
        # one layer and direction: views of the kernel's last states (a concatenation would be two more launches)
        if len(h_n) == 1:
            return inp, h_n[0], c_n[0]
        return inp, torch.cat(h_n), torch.cat(c_n)

    def _joins(self, B: int, dtype, backend: str | None = None) -> bool:
        """Whether a bidirectional layer runs its two directions as one recurrence (see the module docstring), by
        ``backend`` (None: the module's)."""
        backend = backend or self.backend
        if B == 0:  # nothing runs: the joined path returns the empty outputs
            return True
        if self.join_directions is not None:
            return bool(self.join_directions)
        if backend != "fused":
            return True
        kind = fused_plan.plan_kind(B, 2 * self.num_heads, self.head_dim, "lstm", dtype, torch.is_grad_enabled())
        return kind == "single"

    def _direction(self, layer, d, x, s0, lengths, backend: str):
        """One layer, one direction over x [B, T, I_l] (already in its time order) -> (h [B, T, P or H], h_last,
        c_last [1, B, .]); the last states are each sequence's at its length when ``lengths`` is given."""
        B, T, _ = x.shape
        H, nh, dh = self.hidden_size, self.num_heads, self.head_dim
        if self.proj_size:
            s = f"l{layer}{_SUFFIX[d]}"
            b = None
            if self.bias:
                b = getattr(self, f"bias_ih_{s}") + getattr(self, f"bias_hh_{s}")
            wx = nn.functional.linear(x, getattr(self, f"weight_ih_{s}"), b)
            h0, c0 = (None, None) if s0 is None else s0
            h_all, c_all = projected_lstm(wx, getattr(self, f"weight_hh_{s}"), getattr(self, f"weight_hr_{s}"), h0, c0)
            if lengths is None:
                return h_all, h_all[None, :, -1], c_all[None, :, -1]
            idx = torch.arange(B, device=x.device)
            return h_all, h_all[idx, lengths - 1][None], c_all[idx, lengths - 1][None]
        st = None if s0 is None else torch.stack(s0).view(2, B, 1, nh, dh)
        ran = None
        if B and backend != "vanilla":  # one op: the projection's GEMM inside it, the parameters as they are
            s = f"l{layer}{_SUFFIX[d]}"
            if nh > 1 or not self.bias:
                R, b_ih = getattr(self, f"weight_hh_{s}" if nh == 1 else f"recurrent_{s}"), None
                b = getattr(self, f"bias_{s}")
            else:
                R, b_ih, b = (getattr(self, f"{n}_{s}") for n in ("weight_hh", "bias_ih", "bias_hh"))
            ran = lstm_layer(x, getattr(self, f"weight_ih_{s}"), b_ih, R, b, st, backend, (nh, dh))
        if ran is not None:
            all_states, last = ran
        else:
            w_ih, b_ih, R, b = self.layer_weights(layer, d)
            wx = nn.functional.linear(x, w_ih, b_ih).view(B, T, 4, nh, dh)
            if B == 0:  # nothing to run (flashrnn and its kernels take B >= 1); nn.LSTM returns empty outputs
                all_states, last = _empty_batch(wx, R, b, st)
            else:
                all_states, last = flashrnn(wx, R, b, st, "lstm", backend, dtype=wx.dtype)
        if lengths is not None:
            last = packing.last_steps(all_states, lengths)
        h_last, c_last = last.reshape(2, 1, B, H).unbind(0)  # one operator for both (last [2, B, 1, NH, DH])
        return all_states[0].reshape(B, T, H), h_last, c_last

    def _both_directions(self, layer, x, s0, rev, lengths, backend: str):
        """Both directions of one layer in one recurrence: the reverse direction's NH heads beside the forward's
        (R [4, 2 NH, DH, DH], block-diagonal still), its Wx reversed in time (a projection per step commutes with
        the reversal). x [B, T, I_l], s0 (h0, c0) each [2, B, H] or None -> (out [B, T, 2H], [h_f, h_r], [c_f, c_r],
        each [1, B, H])."""
        B, T, _ = x.shape
        H, nh, dh = self.hidden_size, self.num_heads, self.head_dim
        (w_f, bi_f, R_f, b_f), (w_r, bi_r, R_r, b_r) = self.layer_weights(layer, 0), self.layer_weights(layer, 1)
        b_ih = None if bi_f is None else torch.cat((bi_f, bi_r))
        wx = nn.functional.linear(x, torch.cat((w_f, w_r)), b_ih).view(B, T, 2, 4, nh, dh)
        wx = torch.cat((wx[:, :, 0], packing.time_gather(wx[:, :, 1], rev)), dim=3)  # [B, T, 4, 2 NH, DH]
        R, b = torch.cat((R_f, R_r), dim=1), torch.cat((b_f, b_r), dim=1)
        st = None if s0 is None else torch.stack(s0).view(2, 2, B, nh, dh).transpose(1, 2).reshape(2, B, 1, 2 * nh, dh)
        if B == 0:
            all_states, last = _empty_batch(wx, R, b, st)
        else:
            all_states, last = flashrnn(wx, R, b, st, "lstm", backend, dtype=wx.dtype)
        h = all_states[0]  # [B, T, 2 NH, DH]: forward heads, then the reverse's in reversed time
        out = torch.cat((h[:, :, :nh], packing.time_gather(h[:, :, nh:], rev)), dim=2).reshape(B, T, 2 * H)
        last = packing.last_steps(all_states, lengths) if lengths is not None else last[:, :, 0]  # [2, B, 2 NH, DH]
        last = last.reshape(2, 1, B, 2, H)
        return out, [last[0, ..., 0, :], last[0, ..., 1, :]], [last[1, ..., 0, :], last[1, ..., 1, :]]

    def _initial_state(self, hx, B: int, unbatched: bool, dtype, is_packed: bool = False, device=None):
        """``hx`` checked: None, or ``(h0, c0)`` [L*D, B, P or H] and [L*D, B, H] (no B for unbatched x), of the
        module's ``dtype`` and on x's ``device``."""
        if hx is None:
            return None
        LD, H, out = self.num_layers * self.num_directions, self.hidden_size, self.proj_size or self.hidden_size
        shapes = ((LD, out), (LD, H)) if unbatched else ((LD, B, out), (LD, B, H))
        where = " (x is unbatched)" if unbatched else " (B = the number of sequences)" if is_packed else ""
        layout = (f"h0 {shapes[0]} and c0 {shapes[1]} (num_layers * num_directions, "
                  + ("" if unbatched else "batch, ") + ("proj_size" if self.proj_size else "hidden_size") + ")"
                  + where)  # fmt: skip
        if not isinstance(hx, (tuple, list)) or len(hx) != 2:
            if isinstance(hx, (tuple, list)):
                got = f"a {type(hx).__name__} of {len(hx)}"
            elif isinstance(hx, torch.Tensor):
                got = f"one Tensor of shape {tuple(hx.shape)}"
            else:
                got = f"a {type(hx).__name__}"
            raise ValueError(f"hx must be a pair (h0, c0), as nn.LSTM's hx: {layout}; got {got}.")
        for name, t, shape in zip(("h0", "c0"), hx, shapes):
            if isinstance(t, torch.Tensor) and tuple(t.shape) != shape:
                raise ValueError(
                    f"hx's {name} has shape {tuple(t.shape)}, expected {shape} for this module: {layout}. Pass "
                    f"{name} of shape {shape}."
                )
            runtime.require_tensor(f"hx's {name}", t, shape=shape, device_check=False)
            if t.dtype != dtype:
                raise ValueError(f"hx's {name} has dtype {t.dtype} but the module's parameters are {dtype}; "
                                 f"pass it as {name}.to({dtype}).")  # fmt: skip
            if device is not None and t.device != device:
                raise ValueError(f"hx's {name} is on {t.device} but x is on {device}; pass it as "
                                 f"{name}.to({str(device)!r}).")  # fmt: skip
        return tuple(t.unsqueeze(1) for t in hx) if unbatched else tuple(hx)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if self.num_heads == 1:  # the earlier one-head layout (recurrent_l*, bias_l*) -> nn.LSTM's names, warned
            convert_legacy(state_dict, prefix, self.num_layers, self.num_directions, self.hidden_size, self.bias)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @classmethod
    def from_torch(cls, module: nn.LSTM, backend: str = "fused", dtype=None, device=None) -> LSTM:
        """An :class:`LSTM` (num_heads = 1) with a copy of the weights of ``module``, any nn.LSTM configuration
        (dropout, bidirectional, proj_size, bias, batch_first, training mode): the same function, run by ``backend``.

        ``dtype``/``device`` default to the module's. Anything but an ``nn.LSTM`` is refused with a TypeError.
        """
        if not isinstance(module, nn.LSTM):
            raise TypeError(
                f"module must be a torch.nn.LSTM, got {type(module).__name__}; LSTM.from_torch reads nn.LSTM's "
                "weights (for a GRU or RNN there is no gpulab module)."
            )
        backend = backend_name(backend)
        first = module.weight_ih_l0
        dt = first.dtype if dtype is None else float_dtype(dtype)
        dev = first.device if device is None else runtime.as_device(device)
        out = cls(module.input_size, module.hidden_size, module.num_layers, bool(module.bias),
                  bool(module.batch_first), float(module.dropout), bool(module.bidirectional),
                  int(module.proj_size), device=dev, dtype=dt, num_heads=1, backend=backend)  # fmt: skip
        with torch.no_grad():
            out.load_state_dict({k: v.to(device=dev, dtype=dt) for k, v in module.state_dict().items()})
        return out.train(module.training)

    def extra_repr(self) -> str:
        extra = [f"dropout={self.dropout}"] if self.dropout else []
        extra += ["bidirectional=True"] if self.bidirectional else []
        extra += [f"proj_size={self.proj_size}"] if self.proj_size else []
        extra += [] if self.bias else ["bias=False"]
        return ", ".join(
            [f"{self.input_size}, {self.hidden_size}, num_heads={self.num_heads}, num_layers={self.num_layers}",
             f"batch_first={self.batch_first}, backend={self.backend!r}", *extra]
        )  # fmt: skip


def _check_dropout(dropout, num_layers: int) -> float:
    """``dropout`` as a float in [0, 1] (else a ValueError or TypeError with the fix); nn.LSTM's warning for one
    layer with dropout > 0 (it adds dropout after all layers but the last: none)."""
    if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):  # numpy's floats too, as nn.LSTM
        raise TypeError(
            f"dropout must be a number in [0, 1] (the probability of zeroing an element between layers), got "
            f"{dropout!r} ({type(dropout).__name__}); pass e.g. dropout=0.1."
        )
    p = float(dropout)
    if not 0.0 <= p <= 1.0:  # NaN fails too
        raise ValueError(
            f"dropout={dropout!r} is not allowed: it is the probability of zeroing an element between layers, a "
            "number in [0, 1]; pass e.g. dropout=0.1 (or 0.0 for none)."
        )
    if p > 0 and num_layers == 1:
        warnings.warn(
            "dropout option adds dropout after all but last recurrent layer, so non-zero dropout expects "
            f"num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
            UserWarning,
            stacklevel=3,
        )
    return p


def _check_proj_size(proj_size, hidden_size: int, num_heads: int) -> int:
    """``proj_size`` as an int in [0, hidden_size) (one head only), else a ValueError or TypeError with the fix."""
    if isinstance(proj_size, bool) or not isinstance(proj_size, numbers.Integral):  # numpy's ints too, as nn.LSTM
        raise TypeError(f"proj_size must be an int in [0, hidden_size={hidden_size}) (0: no projection), got "
                        f"{proj_size!r} ({type(proj_size).__name__}); pass e.g. proj_size=0.")  # fmt: skip
    proj_size = int(proj_size)
    if not 0 <= proj_size < hidden_size:
        raise ValueError(
            f"proj_size={proj_size} is not allowed: h is projected from hidden_size={hidden_size} units down to "
            f"proj_size, so proj_size must be in [0, {hidden_size}) (0: no projection); pass a smaller proj_size "
            "or a larger hidden_size."
        )
    if proj_size and num_heads > 1:
        raise ValueError(
            f"proj_size={proj_size} with num_heads={num_heads} is not supported: a projection mixes all heads' "
            "units, so the recurrence is no longer block-diagonal; use num_heads=1 with proj_size, or proj_size=0."
        )
    return proj_size


def _warn_once(key, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, UserWarning, stacklevel=3)


def _backend_for_dtype(backend: str, dtype: torch.dtype) -> str:
    """``backend`` where its Triton kernels take ``dtype`` on this device, else ``"vanilla"`` with a warning (once
    per dtype and backend) saying why and what the kernels take: float64 never; bf16 not in Triton's CPU
    interpreter, which computes it wrongly, nor on a GPU without it."""
    here = tuple(d for d in (torch.float32, torch.float16, torch.bfloat16) if d in hardware.supported_dtypes())
    if dtype in here:
        return backend
    where = "on CPU (Triton's interpreter)" if runtime.INTERPRET else "on this GPU"
    if dtype == torch.bfloat16:
        where += ", whose bfloat16 arithmetic is wrong" if runtime.INTERPRET else ", which has no bfloat16"
    _warn_once((str(dtype), backend), f"gpulab.rnn.LSTM: {dtype} runs through backend='vanilla' (a PyTorch loop: "
               f"correct, not fast): backend={backend!r}'s kernels do not take it {where}; they take "
               f"{dtypes.names_of(here)}. For speed convert both: module.to(torch.float32) and "
               "x.to(torch.float32); to silence this, set module.backend = 'vanilla'.")  # fmt: skip
    return "vanilla"


def _empty_batch(wx, R, b, s0):
    """Batch 0: empty ``(states_all [2, 0, T, NH, DH], states_last [2, 0, 1, NH, DH])`` that still depend on every
    input, so that a backward gives each a gradient (zeros, as nn.LSTM's) without launching anything."""
    B, T, _, nh, dh = wx.shape
    tie = wx.sum() + R.sum() + b.sum() + (0 if s0 is None else s0.sum())
    out = wx.new_zeros((2, B, T, nh, dh)) + 0 * tie
    return out, out[:, :, -1:]
