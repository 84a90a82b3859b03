"""Lesson 2, the rules: model configurations checked against Anthony et al.'s sizing rules.

Anthony et al., "The Case for Co-Designing Model Architectures with Hardware" (2024, arXiv:2401.14489): almost all of
a transformer's (and an LSTM's) FLOPs are matrix products, and how fast a matrix product runs depends on its shape.

What you will learn here:
- which GEMMs one layer of a transformer or a multi-head LSTM runs (:func:`model_gemms`) and what the model of
  :mod:`gpulab.codesign.gemm_model` predicts for them (:func:`layer_time`);
- the paper's rules (:func:`check_config`): vocabulary divisible by 64; ``b*s``, ``h/a`` and ``h/t`` divisible by a
  large power of two (64 here); ``(b*a)/t`` an integer; the microbatch as large as memory allows (here: until
  doubling it would buy less than 5% by the model), with b microbatch, s sequence length, h hidden size, a attention
  heads, t tensor-parallel size;
- to find the nearest compliant sizes (:func:`heads_options`, :func:`fix_config`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from gpulab import hardware, runtime
from gpulab.codesign.gemm_model import GemmPrediction, dtype_key, gemm_time

__all__ = [
    "TransformerConfig",
    "LSTMConfig",
    "RuleCheck",
    "KNOWN_CONFIGS",
    "MULTIPLE",
    "MICROBATCH_GAIN",
    "LSTM_STEP_TILE",
    "model_gemms",
    "layer_time",
    "heads_options",
    "check_config",
    "fix_config",
    "format_checks",
]

_positive_int = runtime.positive_int

# ----------------------------------------------------------------------------------------------------------------
# Model configurations and the paper's rules


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """A GPT-style transformer: vocabulary, hidden size h, heads a, sequence s, microbatch b, tensor-parallel t."""

    name: str
    vocab: int
    hidden: int
    heads: int
    seq: int = 2048
    microbatch: int = 1
    tensor_parallel: int = 1
    layers: int | None = None
    ffn: int | None = None  # MLP width; 4h when None
    source: str = ""


@dataclasses.dataclass(frozen=True)
class LSTMConfig:
    """A multi-head LSTM (block-diagonal recurrence, one block per head, as in FlashRNN / sLSTM)."""

    name: str
    hidden: int
    heads: int
    batch: int
    seq: int
    vocab: int | None = None
    tensor_parallel: int = 1
    layers: int | None = None
    source: str = ""


@dataclasses.dataclass(frozen=True)
class RuleCheck:
    """One rule applied to one config: whether it holds, why it matters, and compliant alternatives (nearest first)."""

    rule: str
    passed: bool
    value: object
    why: str
    nearest: tuple = ()


KNOWN_CONFIGS = {
    "GPT-2 small": TransformerConfig(
        "GPT-2 small",
        vocab=50257,
        hidden=768,
        heads=12,
        seq=1024,
        microbatch=8,
        layers=12,
        source="Radford et al. 2019 / Hugging Face gpt2 config (vocab 50257, n_embd 768, n_head 12, n_ctx 1024); "
        "the per-GPU microbatch was not published: 8 is assumed",
    ),
    "Pythia-2.8B": TransformerConfig(
        "Pythia-2.8B",
        vocab=50304,
        hidden=2560,
        heads=32,
        seq=2048,
        microbatch=16,
        layers=32,
        source="EleutherAI/pythia models/2.8B/pythia-2.8b.yml (hidden 2560, 32 heads, 32 layers, seq 2048, "
        "micro-batch 16, model-parallel 1); vocabulary padded to 50304",
    ),
    "GPT-NeoX-20B": TransformerConfig(
        "GPT-NeoX-20B",
        vocab=50432,
        hidden=6144,
        heads=64,
        seq=2048,
        microbatch=4,
        tensor_parallel=2,
        layers=44,
        source="EleutherAI/gpt-neox configs/20B.yml (hidden 6144, 64 heads, 44 layers, seq 2048, micro-batch 4, "
        "model-parallel 2); vocabulary padded to 50432",
    ),
    "multi-head LSTM (example)": LSTMConfig(
        "multi-head LSTM (example)",
        hidden=768,
        heads=4,
        batch=12,
        seq=1000,
        vocab=50257,
        layers=12,
        source="illustrative (not a published model): GPT-2's tokenizer, 4 heads of 192",
    ),
}

MULTIPLE = 64
"""The power of two the rules ask for: 64 elements = 128 bytes of bf16, one K-step (:data:`K_TILE_BYTES`)."""

MICROBATCH_GAIN = 0.05
"""The microbatch rule passes when doubling the microbatch would speed up the layer's GEMMs per token by < 5%."""

LSTM_STEP_TILE = (16, 64)
"""Tile of the recurrent step's GEMM in the model: 16 batch rows (the M of an ``mma.m16n8k16``) x 64 gate columns."""


def _pow2_factor(x: int) -> int:
    return x & -x if x > 0 else 0


def _nearest_multiple(x: int, q: int) -> int:
    """The multiple of q nearest to x (at least q; ties round up)."""
    lo = (x // q) * q
    hi = lo + q
    return max(q, hi if (x - lo) >= (hi - x) or lo == 0 else lo)


def _round_up(x: int, q: int) -> int:
    return math.ceil(x / q) * q


def _divisors(x: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(x) + 1) if x % d == 0]
    return sorted(set(small + [x // d for d in small]))


def _validate_config(config):
    if isinstance(config, TransformerConfig):
        names = ("vocab", "hidden", "heads", "seq", "microbatch", "tensor_parallel")
        optional = ("layers", "ffn")
    elif isinstance(config, LSTMConfig):
        names = ("hidden", "heads", "batch", "seq", "tensor_parallel")
        optional = ("vocab", "layers")
    else:
        raise TypeError(
            f"config must be a TransformerConfig or LSTMConfig, got {type(config).__name__}; build one with "
            "gpulab.codesign.TransformerConfig(name, vocab=..., hidden=..., heads=...)."
        )
    if not isinstance(config.name, str):
        raise TypeError(f"config.name must be a str, got {type(config.name).__name__}.")
    for name in names:
        _positive_int(f"config.{name}", getattr(config, name))
    for name in optional:
        if getattr(config, name) is not None:
            _positive_int(f"config.{name}", getattr(config, name))


def model_gemms(config) -> list[dict]:
    """The GEMMs of one layer on one GPU (tensor parallelism splits heads and MLP columns over t GPUs).

    Each entry: ``name, m, n, k, batch, count`` (``count`` times per layer and sequence: the LSTM's recurrent step
    runs once per time step). Sizes that the config makes fractional are rounded down (at least 1): the checker
    reports them; the model just needs a shape.
    """
    _validate_config(config)
    t = config.tensor_parallel
    h = config.hidden
    d = lambda x, y: max(1, x // y)  # sizes of a (possibly non-compliant) config
    if isinstance(config, TransformerConfig):
        b, s, a = config.microbatch, config.seq, config.heads
        ffn = config.ffn or 4 * h
        hd = d(h, a)
        return [
            dict(name="QKV projection", m=b * s, n=d(3 * h, t), k=h, batch=1, count=1),
            dict(name="attention scores Q K^T", m=s, n=s, k=hd, batch=d(b * a, t), count=1),
            dict(name="attention over values A V", m=s, n=hd, k=s, batch=d(b * a, t), count=1),
            dict(name="attention output projection", m=b * s, n=h, k=d(h, t), batch=1, count=1),
            dict(name="MLP up", m=b * s, n=d(ffn, t), k=h, batch=1, count=1),
            dict(name="MLP down", m=b * s, n=h, k=d(ffn, t), batch=1, count=1),
        ]
    b, s, heads = config.batch, config.seq, config.heads
    hd = d(h, heads)
    return [
        dict(name="input projection (4 gates)", m=b * s, n=d(4 * h, t), k=h, batch=1, count=1),
        dict(name="recurrent step (per time step)", m=b, n=4 * hd, k=hd, batch=d(heads, t), count=s),
    ]


def layer_time(config, gpu="H100", dtype="bfloat16") -> tuple[float, list[tuple[dict, GemmPrediction]]]:
    """Predicted ms of one layer's GEMMs (:func:`model_gemms`, cuBLAS-like tiles; the LSTM step with its tile)."""
    total, parts = 0.0, []
    for g in model_gemms(config):
        tile = LSTM_STEP_TILE if g["name"].startswith("recurrent") else None
        p = gemm_time(g["m"], g["n"], g["k"], dtype=dtype, gpu=gpu, batch=g["batch"], tile=tile)
        total += g["count"] * p.ms
        parts.append((g, p))
    return total, parts


def _tokens(config) -> int:
    return (config.microbatch if isinstance(config, TransformerConfig) else config.batch) * config.seq


def _microbatch_gain(config, gpu, dtype) -> float:
    """How much faster per token the layer's GEMMs would run with twice the microbatch (0.1 = 10%)."""
    field = "microbatch" if isinstance(config, TransformerConfig) else "batch"
    doubled = dataclasses.replace(config, **{field: 2 * getattr(config, field)})
    per_token = layer_time(config, gpu, dtype)[0] / _tokens(config)
    per_token_2 = layer_time(doubled, gpu, dtype)[0] / _tokens(doubled)
    return 1 - per_token_2 / per_token


def _rule_multiple(rule, value, why, nearest, multiple=MULTIPLE) -> RuleCheck:
    """A 'value divisible by multiple' rule; ``value`` may be a fraction (then the rule fails)."""
    if isinstance(value, int):
        ok = value % multiple == 0
        p2 = _pow2_factor(value)
        text = f"{value} = {p2} x {value // p2}: {why}"
    else:
        ok = False
        text = f"{value} is not an integer: {why}"
    return RuleCheck(rule, ok, value, text, () if ok else tuple(nearest))


def _ratio(x: int, y: int):
    """x / y as an int when it divides, else as a float rounded to 3 places (which fails every divisibility rule)."""
    return x // y if x % y == 0 else round(x / y, 3)


def heads_options(hidden: int, heads: int, t: int = 1, multiple: int = MULTIPLE) -> list[int]:
    """Head counts a' that divide ``hidden`` with hidden/a' a multiple of ``multiple`` (64) and a' a multiple of the
    tensor-parallel size ``t``, nearest to ``heads`` first. Every argument is a positive integer."""
    hidden, heads, t = _positive_int("hidden", hidden), _positive_int("heads", heads), _positive_int("t", t)
    multiple = _positive_int("multiple", multiple)
    opts = [a for a in _divisors(hidden) if (hidden // a) % multiple == 0 and a % t == 0]
    return sorted(opts, key=lambda a: (abs(a - heads), -a))


def _step_tiles_per_row_block(config) -> int:
    """Tiles of one 16-row block of the LSTM's recurrent-step GEMM: (heads/t) x ceil(4 * head_dim / 64)."""
    hd = max(1, config.hidden // config.heads)
    return max(1, config.heads // config.tensor_parallel) * math.ceil(4 * hd / LSTM_STEP_TILE[1])


def check_config(config, gpu="H100", dtype="bfloat16") -> list[RuleCheck]:
    """Apply Anthony et al.'s sizing rules to ``config`` (:class:`TransformerConfig` or :class:`LSTMConfig`).

    Returns one :class:`RuleCheck` per rule, failed or passed, each failure with compliant alternatives, nearest
    first. ``gpu`` and ``dtype`` feed the model behind the microbatch rule and the LSTM's SM-filling rule.
    """
    _validate_config(config)
    spec = hardware.spec(gpu)
    dtype_key(dtype, spec)
    is_tf = isinstance(config, TransformerConfig)
    t, h, s, heads = config.tensor_parallel, config.hidden, config.seq, config.heads
    b, bname = (config.microbatch, "microbatch") if is_tf else (config.batch, "batch")
    checks = []

    if config.vocab is not None:
        checks.append(
            _rule_multiple(
                "vocab divisible by 64",
                config.vocab,
                "the vocabulary is N of the logits GEMM; pad it (the padding rows are never predicted)",
                [{"vocab": _round_up(config.vocab, math.lcm(MULTIPLE, t))}],
            )
        )

    step = MULTIPLE // math.gcd(s, MULTIPLE)  # b*s is a multiple of 64 iff b is a multiple of this
    b_opts = sorted({_nearest_multiple(b, step), _round_up(b, step)}, key=lambda x: (abs(x - b), -x))
    checks.append(
        _rule_multiple(
            "b*s divisible by 64",
            b * s,
            "b*s is M of every projection and MLP GEMM; a ragged last row of tiles wastes work",
            [{bname: x} for x in b_opts] + [{"seq": _nearest_multiple(s, MULTIPLE // math.gcd(b, MULTIPLE))}],
        )
    )

    checks.append(
        _rule_multiple(
            "h/a divisible by 64" if is_tf else "head dim h/heads divisible by 64",
            _ratio(h, heads),
            "the head dimension is K of Q K^T and N of A V"
            if is_tf
            else "the head dimension is K of the recurrent GEMM (and a quarter of its N)",
            [{"heads": a} for a in heads_options(h, heads, t)[:2]]
            + [{"hidden": _nearest_multiple(h, MULTIPLE * math.lcm(heads, t))}],
        )
    )

    if is_tf or t > 1:
        smaller_t = [x for x in (t >> i for i in range(t.bit_length())) if h % x == 0 and (h // x) % MULTIPLE == 0]
        checks.append(
            _rule_multiple(
                "h/t divisible by 64",
                _ratio(h, t),
                "each GPU holds h/t of the columns: N or K of its share of the projections",
                [{"hidden": _nearest_multiple(h, MULTIPLE * t)}] + [{"tensor_parallel": x} for x in smaller_t[:1]],
            )
        )

    if is_tf:
        value = _ratio(b * heads, t)
        ok = isinstance(value, int)
        b_fix = next(x for x in itertools.count(b) if (x * heads) % t == 0)
        a_fix = [{"heads": a} for a in heads_options(h, heads, t)[:1]]
        checks.append(
            RuleCheck(
                "(b*a)/t integer",
                ok,
                value,
                f"b*a = {b * heads} attention GEMMs shared by t = {t} GPUs"
                + ("" if ok else ": some GPUs would get a fraction of a head"),
                () if ok else tuple([{"microbatch": b_fix}] + a_fix),
            )
        )
    else:
        ok = heads % t == 0
        checks.append(
            RuleCheck(
                "heads divisible by t",
                ok,
                _ratio(heads, t),
                f"{heads} heads over t = {t} GPUs" + ("" if ok else ": each GPU must own whole heads"),
                () if ok else ({"heads": _round_up(heads, t)},),
            )
        )
        rows = LSTM_STEP_TILE[0]
        checks.append(
            _rule_multiple(
                "batch divisible by 16",
                b,
                "the batch is M of the recurrent GEMM: every time step pays for whole 16-row tensor-core tiles",
                [{"batch": _round_up(b, rows)}],
                multiple=rows,
            )
        )
        per_block = _step_tiles_per_row_block(config)
        tiles = per_block * math.ceil(b / rows)
        ok = tiles >= spec.sm_count
        checks.append(
            RuleCheck(
                "recurrent step fills the SMs",
                ok,
                tiles,
                f"each time step's GEMM has {tiles} tiles of {rows}x{LSTM_STEP_TILE[1]} for {spec.sm_count} SMs"
                + ("" if ok else f": {spec.sm_count - tiles} SMs idle at every step"),
                () if ok else ({"batch": rows * math.ceil(spec.sm_count / per_block)},),
            )
        )

    gain = _microbatch_gain(config, spec, dtype)
    ok = gain < MICROBATCH_GAIN
    better = b
    while _microbatch_gain(dataclasses.replace(config, **{bname: better}), spec, dtype) >= MICROBATCH_GAIN:
        better *= 2
        if better >= 1 << 16:
            break
    checks.append(
        RuleCheck(
            f"{bname} as large as memory allows",
            ok,
            b,
            f"doubling {bname} {b} -> {2 * b} would make the layer's GEMMs {gain:.1%} faster per token (model); "
            f"the rule asks for < {MICROBATCH_GAIN:.0%}, memory permitting",
            () if ok else ({bname: better},),
        )
    )
    return checks


def fix_config(config, gpu="H100", dtype="bfloat16"):
    """The nearest config that passes every rule, changing as little as possible (a new config; seq and t kept).

    Vocabulary padded up to a multiple of 64; hidden rounded to a multiple of 64*t (transformer) or 64*heads (LSTM);
    transformer heads moved to a count whose head dimension is a multiple of 64 (within a factor of two, the one the
    model predicts fastest); microbatch (batch) raised
    until b*s is a multiple of 64 (and the LSTM batch a multiple of 16 that fills the SMs), then doubled until
    doubling again would pay less than 5%.
    """
    _validate_config(config)
    spec = hardware.spec(gpu)
    dtype_key(dtype, spec)
    t, h, s = config.tensor_parallel, config.hidden, config.seq
    changes = {}
    if config.vocab is not None:
        changes["vocab"] = _round_up(config.vocab, math.lcm(MULTIPLE, t))
    if isinstance(config, TransformerConfig):
        h = h if h % (MULTIPLE * t) == 0 else _nearest_multiple(h, MULTIPLE * t)
        a = config.heads
        if h % a or (h // a) % MULTIPLE or a % t:
            # Compliant head counts (a = t always is: h/t is a multiple of 64) within a factor of two of the original;
            # of those, the one the model predicts fastest (unfused attention moves b*a*s^2 scores: fewer, wider
            # heads move less), ties to the nearest.
            opts = heads_options(h, a, t)
            near = [x for x in opts if a / 2 <= x <= 2 * a] or opts[:1]
            trial = lambda x: dataclasses.replace(config, hidden=h, heads=x)
            a = min(near, key=lambda x: (round(layer_time(trial(x), gpu, dtype)[0], 9), abs(x - a)))
        changes.update(hidden=h, heads=a, microbatch=_round_up(config.microbatch, MULTIPLE // math.gcd(s, MULTIPLE)))
        field = "microbatch"
    else:
        heads = _round_up(config.heads, t)
        h = h if h % (MULTIPLE * heads) == 0 else _nearest_multiple(h, MULTIPLE * heads)
        step = math.lcm(LSTM_STEP_TILE[0], MULTIPLE // math.gcd(s, MULTIPLE))
        per_block = _step_tiles_per_row_block(dataclasses.replace(config, hidden=h, heads=heads))
        fill = LSTM_STEP_TILE[0] * math.ceil(spec.sm_count / per_block)
        changes.update(hidden=h, heads=heads, batch=_round_up(max(config.batch, fill), step))
        field = "batch"
    fixed = dataclasses.replace(config, **changes)
    while _microbatch_gain(fixed, spec, dtype) >= MICROBATCH_GAIN and getattr(fixed, field) < 1 << 16:
        fixed = dataclasses.replace(fixed, **{field: 2 * getattr(fixed, field)})
    return dataclasses.replace(fixed, name=f"{config.name} (fixed)")


def format_checks(checks, title=None) -> str:
    """The rule checks (a list of :class:`RuleCheck`, as :func:`check_config` returns) as a text table: rule,
    pass/FAIL, value, nearest compliant alternatives, why; ``title`` (a str or None) above them."""
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a str or None, got {type(title).__name__}.")
    if isinstance(checks, RuleCheck):
        checks = [checks]
    try:
        checks = list(checks)
    except TypeError:
        raise TypeError(
            f"checks must be a list of RuleCheck (from check_config), got {type(checks).__name__}."
        ) from None
    for i, c in enumerate(checks):
        if not isinstance(c, RuleCheck):
            raise TypeError(f"checks[{i}] must be a RuleCheck (from check_config), got {type(c).__name__}.")
    lines = [title] if title else []
    for c in checks:
        alt = "; ".join(", ".join(f"{k}={v}" for k, v in d.items()) for d in c.nearest)
        mark = "pass" if c.passed else "FAIL"
        lines.append(f"  {mark}  {c.rule:34s} {str(c.value):>8s}" + (f"   -> try {alt}" if alt else ""))
        lines.append(f"        {c.why}")
    return "\n".join(lines)
