"""The readers behind the course's claims and the one-record rule refuse bad input with an error naming the argument:
record banners, lesson 4's ratio helpers, lesson 0/2's stored constants, the source scanners. One table: (id, call,
expected exception, a word the message must contain)."""

import pytest

from gpulab.attention.measure import report
from gpulab.codesign import gemm_model
from gpulab.course import one_record, prose
from gpulab.roofline import hbm

CASES = [
    ("ratios-clock", lambda: report.ratios([], "forward", "cuDNN", clock="gpu"), ValueError, "clock"),
    ("ratios-direction", lambda: report.ratios([], "sideways", "cuDNN"), ValueError, "direction"),
    ("sweep-ratios-int", lambda: report.sweep_ratios(5), TypeError, "records"),
    ("stored-read-plateau-name", lambda: hbm.stored_read_plateau("H999"), ValueError, "gpu"),
    ("stored-read-plateau-int", lambda: hbm.stored_read_plateau(3), TypeError, "gpu"),
    ("model-constants-name", lambda: gemm_model.model_constants("H999"), ValueError, "gpu"),
    ("model-constants-int", lambda: gemm_model.model_constants(7), TypeError, "gpu"),
    ("memory-fraction-root", lambda: gemm_model.memory_fraction(root=5), TypeError, "root"),
    ("source-offenders-missing", lambda: prose.source_offenders("nope.py"), ValueError, "path"),
    ("loader-calls-missing", lambda: one_record.loader_calls("nope.py"), ValueError, "path"),
    ("displayed-missing", lambda: one_record.displayed("nope.py"), ValueError, "path"),
    ("check-source-missing", lambda: one_record.check_source("nope.py"), ValueError, "path"),
]


@pytest.mark.parametrize("call, exc, word", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_names_the_argument(call, exc, word):
    with pytest.raises(exc, match=word):
        call()
