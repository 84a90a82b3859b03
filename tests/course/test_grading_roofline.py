"""The graders of exercise 1 (gpulab.course.grading_roofline): correct answers pass with one line, wrong ones fail
with a message that says what to fix, unimplemented ones say so."""

import pytest

from gpulab.course import grading_roofline as grading

# ----------------------------------------------------------------------------------------------------------------
# graders


def _gemm_cost(m, n, k, s):
    return 2 * m * n * k, (m * k + k * n + m * n) * s


def _softmax_cost(r, c, s):
    return 5 * r * c, 2 * r * c * s


def _lstm_step_cost(b, i, h, s):
    return 2 * b * 4 * h * (i + h), s * (b * i + 4 * b * h + 4 * h * (i + h) + 4 * h)


def _bound(flops, nbytes, peak, bw):
    return "compute" if flops / nbytes >= peak * 1e3 / bw else "memory"


def _batch_by_search(i, h, s, peak, bw):
    ridge = peak * 1e3 / bw
    limit = 8 * h * (i + h) / (s * (i + 4 * h))
    if limit <= ridge:
        return None
    b = 1
    while _lstm_step_cost(b, i, h, s)[0] / _lstm_step_cost(b, i, h, s)[1] < ridge:
        b += 1
    return b


@pytest.mark.parametrize(
    ("grade", "fn", "title"),
    [
        (grading.grade_attainable, lambda i, p, bw: min(p, i * bw / 1000), "roofline formula"),
        (grading.grade_gemm_cost, _gemm_cost, "GEMM cost"),
        (grading.grade_softmax_cost, _softmax_cost, "softmax cost"),
        (grading.grade_lstm_step_cost, _lstm_step_cost, "LSTM step cost"),
        (grading.grade_bound, _bound, "memory- or compute-bound"),
        (grading.grade_compute_bound_batch, _batch_by_search, "smallest compute-bound batch"),
        (grading.grade_compute_bound_batch, grading.smallest_compute_bound_batch, "smallest compute-bound batch"),
    ],
)
def test_graders_pass_correct_answers(grade, fn, title, capsys):
    grade(fn)
    out = capsys.readouterr().out
    assert out.startswith(f"PASSED {title}") and out.count("\n") == 1


def _lstm_one_gate(b, i, h, s):
    return 2 * b * h * (i + h), _lstm_step_cost(b, i, h, s)[1]


def _lstm_no_bias(b, i, h, s):
    flops, nbytes = _lstm_step_cost(b, i, h, s)
    return flops, nbytes - 4 * h * s


def _batch_one_too_many(i, h, s, p, bw):
    b = _batch_by_search(i, h, s, p, bw)
    return None if b is None else b + 1


def _batch_as_float(i, h, s, p, bw):
    b = _batch_by_search(i, h, s, p, bw)
    return None if b is None else float(b)


@pytest.mark.parametrize(
    ("grade", "wrong", "words"),
    [
        (grading.grade_attainable, lambda i, p, bw: min(p, i * bw), "divide by 1000"),
        (grading.grade_attainable, lambda i, p, bw: i * bw / 1000, "smaller of the two"),
        (grading.grade_gemm_cost, lambda m, n, k, s: (m * n * k, _gemm_cost(m, n, k, s)[1]), "2 FLOPs"),
        (grading.grade_gemm_cost, lambda m, n, k, s: (2 * m * n * k, (m * k + k * n) * s), "write of C"),
        (grading.grade_gemm_cost, lambda m, n, k, s: 2 * m * n * k, "return a pair"),
        (grading.grade_softmax_cost, lambda r, c, s: (5 * r * c, r * c * s), "written as well"),
        (grading.grade_softmax_cost, lambda r, c, s: (4 * r * c, 2 * r * c * s), "5 FLOPs per element"),
        (grading.grade_lstm_step_cost, _lstm_one_gate, "4 gates"),
        (grading.grade_lstm_step_cost, _lstm_no_bias, "bias"),
        (grading.grade_bound, lambda f, b, p, bw: "compute" if f / b >= p / bw else "memory", "expected"),
        (grading.grade_bound, lambda f, b, p, bw: "Memory", "return 'memory' or 'compute'"),
        (grading.grade_compute_bound_batch, lambda i, h, s, p, bw: 361, "expected"),
        (grading.grade_compute_bound_batch, _batch_one_too_many, "expected"),
        (grading.grade_compute_bound_batch, _batch_as_float, "an int"),
    ],
)
def test_graders_catch_wrong_answers(grade, wrong, words):
    with pytest.raises(AssertionError) as e:
        grade(wrong)
    assert words in str(e.value)


def _not_implemented(*args):
    # YOUR CODE HERE
    raise NotImplementedError()


@pytest.mark.parametrize(
    "grade",
    [
        grading.grade_attainable,
        grading.grade_gemm_cost,
        grading.grade_softmax_cost,
        grading.grade_lstm_step_cost,
        grading.grade_bound,
        grading.grade_compute_bound_batch,
    ],
)
def test_graders_report_not_implemented(grade):
    with pytest.raises(AssertionError, match="not implemented yet"):
        grade(_not_implemented)
