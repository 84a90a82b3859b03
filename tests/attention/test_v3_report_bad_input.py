"""Version 3's record readers (gpulab.attention.v3_report) refuse bad input with an error naming the argument. One
table: (id, call, expected exception, a word the message must contain)."""

import pytest

from gpulab.attention import v3_report as r

CASES = [
    ("stored_v3 missing folder", lambda: r.stored_v3(folder="/nonexistent"), FileNotFoundError, "bench 04 v3"),
    ("stored_v3_run missing folder", lambda: r.stored_v3_run(folder="/nonexistent"), FileNotFoundError, "bench 04 v3"),
    ("stored_v3_tune missing folder", lambda: r.stored_v3_tune(folder="/nonexistent"), FileNotFoundError, "v3-tune"),
    ("stored_v3_headline missing", lambda: r.stored_v3_headline(folder="/nonexistent"), FileNotFoundError, "headline"),
    ("headline_gpu_state missing", lambda: r.headline_gpu_state(folder="/nonexistent"), FileNotFoundError, "smi"),
    ("headline_gpu_state watts", lambda: r.headline_gpu_state(busy_watts=-1), ValueError, "busy_watts"),
    ("v3_headline int", lambda: r.v3_headline(5), TypeError, "records"),
    ("v3_best int", lambda: r.v3_best(5), TypeError, "records"),
    ("v3_ratios clock", lambda: r.v3_ratios([], "SDPA cuDNN", clock="gpu"), ValueError, "clock"),
    ("v3_spread empty", lambda: r.v3_spread([]), ValueError, "no ratios"),
    ("v3_spread str", lambda: r.v3_spread("x"), TypeError, "values"),
    ("v3_spread nan", lambda: r.v3_spread([1.0, float("nan")]), ValueError, "finite"),
    ("v3_step_gains int", lambda: r.v3_step_gains(5), TypeError, "records"),
    ("v3_table int", lambda: r.v3_table(5), TypeError, "records"),
    ("v3_tune_ratios int", lambda: r.v3_tune_ratios(5, "a", "b"), TypeError, "records"),
]


@pytest.mark.parametrize("call, exc, word", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_names_the_argument(call, exc, word):
    with pytest.raises(exc, match=word):
        call()
