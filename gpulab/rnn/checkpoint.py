"""Parameter names of :class:`gpulab.rnn.LSTM` and the conversion of checkpoints saved in its earlier layout.

One head: nn.LSTM's names and shapes, per layer l and direction (suffix ``""`` or ``"_reverse"``): ``weight_ih_l{l}``
[4H, I_l], ``weight_hh_l{l}`` [4H, P or H], ``bias_ih_l{l}``, ``bias_hh_l{l}`` [4H], ``weight_hr_l{l}`` [P, H].
Several heads: ``weight_ih_l{l}`` [4H, I_l], ``recurrent_l{l}`` [4, NH, DH, DH], ``bias_l{l}`` [4, NH, DH] (one bias).

The earlier one-head layout was the several-heads one with NH = 1 (``recurrent_l{l}`` [4, 1, H, H], ``bias_l{l}`` =
b_ih + b_hh [4, 1, H]); :func:`convert_legacy` rewrites such a checkpoint to nn.LSTM's names (b_ih = the sum,
b_hh = 0: the same function) and warns once per load.
"""

from __future__ import annotations

import warnings

__all__ = ["suffix", "convert_legacy"]


def suffix(direction: int) -> str:
    """nn.LSTM's name suffix of a direction: ``""`` forward, ``"_reverse"`` backward in time."""
    return "_reverse" if direction else ""


def convert_legacy(state_dict, prefix: str, num_layers: int, directions: int, hidden_size: int, bias: bool) -> None:
    """Rewrite, in place, one-head entries ``recurrent_l*``/``bias_l*`` under ``prefix`` to nn.LSTM's names."""
    H, found = hidden_size, []
    for layer in range(num_layers):
        for d in range(directions):
            s = f"l{layer}{suffix(d)}"
            old_r = f"{prefix}recurrent_{s}"
            if old_r in state_dict:
                state_dict[f"{prefix}weight_hh_{s}"] = state_dict.pop(old_r).reshape(4 * H, H)
                found.append(old_r)
            old_b = f"{prefix}bias_{s}"
            if bias and old_b in state_dict:
                b = state_dict.pop(old_b).reshape(4 * H)
                state_dict[f"{prefix}bias_ih_{s}"] = b
                state_dict[f"{prefix}bias_hh_{s}"] = b.new_zeros(b.shape)
                found.append(old_b)
    if found:
        warnings.warn(
            f"gpulab.rnn.LSTM: the checkpoint has the earlier one-head layout ({', '.join(found)}); converted to "
            "torch.nn.LSTM's names (weight_hh_l*, bias_ih_l* = the summed bias, bias_hh_l* = 0). Save it again with "
            "module.state_dict() to keep nn.LSTM's layout.",
            UserWarning,
            stacklevel=4,
        )
