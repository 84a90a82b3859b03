"""The tiles of version 6's split kernels (:mod:`.split_gluon`, :mod:`.split_gluon_backward`): sizes both
take, the budgets a tile must fit, and how a length that is not a power of two becomes Gluon tiles (host code; the
kernel files import it, never each other)."""

from __future__ import annotations

import dataclasses
import functools

import torch

from gpulab import runtime

__all__ = [
    "V6Config",
    "UnitsConfig",
    "unit_pieces",
    "units_config",
    "units_backward_config",
    "units_tiles",
    "UNITS_BLOCK_U",
    "UNITS_MAX_LAUNCHES",
    "check_resident",
    "MAX_TILES",
    "k_pieces",
    "REGISTER_BUDGET",
    "register_budget",
    "SHARED_BUDGET",
    "tile_for",
    "compile_sm90",
    "TILES_CANDIDATES",
    "multi_tile_pair",
    "V6_TILES",
]

_SIZES = {"block_u": (4, 8, 16, 32), "block_b": (8, 16, 32, 64), "warps": (1, 2, 4, 8, 16)}
MAX_TILES = 16
"""The most batch tiles one program of version 6's forward loops over in a step (the loop is unrolled)."""
REGISTER_BUDGET = 224
"""Registers per thread a tile's operands may take (:func:`.split_gluon.register_estimate`): of the 255 a thread
can have, the cell, the addresses and the prefetched inputs need the rest (one head of 1024 at 4 warps, 208 of them,
compiled to 242 without spilling). With 16 warps a thread can have 128 registers at most (an SM's 65,536 over 512
threads): :func:`register_budget`."""


def register_budget(warps: int) -> int:
    """The registers per thread a tile's operands may take with ``warps`` warps: :data:`REGISTER_BUDGET`, or less
    where the register file shared by ``warps * 32`` threads leaves each fewer (128 at 16 warps)."""
    return min(REGISTER_BUDGET, 65536 // (32 * runtime.positive_int("warps", warps)))


SHARED_BUDGET = 227 * 1024
"""Bytes of shared memory a program of the H100 may use."""


@dataclasses.dataclass(frozen=True)
class V6Config:
    """Version 6's tile: ``block_u`` units per program (all 4 gates of them), ``block_b`` batch rows (the product's
    N), ``warps`` warps, each holding one K chunk of R_p (DH / warps rows of K); ``tiles`` batch tiles of
    ``block_b`` rows per program (the forward loops over them within each step, R_p loaded once for all; the
    backward takes 1). :func:`.split_gluon.v6_config` (forward) and :func:`.split_gluon_backward.b4_config`
    (backward) check it against a head dim."""

    block_u: int = 8
    block_b: int = 16
    warps: int = 4
    tiles: int = 1

    def __post_init__(self):
        for name, allowed in _SIZES.items():
            v = runtime.positive_int(name, getattr(self, name))
            if v not in allowed:
                raise ValueError(f"{name}={v} is not a version-6 tile size; use one of {allowed}.")
        if not 1 <= runtime.positive_int("tiles", self.tiles) <= MAX_TILES:
            raise ValueError(f"tiles={self.tiles}: a program loops over 1 to {MAX_TILES} batch tiles; use fewer.")

    def __repr__(self) -> str:  # the shipped one-tile config reads as it always has; a multi-tile one says so
        more = f", tiles={self.tiles}" if self.tiles != 1 else ""
        return f"V6Config(block_u={self.block_u}, block_b={self.block_b}, warps={self.warps}{more})"

    def groups(self, batch: int) -> int:
        """Batch groups of a launch: ``tiles`` batch tiles each (the last one's rows past ``batch`` masked)."""
        batch_tiles = -(-runtime.positive_int("batch", batch) // self.block_b)
        return -(-batch_tiles // self.tiles)

    def programs(self, batch: int, heads: int, head_dim: int) -> int:
        """Programs of a launch: ``head_dim / block_u`` per head and batch group (all resident at once)."""
        heads = runtime.positive_int("heads", heads)
        return (runtime.positive_int("head_dim", head_dim) // self.block_u) * heads * self.groups(batch)


def unit_pieces(block_u: int) -> tuple[int, int] | None:
    """``block_u`` units as two powers of two ``(u1, u2)``, ``u1 > u2 >= 4`` (each piece's 4 gates at least the 16
    rows of a tensor-core tile); None where ``block_u`` is one power of two (version 6 takes it) or needs more."""
    bits = [1 << i for i in range(runtime.positive_int("block_u", block_u).bit_length()) if block_u >> i & 1][::-1]
    return (bits[0], bits[1]) if len(bits) == 2 and bits[1] >= 4 else None


@dataclasses.dataclass(frozen=True)
class UnitsConfig:
    """A tile of the two-piece kernels: ``block_u`` units per program as :func:`unit_pieces`, ``block_b`` batch rows,
    ``warps`` warps (the forward's: one K chunk of R_p each; the backward's: a share of R_p^T's rows each)."""

    block_u: int = 12
    block_b: int = 16
    warps: int = 8

    def __post_init__(self):
        if unit_pieces(self.block_u) is None:
            raise ValueError(f"block_u={self.block_u} is not two powers of two of at least 4 (e.g. 12 = 8 + 4, "
                             "24 = 16 + 8); a power of two is version 6's tile (V6Config).")  # fmt: skip
        runtime.one_of("block_b", self.block_b, (8, 16, 32))
        runtime.one_of("warps", self.warps, (1, 2, 4, 8, 16))

    def programs(self, batch: int, heads: int, head_dim: int) -> int:
        """Programs of a launch: ``head_dim / block_u`` per head and batch tile (all resident at once)."""
        tiles = -(-runtime.positive_int("batch", batch) // self.block_b)
        return runtime.positive_int("head_dim", head_dim) // self.block_u * runtime.positive_int("heads", heads) * tiles


def k_pieces(kc: int) -> tuple[int, int] | None:
    """A warp's K chunk ``kc`` as two power-of-two tiles ``(k1, k2)``, ``k1 >= k2`` (``k2`` 0 when ``kc`` is one), each
    at least 16 deep; None when ``kc`` needs more (192 = 128 + 64 at one head of 768 and 4 warps)."""
    kc = runtime.positive_int("kc", kc)
    bits = [1 << i for i in range(kc.bit_length()) if kc >> i & 1][::-1]
    if len(bits) > 2 or bits[-1] < 16:
        return None
    return (bits[0], bits[1] if len(bits) == 2 else 0)


def tile_for(head_dim: int, cfg, make):
    """The tile a kernel runs ``head_dim`` with: ``make(head_dim)`` (the kernel's defaults) when ``cfg`` is None, else
    ``cfg`` checked by ``make`` against the head dim (``make``: :func:`.split_gluon.v6_config` or
    :func:`.split_gluon_backward.b4_config`)."""
    if cfg is not None and not isinstance(cfg, V6Config):
        raise TypeError(f"cfg must be a V6Config ({make.__name__}(head_dim, ...)) or None, got {type(cfg).__name__}.")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int):
        return make(head_dim)  # (make names what is wrong with it)
    return _checked_tile(head_dim, cfg, make)


@functools.lru_cache(maxsize=256)
def _checked_tile(head_dim: int, cfg, make):
    """:func:`tile_for`'s answer, kept: every launch of a problem asks again (a refused tile raises, nothing kept)."""
    if cfg is None:
        return make(head_dim)
    if cfg.tiles != 1:
        return make(head_dim, cfg.block_u, cfg.block_b, cfg.warps, tiles=cfg.tiles)
    return make(head_dim, cfg.block_u, cfg.block_b, cfg.warps)


def compile_sm90(kernel, dtype: str, constexprs: dict, warps: int):
    """Triton's compiled Gluon ``kernel`` of version 6 for sm_90, nothing launched, no GPU needed. Its arguments, as
    both kernels take them: tensors (``dtype`` 'bf16' or 'fp16', 16-byte aligned as the launches' are) up to the
    barrier's int64 counter ``bar_ptr``, the sizes B, T, NH and the program count, then ``constexprs``. Call from a
    process outside the interpreter."""
    import triton  # noqa: PLC0415
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.experimental.gluon._runtime import GluonASTSource  # noqa: PLC0415

    dtype = runtime.one_of("dtype", dtype, ("bf16", "fp16"))
    pointers = kernel.arg_names[: kernel.arg_names.index("bar_ptr")]
    after = {"clk_ptr": "*i64", "xch_ptr": "*i32", "db_ptr": "*fp32"}  # after bar_ptr, where a kernel takes them
    after = {k: v for k, v in after.items() if k in kernel.arg_names}
    signature = {**{k: f"*{dtype}" for k in pointers}, "bar_ptr": "*i64", **after, "B": "i32", "T": "i32", "NH": "i32",
                 "n_programs": "i32", **{k: "constexpr" for k in constexprs}}  # fmt: skip
    src = GluonASTSource(fn=kernel, signature=signature, constexprs=constexprs,
                         attrs={(i,): [["tt.divisibility", 16]] for i in range(len(pointers))})  # fmt: skip
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})


def check_resident(grid: tuple, cfg, device) -> None:
    """Raise a ValueError where the multi-tile kernels' cooperative ``grid`` (unit slices, heads, batch groups) has
    more programs than the GPU's SMs (one program per SM, all resident, or the driver refuses the launch)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    if grid[0] * grid[1] * grid[2] > sms:
        raise ValueError(f"cfg runs {grid[0] * grid[1] * grid[2]} programs ({grid[0]} unit slices x {grid[1]} heads x "
                         f"{grid[2]} batch groups of {cfg.tiles} tiles of {cfg.block_b} rows) but this GPU holds "
                         f"{sms} at once; pass a cfg with more tiles per program (fewer groups), e.g. "
                         "gpulab.rnn.fused.plan.tiles_pair's.")  # fmt: skip


def units_config(head_dim: int, block_u: int = 12, block_b: int = 16, warps: int = 8) -> UnitsConfig:
    """The forward's two-piece tile for ``head_dim``, checked: DH a multiple of ``block_u`` and of 16 * ``warps``,
    each warp's K chunk one or two power-of-two tiles (:func:`gpulab.rnn.fused.gluon_tiles.k_pieces`), the operands
    within the register budget and the partial sums within shared memory."""
    head_dim = runtime.positive_int("head_dim", head_dim)
    cfg = UnitsConfig(block_u, block_b, warps)
    if head_dim % block_u or head_dim % (16 * warps) or k_pieces(head_dim // warps) is None:
        raise ValueError(f"head_dim={head_dim} must be a multiple of block_u={block_u} and of 16 * warps = "
                         f"{16 * warps}, with head_dim / warps one power of two or two; use e.g. head_dim 1536, "
                         "block_u 12, warps 8.")  # fmt: skip
    kc, (u1, u2) = head_dim // warps, unit_pieces(block_u)
    regs = 4 * u1 * kc * 2 // 4 // 32 + kc * block_b * 2 // 4 // 32 + 4 * block_u * block_b // 32  # R's piece a, h
    smem = 4 * warps * 4 * block_u * block_b + 4 * u2 * head_dim * 2  # the partials, R's piece b
    if regs > register_budget(warps) or smem > SHARED_BUDGET:
        raise ValueError(f"head_dim={head_dim} with block_u={block_u}, block_b={block_b}, warps={warps} needs {regs} "
                         f"registers per thread for its operands (at most {register_budget(warps)}) and {smem} bytes "
                         "of shared memory; use more warps or fewer units or rows per program.")  # fmt: skip
    return cfg


def units_backward_config(head_dim: int, block_u: int = 12, block_b: int = 16, warps: int = 8) -> UnitsConfig:
    """The backward's two-piece tile for ``head_dim``: DH a multiple of ``block_u``, DH one power of two or two,
    each at least 16 rows per warp; R_p^T's rows and the larger M piece's share within the register budget."""
    head_dim = runtime.positive_int("head_dim", head_dim)
    cfg = UnitsConfig(block_u, block_b, warps)
    pieces = k_pieces(head_dim)
    if head_dim % block_u or pieces is None or min(x for x in pieces if x) < 16 * warps:
        raise ValueError(f"head_dim={head_dim} must be a multiple of block_u={block_u} and one power of two or the "
                         f"sum of two, each at least 16 * warps = {16 * warps}; use e.g. 1536 (1024 + 512) with "
                         "warps <= 32.")  # fmt: skip
    rows = head_dim // warps
    regs = rows * 4 * block_u * 2 // 4 // 32 + pieces[0] // warps * block_b // 32
    if regs > register_budget(warps):
        raise ValueError(f"head_dim={head_dim} with block_u={block_u}, block_b={block_b}, warps={warps} needs {regs} "
                         f"registers per thread for R^T's rows and a share (at most {register_budget(warps)}); use "
                         "more warps or fewer units or rows per program.")  # fmt: skip
    return cfg


UNITS_BLOCK_U = (12, 24)
"""The two-piece kernels' units per program (:mod:`.split_gluon_units`, :mod:`.split_gluon_backward_units`), in
the order :func:`units_tiles` tries them."""
UNITS_MAX_LAUNCHES = 4
"""The most launches of fewer rows a batch runs in on the two-piece kernels (:func:`gpulab.rnn.fused.plan.batch_rows`);
past them the ``alternating`` backend's batched products run (at a head of 1536: launches of 16 rows, 128 programs
each)."""


def units_tiles(batch, num_heads, head_dim, sm_count):
    """``(forward tile, backward tile)`` of the two-piece kernels (units per program of :data:`UNITS_BLOCK_U`, 8
    warps, 8 batch rows per program up to 8 rows, else 16) whose launch of ``batch`` rows fits ``sm_count`` SMs at
    one program each; None where none does."""
    bb = 8 if runtime.positive_int("batch", batch) <= 8 else 16
    for bu in UNITS_BLOCK_U:
        try:
            pair = (units_config(head_dim, bu, bb),
                    units_backward_config(head_dim, bu, bb))  # fmt: skip
        except ValueError:
            continue
        if pair[0].programs(batch, num_heads, head_dim) <= runtime.positive_int("sm_count", sm_count):
            return pair
    return None


TILES_CANDIDATES = (dict(block_u=16, block_b=8, warps=8), dict(block_u=16, block_b=16, warps=8))
"""The multi-tile kernels' tiles in the order :func:`multi_tile_pair` prefers them (each kernel's own, forward and
backward alike): 16 units in 8 warps (b4's 32-unit tile in 16 warps spills, more so with several tiles), 8 rows per
batch tile first (compiled for sm_90 at a head of 1024, the forward in 16-row tiles spills; in 8-row tiles neither
kernel does), then 16."""


def multi_tile_pair(batch, num_heads, head_dim, sm_count, forward_make, backward_make, candidates=None):
    """``(forward tile, backward tile)`` of the multi-tile kernels for ``batch`` rows, each a :class:`V6Config` with
    ``tiles`` set, made by ``forward_make`` and ``backward_make`` (``make(head_dim, block_u=, block_b=, warps=,
    tiles=)``, ValueError where a tile does not fit): per kernel, of the tiles of ``candidates`` (None:
    :data:`TILES_CANDIDATES`) valid for the head dim, with as many batch groups as ``sm_count`` SMs hold at one program
    each and the batch tiles spread over them, the one with the fewest rows per program (the step's serial work), the
    earlier candidate on a tie; None where a kernel has none (a head past R's register budget, or more than
    :data:`MAX_TILES` tiles per program)."""
    batch, num_heads = runtime.positive_int("batch", batch), runtime.positive_int("num_heads", num_heads)
    head_dim, sm_count = runtime.positive_int("head_dim", head_dim), runtime.positive_int("sm_count", sm_count)

    def best(make):
        found = None
        for tile in TILES_CANDIDATES if candidates is None else candidates:
            programs = head_dim // tile["block_u"] * num_heads  # per batch group
            batch_tiles = -(-batch // tile["block_b"])
            groups = min(sm_count // programs if head_dim % tile["block_u"] == 0 else 0, batch_tiles)
            if groups < 1 or -(-batch_tiles // groups) > MAX_TILES:
                continue
            try:
                cfg = make(head_dim, **tile, tiles=-(-batch_tiles // groups))
            except ValueError:
                continue
            if found is None or cfg.tiles * cfg.block_b < found[0]:
                found = (cfg.tiles * cfg.block_b, cfg)
        return None if found is None else found[1]

    forward, backward = best(forward_make), best(backward_make)
    return None if forward is None or backward is None else (forward, backward)


V6_TILES = (
    dict(forward=dict(block_u=16, block_b=8, warps=8), backward=dict(block_u=16, block_b=8, warps=8), min_head_dim=512),
    dict(
        forward=dict(block_u=16, block_b=16, warps=8),
        backward=dict(block_u=32, block_b=8, warps=16),
        min_head_dim=768,
        max_head_dim=768,
    ),
    dict(forward=dict(block_u=8, block_b=16, warps=4), backward=dict(block_u=16, block_b=16, warps=8)),
    dict(forward=dict(block_u=16, block_b=16, warps=8), backward=dict(block_u=16, block_b=16, warps=8)),
)
"""Version 6's (forward, b4) tile pairs in the order :func:`gpulab.rnn.fused.plan.v6_tiles` tries them; the first whose
launches fit the GPU's SMs at once (and whose ``min_head_dim`` and ``max_head_dim``, where given, bound the head)
wins. 8 batch rows per program first, for heads of 512 and more: every program reads all of h_{t-1} (or pushes its
share of dh_{t-1}) for its rows at every step, and 8 rows halve those bytes, the product and the cell per program (at
a head of 256 the 8-row pair was the slower one). Then, at a head of 768 only (where it was measured), the forward in
16-row tiles beside b4 in 8-row tiles of 32 units and 16 warps: at B32 both launches are 96 programs (b4's 8-row
tiles of 16 units would be 192). Then 16 rows with the kernels' defaults, then 16 rows with the forward in b4's tile
(half the programs). What each pair measured: ``notes/rnn-split.md``."""
