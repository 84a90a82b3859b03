"""Graders for lesson 2 (GEMM shapes and hardware co-design). Each runs the learner's function on fresh random cases
against :mod:`gpulab.codesign` and raises AssertionError saying what differs; on success it prints one line."""

from __future__ import annotations

import math
import numbers
import random

from gpulab import codesign, hardware, runtime
from gpulab.course.grading import fresh_rng, grader, require_callable

_GPUS = ("H100", "A100", "V100", "RTX 4090", "L4", "T4")


def _number(value) -> bool:
    """A real number a learner's function may return (numpy numbers too; not a bool, a string or None)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _indices(got) -> list[int] | None:
    """``got`` as a list of ints when it is a sequence of integers (a list, tuple or numpy array); else None."""
    if isinstance(got, (str, bytes)) or not hasattr(got, "__iter__"):
        return None
    got = list(got)
    if not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in got):
        return None
    return [int(i) for i in got]


def _size(rng: random.Random) -> int:
    """A GEMM size: often a multiple of 64, sometimes just off one (the interesting cases), sometimes small."""
    kind = rng.random()
    if kind < 0.4:
        return 64 * rng.randint(1, 128)
    if kind < 0.8:
        return max(1, 64 * rng.randint(1, 128) + rng.choice((-8, -4, -1, 1, 4, 8, 24)))
    return rng.randint(1, 300)


@grader("tile and wave quantization")
def grade_quantization(quantization, cases: int = 300):
    """``quantization(m, n, tile, sm_count, batch=1) -> (tiles, waves, tile_efficiency, wave_efficiency)``."""
    require_callable("quantization", quantization)
    cases = runtime.positive_int("cases", cases)
    rng, seed = fresh_rng()
    fixed = [
        (128 * 12, 128 * 11, (128, 128), 132, 1),  # exactly one wave
        (128 * 12, 128 * 11 + 8, (128, 128), 132, 1),  # one more column of tiles: a second, nearly empty wave
        (200, 300, (128, 128), 132, 1),  # partial tiles in both directions
        (1, 1, (64, 64), 108, 1),
        (2048, 2048, (128, 256), 132, 256),  # batched
    ]
    tiles_choice = ((128, 128), (128, 256), (256, 128), (64, 64), (16, 64))
    randoms = [
        (
            _size(rng),
            _size(rng),
            rng.choice(tiles_choice),
            rng.choice((40, 58, 108, 114, 132)),
            rng.choice((1, 1, 3, 64)),
        )
        for _ in range(cases)
    ]
    for m, n, tile, sms, batch in fixed + randoms:
        tiles, e_tile = codesign.tile_quantization(m, n, tile, batch)
        waves, e_wave = codesign.wave_quantization(tiles, sms)
        got = quantization(m, n, tile, sms, batch)
        where = f"m={m}, n={n}, tile={tile}, sm_count={sms}, batch={batch} (seed {seed})"
        if not isinstance(got, (tuple, list)) or len(got) != 4:
            raise AssertionError(
                f"{where}: return a tuple (tiles, waves, tile_efficiency, wave_efficiency), got {got!r}."
            )
        g_tiles, g_waves, g_tile, g_wave = got
        if not all(_number(v) for v in got):
            raise AssertionError(
                f"{where}: return four numbers (tiles, waves, tile_efficiency, wave_efficiency), got {got!r}."
            )
        if g_tiles != tiles:
            raise AssertionError(
                f"{where}: tiles = {g_tiles!r}, expected {tiles} = batch x ceil(m/tile_m) x ceil(n/tile_n). "
                "A partly filled tile still counts as a whole tile."
            )
        if g_waves != waves:
            raise AssertionError(f"{where}: waves = {g_waves!r}, expected {waves} = ceil(tiles / sm_count).")
        if not math.isclose(g_tile, e_tile, rel_tol=1e-9):
            raise AssertionError(
                f"{where}: tile efficiency {g_tile!r}, expected {e_tile:.6g}: the useful area m*n over the area of "
                "the tiles, ceil(m/tile_m)*tile_m x ceil(n/tile_n)*tile_n."
            )
        if not math.isclose(g_wave, e_wave, rel_tol=1e-9):
            raise AssertionError(
                f"{where}: wave efficiency {g_wave!r}, expected {e_wave:.6g} = tiles / (waves * sm_count)."
            )
    return f"{len(fixed) + len(randoms)} cases"


@grader("GEMM time model")
def grade_predict_ms(predict_ms, cases: int = 300):
    """``predict_ms(m, n, k, dtype, gpu, tile, batch=1)`` must equal ``codesign.gemm_time(...).ms`` (rel. 1e-6)."""
    require_callable("predict_ms", predict_ms)
    cases = runtime.positive_int("cases", cases)
    rng, seed = fresh_rng()
    fixed = [
        (8192, 8192, 4096, "bfloat16", "H100", (128, 256), 1),
        (8192, 8192, 4095, "bfloat16", "H100", (128, 256), 1),  # misaligned K
        (8192, 8188, 4096, "float16", "H100", (128, 128), 1),  # misaligned N
        (8192, 8192, 4104, "bfloat16", "H100", (128, 128), 1),  # partial last K-step
        (1536, 1416, 4096, "bfloat16", "H100", (128, 128), 1),  # one tile too many: two waves
        (2048, 2048, 64, "bfloat16", "H100", (128, 128), 256),  # memory-bound
        (4096, 4096, 4094, "float32", "A100", (128, 128), 1),  # fp32: misaligned at 4 elements
    ]
    randoms = []
    for _ in range(cases):
        gpu = rng.choice(_GPUS)
        dtypes = ("bfloat16", "float16", "float32") if hardware.spec(gpu).has_bf16 else ("float16", "float32")
        tile = rng.choice(((128, 128), (128, 256), (256, 128), (64, 64)))
        randoms.append((_size(rng), _size(rng), _size(rng), rng.choice(dtypes), gpu, tile, rng.choice((1, 1, 8))))
    for m, n, k, dtype, gpu, tile, batch in fixed + randoms:
        ref = codesign.gemm_time(m, n, k, dtype=dtype, gpu=gpu, batch=batch, tile=tile)
        got = predict_ms(m, n, k, dtype, gpu, tile, batch)
        if not _number(got) or not math.isfinite(got) or not math.isclose(got, ref.ms, rel_tol=1e-6):
            raise AssertionError(
                f"predict_ms({m}, {n}, {k}, {dtype!r}, {gpu!r}, {tile}, batch={batch}) returned {got!r}, expected "
                f"{ref.ms:.6g} ms (seed {seed}). The model's view of this shape:\n{ref.explain()}"
            )
    return f"{len(fixed) + len(randoms)} shapes on {len(_GPUS)} GPUs"


@grader("rank shapes by predicted throughput")
def grade_rank(rank_by_throughput, cases: int = 40):
    """``rank_by_throughput(shapes, gpu) -> indices``, highest predicted TFLOP/s first (cuBLAS model, tile=None)."""
    require_callable("rank_by_throughput", rank_by_throughput)
    cases = runtime.positive_int("cases", cases)
    rng, seed = fresh_rng()
    for _ in range(cases):
        gpu = rng.choice(("H100", "A100", "L4"))
        shapes = [(_size(rng), _size(rng), _size(rng)) for _ in range(rng.randint(2, 7))]
        rate = [codesign.gemm_time(m, n, k, gpu=gpu, tile=None).tflops for m, n, k in shapes]
        got = rank_by_throughput(shapes, gpu)
        indices = _indices(got)
        if indices is None:
            raise AssertionError(
                f"rank_by_throughput({shapes}, {gpu!r}) returned {got!r}: return a list of indices (integers) "
                f"(seed {seed})."
            )
        got = indices
        if sorted(got) != list(range(len(shapes))):
            raise AssertionError(
                f"rank_by_throughput({shapes}, {gpu!r}) returned {got!r}: return every index 0..{len(shapes) - 1} "
                f"once, fastest first (seed {seed})."
            )
        for a, b in zip(got, list(got)[1:]):
            if rate[b] > rate[a] * (1 + 1e-9):
                raise AssertionError(
                    f"{gpu}: shape {shapes[b]} ({rate[b]:.0f} TFLOP/s predicted) is ranked after {shapes[a]} "
                    f"({rate[a]:.0f} TFLOP/s). Rank by codesign.gemm_time(m, n, k, gpu=gpu, tile=None).tflops, "
                    f"highest first (seed {seed})."
                )
    return f"{cases} lists of shapes"


def _flagged_config(rng: random.Random) -> codesign.TransformerConfig:
    """A transformer config near a compliant one, with some rules broken (always the vocabulary)."""
    t = rng.choice((1, 1, 2, 4, 8))
    head_dim, a0 = rng.choice((64, 128)), t * rng.choice((2, 4, 6, 8, 12, 16))
    h = head_dim * a0
    heads = a0
    if rng.random() < 0.7:  # a head count whose head dimension is not a multiple of 64, within 2x of a compliant one
        options = [a for a in range(max(1, a0 // 2 + 1), 2 * a0) if a != a0 and h % a == 0 and ((h // a) % 64 or a % t)]
        heads = rng.choice(options) if options else a0
    if rng.random() < 0.3:  # a hidden size just off a multiple of 64*t (the nearest multiple is the original)
        h += rng.choice((-24, -8, 8, 24))
    vocab = 64 * rng.randint(300, 2000) + rng.randint(1, 63)
    return codesign.TransformerConfig(
        name="flagged",
        vocab=vocab,
        hidden=h,
        heads=heads,
        seq=rng.choice((1000, 1024, 2000, 2048, 4096)),
        microbatch=rng.randint(1, 16),
        tensor_parallel=t,
    )


@grader("fix a flagged config")
def grade_fix_config(fix_config, cases: int = 12):
    """``fix_config(config) -> config`` that passes every rule of ``codesign.check_config`` and stays close:
    seq and tensor_parallel unchanged, vocabulary padded by less than 64*t, hidden moved by at most 64*t, heads
    within a factor of two, microbatch not smaller."""
    require_callable("fix_config", fix_config)
    cases = runtime.positive_int("cases", cases)
    rng, seed = fresh_rng()
    for _ in range(cases):
        cfg = _flagged_config(rng)
        fixed = fix_config(cfg)
        where = f"for {cfg} (seed {seed})"
        if not isinstance(fixed, codesign.TransformerConfig):
            raise AssertionError(f"return a codesign.TransformerConfig (dataclasses.replace(config, ...)) {where}.")
        failed = [c for c in codesign.check_config(fixed) if not c.passed]
        if failed:
            raise AssertionError(
                f"your fix {fixed} still fails {len(failed)} rule(s) {where}:\n" + codesign.format_checks(failed)
            )
        t = cfg.tensor_parallel
        problems = []
        if (fixed.seq, fixed.tensor_parallel) != (cfg.seq, t):
            problems.append("keep seq and tensor_parallel: the data and the machine decide them")
        if not cfg.vocab <= fixed.vocab < cfg.vocab + 64 * t:
            problems.append(f"pad the vocabulary up by less than {64 * t} (tokens cannot be removed)")
        if abs(fixed.hidden - cfg.hidden) > 64 * t:
            problems.append(f"move hidden by at most 64*t = {64 * t}")
        if not cfg.heads / 2 <= fixed.heads <= 2 * cfg.heads:
            problems.append("keep heads within a factor of two")
        if fixed.microbatch < cfg.microbatch:
            problems.append("do not shrink the microbatch")
        if problems:
            raise AssertionError(
                f"your fix {fixed} passes the rules but changes too much {where}: " + "; ".join(problems)
            )
    return f"{cases} flagged configs fixed"
