"""A ``torch.nn.LSTM``'s weights in the layouts gpulab uses: :class:`LSTMWeights`, read by :func:`from_torch_lstm`.

Per layer l (I_0 = input size, I_l = H above; rows in nn.LSTM's gate order i, f, g (= z), o, each block H rows):

- ``w_ih[l]``: [4H, I_l], ``w_hh[l]``: [4H, H];
- ``b_ih[l]``, ``b_hh[l]``: [4H] as read (the module's tensors when shared, float64 copies otherwise; zeros for
  ``bias=False``), and ``bias[l]`` = ``b_ih + b_hh`` [4H] (summed in float64, then rounded once to the weights'
  dtype): the two biases always appear as a sum, so one add suffices;
- ``batch_first`` is kept: the ladder's steps then take and return [B, T, ...] like the module.

**Shared or copied, never half and half.** In the module's own dtype and device, the weights *share* the module's
tensors: a training step on the ``nn.LSTM`` is seen by every ladder step. Converted to another dtype or device they
are a *copy* of all of them (a snapshot): read the module again after changing it. Layouts derived from the weights
(the summed bias, the transposed and stacked matrices of ladder steps 3-8) are cached by :meth:`LSTMWeights.derived`
and rebuilt when any source tensor has changed since (in place: its version counter; replaced: its storage).

Dropout between layers only acts in training mode; the ladder computes the forward pass of the module in eval mode,
so a module with ``dropout > 0`` is read the same way (its output in train mode would differ, by design).
Bidirectional LSTMs and projected LSTMs (``proj_size > 0``) are not supported and raise a ValueError.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from gpulab import dtypes, runtime

__all__ = ["LSTMWeights", "from_torch_lstm", "check_lstm_module", "float_dtype"]

FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
"""The dtypes an LSTM's weights may have (the vanilla backend takes all four; the Triton backends all but float64)."""


@dataclasses.dataclass(eq=False)
class LSTMWeights:
    """A stacked LSTM's weights, per layer, in nn.LSTM's gate order (i, f, g, o). Shapes in the module docstring."""

    w_ih: tuple
    w_hh: tuple
    b_ih: tuple
    b_hh: tuple
    input_size: int
    hidden_size: int
    num_layers: int
    batch_first: bool = False
    cache: dict = dataclasses.field(default_factory=dict, repr=False)  # key -> (sources' stamp, derived layout)

    @property
    def dtype(self) -> torch.dtype:
        return self.w_ih[0].dtype

    @property
    def device(self) -> torch.device:
        return self.w_ih[0].device

    @property
    def bias(self) -> tuple:
        """Per layer ``b_ih + b_hh`` [4H], summed in float64 and rounded once (rebuilt when a bias changes)."""
        return self.derived(
            "bias", lambda: tuple((a.double() + b).to(self.dtype) for a, b in zip(self.b_ih, self.b_hh))
        )

    def sources(self) -> tuple:
        """Every tensor the weights are made of (shared with the module or copied from it)."""
        return self.w_ih + self.w_hh + self.b_ih + self.b_hh

    def stamp(self) -> tuple:
        """What identifies the sources' current values: each tensor's storage and version counter (bumped by every
        in-place change, e.g. an optimizer step or ``load_state_dict``)."""
        return tuple((t.data_ptr(), t._version) for t in self.sources())

    def derived(self, key: str, build: Callable):
        """The layout ``key``, built by ``build()`` on first use and again whenever a source tensor has changed."""
        stamp = self.stamp()
        hit = self.cache.get(key)
        if hit is None or hit[0] != stamp:
            hit = (stamp, build())
            self.cache[key] = hit
        return hit[1]

    def to(self, dtype=None, device=None) -> LSTMWeights:
        """A copy in another dtype and/or on another device (derived layouts are rebuilt on first use)."""
        dtype = None if dtype is None else float_dtype(dtype)
        device = None if device is None else runtime.as_device(device)
        conv = lambda ts, dt: tuple(t.to(device=device or t.device, dtype=dt or t.dtype, copy=True) for t in ts)
        w_ih, w_hh = conv(self.w_ih, dtype), conv(self.w_hh, dtype)
        b_ih, b_hh = conv(self.b_ih, torch.float64), conv(self.b_hh, torch.float64)  # exact: summed in float64
        return dataclasses.replace(self, w_ih=w_ih, w_hh=w_hh, b_ih=b_ih, b_hh=b_hh, cache={})


def float_dtype(dtype, name: str = "dtype") -> torch.dtype:
    """``dtype`` (a torch dtype or a name such as 'float32') as a torch dtype if an LSTM's weights can have it (one of
    :data:`FLOAT_DTYPES`), else a ValueError naming ``name``: an integer dtype cannot hold weights."""
    dt = dtypes.as_dtype(dtype, name)
    if dt not in FLOAT_DTYPES:
        raise ValueError(
            f"{name}={dt} is not supported: an LSTM's weights are floating-point ({dtypes.names_of(FLOAT_DTYPES)}); "
            f"pass e.g. {name}=torch.float32."
        )
    return dt


def check_lstm_module(module, name: str = "module") -> torch.nn.LSTM:
    """``module`` if it is an ``nn.LSTM`` that gpulab can read (unidirectional, unprojected), else a ValueError."""
    if not isinstance(module, torch.nn.LSTM):
        raise ValueError(
            f"{name} must be a torch.nn.LSTM, got {type(module).__name__}; gpulab's ladder reproduces nn.LSTM only."
        )
    if module.bidirectional:
        raise ValueError(f"{name} is bidirectional; gpulab supports unidirectional LSTMs (bidirectional=False).")
    if getattr(module, "proj_size", 0):
        raise ValueError(f"{name} has proj_size={module.proj_size}; projected LSTMs are not supported (proj_size=0).")
    return module


def from_torch_lstm(module, dtype=None, device=None) -> LSTMWeights:
    """Read a ``torch.nn.LSTM``'s weights (all layers, both biases, ``batch_first``) into :class:`LSTMWeights`.

    ``dtype``/``device`` default to the module's; there the weights share the module's tensors, elsewhere they are
    a copy of all of them (see the module docstring). Raises ValueError for anything that is not a unidirectional,
    unprojected ``nn.LSTM``.
    """
    check_lstm_module(module)
    first = module.weight_ih_l0
    dt = first.dtype if dtype is None else float_dtype(dtype)
    dev = first.device if device is None else runtime.as_device(device)
    if dev.type == first.device.type and dev.index is None:
        dev = first.device  # "cuda" is the module's "cuda:0"
    share = dt == first.dtype and dev == first.device

    def read(name, dtype=dt):
        t = getattr(module, name).detach()  # shares storage and version counter with the parameter
        return t if share else t.to(dev, dtype, copy=True)

    w_ih, w_hh, b_ih, b_hh = [], [], [], []
    for layer in range(module.num_layers):
        w_ih.append(read(f"weight_ih_l{layer}"))
        w_hh.append(read(f"weight_hh_l{layer}"))
        if module.bias:
            b_ih.append(read(f"bias_ih_l{layer}", torch.float64))  # copies in float64: the sum rounds once
            b_hh.append(read(f"bias_hh_l{layer}", torch.float64))
        else:
            b_ih.append(torch.zeros(4 * module.hidden_size, dtype=dt, device=dev))
            b_hh.append(torch.zeros(4 * module.hidden_size, dtype=dt, device=dev))
    return LSTMWeights(
        tuple(w_ih),
        tuple(w_hh),
        tuple(b_ih),
        tuple(b_hh),
        module.input_size,
        module.hidden_size,
        module.num_layers,
        bool(module.batch_first),
    )
