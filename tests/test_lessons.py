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


def test_each_part_resolves_to_a_function_of_its_lesson_package_and_names_its_folder():
    parts = [(entry, part) for entry in lessons.LESSONS for part in entry.parts]
    assert {(e.id, p) for e, p in parts} >= {("04", "hopper"), ("04", "cs336"), ("04", "fused")}
    for entry, part in parts:
        fn = lessons.benchmark(entry.id, part)
        module, _, name = entry.parts[part].partition(":")
        assert module.startswith(entry.module) and callable(fn) and fn.__name__ == name, (entry.id, part)
        assert lessons.benchmark(entry.id, part) is fn and fn is not lessons.benchmark(entry.id)
        assert lessons.part_folder(entry.id, part) == entry.folders.get(part, part)
    assert lessons.part_folder("04", "hopper") == "hopper" and lessons.part_folder("04", "cs336") == "hopper/cs336"
    assert all(set(e.folders) <= set(e.parts) for e in lessons.LESSONS)  # every folder names a part


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
    ("part unknown", lambda: lessons.benchmark("04", "hoper"), ValueError, "part='hoper'"),
    ("part unknown lists parts", lambda: lessons.benchmark("04", "x"), ValueError, "hopper, cs336, fused"),
    ("part of a lesson without parts", lambda: lessons.benchmark("00", "x"), ValueError, "its parts: none"),
    ("part not a str", lambda: lessons.benchmark("04", 4), TypeError, "part must be a str"),
    ("part folder unknown", lambda: lessons.part_folder("04", "nope"), ValueError, "part='nope'"),
]


@pytest.mark.parametrize(("call", "error", "words"), [b[1:] for b in LESSONS_BAD], ids=[b[0] for b in LESSONS_BAD])
def test_lessons_refuse_bad_input_naming_the_argument(call, error, words):
    with pytest.raises(error) as e:
        call()
    assert words in str(e.value)
