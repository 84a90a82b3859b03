"""Lesson 2's graders (gpulab.course.grading_codesign): they pass the reference, fail stubs and typical mistakes,
and refuse what is not a learner's function."""

import dataclasses

import numpy as np
import pytest

from gpulab import codesign
from gpulab.course import grading_codesign as g


def _stub(*args, **kwargs):
    raise NotImplementedError()


@pytest.fixture
def quantization():
    """The reference answer to the quantization exercise: ``(tiles, waves, tile_efficiency, wave_efficiency)``."""

    def answer(m, n, tile, sm_count, batch=1):
        tiles, e_tile = codesign.tile_quantization(m, n, tile, batch)
        waves, e_wave = codesign.wave_quantization(tiles, sm_count)
        return tiles, waves, e_tile, e_wave

    return answer


def test_graders_pass_the_reference_and_fail_stubs(capsys, quantization):
    g.grade_quantization(quantization)
    g.grade_predict_ms(lambda m, n, k, d, gpu, tile, batch=1: codesign.gemm_time(m, n, k, d, gpu, batch, tile).ms)
    g.grade_rank(
        lambda shapes, gpu: sorted(
            range(len(shapes)), key=lambda i: -codesign.gemm_time(*shapes[i], gpu=gpu, tile=None).tflops
        )
    )
    g.grade_fix_config(codesign.fix_config)
    assert capsys.readouterr().out.count("PASSED") == 4
    for grade in (g.grade_quantization, g.grade_predict_ms, g.grade_rank, g.grade_fix_config):
        with pytest.raises(AssertionError, match="not implemented yet"):
            grade(_stub)


def test_graders_catch_typical_mistakes(quantization):
    def floor_waves(m, n, tile, sm_count, batch=1):
        tiles, waves, e_tile, _ = quantization(m, n, tile, sm_count, batch)
        waves = max(1, tiles // sm_count)  # floor instead of ceil
        return tiles, waves, e_tile, tiles / (waves * sm_count)

    with pytest.raises(AssertionError, match="ceil"):
        g.grade_quantization(floor_waves)

    def no_alignment(m, n, k, dtype, gpu, tile, batch=1):
        p = codesign.gemm_time(m, n, k, dtype, gpu, batch, tile)
        return max(p.compute_ms * p.alignment_efficiency, p.memory_ms)

    with pytest.raises(AssertionError, match="misaligned"):
        g.grade_predict_ms(no_alignment)

    def by_time(shapes, gpu):
        return sorted(range(len(shapes)), key=lambda i: codesign.gemm_time(*shapes[i], gpu=gpu, tile=None).ms)

    with pytest.raises(AssertionError, match="ranked after"):
        g.grade_rank(by_time, cases=200)

    def vocab_only(cfg):
        return dataclasses.replace(cfg, vocab=-(-cfg.vocab // 64) * 64)

    with pytest.raises(AssertionError, match="still fails"):
        g.grade_fix_config(vocab_only, cases=50)

    def too_big(cfg):
        fixed = codesign.fix_config(cfg)
        return dataclasses.replace(fixed, vocab=fixed.vocab + 64 * cfg.tensor_parallel)

    with pytest.raises(AssertionError, match="changes too much"):
        g.grade_fix_config(too_big)


def test_grader_for_ranking_accepts_numpy_indices_and_refuses_floats():
    def numpy_rank(shapes, gpu):
        return np.argsort([-codesign.gemm_time(*s, gpu=gpu, tile=None).tflops for s in shapes], kind="stable")

    g.grade_rank(numpy_rank, cases=5)
    with pytest.raises(AssertionError, match="list of indices"):
        g.grade_rank(lambda shapes, gpu: [float(i) for i in range(len(shapes))], cases=1)


def test_graders_refuse_answers_that_are_not_numbers(quantization):
    def as_strings(m, n, tile, sm_count, batch=1):
        return tuple(str(v) for v in quantization(m, n, tile, sm_count, batch))

    with pytest.raises(AssertionError, match="four numbers"):
        g.grade_quantization(as_strings, cases=1)
    with pytest.raises(AssertionError, match="returned True"):
        g.grade_predict_ms(lambda *args: True, cases=1)


GRADERS = [g.grade_quantization, g.grade_predict_ms, g.grade_rank, g.grade_fix_config]


@pytest.mark.parametrize("grade", GRADERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    ("args", "error", "word"),
    [
        (("not a function",), TypeError, "must be your function"),
        ((None,), TypeError, "must be your function"),
        ((lambda *a: None, 0), ValueError, "cases"),
        ((lambda *a: None, -3), ValueError, "cases"),
        ((lambda *a: None, 2.0), TypeError, "cases"),
    ],
    ids=["string", "None", "cases-0", "cases-negative", "cases-float"],
)
def test_graders_refuse_bad_arguments(grade, args, error, word):
    with pytest.raises(error, match=word):
        grade(*args)
