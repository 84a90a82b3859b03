"""gpulab.lessons: the syllabus table, each lesson naming its benchmark once."""

import pytest

from gpulab import lessons


def test_find_by_id_slug_and_number():
    assert lessons.find("04").slug == "04_flash_attention"
    assert lessons.find("04_flash_attention").id == "04"
    assert lessons.find("4").id == lessons.find(4).id == "04"
    assert [e.id for e in lessons.LESSONS] == [f"{i:02d}" for i in range(10)]
    assert lessons.find("99") is None


@pytest.mark.parametrize(
    ("old", "new"),
    [("04_attention", ["04", "05"]), ("05_fused_rnn", ["06", "07"]), ("06_state_tracking", ["08"]),
     ("07_distributed", ["09"])],
)  # fmt: skip
def test_an_old_slug_resolves_to_what_it_became_with_a_message(old, new, capsys):
    assert [e.id for e in lessons.successors(old)] == new
    assert lessons.find(old).id == new[0]
    err = capsys.readouterr().err
    assert f"lesson {old} is now " in err and all(f"lesson {i} ({lessons.find(i).slug})" in err for i in new)
    assert lessons.successors(new[0]) == [lessons.find(new[0])]  # a current lesson is its own successor


def test_every_part_of_the_old_lessons_redirects_to_the_lesson_that_has_it(capsys):
    for (old_id, part), new_id in lessons.MOVED_PARTS.items():
        entry, message = lessons.redirect(old_id, part)
        assert entry.id == new_id and part in entry.parts, (old_id, part)
        assert (
            message
            == f"lesson {old_id}'s part {part} is now lesson {new_id} ({entry.slug}): running bench {new_id} {part}"
        )
    assert lessons.redirect("05", "hopper") == (lessons.find("05"), None)  # a part of the lesson named: no redirect
    assert lessons.redirect("04", "nope") == (lessons.find("04"), None)  # unknown: left for benchmark() to refuse
    assert lessons.redirect("04_attention", "hopper")[0].id == "05"
    assert capsys.readouterr().err.count("is now") == 1  # the old slug, once


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
    assert {(e.id, p) for e, p in parts} >= {("05", "hopper"), ("05", "cs336"), ("05", "fused"), ("07", "split")}
    for entry, part in parts:
        fn = lessons.benchmark(entry.id, part)
        module, _, name = entry.parts[part].partition(":")
        assert module.startswith(entry.module) and callable(fn) and fn.__name__ == name, (entry.id, part)
        assert lessons.benchmark(entry.id, part) is fn and fn is not lessons.benchmark(entry.id)
        assert lessons.part_folder(entry.id, part) == entry.folders.get(part, part)
    assert lessons.part_folder("05", "hopper") == "hopper" and lessons.part_folder("05", "cs336") == "hopper/cs336"
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
    ("part unknown", lambda: lessons.benchmark("05", "hoper"), ValueError, "part='hoper'"),
    ("part unknown lists parts", lambda: lessons.benchmark("05", "x"), ValueError, "hopper, cs336, fused"),
    ("part of a lesson without parts", lambda: lessons.benchmark("00", "x"), ValueError, "its parts: none"),
    ("part not a str", lambda: lessons.benchmark("05", 4), TypeError, "part must be a str"),
    ("part folder unknown", lambda: lessons.part_folder("05", "nope"), ValueError, "part='nope'"),
    ("old part by its old id", lambda: lessons.benchmark("04", "hopper"), ValueError, "lesson 05's now"),
    ("successors unknown", lambda: lessons.successors("04_attn"), ValueError, "lesson_id='04_attn'"),
    ("successors not a str", lambda: lessons.successors(4), TypeError, "slug must be"),
    ("redirect unknown lesson", lambda: lessons.redirect("42", "hopper"), ValueError, "lesson_id='42'"),
]


@pytest.mark.parametrize(("call", "error", "words"), [b[1:] for b in LESSONS_BAD], ids=[b[0] for b in LESSONS_BAD])
def test_lessons_refuse_bad_input_naming_the_argument(call, error, words):
    with pytest.raises(error) as e:
        call()
    assert words in str(e.value)
