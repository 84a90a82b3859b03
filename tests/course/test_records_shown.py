"""One record per measurement (gpulab.bench.history): what a lesson shows for one key comes from one run."""

import dataclasses

import pytest

from gpulab.bench import history
from gpulab.course import shown


def _key(clock="device", version="split backward"):
    return history.Key("05", "LSTM forward+backward", version, "H100", "B16 T1024 1x768", clock)


def test_two_runs_of_one_key_conflict_unless_one_is_history():
    old = history.Shown(_key(), "2026-11-24-split.jsonl", 10.67)
    new = history.Shown(_key(), "2026-11-25-d.jsonl", 6.74)
    assert list(history.conflicts([old, new])) == [_key()]
    with pytest.raises(ValueError, match=r"10\.67 from 2026-11-24-split.*6\.74 from 2026-11-25-d"):
        history.check([old, new])
    history.check([dataclasses.replace(old, history=True), new])


def test_other_clocks_versions_and_one_run_do_not_conflict():
    a = history.Shown(_key("device"), "run-a", 6.74)
    history.check([a, history.Shown(_key("wall"), "run-b", 6.95)])
    history.check([a, history.Shown(_key(version="cuDNN"), "run-b", 6.72)])
    history.check([a, history.Shown(_key(), "run-a", 6.74)])


def test_key_bad_input_names_the_field():
    with pytest.raises(ValueError, match="clock"):
        history.Key("05", "x", "v", "H100", "p", "ms")
    with pytest.raises(TypeError, match="Key.version"):
        history.Key("05", "x", "", "H100", "p", "device")
    with pytest.raises(TypeError, match="Shown"):
        history.conflicts([("05", 1.0)])


def test_lesson05_shows_one_head_of_768_training_from_one_run():
    displayed = shown.lesson05()
    assert any(not s.history for s in displayed) and any(s.history for s in displayed)
    history.check(displayed)
    # the display issue 36 found (the first split backward shown as current beside the present one) fails it
    unlabelled = [dataclasses.replace(s, history=False) for s in displayed]
    with pytest.raises(ValueError, match="one measurement shown from several runs"):
        history.check(unlabelled)
