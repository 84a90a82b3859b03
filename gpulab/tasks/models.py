"""The two contenders: a multi-head LSTM on :class:`gpulab.rnn.LSTM` and a causal Transformer on
:mod:`gpulab.attention`, both mapping tokens [B, T] to logits [B, T, C] (one prediction of the state per position).

What you will learn:
- where the sequence length enters each model: the LSTM applies the same cell T times (any T works, nothing in
  the model knows how long the training strings were); the Transformer attends over all T positions at once, and
  what it knows about *order* comes only from the causal mask and the positional encoding;
- why the positional encoding must be able to extrapolate: learned absolute positions (one trained vector per
  position) leave every position past the training length untrained, so a longer test string is out of the model's
  domain by construction. We use **RoPE** (Su et al., 2021): q and k are rotated by an angle proportional to the
  position, so a score depends only on the *relative* distance i - j and is defined at any length (``"none"``, no
  positional encoding at all, is the other choice that extrapolates: the causal mask alone lets a model count);
- which attention runs: ``"flash"`` is the course's Triton FlashAttention (:func:`gpulab.attention.flash_attention`,
  lesson 4), the one to train with on a GPU; ``"naive"`` is its PyTorch reference
  (:func:`gpulab.attention.naive_attention`, differentiable by autograd), the one to train with on CPU, where the
  Triton interpreter would run the kernels as numpy code far too slowly to train; ``"sdpa"`` is PyTorch's own
  ``scaled_dot_product_attention``, the peer. All three compute the same function.
"""

from __future__ import annotations

import torch
from torch import nn

from gpulab import attention, runtime
from gpulab.attention.rope import qkv_heads, qkv_heads_reference, rope
from gpulab.rnn import LSTM
from gpulab.rnn.api import backend_name

__all__ = [
    "ATTENTION",
    "default_attention",
    "default_rnn_backend",
    "rope",
    "CausalSelfAttention",
    "TransformerModel",
    "LSTMModel",
    "TorchLSTMModel",
    "ProjectionsOnly",
    "FloorModel",
    "count_parameters",
]

ATTENTION = {
    "flash": attention.flash_attention,  # Triton, lesson 4: the GPU path
    "naive": attention.naive_attention,  # PyTorch reference: the CPU path
    "sdpa": torch.nn.functional.scaled_dot_product_attention,  # PyTorch's own, the peer
}


def default_attention() -> str:
    """``"flash"`` on a GPU, ``"naive"`` (the PyTorch reference) on CPU, where the Triton interpreter is too slow to
    train with."""
    return "flash" if runtime.on_gpu() else "naive"


def default_rnn_backend() -> str:
    """``"fused"`` (the Triton persistent kernel of lesson 6) on a GPU, ``"vanilla"`` (a PyTorch loop) on CPU."""
    return "fused" if runtime.on_gpu() else "vanilla"


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}.")
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: qkv projection, RoPE (or nothing), ``attention(q, k, v, is_causal=True)``
    on [B, H, N, D], output projection.

    ``rope_kernel``: the heads split and rotated in one Triton pass each way on a GPU
    (:func:`gpulab.attention.rope.qkv_heads`); False: by PyTorch's operations
    (:func:`gpulab.attention.rope.qkv_heads_reference`), as the lesson's Transformer did until 2026-11-27, kept to
    measure what the fusion changes (the same function either way)."""

    def __init__(self, d_model: int, num_heads: int, attention: str | None = None, positional: str = "rope",
                 rope_kernel: bool = True):  # fmt: skip
        super().__init__()
        self.rope_kernel = runtime.strict_bool("rope_kernel", rope_kernel)
        d_model, num_heads = runtime.positive_int("d_model", d_model), runtime.positive_int("num_heads", num_heads)
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}; pick a divisor.")
        attention = default_attention() if attention is None else attention
        if not isinstance(attention, str) or attention not in ATTENTION:
            raise ValueError(f"attention={attention!r} is not supported; use one of {sorted(ATTENTION)}.")
        if not isinstance(positional, str) or positional not in ("rope", "none"):
            raise ValueError(
                f"positional={positional!r} is not supported; use 'rope' or 'none' (both are defined at any length; "
                "learned absolute positions are not, past the training length)."
            )
        self.num_heads, self.attention, self.positional = num_heads, attention, positional
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        # [B, H, N, D] each, the layout of lesson 4's kernels, RoPE on q and k: one Triton pass on a GPU
        heads = qkv_heads if self.rope_kernel else qkv_heads_reference
        q, k, v = heads(self.qkv(x), self.num_heads, self.positional)
        o = ATTENTION[self.attention](q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, n, d))


def _mlp(d_model: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))


class _Block(nn.Module):
    """Pre-LayerNorm residual block: ``x + mixer(ln(x))``, then ``x + mlp(ln(x))`` (MLP 4x wide, GELU). The mixer,
    the only part that moves information along the sequence, is causal self-attention or an LSTM layer."""

    def __init__(self, d_model: int, mixer: nn.Module):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.mixer, self.mlp = mixer, _mlp(d_model)

    def forward(self, x):
        y = self.mixer(self.ln1(x))
        x = x + (y[0] if isinstance(y, tuple) else y)  # an LSTM returns (output, (h_n, c_n))
        return x + self.mlp(self.ln2(x))


def _check_tokens(x) -> None:
    """``x`` must be a batch of token strings: an integer tensor [B, T]; else an error naming ``x``."""
    want = "integer tokens [B, T] (B strings of T tokens each, e.g. from a task's sample)"
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be {want}, got {type(x).__name__}.")
    if x.dim() != 2 or x.dtype not in (torch.int64, torch.int32):  # what nn.Embedding takes
        fix = "; for one string pass x.unsqueeze(0)" if x.dim() == 1 else ""
        raise ValueError(f"x must be {want}, got shape {tuple(x.shape)} of {x.dtype}{fix}.")


class _Stack(nn.Module):
    """Embedding, residual blocks, LayerNorm, linear head: tokens [B, T] -> logits [B, T, classes]."""

    def __init__(self, vocab: int, classes: int, d_model: int, mixers):
        super().__init__()
        vocab, classes = runtime.positive_int("vocab", vocab), runtime.positive_int("classes", classes)
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, m) for m in mixers)
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_tokens(x)
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln(h))


class TransformerModel(_Stack):
    """Tokens [B, T] -> logits [B, T, classes]: embedding, ``num_layers`` pre-LN blocks of causal self-attention and
    MLP, LayerNorm, linear head. About ``12 * d_model^2`` parameters per layer (4 d^2 attention, 8 d^2 MLP).

    ``attention``: ``"flash"`` | ``"naive"`` | ``"sdpa"`` (default :func:`default_attention`); ``positional``:
    ``"rope"`` | ``"none"``; ``rope_kernel``: see :class:`CausalSelfAttention`.
    """

    def __init__(
        self,
        vocab: int,
        classes: int,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        attention: str | None = None,
        positional: str = "rope",
        rope_kernel: bool = True,
    ):
        num_layers = runtime.positive_int("num_layers", num_layers)
        mixers = [
            CausalSelfAttention(d_model, num_heads, attention, positional, rope_kernel) for _ in range(num_layers)
        ]
        super().__init__(vocab, classes, d_model, mixers)


class LSTMModel(_Stack):
    """Tokens [B, T] -> logits [B, T, classes]: the same stack as :class:`TransformerModel` with each attention
    layer replaced by a one-layer :class:`gpulab.rnn.LSTM` of ``num_heads`` block-diagonal recurrent heads (the
    FlashRNN / xLSTM way to compare the two at equal width and depth). About ``4 d^2 + 4 d^2 / num_heads + 8 d^2``
    parameters per layer (input projection, recurrence, MLP).

    ``backend``: ``"fused"`` (Triton persistent kernel, GPU), ``"vanilla"`` (PyTorch loop, CPU) or
    ``"alternating"``; None (only None): :func:`default_rnn_backend`.
    """

    def __init__(
        self,
        vocab: int,
        classes: int,
        d_model: int = 64,
        num_heads: int = 1,
        num_layers: int = 1,
        backend: str | None = None,
    ):
        backend = default_rnn_backend() if backend is None else backend_name(backend)
        d_model, num_layers = runtime.positive_int("d_model", d_model), runtime.positive_int("num_layers", num_layers)
        num_heads = runtime.positive_int("num_heads", num_heads)
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}; each head gets "
                             "d_model // num_heads units: pick a divisor.")  # fmt: skip
        mixers = [
            LSTM(d_model, d_model, num_heads=num_heads, batch_first=True, backend=backend) for _ in range(num_layers)
        ]
        super().__init__(vocab, classes, d_model, mixers)
        self.backend = backend


class _TorchLSTM(nn.Module):
    """One ``torch.nn.LSTM`` layer as a mixer: its output sequence, computed in its weights' dtype (the input cast to
    it and the output back: see :meth:`TorchLSTMModel.half_recurrence`)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.lstm = nn.LSTM(d_model, d_model, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x.to(self.lstm.weight_ih_l0.dtype))[0].to(x.dtype)


class TorchLSTMModel(_Stack):
    """The stack of :class:`LSTMModel` with one dense head, each mixer PyTorch's own ``torch.nn.LSTM`` (cuDNN's
    kernels on a GPU): the peer of ``LSTMModel(num_heads=1)``, the same function with the same parameters (one
    head's ``gpulab.rnn.LSTM`` has nn.LSTM's state_dict), trained in the same step."""

    def __init__(self, vocab: int, classes: int, d_model: int = 64, num_layers: int = 1):
        d_model, num_layers = runtime.positive_int("d_model", d_model), runtime.positive_int("num_layers", num_layers)
        super().__init__(vocab, classes, d_model, [_TorchLSTM(d_model) for _ in range(num_layers)])

    def half_recurrence(self) -> TorchLSTMModel:
        """The recurrences in fp16, the rest as it is; returns the model. cuDNN's RNN kernels take fp16, fp32 and
        fp64 but not bf16 (PyTorch runs a bf16 ``nn.LSTM`` as a loop of its own operations, one set per step), so a
        bf16 model calls this after ``.to(dtype=torch.bfloat16)`` to run its LSTMs on cuDNN, as lesson 6 compares
        with cuDNN in fp16; the casts of each layer's input and output cost two elementwise passes."""
        for block in self.blocks:
            block.mixer.lstm.half()
        return self


FLOORS = {"LSTM": "recurrence", "Transformer": "attention"}
"""What :class:`ProjectionsOnly` leaves out of each model's mixer."""


class ProjectionsOnly(nn.Module):
    """The projections of a mixer without what moves information along the sequence: ``like="LSTM"``, the LSTM's
    input projection d -> 4d (its gates' pre-activations, as :class:`gpulab.rnn.LSTM` computes them before its
    recurrence), returning the last d columns (no recurrence, no cell); ``like="Transformer"``, the q, k, v
    projection d -> 3d and the output projection d -> d applied to v (no RoPE, no split into heads, no attention).

    Position t's output depends on x_t alone: nothing a state-tracking task needs. The mixer of :class:`FloorModel`,
    the floor under a model's training step: whatever its recurrence or attention costs comes on top of this. The
    backward of the slice writes a gradient as wide as the projection (zeros but in its last d columns), as the real
    mixers write theirs (the LSTM's gate gradients dG, attention's dq, dk, dv): the floor holds only work that every
    implementation of the mixer does too."""

    def __init__(self, d_model: int, like: str):
        super().__init__()
        d_model = runtime.positive_int("d_model", d_model)
        if not isinstance(like, str) or like not in FLOORS:
            raise ValueError(f"like={like!r} is not supported; use one of {sorted(FLOORS)} (the model whose mixer's "
                             "projections to keep).")  # fmt: skip
        self.like = like
        self.proj = nn.Linear(d_model, (4 if like == "LSTM" else 3) * d_model)
        self.out = nn.Linear(d_model, d_model) if like == "Transformer" else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.proj(x)[..., -x.shape[-1] :])  # the LSTM's last gate, or the Transformer's v


class FloorModel(_Stack):
    """The stack of ``like`` ("LSTM" or "Transformer": embedding, ``num_layers`` pre-LN blocks with the MLP,
    LayerNorm, head) with each mixer replaced by :class:`ProjectionsOnly`: every layer the model has except its
    recurrence or attention. Its training step is what the model's step costs before its sequence mixing: lesson 8
    times it beside the two models to bound what any recurrence kernel can change in their ratio."""

    def __init__(self, vocab: int, classes: int, d_model: int = 64, num_layers: int = 2, like: str = "LSTM"):
        num_layers = runtime.positive_int("num_layers", num_layers)
        super().__init__(vocab, classes, d_model, [ProjectionsOnly(d_model, like) for _ in range(num_layers)])
        self.like = like
