"""The ``fused`` backend's one chooser: which kernel runs a problem, with which tiles and which configuration.

- :func:`choose`: one program per (head, batch tile), R of the head on one SM (:mod:`.forward`, :mod:`.backward`,
  tiles from :mod:`.tiling`) whenever the forward (and, when training, the backward) fit; else the head split over
  several SMs with a grid barrier per step (:mod:`.split`, :mod:`.split_backward`, tiles from :mod:`.split_tiling`;
  the Gluon :mod:`.split_gluon` and :mod:`.split_gluon_backward` where :func:`v6_applies`, tiles from :func:`v6_tiles`),
  where no split backward of the whole batch fits, an LSTM in 16 bits trains through b4 in launches of fewer rows
  (:func:`b4_rows`; the rows of a batch are independent recurrences), and otherwise through the ``alternating``
  backward (:func:`gpulab.rnn.backends.alternating.alternating_rnn_gradients`) on the pre-activations the split
  forward saves; an LSTM in 16 bits whose head no power-of-two split fits (one head of 1536) on the two-piece Gluon
  kernels (:mod:`.split_gluon_units`, :mod:`.split_gluon_backward_units`; tiles from
  :func:`gpulab.rnn.fused.gluon_tiles.units_tiles`); else a ValueError naming the alternative
  (``backend='alternating'``). :func:`explain` prints the choice.
- :func:`steps_apply`: an LSTM batch no split takes runs whole, one launch per step (:mod:`.stepwise`).
- :func:`fused_forward`: the ``fused`` backend of :func:`gpulab.rnn.flashrnn`: the chosen loops bound to their
  tiles (chosen once per problem), run as one autograd op (:class:`gpulab.rnn.backends.autograd.TritonRNN`).
- :func:`problem_loops`, :func:`saved_gates_dtype`: the loops :func:`fused_forward` would run for one problem (kept per
  problem) and the dtype its forward saves the gates in, for the custom ops of :mod:`gpulab.rnn.ops` that
  ``torch.compile`` runs; :func:`single_sm_forward`, :func:`single_sm_gradients`: the one-SM loops alone.
- :func:`kernel`: the ``@triton.jit`` kernel the choice launches (lesson 6's benchmark reports its registers);
  :data:`KERNELS`: the family's shipped Triton kernels by name (:mod:`.measure.sass` compiles them without a GPU).
- :func:`tiles_pair`: the multi-tile kernels' tiles (:mod:`.split_gluon_tiles`, :mod:`.split_gluon_backward_tiles`:
  several batch tiles per program), which run a batch past version 6's SMs in one launch each way where
  ``GluonConfig.tiles`` is on (off: what ships).
- :func:`config_as`, :func:`current_config`: the :class:`gpulab.rnn.fused.config.FusedConfig` the chosen loops are
  bound to (what ships unless an experiment, :mod:`.experiments`, sets another for the duration).

Lesson 6's numbered ladder (:mod:`.versions`: ``run_version``, ``run_training``) is not imported here: it imports
this module, on demand.

Rule of the rooms: this is the only module that imports several kernels of the family; a kernel module imports
helpers below it (:mod:`.tiles`, :mod:`.tiling`, :mod:`gpulab.rnn.cells`, :mod:`gpulab.triton_ops`), never another
kernel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import torch

from gpulab import dtypes, gluon_compat, hardware, runtime
from gpulab.rnn.backends.alternating import alternating_forward, alternating_rnn_forward, alternating_rnn_gradients
from gpulab.rnn.backends.autograd import TritonRNN
from gpulab.rnn.backends.parameter_grads import gate_gradients_to_parameters, one_launch
from gpulab.rnn.functions import get_function
from gpulab.rnn.fused import (
    gluon_tiles,
    split_gluon,
    split_gluon_backward,
    split_gluon_backward_tiles,
    split_gluon_backward_units,
    split_gluon_tiles,
    split_gluon_units,
    split_tiling,
    tiling,
)
from gpulab.rnn.fused.backward import fused_backward_kernel, fused_rnn_gradients
from gpulab.rnn.fused.config import DEFAULT, SPLIT_VERSIONS, FusedConfig
from gpulab.rnn.fused.forward import fused_forward_kernel, fused_rnn_forward, saved_dtype
from gpulab.rnn.fused.split import split_forward_kernel, split_rnn_forward
from gpulab.rnn.fused.split_backward import split_backward_kernel, split_rnn_backward, split_rnn_gradients
from gpulab.rnn.fused.stepwise import step_rnn_forward, step_rnn_gradients, step_tiles

__all__ = [
    "Plan",
    "choose",
    "explain",
    "fused_forward",
    "batch_rows",
    "b4_rows",
    "plan_kind",
    "steps_apply",
    "steps_on_cublas",
    "problem_loops",
    "saved_gates_dtype",
    "single_sm_forward",
    "single_sm_gradients",
    "kernel",
    "KERNELS",
    "clear_cache",
    "config_as",
    "current_config",
    "SPLIT_VERSIONS",
    "V6_TILES",
    "v6_applies",
    "v6_tiles",
    "TILES_CANDIDATES",
    "tiles_pair",
]

_CONFIG = DEFAULT
"""The configuration :func:`fused_forward` binds its loops to: what ships (its ``split_version`` 'v6': the Gluon
split kernels, :mod:`.split_gluon` and :mod:`.split_gluon_backward`, where :func:`v6_applies`, else the Triton ones,
:mod:`.split` and :mod:`.split_backward`); only :func:`config_as` changes it, for the duration of an experiment."""

KERNELS = {
    "forward": fused_forward_kernel,
    "backward": fused_backward_kernel,
    "split": split_forward_kernel,
    "split_backward": split_backward_kernel,
}
"""The package's four ``@triton.jit`` kernels by name (the ladder's v1 ... v3 are ``versions.KERNELS``; v4 is
``'forward'``, v5 ``'split'``)."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the ``fused`` backend runs for one problem: ``kind`` 'single' (``tiling`` a
    :class:`gpulab.rnn.fused.tiling.FusedTiling`, one program per head and batch tile), 'split' (a
    :class:`gpulab.rnn.fused.split_tiling.SplitTiling`) or 'units' (the two-piece Gluon kernels' forward
    :class:`~gpulab.rnn.fused.gluon_tiles.UnitsConfig`, for a head no power-of-two split fits), and why. ``backward``,
    for a plan made for training: the backward's tiling (a FusedTiling for 'single', a SplitTiling for 'split', a
    UnitsConfig for 'units'), or None where no split backward fits the whole batch. ``b4``, for such a split plan of
    an LSTM in 16 bits: ``(tile, rows)`` of :func:`b4_rows`, b4 in launches of ``rows`` rows (None: ``alternating``)."""

    kind: str
    tiling: object
    why: str
    backward: object = None
    b4: tuple | None = None


def _element_size(dtype) -> int:
    return torch.empty((), dtype=dtypes.as_dtype(dtype)).element_size()


def choose(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, gpu=None, training=False) -> Plan:
    """One SM per (head, batch tile) when the forward (and, when ``training``, the backward) fit; else the head
    split over several SMs (:func:`gpulab.rnn.fused.split_tiling.split_tiling`); else a ValueError naming the
    alternative."""
    if not isinstance(training, bool):
        raise TypeError(f"training must be True or False, got {training!r}.")
    dirs = ("forward", "backward") if training else ("forward",)
    spec = hardware.spec(gpu)
    if all(tiling.fits(batch, num_heads, head_dim, function, dtype, spec, d) for d in dirs):
        single = tiling.fused_tiling(batch, num_heads, head_dim, function, dtype, spec, "forward")
        back = tiling.fused_tiling(batch, num_heads, head_dim, function, dtype, spec, "backward") if training else None
        why = f"R of a head ({single.r_bytes // 1024} KB) fits one SM beside its tiles: no barrier needed"
        return Plan("single", single, why, back)
    try:
        split = split_tiling.split_tiling(batch, num_heads, head_dim, function, dtype, gpu)
    except ValueError:
        if (units := _units_plan(batch, num_heads, head_dim, function, dtype, spec, training)) is None:
            raise
        return units
    need = tiling.slots(function) * head_dim * head_dim * _element_size(dtype)
    why = (
        f"R of a head ({need // 1024} KB) does not fit one SM ({spec.smem_per_block // 1024} KB) for the "
        f"{'/'.join(dirs)}; split over {split.split} programs of {split.block_u} units "
        f"({split.shared_bytes // 1024} KB each), {split.programs} programs resident, "
        + ("one barrier per step" if split.exchange == "barrier" else f"{split.exchange} exchange each step")
    )
    back = b4 = None
    if training:
        try:
            back = split_tiling.split_tiling(batch, num_heads, head_dim, function, dtype, gpu, direction="backward")
            why += f"; backward over {back.split} programs of {back.block_u} units"
        except ValueError:
            usable = get_function(function).name == "lstm" and dtypes.as_dtype(dtype) in (torch.float16, torch.bfloat16)
            b4 = b4_rows(batch, num_heads, head_dim, spec.sm_count) if usable else None
            if b4 is None:
                why += "; no split backward fits: the alternating backward runs"
            else:
                cfg, rows = b4
                why += (f"; no split backward fits the whole batch: b4 runs in {-(-batch // rows)} launch(es) of "
                        f"{rows} rows, {cfg.block_u} units x {cfg.block_b} rows per program")  # fmt: skip
    return Plan("split", split, why, back, b4)


def _units_plan(batch, num_heads, head_dim, function, dtype, spec, training) -> Plan | None:
    """The 'units' plan (:func:`gpulab.rnn.fused.gluon_tiles.units_tiles`) of a 16-bit LSTM on Hopper (the budgets the
    tiles are held to) whose head no power-of-two split fits even at one row; else None (the other kernels keep it)."""
    lstm16 = get_function(function).name == "lstm" and dtypes.as_dtype(dtype) in (torch.float16, torch.bfloat16)
    if not lstm16 or spec.compute_capability[0] != 9:
        return None
    try:
        pair = split_tiling.split_tiling(1, num_heads, head_dim, function, dtype, spec) and None  # a split fits: None
    except ValueError:
        pair = gluon_tiles.units_tiles(batch, num_heads, head_dim, spec.sm_count)
    if pair is None:
        return None
    why = (f"no power-of-two split of R fits {spec.sm_count} SMs; split over {head_dim // pair[0].block_u} programs of "
           f"{pair[0].block_u} units in two pieces (the units kernels), one barrier per step")  # fmt: skip
    return Plan("units", pair[0], why, pair[1] if training else None)


def b4_rows(batch, num_heads, head_dim, sm_count, pairs: tuple | None = None):
    """``(tile, rows)``: the b4 tile of :data:`V6_TILES` (``pairs``) valid for the head dim that runs the batch in
    the fewest launches with every program resident at one per SM (``sm_count`` SMs; the earlier pair on a tie), and
    the rows per launch (the batch spread evenly over those launches); None where no tile takes even one batch
    tile. A launch of ``rows`` rows is ``head_dim / block_u * num_heads * ceil(rows / block_b)`` programs."""
    batch, num_heads = runtime.positive_int("batch", batch), runtime.positive_int("num_heads", num_heads)
    head_dim, sm_count = runtime.positive_int("head_dim", head_dim), runtime.positive_int("sm_count", sm_count)
    best = None
    for pair in V6_TILES if pairs is None else pairs:
        if not pair.get("min_head_dim", 0) <= head_dim <= pair.get("max_head_dim", head_dim):
            continue
        try:
            cfg = split_gluon_backward.b4_config(head_dim, **pair["backward"])
        except ValueError:
            continue
        most = sm_count // cfg.programs(1, num_heads, head_dim) * cfg.block_b  # whole batch tiles resident
        if most > 0 and (best is None or -(-batch // most) < best[1]):
            best = (cfg, -(-batch // most))
    if best is None:
        return None
    cfg, launches = best
    return cfg, -(-batch // launches)


def explain(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, gpu=None) -> str:
    """The split candidates as a table (:func:`gpulab.rnn.fused.split_tiling.explain_split`), and the choice with its
    reason."""
    text = split_tiling.explain_split(batch, num_heads, head_dim, function, dtype, gpu)
    try:
        p = choose(batch, num_heads, head_dim, function, dtype, hardware.spec(gpu))
        return f"{text}\nplan: {p.kind} ({p.why})"
    except ValueError as exc:
        return f"{text}\nnone fits: {exc}"


def _check_problem(batch, num_heads, head_dim, training) -> None:
    for name, x in (("batch", batch), ("num_heads", num_heads), ("head_dim", head_dim)):
        runtime.positive_int(name, x)
    runtime.strict_bool("training", training)


def plan_kind(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, training=False) -> str | None:
    """What the fused backend runs this problem on, under the config in force (kept per problem and config):
    ``"single"`` (one SM per head and batch tile), ``"split"`` (a head over several SMs), ``"units"`` (the two-piece
    split kernels), ``"steps"`` (the stepwise kernels, :func:`steps_apply`) or None (no launch of the whole batch
    fits: the batch runs in launches of fewer rows)."""
    _check_problem(batch, num_heads, head_dim, training)
    return _plan_kind(batch, num_heads, head_dim, function, dtype, training, _CONFIG)


@functools.lru_cache(maxsize=256)
def _plan_kind(batch, num_heads, head_dim, function, dtype, training, config) -> str | None:
    if steps_apply(batch, num_heads, head_dim, function, dtype, training, config):
        return "steps"
    return _chosen_kind(batch, num_heads, head_dim, function, dtype, training)


@functools.lru_cache(maxsize=256)
def _chosen_kind(batch, num_heads, head_dim, function, dtype, training) -> str | None:
    try:
        return choose(batch, num_heads, head_dim, function, dtype, training=training).kind
    except ValueError:
        return None


def steps_apply(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, training=False, config=None) -> bool:
    """Whether the fused backend runs a large batch's loops (the stepwise kernels, :mod:`.stepwise`, or where
    :func:`steps_on_cublas` the ``alternating`` ones), under ``config`` (None: the one in force): an LSTM of at least
    ``steps_min_batch`` rows (``large_batch`` 'steps') whose whole batch no split of R takes (:func:`choose` raises).
    Where only the backward runs in launches of fewer rows (b4, H1024 B64) the split kernels measured faster: kept."""
    _check_problem(batch, num_heads, head_dim, training)
    config = _CONFIG if config is None else config
    if config.large_batch != "steps" or batch < config.steps_min_batch or get_function(function).name != "lstm":
        return False
    return _chosen_kind(batch, num_heads, head_dim, function, dtype, training) is None


def steps_on_cublas(batch, num_heads, head_dim, config=None) -> bool:
    """Whether a large batch's steps run as the ``alternating`` loops (a cuBLAS product and a pointwise kernel each,
    which measured faster there) rather than the stepwise kernels: where a step's product, 2 B DH 4DH FLOP per head,
    is at least ``cublas_from_gflop`` GFLOP of ``config`` (None: the one in force; one head of 1536 at B 256: 4.8)."""
    _check_problem(batch, num_heads, head_dim, False)
    config = _CONFIG if config is None else config
    return 2 * batch * head_dim * 4 * head_dim * num_heads >= config.cublas_from_gflop * 1e9


@functools.lru_cache(maxsize=256)
def batch_rows(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, training=False) -> int | None:
    """The batch rows of one launch: ``batch`` where :func:`choose` takes the whole batch; else, since the rows of
    a batch are independent recurrences, the launches of fewer rows each that it does take (the most rows it takes,
    found by bisection, then spread evenly over the launches the batch needs); None where it takes not even one
    row (the head does not fit this GPU even split over every SM). A split launch keeps every program resident, so
    a large batch of a large head exceeds the SMs long before one row does."""
    _check_problem(batch, num_heads, head_dim, training)

    def takes(rows: int) -> bool:
        return _chosen_kind(rows, num_heads, head_dim, function, dtype, training) is not None

    if takes(batch):
        return batch
    if not takes(1):
        return None
    lo, hi = 1, batch  # takes(lo), not takes(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if takes(mid) else (lo, mid)
    launches = -(-batch // lo)
    rows = -(-batch // launches)
    rows = rows if takes(rows) else lo
    many = -(-batch // rows) > gluon_tiles.UNITS_MAX_LAUNCHES  # (the two-piece kernels' launches: at most so many)
    return None if many and choose(rows, num_heads, head_dim, function, dtype).kind == "units" else rows


def fused_forward(Wx, R, b, states, function="lstm"):
    """The ``fused`` backend of :func:`gpulab.rnn.flashrnn` (inputs validated, in one compute dtype).

    Chooses first (:func:`choose`) so an unsupported size is known before any work: a batch too large for one
    launch runs in launches of :func:`batch_rows` rows (the rows are independent); a head too large for the GPU at
    any batch runs on the ``alternating`` backend, with a warning (once per problem) naming the reason.
    """
    B, _, _, NH, DH = Wx.shape
    training = torch.is_grad_enabled() and (
        Wx.requires_grad or R.requires_grad or b.requires_grad or states.requires_grad
    )
    try:
        run_forward, run_backward = _loops(B, NH, DH, function, Wx.dtype, Wx.device, training, _CONFIG)
    except ValueError as exc:  # no launch of the whole batch fits
        rows = batch_rows(B, NH, DH, function, Wx.dtype, training)
        if rows is None:
            gluon_compat.warn_once(("rnn fused", NH, DH, function, Wx.dtype, training),
                                   f"gpulab.rnn: backend='fused' cannot run {NH} head(s) of {DH} on this GPU ({exc}); "
                                   "running backend='alternating' (a batched product per step) instead.")  # fmt: skip
            return alternating_forward(Wx, R, b, states, function)
        if rows >= B:  # the chooser takes the batch: the error was another one
            raise
        parts = [fused_forward(Wx[i : i + rows], R, b, states[:, i : i + rows], function) for i in range(0, B, rows)]
        return torch.cat([p[0] for p in parts], dim=1), torch.cat([p[1] for p in parts], dim=1)
    return TritonRNN.apply(Wx, R, b, states, function, run_forward, run_backward)


def v6_applies(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, wide: bool = False) -> bool:
    """Whether version 6 (forward and backward b4, their default tiles) can run a problem here: an LSTM in a 16-bit
    dtype on a GPU (Gluon has no interpreter), a Triton measured on the GPU (:func:`gpulab.gluon_compat.untested`;
    else it warns once), tiles valid for the head dim, and every program of the larger launch resident at once at
    one per SM (the cooperative launch's condition; b4's tile takes most of an SM's registers).
    ``wide``: as for :func:`v6_tiles`."""
    batch, num_heads = runtime.positive_int("batch", batch), runtime.positive_int("num_heads", num_heads)
    head_dim = runtime.positive_int("head_dim", head_dim)
    dtype = dtypes.as_dtype(dtype)
    if not _gluon_runs(function, dtype):
        return False
    try:
        tiles = v6_tiles(batch, head_dim, num_heads, wide)
    except ValueError:
        return False
    sms = hardware.live_properties().get("sm_count", 0)
    return max(t.programs(batch, num_heads, head_dim) for t in tiles) <= sms


def _gluon_runs(function, dtype) -> bool:
    """Whether the Gluon split kernels can run this function and dtype here (an LSTM in 16 bits, on a GPU, with a
    Triton measured there; else False, with a warning once where the Triton is the reason)."""
    if get_function(function).name != "lstm" or dtypes.as_dtype(dtype) not in (torch.float16, torch.bfloat16):
        return False
    if runtime.INTERPRET:
        return False
    if (why := gluon_compat.problem() or gluon_compat.untested("the fused RNN's version 6 (Gluon)")) is not None:
        gluon_compat.warn_once(("rnn v6", why), f"gpulab.rnn: {why}. Running version 5 (Triton) instead.")
        return False
    return True


V6_TILES = gluon_tiles.V6_TILES  # version 6's (forward, b4) tile pairs, in the order v6_tiles tries them


def v6_tiles(batch: int, head_dim: int, num_heads: int = 1, wide: bool = False, pairs: tuple | None = None) -> tuple:
    """(forward tile, backward tile) of version 6 for ``batch`` rows of ``num_heads`` heads: the first pair of
    :data:`V6_TILES` valid for the head dim whose programs all fit this GPU's SMs at once (the first valid pair
    where the SM count is unknown; the last valid one where none fits, which :func:`v6_applies` then refuses). With
    ``wide`` (``GluonConfig.wide``, off), 32 rows of 16 units in 8 warps beyond 16 rows. ``pairs``: the candidates
    (None: :data:`V6_TILES`). ValueError where no pair fits the head dim."""
    batch, head_dim = runtime.positive_int("batch", batch), runtime.positive_int("head_dim", head_dim)
    num_heads = runtime.positive_int("num_heads", num_heads)
    wide = runtime.strict_bool("wide", wide)
    pairs = V6_TILES if pairs is None else pairs
    if batch > 16 and wide:
        wide = dict(block_u=16, block_b=32, warps=8)
        return split_gluon.v6_config(head_dim, **wide), split_gluon_backward.b4_config(head_dim, **wide)
    valid, errors = [], []
    for pair in pairs:
        if not pair.get("min_head_dim", 0) <= head_dim <= pair.get("max_head_dim", head_dim):
            continue
        try:
            valid.append((split_gluon.v6_config(head_dim, **pair["forward"]),
                          split_gluon_backward.b4_config(head_dim, **pair["backward"])))  # fmt: skip
        except ValueError as exc:
            errors.append(str(exc))
    if not valid:
        why = errors[-1] if errors else "no pair of V6_TILES takes this head (min_head_dim, max_head_dim)"
        raise ValueError(f"head_dim={head_dim} fits no version-6 tile pair: {why}")
    sms = hardware.live_properties().get("sm_count", 0)
    fits = [p for p in valid if max(t.programs(batch, num_heads, head_dim) for t in p) <= sms]
    return fits[0] if fits else valid[0] if not sms else valid[-1]


def _v6_forward(Wx, R, b, states, function, save_gates, *, cfg, config):
    return split_gluon.split_forward_v6(Wx, R, b, states, save_gates=save_gates, cfg=cfg, config=config.gluon)


def _b4_gradients(d_out, gates, out, states, R, function, d_last=None, *, cfg, config, rows=None):
    """b4's gate gradients in launches of ``rows`` batch rows (None: one launch of the whole batch), then the
    parameter gradients of the whole batch at once: ``(dWx, dR, db, d_states)``."""
    sum_db = config.gluon.sum_db and not one_launch(out, config.small_rows)  # (the one launch sums db beside dR)
    B = out.shape[1]
    rows = B if rows is None else rows
    if rows >= B:  # one launch of the whole batch: the tensors as they are (slices are host operators)
        chunks = [(d_out, gates, out, states, R, d_last)]
    else:
        chunks = [(d_out[:, s], gates[s], out[:, s], states[:, s], R, None if d_last is None else d_last[:, s])
                  for s in (slice(i, i + rows) for i in range(0, B, rows))]  # fmt: skip
    parts = [split_gluon_backward.split_backward_b4(*c, cfg=cfg, sum_db=sum_db, config=config.gluon) for c in chunks]
    if len(parts) == 1:
        dG, ds0, *db = parts[0]
    else:
        dG, ds0 = torch.cat([p[0] for p in parts], dim=0), torch.cat([p[1] for p in parts], dim=1)
        db = [sum(p[2] for p in parts)] if sum_db else []
    grads = gate_gradients_to_parameters(dG, out, states, function, db=db[0] if db else None,
                                         small_rows=config.small_rows)  # fmt: skip
    return (*grads, ds0)


TILES_CANDIDATES = gluon_tiles.TILES_CANDIDATES


def tiles_pair(batch, num_heads, head_dim, sm_count, candidates: tuple | None = None):
    """``(forward tile, backward tile)`` of the multi-tile kernels for ``batch`` rows
    (:func:`gpulab.rnn.fused.gluon_tiles.multi_tile_pair` with the two kernels' tile makers), or None."""
    return gluon_tiles.multi_tile_pair(batch, num_heads, head_dim, sm_count, split_gluon.v6_config,
                                       split_gluon_backward_tiles.b4_tiles_config, candidates)  # fmt: skip


def _tiles_forward(Wx, R, b, states, function, save_gates, *, cfg, config):
    return split_gluon_tiles.split_forward_tiles(Wx, R, b, states, cfg=cfg, save_gates=save_gates, config=config.gluon)


def _tiles_gradients(d_out, gates, out, states, R, function, d_last=None, *, cfg, config):
    """The multi-tile backward's gate gradients in one launch, then the parameter gradients: ``(dWx, dR, db,
    d_states)``."""
    sum_db = config.gluon.sum_db and not one_launch(out, config.small_rows)
    dG, ds0, *db = split_gluon_backward_tiles.split_backward_tiles(d_out, gates, out, states, R, d_last, cfg=cfg,
                                                                   sum_db=sum_db, config=config.gluon)  # fmt: skip
    grads = gate_gradients_to_parameters(dG, out, states, function, db=db[0] if db else None,
                                         small_rows=config.small_rows)  # fmt: skip
    return (*grads, ds0)


def _units_forward(Wx, R, b, states, function, save_gates, *, cfg, config):
    return split_gluon_units.split_forward_units(Wx, R, b, states, save_gates=save_gates, cfg=cfg, config=config.gluon)


def _units_gradients(d_out, gates, out, states, R, function, d_last=None, *, cfg, config):
    """The two-piece backward's gate gradients, then the parameter gradients: ``(dWx, dR, db, d_states)``."""
    dG, ds0 = split_gluon_backward_units.split_backward_units(d_out, gates, out, states, R, d_last, cfg=cfg,
                                                              config=config.gluon)  # fmt: skip
    return (*gate_gradients_to_parameters(dG, out, states, function, small_rows=config.small_rows), ds0)


def current_config() -> FusedConfig:
    """The :class:`gpulab.rnn.fused.config.FusedConfig` in force (what ships, unless inside :func:`config_as`)."""
    return _CONFIG


@contextlib.contextmanager
def config_as(config: FusedConfig):
    """The fused backend's loops bound to ``config`` (a :class:`gpulab.rnn.fused.config.FusedConfig`) for the
    duration, then to the one before (the loops are chosen again; not thread-safe). :mod:`.experiments` builds the
    configs of the off-by-default paths."""
    global _CONFIG
    if not isinstance(config, FusedConfig):
        raise TypeError(f"config must be a gpulab.rnn.fused.config.FusedConfig, got {config!r}.")
    saved, _CONFIG = _CONFIG, config
    try:
        yield config
    finally:
        _CONFIG = saved


@functools.lru_cache(maxsize=256)
def _loops(B, NH, DH, function, dtype, device, training, config=DEFAULT):
    """The forward loop and (when training) the backward loop of one problem with their tiles and ``config`` (a
    :class:`gpulab.rnn.fused.config.FusedConfig`) bound, chosen once: the tile choosers weigh every candidate, too
    slow to repeat on every call."""
    version, wide = config.split_version, config.gluon.wide
    if config.gluon.tiles and version == "v6" and _gluon_runs(function, dtype) and not v6_applies(
            B, NH, DH, function, dtype, wide):  # fmt: skip
        pair = tiles_pair(B, NH, DH, hardware.live_properties().get("sm_count", 0))
        if pair is not None:
            return (functools.partial(_tiles_forward, cfg=pair[0], config=config),
                    functools.partial(_tiles_gradients, cfg=pair[1], config=config) if training else None)  # fmt: skip
    if steps_apply(B, NH, DH, function, dtype, training, config):  # a large batch: one launch per step
        if steps_on_cublas(B, NH, DH, config):  # a step cuBLAS runs well: its product, then the pointwise kernel
            return alternating_rnn_forward, alternating_rnn_gradients if training else None
        tiles = step_tiles(B, DH, NH, hardware.live_properties().get("sm_count", 0) or 132)
        return (functools.partial(step_rnn_forward, tiles=tiles),
                functools.partial(step_rnn_gradients, tiles=tiles, small_rows=config.small_rows) if training
                else None)  # fmt: skip
    chosen = choose(B, NH, DH, function, dtype, training=training)
    if chosen.kind == "units":  # (where Gluon cannot run: the alternating loops, as before these kernels)
        if not _gluon_runs(function, dtype):
            return alternating_rnn_forward, alternating_rnn_gradients if training else None
        back = functools.partial(_units_gradients, cfg=chosen.backward, config=config) if training else None
        return functools.partial(_units_forward, cfg=chosen.tiling, config=config), back
    if chosen.kind == "split" and version == "v6" and v6_applies(B, NH, DH, function, dtype, wide):
        forward, backward = v6_tiles(B, DH, NH, wide)  # chosen once per problem, like the rest of the loops
        return (functools.partial(_v6_forward, cfg=forward, config=config),
                functools.partial(_b4_gradients, cfg=backward, config=config) if training else None)  # fmt: skip
    split_backward = functools.partial(split_rnn_gradients, tiling=chosen.backward, small_rows=config.small_rows,
                                       exchange=config.backward_exchange)  # fmt: skip
    if chosen.kind == "split" and version == "v6+b3" and chosen.backward is not None and v6_applies(
            B, NH, DH, function, dtype, wide):  # fmt: skip
        forward = functools.partial(_v6_forward, cfg=v6_tiles(B, DH, NH, wide)[0], config=config)
        return forward, split_backward if training else None
    if chosen.kind == "split":
        run_forward = functools.partial(split_rnn_forward, tiling=chosen.tiling, exchange=config.split_exchange)
        if not training:
            return run_forward, None
        if chosen.backward is None and chosen.b4 is not None and _gluon_runs(function, dtype):
            cfg, rows = chosen.b4  # b4 in launches of fewer rows: far fewer kernels than the alternating backward
            return run_forward, functools.partial(_b4_gradients, cfg=cfg, config=config, rows=rows)
        if chosen.backward is None:
            return run_forward, alternating_rnn_gradients
        return run_forward, split_backward
    run_forward = functools.partial(fused_rnn_forward, tiling=chosen.tiling)
    if not training:
        return run_forward, None
    return run_forward, functools.partial(fused_rnn_gradients, tiling=chosen.backward, config=config.backward,
                                          small_rows=config.small_rows)  # fmt: skip


def problem_loops(B, NH, DH, function, dtype, device, training):
    """``(run_forward, run_backward or None)`` of one problem, as :func:`fused_forward` runs it (the config in force,
    chosen once per problem): one SM per head, or the head split (version 6 where it applies). Where no launch of
    the whole batch fits, the ``alternating`` loops, with a warning once per problem (eagerly, :func:`fused_forward`
    would cut the batch into launches instead). The custom ops of :mod:`gpulab.rnn.ops` run these under
    ``torch.compile``; :func:`saved_gates_dtype` says what the forward saves."""
    try:
        return _loops(B, NH, DH, function, dtype, device, training, _CONFIG)
    except ValueError as exc:
        why = (f"gpulab.rnn: backend='fused' under torch.compile cannot run {B} row(s) of {NH} head(s) of {DH} in one "
               f"launch ({exc}); running backend='alternating' instead.")  # fmt: skip
        gluon_compat.warn_once(("rnn fused op", B, NH, DH, function, dtype, training), why)
        return alternating_rnn_forward, alternating_rnn_gradients if training else None


def saved_gates_dtype(B, NH, DH, function, dtype) -> torch.dtype:
    """The dtype of the gates that :func:`problem_loops`' training forward saves: the one-SM forward keeps them in
    :func:`gpulab.rnn.fused.forward.saved_dtype`, the split and ``alternating`` forwards in the compute dtype. Only
    an LSTM in bfloat16 depends on the plan: then the sizes are read as ints (a traced size is specialized)."""
    dtype = dtypes.as_dtype(dtype)
    one_sm = saved_dtype(function, dtype)
    if one_sm == dtype:  # every forward saves the compute dtype
        return dtype
    return one_sm if plan_kind(int(B), int(NH), int(DH), function, dtype, True) == "single" else dtype


def clear_cache() -> None:
    """Forget the loops and batch rows chosen per problem (:func:`fused_forward` chooses again on its next call)."""
    _loops.cache_clear()
    batch_rows.cache_clear()
    _plan_kind.cache_clear()
    _chosen_kind.cache_clear()


def single_sm_forward(Wx, R, b, states, function, save_gates):
    """The one-SM forward loop with the chooser's tiles: ``(states_all, states_last, gates or None)``."""
    B, _, _, NH, DH = Wx.shape
    return fused_rnn_forward(Wx, R, b, states, function, save_gates, tiling.fused_tiling(B, NH, DH, function, Wx.dtype))


def split_forward_at(Wx, R, b, states, split_tiles, function="lstm", save_gates=False, exchange=None, clocks=None):
    """The split forward at ``split_tiles`` (a :class:`~gpulab.rnn.fused.split_tiling.SplitTiling`, e.g. each
    candidate of a sweep): ``(states_all, states_last, gates or None)``; ``exchange`` and ``clocks`` (a stamp buffer)
    for the exchange experiment (``gpulab.rnn.fused.measure.steps_bench``)."""
    return split_rnn_forward(Wx, R, b, states, function=function, save_gates=save_gates, tiling=split_tiles,
                             exchange=exchange, clocks=clocks)  # fmt: skip


def split_backward_at(d_out, gates, out, states, R, split_tiles, function="lstm", exchange=None, clocks=None):
    """The split backward's reverse-time kernel at ``split_tiles`` (backward candidates): ``(dG, d_states)``;
    ``exchange`` and ``clocks`` as for :func:`split_forward_at`."""
    return split_rnn_backward(d_out, gates, out, states, R, function, tiling=split_tiles, exchange=exchange,
                              clocks=clocks)  # fmt: skip


def single_sm_gradients(d_out, gates, out, states, R, function, d_last):
    """The one-SM backward with the chooser's tiles and the config in force: ``(dWx, dR, db, d_states)``."""
    S, B, T, NH, DH = out.shape
    tiles = tiling.fused_tiling(B, NH, DH, function, out.dtype, direction="backward")
    return fused_rnn_gradients(d_out, gates, out, states, R, function, tiling=tiles, d_last=d_last,
                               config=_CONFIG.backward, small_rows=_CONFIG.small_rows)  # fmt: skip


def kernel(batch, num_heads, head_dim, function="lstm", dtype=torch.bfloat16, gpu=None, training=False):
    """The ``@triton.jit`` kernel :func:`choose` launches for this problem: the backward's when ``training`` (None
    where a split forward trains through the ``alternating`` backward, and for the Gluon 'units' plan)."""
    chosen = choose(batch, num_heads, head_dim, function, dtype, gpu, training=training)
    if chosen.kind == "single":
        return KERNELS["backward" if training else "forward"]
    if chosen.kind == "units" or (training and chosen.backward is None):
        return None
    return KERNELS["split_backward" if training else "split"]
