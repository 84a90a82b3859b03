"""Shared builders for lesson 4's tests: random attention inputs and the check of flash_attention against float64."""

import pytest
import torch

from gpulab import attention as A
from gpulab import check


def _inputs(b, h, nq, nk, d, dtype=torch.float32, scale=1.0):
    q = check.random_tensor(b, h, nq, d, dtype=dtype, scale=scale)
    k = check.random_tensor(b, h, nk, d, dtype=dtype, scale=scale)
    v = check.random_tensor(b, h, nk, d, dtype=dtype)
    do = check.random_tensor(b, h, nq, d, dtype=dtype)
    return q, k, v, do


def _close(out, ref, dtype, name, rtol=None, context=""):
    """assert_close, except where the reference is exactly zero everywhere (a one-key softmax has dQ = dK = 0):
    then the metric has no scale, and the output must be zero up to rounding of order-one terms."""
    assert torch.isfinite(out).all(), f"{name} ({context}) has NaN or inf"
    if ref.abs().max() == 0:
        tol = rtol or check.tolerance(dtype)
        assert out.abs().max().item() <= tol, f"{name} ({context}) should be 0, got up to {out.abs().max().item()}"
        return 0.0
    return check.assert_close(out, ref, dtype=dtype, rtol=rtol, name=name, context=context)


def _check_attention(b, h, nq, nk, d, causal, dtype, scale=1.0, rtol=None, grad_rtol=None):
    q, k, v, do = _inputs(b, h, nq, nk, d, dtype, scale)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    o = A.flash_attention(qg, kg, vg, is_causal=causal)
    o.backward(do)
    o_ref, dq_ref, dk_ref, dv_ref = A.attention_reference(q, k, v, is_causal=causal, do=do)
    ctx = f"B={b} H={h} Nq={nq} Nk={nk} D={d} causal={causal} {dtype}"
    _close(o.detach(), o_ref, dtype, "O", rtol, ctx)
    for name, g, ref in (("dQ", qg.grad, dq_ref), ("dK", kg.grad, dk_ref), ("dV", vg.grad, dv_ref)):
        _close(g, ref, dtype, name, grad_rtol or rtol, ctx)
    if causal and nk > nq:  # keys that no query sees
        assert (kg.grad[:, :, nq:] == 0).all() and (vg.grad[:, :, nq:] == 0).all()


@pytest.fixture
def attention_inputs():
    """``make(b, h, nq, nk, d, dtype=float32, scale=1.0) -> (q, k, v, do)``: fresh random inputs on gpulab's device."""
    return _inputs


@pytest.fixture
def check_attention():
    """``check(b, h, nq, nk, d, causal, dtype, scale=1.0, rtol=None, grad_rtol=None)``: flash_attention's output
    and gradients against the float64 reference (fresh inputs; keys no causal query sees get zero gradients)."""
    return _check_attention


@pytest.fixture
def close():
    """``close(out, ref, dtype, name, rtol=None, context="")``: assert_close that also handles an all-zero ref."""
    return _close
