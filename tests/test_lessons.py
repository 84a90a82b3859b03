"""gpulab.lessons: the syllabus table and the registry of benchmark callables."""

import pytest

from gpulab import lessons


def test_find_by_id_slug_and_number():
    assert lessons.find("04").slug == "04_attention"
    assert lessons.find("04_attention").id == "04"
    assert lessons.find("4").id == lessons.find(4).id == "04"
    assert lessons.find("99") is None


def test_lessons_hold_no_benchmark_strings():
    assert all(not hasattr(entry, "benchmark") for entry in lessons.LESSONS)


def test_register_and_look_up_a_benchmark(monkeypatch):
    monkeypatch.setattr(lessons, "_BENCHMARKS", {})

    def fake(progress=None):
        return []

    assert lessons.register_benchmark("02", fake) is fake
    assert lessons.benchmark("2") is fake


LESSONS_BAD = [
    ("find list", lambda: lessons.find(["04"]), TypeError, "lesson"),
    ("find bool", lambda: lessons.find(True), TypeError, "lesson"),
    ("register unknown", lambda: lessons.register_benchmark("99", print), ValueError, "lesson_id='99'"),
    (
        "register not callable",
        lambda: lessons.register_benchmark("04", "gpulab.attention:benchmark"),
        TypeError,
        "fn must be callable",
    ),
    ("benchmark unknown", lambda: lessons.benchmark("42"), ValueError, "lesson_id='42'"),
]


@pytest.mark.parametrize(("call", "error", "words"), [b[1:] for b in LESSONS_BAD], ids=[b[0] for b in LESSONS_BAD])
def test_lessons_refuse_bad_input_naming_the_argument(call, error, words):
    with pytest.raises(error) as e:
        call()
    assert words in str(e.value)
