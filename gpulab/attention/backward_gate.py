"""The backward's length gate: where version 3's backward (Gluon) is taken instead of version 1's two kernels.

What you will learn: a switch between kernels is a frozen config passed in, never a module variable set from outside;
:data:`gpulab.attention.plan.V3_BACKWARD` is the package's :class:`BackwardGate`, read by
:func:`gpulab.attention.plan.backward_launches` and :func:`gpulab.attention.plan.varlen_takes_v3`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["BackwardGate"]


@dataclass(frozen=True)
class BackwardGate:
    """Where :func:`run_backward` takes version 3's backward (:mod:`gpulab.attention.v3.backward`, Gluon: dQ by fp32
    atomic additions) instead of version 1's two kernels, where
    :func:`gpulab.attention.v3.backward.supported` allows it, no tiles were asked for and determinism is not
    (``torch.use_deterministic_algorithms(True)`` takes the two kernels: the atomic dQ sums in no fixed order).

    ``head_dims``: taken at every length; ``min_seq``: ``(head dim, causal) -> N``, taken where both lengths are at
    least N (no entry: never). :data:`V3_BACKWARD` is the package's; :func:`backward_launches` takes another."""

    head_dims: tuple[int, ...] = ()
    min_seq: Mapping[tuple[int, bool], int] | None = None  # None: no entry

    def __post_init__(self):
        object.__setattr__(self, "min_seq", {} if self.min_seq is None else self.min_seq)
        if not isinstance(self.head_dims, tuple) or not all(type(d) is int and d > 0 for d in self.head_dims):
            raise TypeError(f"BackwardGate.head_dims must be a tuple of positive ints such as (64,), got "
                            f"{self.head_dims!r}.")  # fmt: skip
        ok = isinstance(self.min_seq, Mapping) and all(isinstance(k, tuple) and len(k) == 2 and type(k[0]) is int
                                                       and type(k[1]) is bool and type(n) is int and n > 0
                                                       for k, n in self.min_seq.items())  # fmt: skip
        if not ok:
            raise TypeError(f"BackwardGate.min_seq must map (head dim, causal) to a positive length, such as "
                            f"{{(64, True): 4096}}, got {self.min_seq!r}.")  # fmt: skip
        object.__setattr__(self, "min_seq", MappingProxyType(dict(self.min_seq)))

    def takes_v3(self, head_dim: int, is_causal: bool, n_q: int, n_k: int) -> bool:
        """Whether a plain problem of these sizes takes version 3's backward under this gate (where it can run)."""
        return head_dim in self.head_dims or min(n_q, n_k) >= self.min_seq.get((head_dim, is_causal), 1 << 62)
