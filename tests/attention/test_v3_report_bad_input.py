"""Version 3's record readers (gpulab.attention.measure.v3_report) refuse bad input with an error naming the argument.
One table: (id, call, expected exception, a word the message must contain)."""

import shutil
from pathlib import Path

import pytest

from gpulab.attention.measure import v3_report as r

CASES = [
    ("stored_v3 missing folder", lambda: r.stored_v3(folder="/nonexistent"), FileNotFoundError, "bench 05 v3"),
    ("stored_v3_run missing folder", lambda: r.stored_v3_run(folder="/nonexistent"), FileNotFoundError, "bench 05 v3"),
    ("stored_v3_tune missing folder", lambda: r.stored_v3_tune(folder="/nonexistent"), FileNotFoundError, "v3-tune"),
    ("stored_v3_tune bad run", lambda: r.stored_v3_tune(run="../i"), ValueError, "run"),
    ("stored_v3_tune missing run", lambda: r.stored_v3_tune(run="zz"), FileNotFoundError, "run zz"),
    ("stored_v3_ab bad name", lambda: r.stored_v3_ab("q/../x"), ValueError, "name"),
    ("stored_v3_ab int", lambda: r.stored_v3_ab(3), ValueError, "name"),
    ("stored_v3_ab missing", lambda: r.stored_v3_ab("nosuch"), FileNotFoundError, "nosuch"),
    ("v3_headline kind", lambda: r.v3_headline([], kind="grid"), ValueError, "kind"),
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


HISTORY = Path(__file__).resolve().parents[2] / "benchmarks" / "history" / "05_attention_hopper" / "v3"


def test_stored_v3_tune_by_run_and_ab_read_their_own_files(tmp_path):
    """A run letter picks that run's tune records (not the newest); the A/B reader reads its kind='ab' rounds. The
    folder holds the current tune (run l) beside a superseded one (run i, from benchmarks/history/)."""
    tunes = [*r.V3_FOLDER.glob("*-l-tune.jsonl"), *HISTORY.glob("*-i-tune.jsonl")]
    if len(tunes) != 2:
        pytest.skip("no version-3 tune records of runs i and l in this checkout")
    for f in tunes:
        shutil.copy(f, tmp_path / f.name)
    newest, run_i = r.stored_v3_tune(folder=tmp_path), r.stored_v3_tune(folder=tmp_path, run="i")
    try:
        ab = r.v3_headline(r.stored_v3_ab("qregs"), kind="ab")
    except FileNotFoundError:
        pytest.skip("no version-3 A/B records in this checkout")
    names_i = {x.provider or "" for x in run_i}
    assert any("q_regs=True" in (x.provider or "") for x in newest) and not any("q_regs" in n for n in names_i)
    assert {"gpulab v3 (tuned)", "gpulab v3 (tuned, q_regs)", "SDPA cuDNN"} <= set(ab)
    assert all(h["rounds"] == 9 for h in ab.values())
