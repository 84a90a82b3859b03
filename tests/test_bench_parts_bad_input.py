"""Bad input to the named benchmark parts (`python -m gpulab bench NN PART`) and their readers: a clear error naming
the argument, before anything runs."""

import pytest

from gpulab import lessons
from gpulab.attention.measure import hopper_bench, v3_bench
from gpulab.course import book_pages
from gpulab.rnn.fused.measure import split_bench, split_report, versions_bench

BAD = [
    ("successors unknown slug", lambda: lessons.successors("04_attn"), ValueError, "lesson_id='04_attn'"),
    ("successors not a str", lambda: lessons.successors(4), TypeError, "slug must be"),
    ("redirect unknown lesson", lambda: lessons.redirect("42", "hopper"), ValueError, "lesson_id='42'"),
    ("redirect lesson a list", lambda: lessons.redirect(["04"], "hopper"), TypeError, "lesson must be"),
    (
        "redirect_page old not a str",
        lambda: book_pages.redirect_page(4, lessons.successors("04_attention")),
        TypeError,
        "old must be",
    ),
    ("redirect_page new empty", lambda: book_pages.redirect_page("04_attention", []), TypeError, "new must be"),
    (
        "redirect_page suffix",
        lambda: book_pages.redirect_page("04_attention", lessons.LESSONS[4:5], suffix="x"),
        ValueError,
        "suffix must be",
    ),
    ("part_folder unknown part", lambda: lessons.part_folder("05", "nope"), ValueError, "part='nope'"),
    ("part_folder unknown lesson", lambda: lessons.part_folder("42", "hopper"), ValueError, "lesson_id='42'"),
    ("part_folder part not a str", lambda: lessons.part_folder("05", None), TypeError, "part must be a str"),
    ("rows_of not a list", lambda: split_report.rows_of({"kind": "env"}), TypeError, "records must be a list"),
    ("rows_of not dicts", lambda: split_report.rows_of(["env"]), TypeError, "records must be a list"),
    ("time_benchmarks empty", lambda: split_bench.time_benchmarks([]), TypeError, "head_dims"),
    ("time_benchmarks zero", lambda: split_bench.time_benchmarks([0]), ValueError, "head_dims"),
    ("time_benchmarks alternating", lambda: split_bench.time_benchmarks([16], "768"), TypeError, "alternating"),
    ("sweep_benchmark DH", lambda: split_bench.sweep_benchmark(-8), ValueError, "DH"),
    ("split head_dims", lambda: split_bench.split(head_dims=16), TypeError, "head_dims"),
    ("split sweep_dims", lambda: split_bench.split(sweep_dims=[0]), ValueError, "sweep_dims"),
    ("cross batches", lambda: split_bench.cross(batches=[1.5]), TypeError, "batches"),
    ("tiling_benchmark direction", lambda: split_bench.tiling_benchmark(4, 1, 16, "sideways"), ValueError, "direction"),
    ("tiling_benchmark B", lambda: split_bench.tiling_benchmark(0, 1, 16, "forward"), ValueError, "B"),
    ("training_benchmarks DH", lambda: split_bench.training_benchmarks(4, 1, "16"), TypeError, "DH"),
    ("candidates shapes", lambda: split_bench.candidates(shapes=(4, 1, 16)), TypeError, "shapes"),
    ("partials shapes", lambda: split_bench.partials(shapes=[(4, 0, 16)]), ValueError, "shapes"),
    ("versions forward_only", lambda: versions_bench.versions(forward_only="yes"), TypeError, "forward_only"),
    ("hopper run_sweep", lambda: hopper_bench.hopper(run_sweep="no"), TypeError, "run_sweep"),
    ("hopper candidates", lambda: hopper_bench.hopper(candidates=[(64, 64, 4, 3)]), TypeError, "candidates"),
    ("hopper problems", lambda: hopper_bench.hopper(problems="grid"), TypeError, "problems"),
    ("bench_v3 problems", lambda: v3_bench.bench_v3(problems=["grid"]), TypeError, "problems"),
    ("headline_v3 problems", lambda: v3_bench.headline_v3(problems="grid"), TypeError, "problems"),
    ("headline_v3 rounds", lambda: v3_bench.headline_v3(rounds=0), ValueError, "rounds"),
    ("check_v3 shapes", lambda: v3_bench.check_v3(shapes=(1, 2, 5, 7)), TypeError, "shapes"),
    ("check_v3 shapes zero", lambda: v3_bench.check_v3(shapes=[(1, 2, 0, 7)]), ValueError, "shapes"),
    ("race_v3 runs", lambda: v3_bench.race_v3(runs=0), ValueError, "runs"),
    ("race_v3 configs", lambda: v3_bench.race_v3(configs={(64, True): [dict(step=3)]}), TypeError, "configs"),
    (
        "race_v3 head dim",
        lambda: v3_bench.race_v3(configs={(96, True): [v3_bench.v3.V3Config()]}),
        ValueError,
        "head dim",
    ),
    ("tune_v3 candidates", lambda: v3_bench.tune_v3(candidates=[dict(step=3)]), TypeError, "candidates"),
    ("tune_v3 tokens", lambda: v3_bench.tune_v3(tokens=0), ValueError, "tokens"),
    ("variants head dim", lambda: v3_bench.variants(96, False), ValueError, "head_dim"),
    ("variants causal", lambda: v3_bench.variants(64, "yes"), TypeError, "is_causal"),
]


@pytest.mark.parametrize(("call", "error", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_parts_refuse_bad_input_naming_the_argument(call, error, words):
    with pytest.raises(error) as e:
        call()
    assert words in str(e.value)
