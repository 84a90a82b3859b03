"""Tagged words: data stored together with the step that wrote it, so that a reader's load is also its barrier.

What you will learn: the split kernels (:mod:`.split`, :mod:`.split_backward`) exchange a small tile through L2
every step. With a counter barrier that costs several round trips in a row: the writer's stores, the fence of its
release and the atomic arrival, the readers' spin on the counter, and only then the readers' load of the data.
NCCL's LL protocol stores each 4-byte value *together with a 4-byte flag* in one 8-byte word: an aligned 8-byte
store is single-copy atomic, so a reader that sees the flag of step t in a word also sees that word's data of step
t. The reader loads the words it needs, checks every flag, and loads again until all carry the step it waits for:
no counter, no fence, no second round trip; the price is twice the bytes.

Here a word is an int64: the low 32 bits are two 16-bit values (element 2m in the lower half, as in memory), the high 32
bits the tag. Tags come from a per-(device, stream, program count) int64 sequence number ``seq`` (made zero once, like
:func:`gpulab.rnn.fused.tiles.barrier_counter`): a launch reads ``seq`` at its start, tags the data of step s with
``base + s + 1`` (``base = seq - t_start``; the initial state, step -1, is read from the input, written before the
launch), and the last program to leave adds the tags it used (its steps) to ``seq``. So tags only grow across launches
and CUDA-graph replays (a stale word from an earlier launch never carries a tag a later launch waits for, until 2^31
steps have passed), and launches of one step each (the interpreter) continue each other's tags. Exchange slots alternate
between two (step s in slot (s + 1) % 2): a writer overwrites slot s % 2 with step s + 1 only after reading every
program's step s, so after every program finished reading step s - 1 from it.

**Hinted words** (``exchange='hinted'``, the third candidate; ``notes/rnn-split.md``): a 32-bit word per value, the
value in the low half and a 15-bit tag in the high half (:func:`pack_hinted`), so a word is as atomic as NCCL's LL
words and carries the same guarantee. The tagged and flags kernels compiled badly (sm_90 SASS: 255 registers with
local-memory spills, and the flags' loads of h split into 16-bit loads), and a reader that polls the whole tile while
its producers still compute loads it again and again, the L2's bandwidth times every program. So here the writer also
adds one to a counter *without* a fence (a relaxed ``red``: a hint, not a barrier), the readers spin on that counter
with relaxed loads until every program has arrived, and only then load the words, once in the common case, again
only if a word still carries an older tag (a relaxed arrival may overtake the stores it follows). The release fence
of the counter barrier (a round trip to L2 that waits for the stores' acknowledgements) is gone; the price is twice
the bytes of h. 15-bit tags are enough: a slot holds the step two before, or the previous launch's last steps, never
one 2^15 steps back. The split backward has the same exchange for its shares of dh (``exchange='hinted'`` there too).

``while`` over tags in Triton: the loads of all chunks, then the count of stale words (a CTA reduction), again while
any is stale. In the interpreter programs run one after another, so only the one-step-per-launch mode is used, where
the first load always finds the tags. A stale word or flag there is a bug: :data:`SPIN_TRIES` is one, so the
reader stops, and :func:`poison_if` turns what it read into NaN, which fails the tests against float64 (the data
itself is there either way: the previous launch wrote it).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpulab import runtime

__all__ = [
    "TAG_MASK",
    "EXCHANGES",
    "SPIN_TRIES",
    "tagged_fits",
    "pack_tagged",
    "stale_words",
    "unpack_tagged",
    "tagged_state",
    "tag_base",
    "leave",
    "flag_arrive",
    "flags_wait",
    "poison_if",
    "HINT_MASK",
    "pack_hinted",
    "hinted_chunk",
    "hinted_stale",
    "hinted_fits",
]

TAG_MASK: tl.constexpr = tl.constexpr(0x7FFFFFFF)
"""31-bit tags: the high half of a word stays non-negative, so ``w >> 32`` is the tag."""
SPIN_TRIES = 1 if runtime.INTERPRET else (1 << 31) - 1
"""Loads of the words before a reader gives up: unbounded on a GPU; one in the interpreter (see the module)."""

EXCHANGES = ("barrier", "tagged", "flags", "hinted")
"""How the split kernels exchange their tile each step: a counter barrier (one int64 all programs add to), then the
load; tagged words (the load is the barrier); or a flag per program (each writes the tag of its latest step into its
own flag with release semantics, readers poll the flags of their head's programs only, then load); or hinted words
(a value and a 15-bit tag per 32-bit word, read after a fence-free counter says every program arrived)."""

HINT_MASK: tl.constexpr = tl.constexpr(0x7FFF)
"""15-bit tags of the hinted words: the high half of a word stays non-negative."""

_STATES: dict = {}


def tagged_fits(dtype, head_dim: int, *blocks: int) -> bool:
    """Whether the tagged exchange can carry this problem: 16-bit values (two per word), an even head dim and even
    tiles (``blocks``: the units and chunk widths of the kernel's tiles)."""
    head_dim = runtime.positive_int("head_dim", head_dim)
    blocks = tuple(runtime.positive_int("blocks", b) for b in blocks)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype such as torch.bfloat16, got {dtype!r}.")
    return torch.empty((), dtype=dtype).element_size() == 2 and head_dim % 2 == 0 and all(b % 2 == 0 for b in blocks)


@triton.jit
def pack_tagged(x, tag, ROWS: tl.constexpr, COLS: tl.constexpr):
    """A 16-bit tile [ROWS, COLS] and its tag (int64 scalar) -> int64 words [ROWS, COLS // 2]: two values and the
    tag in each."""
    pair = tl.reshape(x, [ROWS, COLS // 2, 2])
    lo, hi = tl.split(pair)
    lo32 = lo.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    hi32 = hi.to(tl.int16, bitcast=True).to(tl.int32) << 16
    return ((lo32 | hi32).to(tl.int64) & 0xFFFFFFFF) | (tag.to(tl.int64) << 32)


def hinted_fits(dtype) -> bool:
    """Whether the hinted exchange can carry values of ``dtype``: 16-bit only (the other half of a word is the tag)."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype such as torch.bfloat16, got {dtype!r}.")
    return torch.empty((), dtype=dtype).element_size() == 2


@triton.jit
def pack_hinted(x, tag):
    """A 16-bit tile and its tag (int scalar, < 2^15) -> int32 words of the same shape: the value's bits low, the tag
    high."""
    v = x.to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    return v | ((tag & HINT_MASK).to(tl.int32) << 16)


@triton.jit
def hinted_chunk(ptr, mask, want, DT: tl.constexpr):
    """Load the hinted words at ``ptr`` [ROWS, COLS] -> (their values as DT, the words XOR ``want``'s tag: below 2^16
    exactly where a word carries ``want``; masked-off words count as carrying it). Volatile: a load again in a loop is
    a new load, and L1 never answers it."""
    tag = (want & HINT_MASK).to(tl.int32) << 16
    w = tl.load(ptr, mask=mask, other=tag, volatile=True)
    return (w & 0xFFFF).to(tl.int16).to(DT, bitcast=True), w ^ tag


@triton.jit
def hinted_stale(x):
    """Whether any of the XORed words ``x`` (from :func:`hinted_chunk`, ORed together) carries another tag: a boolean
    scalar (one reduction for all the chunks)."""
    return (tl.max(tl.max(x, axis=1), axis=0) >> 16) != 0


@triton.jit
def stale_words(w, mask, tag):
    """How many words of ``w`` (int64 tile) under ``mask`` do not carry ``tag``: int32 scalar."""
    return tl.sum(tl.sum(tl.where(mask & ((w >> 32) != tag), 1, 0), axis=1), axis=0)


@triton.jit
def unpack_tagged(w, DT: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    """int64 words [ROWS, COLS // 2] -> their values as DT [ROWS, COLS] (the tags dropped)."""
    v = (w & 0xFFFFFFFF).to(tl.int32)
    lo = v.to(tl.int16).to(DT, bitcast=True)
    hi = (v >> 16).to(tl.int16).to(DT, bitcast=True)
    return tl.reshape(tl.join(lo, hi), [ROWS, COLS])


@triton.jit
def tag_base(seq_ptr, t_start):
    """This launch's ``base``: step s's tag is ``(base + s + 1) & TAG_MASK``."""
    seq = tl.atomic_add(seq_ptr, 0, sem="acquire", scope="gpu")  # a load: nobody left this launch yet
    return seq - t_start


@triton.jit
def leave(seq_ptr, n_programs, steps):
    """Called once by every program at its end: the last to leave adds the tags this launch used to ``seq``."""
    gone = tl.atomic_add(seq_ptr + 1, 1, sem="acq_rel", scope="gpu") + 1
    if gone % n_programs == 0:
        tl.atomic_add(seq_ptr, steps, sem="release", scope="gpu")


@triton.jit
def flag_arrive(flag_ptr, tag):
    """After this program's stores of a step: its flag := ``tag`` (release: every thread's stores come first)."""
    tl.debug_barrier()
    tl.atomic_xchg(flag_ptr, tag, sem="release", scope="gpu")


@triton.jit
def flags_wait(group_ptr, n, want, N_PAD: tl.constexpr, SPIN: tl.constexpr, FENCE: tl.constexpr):
    """Poll the ``n`` flags at ``group_ptr`` until all are at least ``want`` (volatile loads of a few bytes), then an
    acquire fence. Returns ``(zero, late)``: an int32 [1, 1] zero the compiler cannot see through (added to the
    addresses of the data loads that follow, it keeps them after the fence; FENCE: compiled kernels, the interpreter
    needs none) and how many flags were still behind when the reader stopped (0 unless it gave up: see
    :func:`poison_if`)."""
    k = tl.arange(0, N_PAD)
    ok = k < n
    late = tl.sum(tl.where(ok & (tl.load(group_ptr + k, mask=ok, other=0, volatile=True) < want), 1, 0))
    tries = 1
    while (late > 0) & (tries < SPIN):
        late = tl.sum(tl.where(ok & (tl.load(group_ptr + k, mask=ok, other=0, volatile=True) < want), 1, 0))
        tries += 1
    zero = tl.zeros([1, 1], tl.int32) + late * 0
    if FENCE:
        zero = tl.inline_asm_elementwise("fence.acq_rel.gpu;\n\tmov.b32 $0, 0;", "=r,r", [zero], dtype=tl.int32,
                                         is_pure=False, pack=1)  # fmt: skip
    return zero, late


@triton.jit
def poison_if(x, late, SPIN: tl.constexpr):
    """``x``, or NaN where the reader gave up with ``late`` > 0 words or flags behind. Only where the reader can give
    up (SPIN == 1, the interpreter, where the previous launch already wrote everything): a tag or flag that does not
    line up then fails the tests against float64 instead of passing on data that happens to be there."""
    if SPIN == 1:
        return tl.where(late > 0, float("nan"), x)
    else:
        return x


def tagged_state(device: torch.device, programs: int, words: int, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(seq [2] int64, words [words] int64)`` for launches of ``programs`` programs on ``device``'s current stream
    exchanging ``words`` tagged words (``kind`` names the exchange, e.g. 'forward'): made zero once and kept, so the
    tags grow across launches and graph replays (see the module)."""
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be a torch.device, got {device!r}.")
    programs, words = runtime.positive_int("programs", programs), runtime.positive_int("words", words)
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"kind must name the exchange (a non-empty str such as 'forward'), got {kind!r}.")
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device, stream, programs, words, kind)
    state = _STATES.get(key)
    if state is None:
        state = _STATES[key] = (
            torch.zeros(2, dtype=torch.int64, device=device),
            torch.zeros(words, dtype=torch.int64, device=device),
        )
    return state
