"""Gluon pieces that version 6's forward and backward (:mod:`.split_gluon`, :mod:`.split_gluon_backward`)
share: the activations in one special-function instruction each, and version 5's grid barrier (a counter in global
memory, :mod:`gpulab.rnn.fused.split`) written for Gluon. Gluon has no interpreter: these compile for a GPU only."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from gpulab import gluon_compat as compat
from gpulab import runtime
from gpulab.rnn.fused.clocks import CLOCK_AFTER, GLOBALTIMER_AFTER
from gpulab.rnn.fused.config import BARRIERS, POLLS
from gpulab.rnn.fused.tiles import COUNTER_STRIDE, barrier_counter

__all__ = ["tanh", "sigmoid", "barrier_base", "grid_barrier", "grid_arrive", "grid_wait", "cta_barrier"]
__all__ += ["BARRIERS", "barrier_groups", "launch_counter", "barrier_start", "POLLS"]
__all__ += ["barrier_constexprs", "r_offsets", "h_pointers", "gate_inputs", "rt_tile", "push_share", "gather_shares"]
__all__ += ["clock_after", "globaltimer_after", "keep2", "keep3"]

cta_barrier = compat.barrier
"""A barrier of the program's threads (:func:`gpulab.gluon_compat.barrier`, whichever Triton is installed)."""


@gluon.jit
def tanh(x, FAST: gl.constexpr):
    """tanh in one instruction (``tanh.approx.f32``, FAST) or from one exponential."""
    if FAST:
        return gl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [x], dtype=gl.float32, is_pure=True,
                                         pack=1)  # fmt: skip
    else:
        return 2.0 / (1.0 + gl.exp(-2.0 * x)) - 1.0


@gluon.jit
def sigmoid(x, FAST: gl.constexpr):
    """sigmoid(x) = 1/2 + tanh(x / 2) / 2."""
    return 0.5 + 0.5 * tanh(0.5 * x, FAST)


@gluon.jit
def barrier_base(bar_ptr, n_programs):
    """The counter's value before this launch, as version 5 reads it: nobody has passed our first barrier yet, so
    the count is a multiple of the program count plus early arrivals."""
    base = gl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")
    return base - base % n_programs


@gluon.jit
def grid_arrive(bar_ptr):
    """Arrive: after every thread's stores so far (a CTA barrier), one release add to the counter. The release waits
    for those stores, so a kernel arrives right after the stores the other programs read and issues the rest after."""
    cta_barrier()
    gl.atomic_add(bar_ptr, 1, sem="release", scope="gpu")


def barrier_groups(heads: int, tiles: int, barrier: str = "group") -> int:
    """How many counters a launch of version 6 uses under ``barrier`` (one of :data:`BARRIERS`, the
    :class:`gpulab.rnn.fused.config.GluonConfig`'s): one per head and batch tile (``group``), or one (``grid``)."""
    heads, tiles = runtime.positive_int("heads", heads), runtime.positive_int("tiles", tiles)
    return heads * tiles if runtime.one_of("barrier", barrier, BARRIERS) == "group" else 1


def launch_counter(device, programs: int, heads: int, tiles: int, barrier: str = "group"):
    """The counters of a launch of version 6 (``programs`` programs over ``heads`` heads and ``tiles`` batch tiles)
    under ``barrier``, and how many programs each counter waits for: ``(counter tensor, n_programs)``."""
    groups = barrier_groups(heads, tiles, barrier)
    return barrier_counter(device, programs, groups), programs // groups


def barrier_constexprs(barrier: str = "group", poll: str = "atomic") -> dict:
    """The kernels' barrier constexprs under ``barrier`` (:data:`BARRIERS`) and ``poll`` (:data:`POLLS`):
    ``GROUP_STRIDE`` (int64s between two groups' counters; 0 for one counter) and ``POLL_LOADS``."""
    runtime.one_of("barrier", barrier, BARRIERS)
    return dict(GROUP_STRIDE=COUNTER_STRIDE if barrier == "group" else 0,
                POLL_LOADS=runtime.one_of("poll", poll, POLLS) == "load")  # fmt: skip


@gluon.jit
def barrier_start(bar_ptr, n_programs, GROUP_STRIDE: gl.constexpr):
    """This program's counter and its value before the launch (:func:`barrier_base`): with GROUP_STRIDE > 0 the
    counter of its head (axis 1 of the grid) and batch tile (axis 2), ``n_programs`` the programs of one group
    (:func:`launch_counter`). Returns ``(bar_ptr, base)``."""
    if GROUP_STRIDE > 0:
        bar_ptr += (gl.program_id(1) * gl.num_programs(2) + gl.program_id(2)) * GROUP_STRIDE
    return bar_ptr, barrier_base(bar_ptr, n_programs)


@gluon.jit
def _count(bar_ptr, LOADS: gl.constexpr):
    if LOADS:
        return gl.inline_asm_elementwise("ld.acquire.gpu.global.b64 $0, [$1];", "=l,l", [bar_ptr], dtype=gl.int64,
                                         is_pure=False, pack=1)  # fmt: skip
    else:
        return gl.atomic_add(bar_ptr, 0, sem="acquire", scope="gpu")


@gluon.jit
def grid_wait(bar_ptr, target, LOADS: gl.constexpr = False):
    """Wait until the counter reaches ``target`` (acquire: this program's later loads see what the arrivals
    released), polling with atomics or (LOADS) acquire loads; returns the count seen (for a clock stamp after the
    wait)."""
    seen = _count(bar_ptr, LOADS)
    while seen < target:
        seen = _count(bar_ptr, LOADS)
    return seen


@gluon.jit
def grid_barrier(bar_ptr, target, LOADS: gl.constexpr = False):
    """:func:`grid_arrive` then :func:`grid_wait`."""
    grid_arrive(bar_ptr)
    return grid_wait(bar_ptr, target, LOADS)


@gluon.jit
def clock_after(dep):
    """``%clock64`` read once ``dep`` (a 32-bit tile) is in registers (Gluon's :func:`gpulab.rnn.fused.clocks.
    clock_after`, the same PTX): int64, the shape and layout of ``dep``."""
    return gl.inline_asm_elementwise(CLOCK_AFTER, "=l,r", [dep], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def globaltimer_after(dep):
    """``%globaltimer`` (ns) read once ``dep`` (a 32-bit tile) is in registers: int64, the shape of ``dep``."""
    return gl.inline_asm_elementwise(GLOBALTIMER_AFTER, "=l,r", [dep], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def keep2(ptr, stamp):
    """Store element [0, 0] of a 2-D ``stamp`` at ``ptr`` (the other threads store nothing)."""
    L: gl.constexpr = stamp.type.layout
    r = gl.arange(0, stamp.shape[0], layout=gl.SliceLayout(1, L))
    c = gl.arange(0, stamp.shape[1], layout=gl.SliceLayout(0, L))
    idx = gl.expand_dims(r, 1) + gl.expand_dims(c, 0)
    gl.store(ptr + idx * 0, stamp, mask=idx == 0)


@gluon.jit
def keep3(ptr, stamp):
    """Store element [0, 0, 0] of a 3-D ``stamp`` at ``ptr`` (the other threads store nothing)."""
    L: gl.constexpr = stamp.type.layout
    a = gl.arange(0, stamp.shape[0], layout=gl.SliceLayout(1, gl.SliceLayout(2, L)))
    b = gl.arange(0, stamp.shape[1], layout=gl.SliceLayout(0, gl.SliceLayout(2, L)))
    c = gl.arange(0, stamp.shape[2], layout=gl.SliceLayout(0, gl.SliceLayout(1, L)))
    idx = gl.expand_dims(gl.expand_dims(a, 1), 2) + gl.expand_dims(gl.expand_dims(b, 0), 2)
    idx = idx + gl.expand_dims(gl.expand_dims(c, 0), 1)
    gl.store(ptr + idx * 0, stamp, mask=idx == 0)


@gluon.jit
def r_offsets(n, p, K0: gl.constexpr, KP: gl.constexpr, KC: gl.constexpr, NH, DH: gl.constexpr,
               BLOCK_U: gl.constexpr, KS: gl.constexpr, M: gl.constexpr, la: gl.constexpr):  # fmt: skip
    """Offsets into R [4, NH, DH, DH] of a [KS, M, KP] tile: [s, m, k] at
    R[m // BLOCK_U, n, p BLOCK_U + m % BLOCK_U, s KC + K0 + k]."""
    s_a = gl.arange(0, KS, layout=gl.SliceLayout(1, gl.SliceLayout(2, la)))
    m_a = gl.arange(0, M, layout=gl.SliceLayout(0, gl.SliceLayout(2, la)))
    k_a = gl.arange(0, KP, layout=gl.SliceLayout(0, gl.SliceLayout(1, la)))
    row_a = ((m_a // BLOCK_U) * NH + n) * DH + p * BLOCK_U + m_a % BLOCK_U  # [M]
    return (gl.expand_dims(gl.expand_dims(row_a, 0), 2) * DH
            + gl.expand_dims(gl.expand_dims(s_a * KC + K0, 1), 2)
            + gl.expand_dims(gl.expand_dims(k_a, 0), 1))  # fmt: skip


@gluon.jit
def h_pointers(h_ptr, r0, n, K0: gl.constexpr, KP: gl.constexpr, KC: gl.constexpr, KS: gl.constexpr, B,
                row_stride, DH: gl.constexpr, BLOCK_B: gl.constexpr, lb: gl.constexpr,
                COALESCED: gl.constexpr):  # fmt: skip
    """Pointers to a piece of h [KS, KP, BLOCK_B] (element [s, k, j] = h[r0 + j, s KC + K0 + k], rows
    ``row_stride`` apart: the initial state, or out[0] at step 0) and their mask: in the operand layout ``lb`` (a
    thread's two adjacent K in 4 bytes), or with COALESCED in a layout whose threads read 8 adjacent K (16 bytes;
    rows of KP along the lanes: whole 32-byte sectors)."""
    if COALESCED:
        TK: gl.constexpr = KP // 8 if KP // 8 < 32 else 32
        L: gl.constexpr = gl.BlockedLayout([1, 8, 1], [1, TK, 32 // TK], [KS, 1, 1], [1, 2, 0])
    else:
        L: gl.constexpr = lb
    s = gl.arange(0, KS, layout=gl.SliceLayout(1, gl.SliceLayout(2, L)))
    k = gl.arange(0, KP, layout=gl.SliceLayout(0, gl.SliceLayout(2, L)))
    j = gl.arange(0, BLOCK_B, layout=gl.SliceLayout(0, gl.SliceLayout(1, L)))
    rows = gl.expand_dims(gl.expand_dims(r0 + j, 0), 1)  # [1, 1, BLOCK_B]
    cols = gl.expand_dims(gl.expand_dims(s * KC + K0, 1), 2) + gl.expand_dims(gl.expand_dims(k, 0), 2)
    return h_ptr + rows.to(gl.int64) * row_stride + n * DH + cols, (rows < B) & (cols >= 0)


@gluon.jit
def gate_inputs(ptr, mask, HD):
    """A step's input projections of this program's elements, gates i, f, z, o (16-bit: converted where used)."""
    x_i = gl.load(ptr, mask=mask, other=0.0)
    x_f = gl.load(ptr + HD, mask=mask, other=0.0)
    x_z = gl.load(ptr + 2 * HD, mask=mask, other=0.0)
    x_o = gl.load(ptr + 3 * HD, mask=mask, other=0.0)
    return x_i, x_f, x_z, x_o


@gluon.jit
def rt_tile(r_ptr, n, p, M0: gl.constexpr, MP: gl.constexpr, NH, DH: gl.constexpr, BLOCK_U: gl.constexpr,
            la: gl.constexpr):  # fmt: skip
    """The backward's R_p^T rows [M0, M0 + MP) in the A layout ``la``: [MP, 4 BLOCK_U], element [m, g U + u] =
    R[g, n, p U + u, M0 + m]."""
    m = gl.arange(0, MP, layout=gl.SliceLayout(1, la))
    k = gl.arange(0, 4 * BLOCK_U, layout=gl.SliceLayout(0, la))
    row = ((k // BLOCK_U) * NH + n) * DH + p * BLOCK_U + k % BLOCK_U  # [4 U]: R's row of column k
    return gl.load(r_ptr + gl.expand_dims(row, 0) * DH + M0 + gl.expand_dims(m, 1))


@gluon.jit
def push_share(share, part_own, M0: gl.constexpr, MP: gl.constexpr, BLOCK_B: gl.constexpr, W: gl.constexpr,
               mma: gl.constexpr, COALESCED: gl.constexpr):  # fmt: skip
    """Store a share of dh^T [MP, BLOCK_B] (rows M0..) at ``part_own`` (a program's [DH, BLOCK_B] slab): from the
    product's fragments (layout ``mma``, 4 bytes a store), or with COALESCED in 16-byte rows (whole sectors)."""
    if COALESCED:
        JT: gl.constexpr = BLOCK_B // 8 if BLOCK_B // 8 < 32 else 32
        L: gl.constexpr = gl.BlockedLayout([1, 8], [32 // JT, JT], [W, 1], [1, 0])
    else:
        L: gl.constexpr = mma
    m = gl.arange(0, MP, layout=gl.SliceLayout(1, L))
    j = gl.arange(0, BLOCK_B, layout=gl.SliceLayout(0, L))
    value = gl.convert_layout(share.to(part_own.dtype.element_ty), L)
    gl.store(part_own + (M0 + gl.expand_dims(m, 1)) * BLOCK_B + gl.expand_dims(j, 0), value)


@gluon.jit
def gather_shares(slab0, units_b, SPLIT: gl.constexpr, DH: gl.constexpr, BLOCK_B: gl.constexpr, lp: gl.constexpr):
    """The sum over SPLIT programs' slabs (``slab0`` the first; each [DH, BLOCK_B]) of this program's rows
    ``units_b``: [BLOCK_U, BLOCK_B] fp32 in layout ``lp``, read from L2 in program order."""
    acc = gl.load(slab0 + units_b, cache_modifier=".cg").to(gl.float32)
    for q in gl.static_range(1, SPLIT):
        acc += gl.load(slab0 + q * DH * BLOCK_B + units_b, cache_modifier=".cg").to(gl.float32)
    return gl.convert_layout(acc, lp)
