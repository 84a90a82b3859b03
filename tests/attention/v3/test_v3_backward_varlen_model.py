"""Version 3's packed (variable-length) backward, its CPU model against the float64 reference: the programs, query
block ranges, edge masks and stores of the kernel's ``GQA_WIN`` bit 8 (v3/backward_varlen.py), at odd lengths (1, 17,
100, an empty sequence inside the batch, Nq != Nk), windows and groups 1/2/4."""

import pytest
import torch

from gpulab.attention import reference
from gpulab.attention.measure import v3_backward_model as model


def _offsets(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


# (query lengths, key lengths, Hq, Hkv, window); 3 rows past the last sequence in each tensor
CASES = [
    ("plain", [17, 100, 1], [17, 100, 1], 2, 2, (-1, -1)),
    ("empty-inside-group2", [17, 0, 100, 1], [30, 5, 100, 1], 4, 2, (-1, -1)),
    ("causal-nq-ne-nk-group4", [100, 17, 1], [70, 150, 3], 4, 1, (-1, 0)),
    ("window-5-0", [100, 17], [100, 40], 2, 1, (5, 0)),
    ("window-3-7-group2", [1, 100, 17], [9, 100, 17], 4, 2, (3, 7)),
    ("window-m1-4-no-keys", [17, 100], [0, 130], 2, 2, (-1, 4)),
    ("window-0-0", [100, 1], [100, 1], 2, 2, (0, 0)),
]


@pytest.mark.parametrize("case", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_model_varlen_backward_matches_the_float64_reference(case):
    lens_q, lens_k, hq, hkv, window = case
    cu_q, cu_k = _offsets(lens_q), _offsets(lens_k)
    t_q, t_k, d = int(cu_q[-1]) + 3, int(cu_k[-1]) + 3, 16
    g = torch.Generator().manual_seed(sum(lens_q) * 7 + hq)
    q, do = (torch.randn(t_q, hq, d, generator=g, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(t_k, hkv, d, generator=g, dtype=torch.float64) for _ in range(2))
    o, lse, dq_ref, dk_ref, dv_ref = reference.varlen_attention_reference(
        q, k, v, cu_q, cu_k, window_size=window, enable_gqa=hq != hkv, do=do)  # fmt: skip
    dq, dk, dv = model.model_varlen_backward(q, k, v, o, do, lse, cu_q, cu_k, max(lens_k), window=window,
                                             acc_dtype=torch.float64)  # fmt: skip
    end_q, end_k = int(cu_q[-1]), int(cu_k[-1])
    for name, out, ref in (("dQ", dq[:end_q], dq_ref[:end_q]), ("dK", dk[:end_k], dk_ref[:end_k]),
                           ("dV", dv[:end_k], dv_ref[:end_k])):  # fmt: skip
        assert not out.isnan().any(), f"{name}: a row of a sequence was not written ({case})"
        err = (out - ref).abs().max() / ref.abs().max().clamp_min(1e-3)  # window (0, 0): dQ = 0 exactly
        assert err < 1e-10, f"{name}: relative error {err:.2e} ({case})"
    assert dk[end_k:].isnan().all() and dv[end_k:].isnan().all(), "key rows of no sequence were written"
    assert (dq[end_q:] == 0).all()


@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (5, 0), (3, 7), (-1, 4), (0, 0)])
def test_varlen_query_blocks_cover_every_visible_query_and_stay_in_the_sequence(window):
    """Each key block's query blocks start at or after its sequence's first query (dQ never reaches the sequence
    before) and cover every query that sees one of its keys (the visible mask per sequence, bottom-right)."""
    for len_q, len_k, q_off, k_off in ((100, 17, 3, 40), (17, 130, 64, 0), (1, 1, 5, 5), (0, 9, 7, 2), (70, 0, 1, 1)):
        q_end, k_end = q_off + len_q, k_off + len_k
        seen = reference.visible_mask(len_q, len_k, False, window) if len_q and len_k else None
        for pid in range(-(-max(len_k, 1) // 128) + 1):
            start_n = k_off + 128 * pid
            lo, n_m = model.varlen_query_blocks(start_n, 128, q_off, q_end, k_end, window)
            assert lo >= q_off and (lo - q_off) % 64 == 0
            keys = slice(start_n - k_off, min(start_n + 128, k_end) - k_off)
            need = seen[:, keys].any(1).nonzero().flatten() + q_off if seen is not None and keys.start < len_k else []
            for i in need:
                assert lo <= i < lo + 64 * max(n_m, 0), (window, len_q, len_k, pid, int(i), lo, n_m)
