"""Version 3's packed (variable-length) backward on a Hopper GPU (``pytest -m gpu``): dQ, dK, dV of packed batches
against float64 autograd (:func:`gpulab.attention.reference.varlen_attention_reference`) at odd lengths (1, 17, an
empty sequence, Nq != Nk), windows and grouped heads, the outputs poisoned (NaN) so unwritten rows show; and
varlen_attn's backward taking version 3 where the padded problem's gate does. Skipped without CUDA (tests/conftest.py)
and where :func:`gpulab.attention.v3.backward_varlen.varlen_backward_supported` says no."""

import pytest
import torch

from gpulab import attention as A
from gpulab import check, runtime
from gpulab.attention import reference, varlen
from gpulab.attention.v3 import backward_varlen as v3v

pytestmark = pytest.mark.gpu

LENGTHS = {  # name: (query lengths, key lengths)
    "same": ([17, 1, 300, 0, 129], [17, 1, 300, 0, 129]),
    "nq-ne-nk": ([100, 0, 1, 257], [300, 5, 1, 64]),
    "no-keys": ([33, 200], [0, 190]),
}
WINDOWS = [(-1, -1), (-1, 0), (0, 0), (5, 0), (3, 7), (-1, 4), (130, 0)]


def _offsets(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")


def _inputs(lens_q, lens_k, h, h_kv, d, dtype, window, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    cu_q, cu_k = _offsets(lens_q), _offsets(lens_k)
    t_q, t_k = int(cu_q[-1]) + 5, int(cu_k[-1]) + 5  # rows of no sequence at the end
    q, do = (torch.randn(t_q, h, d, device="cuda", dtype=dtype, generator=gen) for _ in "qd")
    k, v = (torch.randn(t_k, h_kv, d, device="cuda", dtype=dtype, generator=gen) for _ in "kv")
    ok, why = v3v.varlen_backward_supported(q, k, v)
    if not ok:
        pytest.skip(why)
    o, lse, *ref = reference.varlen_attention_reference(q, k, v, cu_q, cu_k, window_size=window,
                                                        enable_gqa=h != h_kv, do=do)  # fmt: skip
    return q, k, v, o.to(dtype), lse.float(), do, cu_q, cu_k, ref


def _check(got, ref, cu_q, cu_k, dtype, what):
    end_q, end_k = int(cu_q[-1]), int(cu_k[-1])
    for name, g, r, end in zip(("dq", "dk", "dv"), got, ref, (end_q, end_k, end_k)):
        g, r = g[:end], r[:end]
        assert torch.isfinite(g).all(), f"{name} {what}: a row of a sequence unwritten (NaN) or not finite"
        if r.abs().max() == 0:  # one visible key per query: dQ = dK = 0 up to the rounding of dP - D
            assert g.double().abs().max() <= check.tolerance(dtype) * ref[2].abs().max(), f"{name} {what}"
            continue
        err = check.relative_error(g, r)
        assert err <= check.tolerance(dtype), f"{name} {what}: rel err {err:.3g}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2), (4, 1)], ids=["g1", "g2", "g4"])
@pytest.mark.parametrize("window", WINDOWS, ids=str)
@pytest.mark.parametrize("lengths", list(LENGTHS))
def test_packed_backward_matches_the_float64_reference(lengths, window, heads, d, dtype, monkeypatch):
    monkeypatch.setattr(runtime, "POISON", True)  # outputs start as NaN: an unwritten row shows
    lens_q, lens_k = LENGTHS[lengths]
    q, k, v, o, lse, do, cu_q, cu_k, ref = _inputs(lens_q, lens_k, *heads, d, dtype, window)
    got = v3v.attention_backward_varlen(do, q, k, v, o, lse, cu_q, cu_k, max(lens_k), d**-0.5, window)
    _check(got, ref, cu_q, cu_k, dtype, f"{lengths} {window} {heads} d{d} {dtype}")


@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (200, 0)], ids=str)
@pytest.mark.parametrize("heads", [(4, 4), (8, 2)], ids=["g1", "g4"])
def test_varlen_attn_backward_takes_version_3_where_the_gate_does(window, heads, monkeypatch):
    """Lengths past the gate's d64 length (1024): varlen_attn's backward runs version 3 (its plan says so) and
    matches the reference; an empty and a one-token sequence inside the batch."""
    monkeypatch.setattr(runtime, "POISON", True)
    lens_q, lens_k = [1100, 0, 17, 1, 1030], [1050, 3, 17, 1, 1100]
    q, k, v, _, _, do, cu_q, cu_k, ref = _inputs(lens_q, lens_k, *heads, 64, torch.bfloat16, window)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    args = (cu_q, cu_k, max(lens_q), max(lens_k))
    A.varlen_attn(qg, kg, vg, *args, window_size=window, enable_gqa=heads[0] != heads[1]).backward(do)
    plan = varlen.varlen_plan(q, k, v, *args, None, window, heads[0] != heads[1])
    assert plan.backward == varlen.V3_KIND, plan.backward
    _check((qg.grad, kg.grad, vg.grad), ref, cu_q, cu_k, torch.bfloat16, f"varlen_attn {window} {heads}")


def test_short_batches_keep_version_1():
    """Under the gate's lengths the backward stays version 1's two launches (the padded problem's choice)."""
    q, k, v, _, _, do, cu_q, cu_k, _ = _inputs([17, 100], [17, 100], 2, 2, 64, torch.bfloat16, (-1, -1))
    qg = q.clone().requires_grad_(True)
    A.varlen_attn(qg, k, v, cu_q, cu_k, 100, 100).backward(do)
    plan = varlen.varlen_plan(q, k, v, cu_q, cu_k, 100, 100, None, (-1, -1), False)
    assert plan.backward.__class__ is tuple, plan.backward
