"""Speed grading (gpulab.course.speed): off unless asked, a note on CPU, records and the leaderboard table; on a GPU
each timed task is timed with a reference answer against its solution and peer."""

import json

import pytest
import torch

from gpulab import runtime
from gpulab.course import speed
from gpulab.course.grading_attention import grade_forward_kernel
from tests.course.test_grading_attention import forward_right


def test_speed_is_off_unless_asked(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv(speed.ENV, raising=False)
    assert speed.grade_speed("FlashAttention forward inner loop", forward_right, board=tmp_path / "b.jsonl") is None
    assert capsys.readouterr().out == ""
    assert not (tmp_path / "b.jsonl").exists()


@pytest.mark.skipif(runtime.on_gpu(), reason="the CPU note")
def test_on_cpu_the_grader_says_speed_is_graded_on_a_gpu(monkeypatch, capsys):
    monkeypatch.setenv(speed.ENV, "1")
    grade_forward_kernel(forward_right, cases=1)
    out = capsys.readouterr().out
    assert speed.CPU_NOTE in out and "PASSED FlashAttention forward inner loop" in out
    assert speed.summary([], [("FlashAttention forward inner loop", True, "passed")]) == speed.CPU_NOTE + "."


def test_an_unknown_task_is_refused():
    with pytest.raises(ValueError, match="title"):
        speed.grade_speed("no such task", print)


def test_leaderboard_table_orders_by_device_time(tmp_path):
    path = tmp_path / "leaderboard.jsonl"
    assert "no leaderboard yet" in speed.leaderboard_table(path)
    base = {"task": "t", "problem": "p", "device": "H100", "date": "2026-11-26T15:00:00", "peer": "SDPA",
            "solution_ms": 2.0, "solution_wall_ms": 2.1, "peer_ms": 1.0, "peer_wall_ms": 1.1}  # fmt: skip
    rows = [dict(base, who="slow", ms=4.0, wall_ms=4.2), dict(base, who="fast", ms=1.0, wall_ms=1.5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = speed.leaderboard_table(path)
    assert table.index("fast") < table.index("slow")
    assert "x SDPA" in table and "2.00" in table and "0.50" in table  # slow: 4 / 2 the solution; fast: 1 / 2
    assert speed.records(path) == rows


def test_the_attention_task_runs_its_three_providers_on_a_small_problem():
    inputs = speed._attention_inputs(1, 2, 80, 16)
    want = speed._attention_peer(inputs)()
    for fn in (speed._attention_answer(forward_right, inputs), speed._attention_solution(inputs)):
        assert torch.allclose(fn(), want, atol=1e-4)


@pytest.mark.skipif(not runtime.on_gpu(), reason="speed is graded on a GPU")
@pytest.mark.parametrize("title", list(speed.TASKS))
def test_each_task_is_timed_on_a_gpu(title, monkeypatch, tmp_path):
    from gpulab.rnn.ladder.steps import step1_combined_gemm
    from tests.course.test_grading_rnn import _Variant

    answers = {
        "FlashAttention forward inner loop": forward_right,
        "step 1: combined GEMMs": step1_combined_gemm,
        "fused LSTM forward time loop": _Variant(1.0, True),
    }
    monkeypatch.setenv(speed.ENV, "1")
    record = speed.grade_speed(title, answers[title], label="test", board=tmp_path / "b.jsonl")
    assert record["ms"] > 0 and record["peer_ms"] > 0 and record["solution_ms"] > 0
    assert speed.records(tmp_path / "b.jsonl")[-1]["task"] == title
