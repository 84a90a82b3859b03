"""gpulab.course.lab refuses bad input with a TypeError naming the argument."""

import pytest

from gpulab.course import lab

CASES = [
    ("lab_command as_root int", lambda: lab.lab_command(as_root=1), "as_root"),
    ("lab_command as_root str", lambda: lab.lab_command(as_root="yes"), "as_root"),
    ("lab_command extra int", lambda: lab.lab_command("--no-browser", 8888), "strings"),
    ("link_course int", lambda: lab.link_course(3), "course"),
    ("link_course None", lambda: lab.link_course(None), "course"),
]


@pytest.mark.parametrize("call, word", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_naming_the_argument(call, word):
    with pytest.raises(TypeError, match=word):
        call()
