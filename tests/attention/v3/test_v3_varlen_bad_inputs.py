"""Bad input to version 3's packed (varlen) forward and its CPU model: each raises naming the argument, or (the
gates) says no with the reason."""

import pytest
import torch

from gpulab.attention import varlen
from gpulab.attention.measure import v3_schedule_model as sm
from gpulab.attention.v3 import tiles, varlen_forward

CU = torch.tensor([0, 3, 8], dtype=torch.int32)
P = torch.zeros(8, 2, 64, dtype=torch.float64)

CASES = [
    ("varlen_tile_table max_q", lambda: tiles.varlen_tile_table(CU, CU, 0, 2), ValueError, "max_q"),
    ("varlen_tile_table heads", lambda: tiles.varlen_tile_table(CU, CU, 5, -1), ValueError, "heads"),
    ("varlen_tile_table dtype", lambda: tiles.varlen_tile_table(CU.long(), CU, 5, 2), ValueError, "cu_seq_q"),
    ("varlen_tile_table lengths", lambda: tiles.varlen_tile_table(CU, CU[:2], 5, 2), ValueError, "cu_seq_k"),
    ("varlen_tile_table window", lambda: tiles.varlen_tile_table(CU, CU, 5, 2, window_size=(0, -5)), ValueError,
     "window"),
    ("varlen_tiles window", lambda: sm.varlen_tiles(CU, CU, 5, 2, window_size=(1, 2, 3)), TypeError, "window"),
    ("model_varlen_forward step", lambda: sm.model_varlen_forward(P, P, P, CU, CU, 5, step=4), ValueError, "step"),
    ("model_varlen_forward consumers", lambda: sm.model_varlen_forward(P, P, P, CU, CU, 5, consumers=1), ValueError,
     "consumers"),
    ("attention_forward_varlen on the CPU", lambda: varlen_forward.attention_forward_varlen(P, P, P, CU, CU, 5, 0.1),
     ValueError, "version 3"),
    ("attention_forward_varlen window", lambda: varlen_forward.attention_forward_varlen(P, P, P, CU, CU, 5, 0.1,
                                                                                        (0, -3)), ValueError, "window"),
    ("varlen_config head dim", lambda: varlen_forward.varlen_config(96), ValueError, "head_dim"),
    ("varlen_config window", lambda: varlen_forward.varlen_config(64, (0, -2)), ValueError, "window"),
    ("varlen_config persistent", lambda: varlen_forward.varlen_config(64, persistent=1), TypeError, "persistent"),
    ("varlen_tile_table programs", lambda: tiles.varlen_tile_table(CU, CU, 5, 2, programs=0), ValueError,
     "programs"),
    ("varlen_persistent_tiles programs", lambda: sm.varlen_persistent_tiles(CU, CU, 5, 2, 0), ValueError,
     "programs"),
    ("varlen_balance programs", lambda: sm.varlen_balance(CU, CU, 5, 2, 0), ValueError, "programs"),
    ("varlen_balance window", lambda: sm.varlen_balance(CU, CU, 5, 2, 4, window_size=(-3, 0)), ValueError, "window"),
    ("model_varlen_forward programs", lambda: sm.model_varlen_forward(P, P, P, CU, CU, 5, programs=-1), ValueError,
     "programs"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input(case):
    _, call, err, word = case
    with pytest.raises(err, match=word):
        call()


def test_the_gates_say_no_with_the_reason():
    ok, why = varlen_forward.supported(P[0], P, P)
    assert not ok and "packed [T, H, D]" in why
    ok, why = varlen_forward.supported(P, P, P)  # float64 on the CPU
    assert not ok and why
    assert varlen_forward.aligned(P, P) and not varlen_forward.aligned(P.transpose(0, 1))
    f = P.float()
    plan = varlen.varlen_plan(f, f, f, CU, CU, 5, 5, None, (-1, -1), False)
    assert varlen.v3_gate(plan, f, f, f) is False  # float32 (and not on a GPU): version 1
