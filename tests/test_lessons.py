"""gpulab.lessons: the syllabus table, each lesson naming its benchmark once."""

import pytest

from gpulab import lessons


def test_find_by_id_slug_and_number():
    assert lessons.find("04").slug == "04_attention"
    assert lessons.find("04_attention").id == "04"
    assert lessons.find("4").id == lessons.find(4).id == "04"
    assert lessons.find("99") is None


def test_each_lesson_names_its_benchmark_once_and_it_resolves():
    for entry in lessons.LESSONS:
        fn = lessons.benchmark(entry.id)
        if entry.benchmark is None:
            assert fn is None
            continue
        module, _, name = entry.benchmark.partition(":")
        assert module.startswith(entry.module) and name == "benchmark", entry
        assert callable(fn) and fn.__module__ == module and lessons.benchmark(entry.id) is fn


def test_no_package_registers_a_benchmark_at_import():
    import pathlib

    import gpulab

    root = pathlib.Path(gpulab.__file__).parent
    offenders = [str(p) for p in root.rglob("*.py") if "register_benchmark" in p.read_text()]
    assert offenders == []


LESSONS_BAD = [
    ("find list", lambda: lessons.find(["04"]), TypeError, "lesson"),
    ("find bool", lambda: lessons.find(True), TypeError, "lesson"),
    ("benchmark unknown", lambda: lessons.benchmark("42"), ValueError, "lesson_id='42'"),
]


@pytest.mark.parametrize(("call", "error", "words"), [b[1:] for b in LESSONS_BAD], ids=[b[0] for b in LESSONS_BAD])
def test_lessons_refuse_bad_input_naming_the_argument(call, error, words):
    with pytest.raises(error) as e:
        call()
    assert words in str(e.value)
