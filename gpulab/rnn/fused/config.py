"""The fused-RNN family's switches as frozen configuration: every field's default is what ships.

- :class:`BackwardConfig`: the one-SM backward (:mod:`.backward`): how dh_{t-1}'s product is formed, where dG lies,
  where the sequence is cut for the overlapped parameter products;
- :class:`GluonConfig`: the Gluon split kernels (:mod:`.split_gluon`, :mod:`.split_gluon_backward`): the barrier and
  its poll, the exchange of h, what each step issues while it waits, whether large batches take the multi-tile kernels;
- :class:`FusedConfig`: the family's one config, which :mod:`.plan` passes to every kernel it launches: the two above,
  which split kernels run, the Triton split kernels' exchange and the row count of the one-launch parameter products.

A value other than the default is an experiment (:mod:`.experiments` names each one); what each measured is in the
lab notes, ``notes/rnn-fused.md`` and ``notes/rnn-split.md``. This module imports no kernel: the kernels import it.
"""

from __future__ import annotations

import dataclasses

from gpulab import runtime

__all__ = [
    "BARRIERS",
    "POLLS",
    "GLUON_EXCHANGES",
    "TAG_STORES",
    "DG_LAYOUTS",
    "PRODUCTS",
    "SPLIT_VERSIONS",
    "SPLIT_EXCHANGES",
    "LARGE_BATCHES",
    "BackwardConfig",
    "GluonConfig",
    "FusedConfig",
    "DEFAULT",
]

BARRIERS = ("grid", "group")
"""What a Gluon step's barrier waits for: every program of the launch (``grid``), or only the programs of the same
head and batch tile (``group``: they alone exchange h or dh; one counter each)."""
POLLS = ("atomic", "load")
"""How the Gluon barrier reads its counter: an atomic add of 0 with acquire semantics (one thread's load, passed to
the others through shared memory), or an acquire load in every thread (inline PTX)."""
GLUON_EXCHANGES = ("counter", "tagged")
"""How the Gluon forward's programs hand each other h_t: ``counter`` (stored in out[0], then the barrier) or
``tagged`` (each h word stored beside its step's tag in 32 bits, in one of two slots; no fence and no counter, twice
the bytes of h)."""
TAG_STORES = (0, 1, 2)
"""How the tagged exchange stores its words: 0 a plain store, 1 a relaxed store at the GPU's scope, 2 a plain store
and a fence."""
DG_LAYOUTS = ("batch", "time")
"""Where the one-SM backward stores dG: 'batch', Wx's layout [B, T, G_b, NH, DH] (dWx is dG itself), or 'time',
[T, B, G_b, NH, DH] (dWx a transposed view, which autograd copies into Wx's layout on every step of a loop that
clears its gradients)."""
PRODUCTS = ("by head dim", "all gates", "per gate")
"""How the one-SM backward computes dh_{t-1} = sum_g dG_g @ R_g: one product over all gates, one per gate, or per
gate from :data:`gpulab.rnn.fused.backward.PER_GATE_FROM` (the padded head dim) on."""
SPLIT_VERSIONS = ("v5", "v6", "v6+b3")
"""The split kernels for a head that needs several SMs: 'v6' (Gluon forward and backward, where
:func:`gpulab.rnn.fused.plan.v6_applies`), 'v6+b3' (the Gluon forward, the Triton split backward) or 'v5' (the
Triton split kernels, :mod:`.split` and :mod:`.split_backward`, which also run every problem v6 cannot)."""
LARGE_BATCHES = ("steps", "launches")
"""How the fused backend runs an LSTM batch that the on-chip kernels cannot take in one launch each way: ``steps``
(the stepwise kernels, :mod:`.stepwise`: one launch per step of a GEMM with the cell as its epilogue, the whole
batch at once) or ``launches`` (the split kernels in launches of fewer rows, :func:`gpulab.rnn.fused.plan.batch_rows`
and :func:`gpulab.rnn.fused.plan.b4_rows`, the ``alternating`` backend where none fits)."""
SPLIT_EXCHANGES = ("barrier", "tagged", "flags", "hinted")
"""The Triton split kernels' meeting points (:mod:`.exchange`); the backward has no tagged words and takes 'barrier'
where the forward takes them."""


@dataclasses.dataclass(frozen=True)
class BackwardConfig:
    """The one-SM backward's switches (:func:`gpulab.rnn.fused.backward.fused_rnn_gradients`).

    ``product``: one of :data:`PRODUCTS`; ``dg_layout``: one of :data:`DG_LAYOUTS`; ``cuts``: where the sequence is
    cut for the products on a second stream, as an increasing tuple of fractions of T in (0, 1) (``()``: one piece,
    the kernel then the products on one stream); ``min_piece_steps``: sequences shorter than this many steps per
    piece run in one piece."""

    product: str = "by head dim"
    dg_layout: str = "batch"
    cuts: tuple = (0.125,)
    min_piece_steps: int = 64

    def __post_init__(self):
        runtime.one_of("product", self.product, PRODUCTS)
        runtime.one_of("dg_layout", self.dg_layout, DG_LAYOUTS)
        cuts = self.cuts
        ok = isinstance(cuts, tuple) and all(isinstance(c, float) and 0 < c < 1 for c in cuts)
        if not ok or list(cuts) != sorted(cuts):
            raise ValueError(
                f"cuts must be an increasing tuple of floats in (0, 1), or () for one piece, got {cuts!r}."
            )
        runtime.positive_int("min_piece_steps", self.min_piece_steps)


@dataclasses.dataclass(frozen=True)
class GluonConfig:
    """The Gluon split kernels' switches.

    ``barrier`` (:data:`BARRIERS`) and ``poll`` (:data:`POLLS`): both kernels' barrier. The forward:
    ``exchange`` (:data:`GLUON_EXCHANGES`), ``tag_store`` (:data:`TAG_STORES`, for the tagged exchange),
    ``early_arrive`` (arrive right after storing h, store c and the pre-activations while waiting; False: after every
    store), ``late_inputs`` (issue the next step's input projections after the arrival instead of before the cell:
    True, False, or None for tiles of at most 8 batch rows only). The backward: ``backward_early_arrive`` (arrive
    right after pushing the shares of dh, store dG while waiting), ``prefetch`` (load each step's inputs during the
    previous step's wait), ``sum_db`` (db summed in the kernel instead of a reduction over all of dG after it).
    ``wide``: more than 16 batch rows in 32-row tiles of 16 units and 8 warps
    (:func:`gpulab.rnn.fused.plan.v6_tiles`). ``tiles``: where version 6's launch of the whole batch needs more
    programs than the GPU has SMs, an LSTM in 16 bits trains in one launch each way of the multi-tile kernels
    (:mod:`.split_gluon_tiles`, :mod:`.split_gluon_backward_tiles`; several batch tiles per program,
    :func:`gpulab.rnn.fused.plan.tiles_pair`) instead of launches of fewer rows."""

    barrier: str = "group"
    poll: str = "atomic"
    exchange: str = "counter"
    tag_store: int = 0
    early_arrive: bool = True
    late_inputs: bool | None = None
    backward_early_arrive: bool = True
    prefetch: bool = True
    sum_db: bool = True
    wide: bool = False
    tiles: bool = False

    def __post_init__(self):
        runtime.one_of("barrier", self.barrier, BARRIERS)
        runtime.one_of("poll", self.poll, POLLS)
        runtime.one_of("exchange", self.exchange, GLUON_EXCHANGES)
        runtime.one_of("tag_store", self.tag_store, TAG_STORES)
        for name in ("early_arrive", "backward_early_arrive", "prefetch", "sum_db", "wide", "tiles"):
            runtime.strict_bool(name, getattr(self, name))
        if self.late_inputs is not None:
            runtime.strict_bool("late_inputs", self.late_inputs)

    @classmethod
    def of(cls, config) -> GluonConfig:
        """``config`` as the Gluon kernels take it: the default switches for None, the config itself if it is one."""
        if config is None:
            return cls()
        if not isinstance(config, cls):
            raise TypeError(f"config must be None or a gpulab.rnn.fused.config.GluonConfig, got {config!r}.")
        return config

    def late_inputs_for(self, block_b: int) -> bool:
        """Whether the forward issues its next inputs after the arrival for tiles of ``block_b`` rows."""
        return block_b <= 8 if self.late_inputs is None else self.late_inputs


@dataclasses.dataclass(frozen=True)
class FusedConfig:
    """The fused-RNN family's configuration, passed by :mod:`.plan` to the kernels it launches.

    ``split_version``: one of :data:`SPLIT_VERSIONS`; ``split_exchange``: the Triton split forward's exchange (one
    of :data:`SPLIT_EXCHANGES`, None: the tiling's, where it fits, else 'barrier'; the split backward takes the
    matching one); ``small_rows``: up to this many rows B * T the parameter products run in one launch
    (:func:`gpulab.rnn.backends.parameter_grads.one_launch`; None: its ``SMALL_ROWS``); ``backward``: a
    :class:`BackwardConfig`; ``gluon``: a :class:`GluonConfig`; ``large_batch``: one of :data:`LARGE_BATCHES`, for
    batches of at least ``steps_min_batch`` rows; ``cublas_from_gflop``: where a step's product (2 B DH 4DH per head)
    is at least this many GFLOP, a large batch's steps run as a cuBLAS product and a pointwise kernel each (the
    ``alternating`` loops) instead of the stepwise kernels."""

    split_version: str = "v6"
    split_exchange: str | None = None
    small_rows: int | None = None
    large_batch: str = "steps"
    steps_min_batch: int = 64
    cublas_from_gflop: float = 3.0
    backward: BackwardConfig = BackwardConfig()
    gluon: GluonConfig = GluonConfig()

    def __post_init__(self):
        runtime.one_of("split_version", self.split_version, SPLIT_VERSIONS)
        if self.split_exchange is not None:
            runtime.one_of("split_exchange", self.split_exchange, SPLIT_EXCHANGES)
        runtime.one_of("large_batch", self.large_batch, LARGE_BATCHES)
        runtime.positive_int("steps_min_batch", self.steps_min_batch)
        if not isinstance(self.cublas_from_gflop, (int, float)) or not self.cublas_from_gflop > 0:
            raise ValueError(f"cublas_from_gflop must be a positive number of GFLOP, got {self.cublas_from_gflop!r}.")
        if self.small_rows is not None:
            runtime.positive_int("small_rows", self.small_rows)
        for name, kind in (("backward", BackwardConfig), ("gluon", GluonConfig)):
            if not isinstance(getattr(self, name), kind):
                raise runtime.ArgumentTypeError(
                    f"{name} must be a gpulab.rnn.fused.config.{kind.__name__}, got {getattr(self, name)!r}."
                )

    @property
    def backward_exchange(self) -> str:
        """The Triton split backward's exchange beside :attr:`split_exchange` (the backward has no tagged words)."""
        return {"flags": "flags"}.get(self.split_exchange, "barrier")


DEFAULT = FusedConfig()
"""What ships."""
