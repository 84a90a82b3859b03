"""The course's counting conventions, stated once.

- a multiply-add is 2 FLOPs; a GEMM of (M, K) x (K, N) is ``2*M*N*K``;
- attention forward is ``4*B*H*Nq*Nk*D`` (two GEMMs, QK^T and PV), halved when causal; forward + backward is 3.5x
  the forward (the backward's five GEMMs of the same size, one of them recomputing S, count 2.5x);
- bytes are the fewest an implementation must move through device memory: each input read once, each output
  written once. A kernel that moves more shows up as a lower achieved bandwidth, which is the point.
"""

from __future__ import annotations

from gpulab import runtime

__all__ = ["attention_flops"]


def attention_flops(batch, heads, seq_q, seq_k, head_dim, causal=False, backward=False) -> float:
    """FLOPs of attention by the course's convention: 4*B*H*Nq*Nk*D, halved if causal, x3.5 with backward.

    Sizes are non-negative integers (0 gives 0 FLOPs); ``causal`` and ``backward`` are bools.
    """
    sizes = {"batch": batch, "heads": heads, "seq_q": seq_q, "seq_k": seq_k, "head_dim": head_dim}
    b, h, nq, nk, d = (runtime.nonnegative_int(name, v) for name, v in sizes.items())
    causal = runtime.strict_bool("causal", causal)
    backward = runtime.strict_bool("backward", backward)
    f = 4.0 * b * h * nq * nk * d
    if causal:
        f /= 2
    return f * 3.5 if backward else f
