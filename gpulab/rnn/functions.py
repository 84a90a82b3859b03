"""The recurrent functions gpulab.rnn computes, and how many gates and states each has (flashrnn's registry).

Every function has the same structure: per time step t and head n, gate pre-activations

    g_t = Wx_t + R h_{t-1} + b        (for the gates that take input and recurrent parts; see GRU below)

followed by a pointwise cell (:mod:`gpulab.rnn.cells`). The counts, as in the ``flashrnn`` package:

=========  ====  ====  ====  ====  ==========================================================================
function   G_w   G_r   G_b   S     gates (in order) and states
=========  ====  ====  ====  ====  ==========================================================================
lstm       4     4     4     2     i, f, z, o (nn.LSTM's i, f, g, o); states h, c
gru        3     3     4     1     R: (g, r, z), Wx: (r, z, n), b: (g, r, z, n); state h
elman      1     1     1     1     one gate; state h
=========  ====  ====  ====  ====  ==========================================================================

GRU in flashrnn's order (PyTorch's GRU up to naming): ``g = R_0 h + b_0`` (PyTorch's ``W_hn h + b_hn``),
``r = sigmoid(Wx_0 + R_1 h + b_1)``, ``z = sigmoid(Wx_1 + R_2 h + b_2)``, ``n = tanh(Wx_2 + b_3 + r * g)``,
``h' = z * h + (1 - z) * n``.

All three are stored in one layout for their *gate* tensors (saved pre-activations and gate gradients dG):
[B, T, G_b, NH, DH]. For lstm and elman the G_b gates are exactly the G_w = G_r gates; for gru the four are
(g, r, z, n), so the recurrent gates are ``[0:3]`` and the input gates ``[1:4]`` (:attr:`RNNFunction.r_gates`,
:attr:`RNNFunction.w_gates`).
"""

from __future__ import annotations

import dataclasses

__all__ = ["RNNFunction", "FUNCTIONS", "get_function"]


@dataclasses.dataclass(frozen=True)
class RNNFunction:
    """Gate and state counts of one recurrent function; ``code`` is the constexpr the Triton kernels branch on."""

    name: str
    code: int
    gates_w: int  # G_w: gates that take the input projection Wx
    gates_r: int  # G_r: gates that take the recurrent product R h
    gates_b: int  # G_b: biases, = gates saved for the backward and gate gradients dG
    states: int  # S: h (and c for the LSTM)
    state_names: tuple[str, ...]
    gate_names: tuple[str, ...]  # the G_b gates, in order

    @property
    def r_gates(self) -> slice:
        """Which of the G_b gates take the recurrent product (the rows of dG that make dR)."""
        return slice(0, self.gates_r)

    @property
    def w_gates(self) -> slice:
        """Which of the G_b gates take the input projection (the rows of dG that are dWx)."""
        return slice(self.gates_b - self.gates_w, self.gates_b)


FUNCTIONS: dict[str, RNNFunction] = {
    f.name: f
    for f in (
        RNNFunction("lstm", 0, 4, 4, 4, 2, ("h", "c"), ("i", "f", "z", "o")),
        RNNFunction("gru", 1, 3, 3, 4, 1, ("h",), ("g", "r", "z", "n")),
        RNNFunction("elman", 2, 1, 1, 1, 1, ("h",), ("g",)),
    )
}


def get_function(function) -> RNNFunction:
    """The :class:`RNNFunction` called ``function`` ('lstm', 'gru', 'elman'); ValueError naming the choices."""
    if isinstance(function, RNNFunction):
        return function
    if not isinstance(function, str) or function.lower() not in FUNCTIONS:
        raise ValueError(
            f"function={function!r} is not supported; gpulab.rnn computes {', '.join(map(repr, FUNCTIONS))} "
            "(flashrnn's 'slstm' is not implemented here)."
        )
    return FUNCTIONS[function.lower()]
