"""The course's counting conventions, stated once.

- a multiply-add is 2 FLOPs; a GEMM of (M, K) x (K, N) is ``2*M*N*K``;
- attention forward is ``4*B*H*Nq*Nk*D`` (two GEMMs, QK^T and PV), halved when causal; forward + backward is 3.5x
  the forward (the backward's five GEMMs of the same size, one of them recomputing S, count 2.5x);
- with masks that skip work (causal, sliding windows, packed sequences of different lengths),
  :func:`visible_attention_flops` counts ``4*D`` per *visible* score entry (i, j), exactly, as FlashAttention's and
  cudnn-frontend's benchmarks count them, so TFLOP/s compare with theirs;
- bytes are the fewest an implementation must move through device memory: each input read once, each output
  written once. A kernel that moves more shows up as a lower achieved bandwidth, which is the point.
"""

from __future__ import annotations

from gpulab import runtime

__all__ = ["attention_flops", "visible_pairs", "visible_attention_flops"]


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


def visible_pairs(seq_q: int, seq_k: int, is_causal: bool = False, window_size=(-1, -1)) -> int:
    """The (i, j) pairs query i sees in one head of one sequence: SDPA's top-left causal mask (``j <= i``), or
    FlashAttention's bottom-right window (``i + Nk - Nq - left <= j <= i + Nk - Nq + right``, -1 unbounded); exact,
    counted row by row in closed form (O(Nq) work, no mask)."""
    nq, nk = runtime.nonnegative_int("seq_q", seq_q), runtime.nonnegative_int("seq_k", seq_k)
    is_causal = runtime.strict_bool("is_causal", is_causal)
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise TypeError(f"window_size must be a pair (left, right) of ints >= -1, got {window_size!r}.")
    left, right = (runtime.integer(f"window_size[{n}]", w, minimum=-1) for n, w in enumerate(window_size))
    if is_causal and (left, right) != (-1, -1):
        raise ValueError(f"is_causal=True together with window_size={(left, right)}; pass one of them.")
    if is_causal:
        left, right, off = -1, 0, 0
    else:
        off = nk - nq
    total = 0
    for i in range(nq):
        hi = nk - 1 if right < 0 else min(nk - 1, i + off + right)
        lo = 0 if left < 0 else max(0, i + off - left)
        total += max(0, hi - lo + 1)
    return total


def visible_attention_flops(seq_q, seq_k, head_dim: int, heads: int = 1, batch: int = 1, is_causal: bool = False,
                            window_size=(-1, -1), backward: bool = False) -> float:  # fmt: skip
    """FLOPs of attention counting only visible score entries: ``4 * D * heads * batch * sum(visible pairs)``, x3.5
    with the backward. ``seq_q``, ``seq_k``: ints (every sequence that long) or equal-length lists of per-sequence
    lengths (a packed ``varlen_attn`` batch; then ``batch`` multiplies nothing more than 1 would)."""
    d, h, b = (runtime.nonnegative_int(n, x) for n, x in (("head_dim", head_dim), ("heads", heads), ("batch", batch)))
    backward = runtime.strict_bool("backward", backward)
    lens_q = list(seq_q) if isinstance(seq_q, (list, tuple)) else [seq_q]
    lens_k = list(seq_k) if isinstance(seq_k, (list, tuple)) else [seq_k]
    if len(lens_q) != len(lens_k):
        raise ValueError(f"seq_q has {len(lens_q)} lengths but seq_k has {len(lens_k)}; give one pair per sequence.")
    pairs = sum(visible_pairs(nq, nk, is_causal, window_size) for nq, nk in zip(lens_q, lens_k))
    f = 4.0 * d * h * b * pairs
    return f * 3.5 if backward else f
