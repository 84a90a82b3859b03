"""Version 3's packed (varlen) forward on a Hopper GPU (``pytest -m gpu``): the kernel against the float64 varlen
reference (called directly: ``varlen_attn`` keeps version 1 for tiny batches), ``varlen_attn`` checked to take
version 3 above ``plan.SMALL_WORK``, odd lengths, an empty sequence inside the batch, Nq != Nk,
windows, grouped-query heads, outputs poisoned (rows outside every sequence must stay untouched, every row of a
sequence written), both grids (persistent, the default, and one tile per program), the backward (version 1) fed by
version 3's O and LSE, and a CUDA-graph replay with new offsets.
Skipped without CUDA and where :func:`gpulab.attention.v3.varlen_forward.supported` says no."""

import pytest
import torch

from gpulab import attention as A
from gpulab import check, runtime
from gpulab.attention import varlen
from gpulab.attention.v3 import varlen_forward as v3v

pytestmark = pytest.mark.gpu


def _offsets(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")


def _inputs(lens_q, lens_k, hq, hkv, d, dtype, window=(-1, -1), seed=0, pad=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tq, tk = sum(lens_q) + pad, sum(lens_k)
    q = torch.randn(tq, hq, d, device="cuda", dtype=dtype, generator=gen)
    k, v = (torch.randn(tk, hkv, d, device="cuda", dtype=dtype, generator=gen) for _ in "kv")
    ok, why = v3v.supported(q, k, v, None, window, hq != hkv)
    if not ok:
        pytest.skip(why)
    return q, k, v, _offsets(lens_q), _offsets(lens_k)


def _run(q, k, v, cu_q, cu_k, lens_q, lens_k, window):
    """Version 3's packed forward called directly (``varlen_attn`` keeps version 1 below ``plan.SMALL_WORK``)."""
    return v3v.attention_forward_varlen(q, k, v, cu_q, cu_k, max(lens_q), q.shape[2] ** -0.5, window)


def _routed(q, k, v, cu_q, cu_k, max_q, max_k, window):
    """``varlen_attn``'s forward plan, asserting that version 3 ran."""
    plan = varlen.varlen_plan(q, k, v, cu_q, cu_k, max_q, max_k, None, window, q.shape[1] != k.shape[1])
    assert plan.forward_version == 3, f"varlen_attn's forward ran version {plan.forward_version}, not 3"


# (query lengths, key lengths, Hq, Hkv, window)
PROBLEMS = [
    ([1], [1], 2, 2, (-1, -1)),
    ([1, 17, 0, 100, 333], [1, 17, 0, 100, 333], 4, 2, (-1, -1)),  # an empty sequence inside the batch
    ([1, 17, 0, 100, 333], [1, 17, 0, 100, 333], 8, 2, (-1, 0)),  # causal (bottom-right), GQA group 4
    ([17, 100, 5, 1000], [40, 60, 5, 999], 4, 4, (-1, 0)),  # Nq != Nk
    ([100, 17, 3, 700], [17, 300, 1, 1300], 4, 1, (-1, -1)),  # MQA, Nq != Nk both ways
    ([5, 30, 7], [5, 0, 9], 2, 1, (-1, -1)),  # a sequence with queries and no keys: O = 0, LSE = 0
    ([333, 17, 1, 2049], [300, 17, 1, 2049], 4, 2, (3, 7)),
    ([200, 0, 129, 4096], [200, 4, 129, 4096], 4, 4, (256, 0)),
    ([100, 40, 777], [17, 40, 129], 2, 2, (-1, 4)),  # rows that see no key
    ([3696 // 4] * 2 + [3696 // 8] * 4, [3696 // 4] * 2 + [3696 // 8] * 4, 16, 16, (-1, -1)),  # the benchmark's mix
]
IDS = [f"{len(p[0])}seq-{max(p[0])}-{p[2]}x{p[3]}-{p[4]}" for p in PROBLEMS]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("case", PROBLEMS, ids=IDS)
def test_varlen_v3_matches_float64(case, d, dtype):
    assert runtime.POISON  # tests/conftest.py: outputs start as NaN, so an unwritten row shows
    lens_q, lens_k, hq, hkv, window = case
    q, k, v, cu_q, cu_k = _inputs(lens_q, lens_k, hq, hkv, d, dtype, window, pad=5)  # 5 rows after the last sequence
    o, lse = _run(q, k, v, cu_q, cu_k, lens_q, lens_k, window)
    ref_o, ref_lse = A.varlen_attention_reference(q, k, v, cu_q, cu_k, window_size=window, enable_gqa=hq != hkv)
    end = sum(lens_q)
    assert torch.isfinite(o[:end]).all() and torch.isfinite(lse[:, :end]).all(), "a row of a sequence not written"
    assert torch.isnan(o[end:]).all() and torch.isnan(lse[:, end:]).all(), "rows outside every sequence written"
    err_o = check.relative_error(o[:end], ref_o[:end])
    err_lse = check.relative_error(lse[:, :end], ref_lse[:, :end].to(lse.device))
    assert err_o <= check.tolerance(dtype), f"{case}: o relative error {err_o:.3g}"
    assert err_lse <= 1e-3, f"{case}: lse relative error {err_lse:.3g}"


# Many tiles per program on the persistent grid: most programs take several tiles, skipping those past their
# sequence's end (lengths 1..3001 mixed: most of the (query tile, head, sequence) items are empty).
MANY = [1 + (977 * i) % 3001 for i in range(40)] + [0, 3001]


@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (3, 7)])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "one-tile-per-program"])
def test_varlen_v3_persistent_and_one_tile_per_program(persistent, d, window):
    """Both grids (:func:`v3v.varlen_config`'s switch: persistent with two Q buffers, or one tile per program with
    one) against the float64 reference, every row of a sequence written and no other."""
    lens_k = [n + (i % 3) - 1 if n > 1 else n for i, n in enumerate(MANY)]  # Nq != Nk for most sequences
    q, k, v, cu_q, cu_k = _inputs(MANY, lens_k, 8, 2, d, torch.bfloat16, window, seed=3, pad=3)
    cfg = v3v.varlen_config(d, window, max(MANY), persistent)
    assert cfg.persistent == persistent and cfg.q_buffers == (2 if persistent else 1)
    o, lse = v3v.attention_forward_varlen(q, k, v, cu_q, cu_k, max(MANY), d**-0.5, window, cfg)
    ref_o, ref_lse = A.varlen_attention_reference(q, k, v, cu_q, cu_k, window_size=window, enable_gqa=True)
    end = sum(MANY)
    assert torch.isfinite(o[:end]).all() and torch.isfinite(lse[:, :end]).all(), "a row of a sequence not written"
    assert torch.isnan(o[end:]).all() and torch.isnan(lse[:, end:]).all(), "rows outside every sequence written"
    assert check.relative_error(o[:end], ref_o[:end]) <= check.tolerance(torch.bfloat16)
    assert check.relative_error(lse[:, :end], ref_lse[:, :end].to(lse.device)) <= 1e-3


@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (256, 0)])
@pytest.mark.parametrize("d", [64, 128])
def test_varlen_attn_takes_version_3(d, window):
    """Above ``plan.SMALL_WORK`` on Hopper ``varlen_attn``'s forward is version 3's, with its O and LSE."""
    lens = [1000, 17, 0, 3001, 1, 129]
    q, k, v, cu, _ = _inputs(lens, lens, 8, 2, d, torch.bfloat16, window, seed=2)
    o, lse = A.varlen_attn(q, k, v, cu, cu, 3001, 3001, window_size=window, enable_gqa=True,
                           return_aux=A.AuxRequest(lse=True))  # fmt: skip
    _routed(q, k, v, cu, cu, 3001, 3001, window)
    ref_o, ref_lse = A.varlen_attention_reference(q, k, v, cu, cu, window_size=window, enable_gqa=True)
    assert check.relative_error(o, ref_o) <= check.tolerance(torch.bfloat16)
    assert check.relative_error(lse, ref_lse.to(lse.device)) <= 1e-3


@pytest.mark.parametrize("d", [64, 128])
def test_backward_reads_version_3s_o_and_lse(d):
    lens, window = [1000, 0, 3000, 129], (-1, 0)
    q, k, v, cu, _ = _inputs(lens, lens, 8, 2, d, torch.bfloat16, window, seed=1)
    do = torch.randn_like(q)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = A.varlen_attn(qg, kg, vg, cu, cu, 3000, 3000, window_size=window, enable_gqa=True)
    _routed(qg, kg, vg, cu, cu, 3000, 3000, window)
    o.backward(do)
    refs = A.varlen_attention_reference(q, k, v, cu, cu, window_size=window, enable_gqa=True, do=do)
    for name, got, ref in zip(("O", "dQ", "dK", "dV"), (o.detach(), qg.grad, kg.grad, vg.grad), refs[:1] + refs[2:]):
        err = check.relative_error(got, ref)
        assert err <= 2 * check.tolerance(torch.bfloat16), f"{name}: relative error {err:.3g}"


def test_cuda_graph_replay_with_new_offsets():
    """The offsets are read on the device only: a captured launch replayed with other offsets (same shapes) computes
    the other batch."""
    lens, other = [1000, 0, 1, 3000], [2000, 1500, 500, 1]
    q, k, v, cu, _ = _inputs(lens, lens, 8, 2, 128, torch.bfloat16, (-1, 0))
    A.varlen_attn(q, k, v, cu, cu, 3000, 3000, enable_gqa=True, window_size=(-1, 0))  # compile, outside capture
    _routed(q, k, v, cu, cu, 3000, 3000, (-1, 0))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o = A.varlen_attn(q, k, v, cu, cu, 3000, 3000, enable_gqa=True, window_size=(-1, 0))
    cu.copy_(_offsets(other))
    graph.replay()
    ref, _ = A.varlen_attention_reference(q, k, v, cu, cu, window_size=(-1, 0), enable_gqa=True)
    assert check.relative_error(o, ref) <= check.tolerance(torch.bfloat16)
