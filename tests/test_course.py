"""Course machinery: exercise generation from solutions, grader cells, and the lesson graders themselves."""

import warnings

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

import gpulab  # noqa: F401 - before triton: sets TRITON_INTERPRET before the kernels below are defined
from gpulab import hardware
from gpulab.course import (
    check_exercises,
    check_regions,
    generate_exercises,
    grader_cells,
    grading,
    make_exercise,
)
from gpulab.course.notebooks import grader_title

import triton  # isort: skip
import triton.language as tl  # isort: skip

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


# ----------------------------------------------------------------------------------------------------------------
# solution regions, cleared by nbgrader's ClearSolutions (through make_exercise)


def _cleared(source, markdown=False):
    nb = new_notebook()
    nb.cells = [new_markdown_cell(source) if markdown else new_code_cell(source)]
    return make_exercise(nb).cells[0].source


def test_a_region_nested_in_a_function_body_becomes_a_stub_at_its_indentation():
    source = "\n".join(
        [
            "import math",
            "",
            "def f(x):",
            '    """Double x."""',
            "    y = 1",
            "    if x:",
            f"        {BEGIN}",
            "        return 2 * x",
            f"        {END}",
            "    return y",
            "",
            "print(f(3))",
        ]
    )
    expected = "\n".join(
        [
            "import math",
            "",
            "def f(x):",
            '    """Double x."""',
            "    y = 1",
            "    if x:",
            "        # YOUR CODE HERE",
            "        raise NotImplementedError()",
            "    return y",
            "",
            "print(f(3))",
        ]
    )
    assert _cleared(source) == expected
    # the stubbed code is valid Python that raises where the answer was
    namespace = {}
    exec(compile(_cleared(source).replace("print(f(3))", ""), "<exercise>", "exec"), namespace)
    with pytest.raises(NotImplementedError):
        namespace["f"](3)
    assert namespace["f"](0) == 1


def test_several_regions_and_top_level():
    source = f"a = 1\n{BEGIN}\nb = 2\n{END}\nc = 3\ndef g():\n    {BEGIN}\n    pass\n    {END}"
    assert _cleared(source) == (
        "a = 1\n# YOUR CODE HERE\nraise NotImplementedError()\nc = 3\ndef g():\n"
        "    # YOUR CODE HERE\n    raise NotImplementedError()"
    )


def test_a_markdown_answer_and_markers_with_spaces():
    source = f"Question?\n  {BEGIN}   \nThe answer.\n{END}  \nAfter."
    assert _cleared(source, markdown=True) == "Question?\n  YOUR ANSWER HERE\nAfter."


def test_a_cell_without_regions_keeps_its_text():
    source = "x = 1\n    # indented comment\n\ny = 2"
    assert _cleared(source) == source


@pytest.mark.parametrize(
    ("source", "words"),
    [
        (f"x = 1\n{BEGIN}\ny = 2", ["never closed", END]),
        (f"{BEGIN}\na\n    {BEGIN}\nb\n{END}\n{END}", ["line 3", "inside another"]),
        (f"x = 1\ny = 2\n{END}", ["line 3", "without"]),
        (f"{BEGIN}\na\n{END}\n{END}", ["line 4"]),
    ],
    ids=["unclosed", "nested", "stray-end", "double-end"],
)
def test_malformed_regions_are_refused_naming_the_line(source, words):
    """nbgrader itself drops a stray END silently: check_regions refuses it before ClearSolutions runs."""
    with pytest.raises(ValueError) as e:
        check_regions(source)
    for word in words:
        assert word in str(e.value)
    with pytest.raises(ValueError, match="cell 0, line|cell 0, a"):
        _cleared(source)


# ----------------------------------------------------------------------------------------------------------------
# make_exercise, generate_exercises, check_exercises


def _solution_notebook():
    nb = new_notebook()
    nb.cells = [
        new_markdown_cell("# Exercise\nWrite `double`."),
        new_code_cell(
            f"def double(x):\n    {BEGIN}\n    return 2 * x\n    {END}",
            execution_count=4,
            outputs=[new_output("stream", name="stdout", text="ok\n")],
        ),
        new_code_cell("# GRADER: double\nassert double(2) == 4", execution_count=5),
        new_markdown_cell(f"Why?\n\n{BEGIN}\nBecause.\n{END}"),
    ]
    nb.cells[1].metadata["execution"] = {"iopub.execute_input": "2026-01-01T00:00:00Z"}
    nb.metadata["widgets"] = {"state": {}}
    return nb


def test_make_exercise():
    nb = _solution_notebook()
    ex = make_exercise(nb)
    code, grader, md = ex.cells[1], ex.cells[2], ex.cells[3]
    assert code.source == "def double(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    assert code.outputs == [] and code.execution_count is None
    assert "execution" not in code.metadata
    assert grader.execution_count is None and grader.source == nb.cells[2].source
    assert md.source == "Why?\n\nYOUR ANSWER HERE"
    assert ex.cells[0].source == nb.cells[0].source
    assert "widgets" not in ex.metadata
    # the solution notebook is not changed
    assert "return 2 * x" in nb.cells[1].source and nb.cells[1].execution_count == 4
    assert nb.cells[1].outputs and "widgets" in nb.metadata


def _course(tmp_path, nb=None):
    solutions, exercises = tmp_path / "solutions", tmp_path / "exercises"
    solutions.mkdir()
    nbformat.write(nb or _solution_notebook(), solutions / "00_test.ipynb")
    return solutions, exercises


def test_generate_then_check_is_in_sync(tmp_path):
    solutions, exercises = _course(tmp_path)
    written = generate_exercises(solutions, exercises)
    assert written == [exercises / "00_test.ipynb"]
    ex = nbformat.read(written[0], as_version=4)
    assert "raise NotImplementedError()" in ex.cells[1].source and "2 * x" not in ex.cells[1].source
    assert ex.cells[1].outputs == []
    assert check_exercises(solutions, exercises) == []


def test_generated_notebooks_are_valid(tmp_path):
    solutions, exercises = _course(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", nbformat.warnings.MissingIDFieldWarning)
        (path,) = generate_exercises(solutions, exercises)
        nbformat.validate(nbformat.read(path, as_version=4))


def test_check_ignores_outputs_of_a_run_exercise(tmp_path):
    solutions, exercises = _course(tmp_path)
    (path,) = generate_exercises(solutions, exercises)
    ex = nbformat.read(path, as_version=4)
    ex.cells[2].outputs = [new_output("error", ename="AssertionError", evalue="x", traceback=[])]
    ex.cells[2].execution_count = 1
    nbformat.write(ex, path)
    assert check_exercises(solutions, exercises) == []


def test_check_finds_a_hand_edited_exercise(tmp_path):
    solutions, exercises = _course(tmp_path)
    (path,) = generate_exercises(solutions, exercises)
    ex = nbformat.read(path, as_version=4)
    ex.cells[1].source = "def double(x):\n    return x + x  # edited by hand"
    nbformat.write(ex, path)
    problems = check_exercises(solutions, exercises)
    assert len(problems) == 1
    assert "00_test.ipynb" in problems[0] and "cell 1" in problems[0]
    assert "python -m gpulab exercises" in problems[0]


def test_check_finds_a_missing_or_extra_cell(tmp_path):
    solutions, exercises = _course(tmp_path)
    (path,) = generate_exercises(solutions, exercises)
    ex = nbformat.read(path, as_version=4)
    ex.cells.append(new_code_cell("print('extra')"))
    nbformat.write(ex, path)
    problems = check_exercises(solutions, exercises)
    assert len(problems) == 1 and "cell 4" in problems[0]


def test_check_finds_a_missing_exercise(tmp_path):
    solutions, exercises = _course(tmp_path)
    exercises.mkdir()
    problems = check_exercises(solutions, exercises)
    assert problems == ["exercises/00_test.ipynb is missing; run `python -m gpulab exercises`."]


def test_check_finds_an_exercise_without_solution(tmp_path):
    solutions, exercises = _course(tmp_path)
    generate_exercises(solutions, exercises)
    nbformat.write(make_exercise(_solution_notebook()), exercises / "01_orphan.ipynb")
    problems = check_exercises(solutions, exercises)
    assert len(problems) == 1 and "01_orphan.ipynb" in problems[0] and "no solutions/" in problems[0]


def test_check_finds_a_solution_without_regions(tmp_path):
    nb = new_notebook(cells=[new_code_cell("x = 1"), new_markdown_cell("Nothing to do")])
    solutions, exercises = _course(tmp_path, nb)
    generate_exercises(solutions, exercises)
    problems = check_exercises(solutions, exercises)
    assert len(problems) == 1
    assert "solutions/00_test.ipynb" in problems[0] and BEGIN in problems[0]


# ----------------------------------------------------------------------------------------------------------------
# grader cells


def test_grader_cells():
    nb = new_notebook(
        cells=[
            new_code_cell("# GRADER: masked copy kernel\ngrading.grade_copy_kernel(copy_kernel)"),
            new_markdown_cell("# GRADER: a markdown cell is not a grader"),
            new_code_cell("x = 1  # GRADER in a comment later on the line"),
            new_code_cell("print(1)\n# GRADER: on the second line"),
            new_code_cell("\n  # GRADER: copy bandwidth\ngrading.grade_copy_bandwidth(copy_gbps)"),
            new_code_cell("# GRADE: close, but no"),
        ]
    )
    assert grader_cells(nb) == [0, 4]
    assert grader_title(nb.cells[0]) == "masked copy kernel"
    assert grader_title(nb.cells[4]) == "copy bandwidth"


# ----------------------------------------------------------------------------------------------------------------
# the lesson 0 graders


@triton.jit
def good_copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


@triton.jit
def unmasked_store_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src_ptr + offs, mask=offs < n, other=0.0)
    tl.store(dst_ptr + offs, x)  # lanes past n write too


@triton.jit
def drops_last_element_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n - 1  # off by one
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


@triton.jit
def first_block_only_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)  # forgot the program id: every program copies block 0
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


@triton.jit
def stub_copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    # YOUR CODE HERE
    raise NotImplementedError()


def test_grade_copy_kernel_passes_a_correct_kernel(capsys):
    grading.grade_copy_kernel(good_copy_kernel)
    out = capsys.readouterr().out
    assert out.startswith("PASSED masked copy kernel")
    assert out.count("\n") == 1


def test_grade_copy_kernel_catches_an_unmasked_store():
    with pytest.raises(AssertionError) as e:
        grading.grade_copy_kernel(unmasked_store_kernel)
    msg = str(e.value)
    assert "wrote" in msg and "past the end of dst" in msg and "mask" in msg


@pytest.mark.parametrize("kernel", [drops_last_element_kernel, first_block_only_kernel])
def test_grade_copy_kernel_catches_wrong_elements(kernel, capsys):
    with pytest.raises(AssertionError) as e:
        grading.grade_copy_kernel(kernel)
    assert "dst" in str(e.value) and "does not match" in str(e.value)
    assert "PASSED" not in capsys.readouterr().out


def test_grade_copy_kernel_on_the_unsolved_stub():
    with pytest.raises(AssertionError, match="not implemented"):
        grading.grade_copy_kernel(stub_copy_kernel)


def _which_level(w, gpu):
    if w <= gpu.l1_per_sm:
        return "L1"
    return "L2" if w <= gpu.l2_bytes else "HBM"


def _which_level_strict(w, gpu):  # < instead of <=: wrong exactly at the capacities
    if w < gpu.l1_per_sm:
        return "L1"
    return "L2" if w < gpu.l2_bytes else "HBM"


def _which_level_smem(w, gpu):  # shared memory instead of the L1 capacity
    if w <= gpu.smem_per_sm:
        return "L1"
    return "L2" if w <= gpu.l2_bytes else "HBM"


def test_grade_which_level(capsys):
    grading.grade_which_level(_which_level)
    out = capsys.readouterr().out
    assert out.startswith("PASSED which level serves a working set")
    assert f"{len(hardware.SPECS)} GPUs" in out


@pytest.mark.parametrize("wrong", [_which_level_strict, _which_level_smem, lambda w, gpu: "L2"])
def test_grade_which_level_catches_wrong_answers(wrong):
    with pytest.raises(AssertionError) as e:
        grading.grade_which_level(wrong)
    msg = str(e.value)
    assert "which_level(" in msg and "expected" in msg and "L1 per SM" in msg


def _copy_gbps(n, dtype, ms):
    itemsize = (torch.finfo(dtype).bits if dtype.is_floating_point else torch.iinfo(dtype).bits) // 8
    return (n * itemsize + n * itemsize) / (ms / 1000) / 1e9


def test_grade_copy_bandwidth(capsys):
    grading.grade_copy_bandwidth(_copy_gbps)
    assert capsys.readouterr().out.startswith("PASSED copy bandwidth")


@pytest.mark.parametrize(
    "wrong",
    [
        lambda n, dtype, ms: _copy_gbps(n, dtype, ms) / 2,  # forgot the write
        lambda n, dtype, ms: _copy_gbps(n, dtype, ms) * 1e9 / 2**30,  # GiB/s
        lambda n, dtype, ms: 2 * n * 4 / (ms * 1e-3) / 1e9,  # assumed fp32
        lambda n, dtype, ms: torch.tensor(_copy_gbps(n, dtype, ms)),  # not a number
    ],
    ids=["read-only", "gibps", "fp32-only", "tensor"],
)
def test_grade_copy_bandwidth_catches_wrong_answers(wrong):
    with pytest.raises(AssertionError) as e:
        grading.grade_copy_bandwidth(wrong)
    assert "copy_gbps(" in str(e.value) and "expected" in str(e.value)


def _not_implemented(*args):
    # YOUR CODE HERE
    raise NotImplementedError()


@pytest.mark.parametrize(
    ("grade", "title"),
    [
        (grading.grade_which_level, "which level serves a working set"),
        (grading.grade_copy_bandwidth, "copy bandwidth"),
    ],
)
def test_graders_report_not_implemented(grade, title, capsys):
    with pytest.raises(AssertionError) as e:
        grade(_not_implemented)
    msg = str(e.value)
    assert msg.startswith(f"{title}: not implemented")
    assert "raise NotImplementedError()" in msg
    assert isinstance(e.value.__cause__, NotImplementedError)
    assert "PASSED" not in capsys.readouterr().out
