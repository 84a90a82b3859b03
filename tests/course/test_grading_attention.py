"""The attention graders: the backward-block grader passes a correct answer and names each common mistake."""

import pytest
import torch

from gpulab.course import grading_attention as grading


def backward_block(q, k, v, o, do, lse, scale):
    p = torch.exp(scale * q @ k.T - lse[:, None])
    dv = p.T @ do
    dp = do @ v.T
    ds = p * (dp - (do * o).sum(-1, keepdim=True))
    return scale * ds @ k, scale * ds.T @ q, dv


def _mutant(kind):
    def f(q, k, v, o, do, lse, scale):
        p = torch.exp(scale * q @ k.T - (0 if kind == "no lse" else lse[:, None]))
        dp = do @ v.T
        ds = p * (dp if kind == "no D" else dp - (do * o).sum(-1, keepdim=True))
        c = 1.0 if kind == "no scale" else scale
        dk = c * ds.T @ q
        return c * ds @ k, dk.T if kind == "no transpose" else dk, p.T @ do

    return f


def test_a_correct_block_passes(capsys):
    grading.grade_attention_backward(backward_block)
    assert capsys.readouterr().out.startswith("PASSED attention backward for one block")


@pytest.mark.parametrize(
    "kind, message",
    [("no D", "subtract D"), ("no scale", "scale comes back"), ("no lse", "log-sum-exp"), ("no transpose", "shape")],
)
def test_common_mistakes_are_named(kind, message):
    with pytest.raises(AssertionError, match=message):
        grading.grade_attention_backward(_mutant(kind))


def test_the_unsolved_stub_fails_clearly():
    def stub(*args):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented|NotImplementedError|YOUR CODE"):
        grading.grade_attention_backward(stub)


def test_kv_bytes_grader_and_its_mistakes(capsys):
    grading.grade_kv_bytes(lambda n, d, bm, e: -(-n // bm) * 2 * n * d * e)
    assert capsys.readouterr().out.startswith("PASSED K/V bytes read by the forward")
    for wrong, message in (
        (lambda n, d, bm, e: -(-n // bm) * n * d * e, "both K and V"),
        (lambda n, d, bm, e: n / bm * 2 * n * d * e, "ragged"),
        (lambda n, d, bm, e: 2 * n * d * e, "number of Q blocks"),
    ):
        with pytest.raises(AssertionError, match=message):
            grading.grade_kv_bytes(wrong)
