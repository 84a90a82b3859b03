"""Every grader refuses what is not a learner's answer before it draws a case: a string (a quoted name), a number or
None where the function or kernel belongs is a TypeError that names the parameter, and ``cases=0`` is a ValueError
(not a grader that checks nothing and prints PASSED)."""

import importlib
import inspect
import pkgutil

import pytest

import gpulab.course

GRADERS = sorted(
    (f"{info.name.rpartition('.')[2]}.{name}", fn)
    for info in pkgutil.iter_modules(gpulab.course.__path__, "gpulab.course.")
    if info.name.rpartition(".")[2].startswith("grading")
    for name, fn in vars(importlib.import_module(info.name)).items()
    if name.startswith("grade_") and inspect.isfunction(fn) and fn.__module__ == info.name
)


def test_the_audit_finds_the_graders():
    names = {n for n, _ in GRADERS}
    assert {
        "grading_rnn.grade_lstm_loop",
        "grading_ladder.grade_pointwise_kernel",
        "grading.grade_copy_kernel",
    } <= names
    assert len(GRADERS) >= 25


@pytest.mark.parametrize("given", ["my_function", 3, None], ids=["str", "int", "None"])
@pytest.mark.parametrize("name, grade", GRADERS, ids=[n for n, _ in GRADERS])
def test_a_grader_given_no_function_names_its_parameter(name, grade, given):
    param = next(iter(inspect.signature(grade).parameters))
    with pytest.raises(TypeError, match=rf"\b{param}\b"):
        grade(given)


WITH_CASES = [g for g in GRADERS if "cases" in inspect.signature(g[1]).parameters]


@pytest.mark.parametrize("name, grade", WITH_CASES, ids=[n for n, _ in WITH_CASES])
def test_a_grader_given_no_cases_says_so(name, grade):
    from gpulab.rnn import cells

    param = next(iter(inspect.signature(grade).parameters))
    answer = cells.lstm_cell if param in ("kernel", "gru_cell", "all_gates") else print  # passes the type check
    with pytest.raises(ValueError, match="cases"):
        grade(answer, cases=0)
