"""Bad input to the method readers (gpulab.course.method) and to speed grading (gpulab.course.speed): each is refused
with an error that names the argument."""

import pytest

from gpulab import runtime
from gpulab.course import method, speed
from gpulab.course.grading_attention import _FORWARD_SIGNATURE
from tests.course.test_grading_attention import forward_right

CASES = [
    ("ttir-signature", lambda: method.ttir(forward_right, "q_ptr: *fp32", {}), TypeError, "signature"),
    ("dots-bytes", lambda: method.dots(b"tt.dot"), TypeError, "ir must be TTIR text"),
    ("loads_and_stores-none", lambda: method.loads_and_stores(None), TypeError, "ir must be TTIR text"),
    ("refuse_autograd-list", lambda: method.refuse_autograd("here", []), TypeError, "trace must be an OpTrace"),
    ("grade_speed-title", lambda: speed.grade_speed("attention", print), ValueError, "title"),
    ("leaderboard_table-int", lambda: speed.leaderboard_table(3), TypeError, "path"),
    ("records-list", lambda: speed.records(["a.jsonl"]), TypeError, "path"),
]


@pytest.mark.parametrize("call, error, word", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_with_its_name(call, error, word):
    with pytest.raises(error, match=word):
        call()


def test_a_kernel_that_does_not_compile_is_the_learners_mistake():
    with pytest.raises(AssertionError, match="does not compile for a GPU"):
        method.ttir(forward_right, {"q_ptr": "*fp32"}, {"HEAD_DIM": 16, "BLOCK_M": 16, "BLOCK_N": 16})
    assert method.dots(method.ttir(forward_right, _FORWARD_SIGNATURE, {"HEAD_DIM": 16, "BLOCK_M": 16, "BLOCK_N": 16}))


@pytest.mark.skipif(runtime.on_gpu(), reason="the refusal on CPU")
def test_grade_solutions_needs_a_gpu():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        speed.grade_solutions()
