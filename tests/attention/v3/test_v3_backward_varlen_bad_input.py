"""Version 3's packed (variable-length) backward: its public callables refuse bad input with a clear error naming the
argument (no GPU)."""

import pytest
import torch

from gpulab.attention import plan
from gpulab.attention.measure import v3_backward_model as backward_model
from gpulab.attention.v3 import backward_configs, backward_varlen

P = torch.zeros(8, 2, 64, dtype=torch.float16)
F = torch.zeros(8, 2, 16, dtype=torch.float64)
CU = torch.tensor([0, 8], dtype=torch.int32)

CASES = [
    ("varlen_query_blocks window", lambda: backward_model.varlen_query_blocks(0, 128, 0, 8, 8, (-3, 0)), ValueError),
    ("model_varlen_backward shape", lambda: backward_model.model_varlen_backward(F[0], F, F, F, F, F[:, :, 0].T, CU,
                                                                                 CU, 8), ValueError),
    ("model_varlen_backward tensor", lambda: backward_model.model_varlen_backward([1.0], F, F, F, F, F[:, :, 0].T,
                                                                                  CU, CU, 8), TypeError),
    ("model_varlen_backward lse", lambda: backward_model.model_varlen_backward(F, F, F, F, F, F[:, :, 0], CU, CU, 8),
     ValueError),
    ("model_varlen_backward max_k", lambda: backward_model.model_varlen_backward(F, F, F, F, F, F[:, :, 0].T, CU,
                                                                                 CU, 0), ValueError),
    ("model_varlen_backward window", lambda: backward_model.model_varlen_backward(F, F, F, F, F, F[:, :, 0].T, CU,
                                                                                  CU, 8, window=(0, -2)), ValueError),
    ("varlen_backward_config head_dim", lambda: backward_varlen.varlen_backward_config(96), ValueError),
    ("attention_backward_varlen unsupported", lambda: backward_varlen.attention_backward_varlen(
        P, P, P, P, P, P[:, :, 0].T.float(), CU, CU, 8, 0.125), ValueError),
    ("gqa_win varlen", lambda: backward_configs.gqa_win(1, (-1, -1), varlen=1), TypeError),
    ("constexprs varlen step", lambda: backward_configs.constexprs(
        64, False, backward_configs.V3BackwardConfig(step=3), 8), ValueError),
    ("varlen_takes_v3 gate", lambda: plan.varlen_takes_v3(None, P, P, P, gate={}), TypeError),
]  # fmt: skip


@pytest.mark.parametrize("call, err", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(call, err):
    with pytest.raises(err) as info:
        call()
    assert len(str(info.value)) > 20  # says what was given and what is allowed


def test_varlen_backward_supported_says_why_without_raising():
    ok, why = backward_varlen.varlen_backward_supported(P, P, P)  # CPU tensors
    assert not ok and why
    ok, why = backward_varlen.varlen_backward_supported(P[0], P, P)
    assert not ok and "[T, H, D]" in why
    ok, why = backward_varlen.varlen_backward_supported(P[:0], P, P)
    assert not ok and "at least one" in why
