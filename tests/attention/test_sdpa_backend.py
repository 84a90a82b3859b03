"""gpulab as PyTorch's flash attention (gpulab.attention.sdpa): the registration, the aten operators' implementations
against a float64 reference, their outputs' layouts against the operators' meta functions.

On CPU the activation's CUDA kernels never run (SDPA on CPU tensors takes other operators), so these tests register
the same implementations for the CPU key (``activate_kernels("CPU")``, the ``routed`` fixture; the CUDA key when the
suite runs on a GPU) and call the aten operators themselves: through the dispatcher, with aten's own derivative
formulas for the backward, and through torch's ``varlen_attn``. The GPU tests (``-m gpu``) run a model that calls
only SDPA. Refusals and bad input: ``test_sdpa_bad_input.py``.
"""

import inspect
import itertools

import pytest
import torch
import torch.nn.attention as tna

from gpulab import check, runtime
from gpulab.attention import plan, sdpa
from gpulab.attention.sdpa import sdpa_status

aten = torch.ops.aten

HAS_WINDOWS = "window_size" in inspect.signature(plan.attention_forward).parameters
HAS_GQA = "enable_gqa" in inspect.signature(plan.attention_forward).parameters
try:
    from gpulab.attention.varlen import varlen_attn as _gpulab_varlen  # noqa: F401
except ImportError:
    _gpulab_varlen = None
needs_windows = pytest.mark.skipif(not HAS_WINDOWS, reason="gpulab.attention.attention_forward has no window_size")
needs_gqa = pytest.mark.skipif(not HAS_GQA, reason="gpulab.attention.attention_forward has no enable_gqa")
needs_varlen = pytest.mark.skipif(_gpulab_varlen is None, reason="gpulab.attention.varlen_attn is not in this build")


# ----------------------------------------------------------------------------------------------------------------
# the float64 reference: q [B, H, Nq, D], k and v [B, Hkv, Nk, D], a boolean mask [Nq, Nk] (True: visible)


def top_left_causal(n_q, n_k):
    return torch.ones(n_q, n_k, dtype=torch.bool).tril()


def bottom_right(n_q, n_k, left, right):
    i = torch.arange(n_q)[:, None] + (n_k - n_q)
    j = torch.arange(n_k)[None, :]
    ok = torch.ones(n_q, n_k, dtype=torch.bool)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok


def reference(q, k, v, mask=None, scale=None, do=None):
    """float64 ``(O, LSE, dQ, dK, dV)`` (gradients None without ``do``); rows that see no key: O = 0, LSE = 0."""
    q64, k64, v64 = (t.detach().double().requires_grad_(do is not None) for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    with torch.enable_grad():
        kk, vv = (t.repeat_interleave(group, dim=1) for t in (k64, v64))
        s = q64 @ kk.transpose(-1, -2) * scale
        if mask is not None:
            s = s.masked_fill(~mask.to(s.device), float("-inf"))
        lse = torch.logsumexp(s, -1)
        p = torch.where(torch.isfinite(lse)[..., None], torch.exp(s - lse[..., None]), torch.zeros_like(s))
        o = p @ vv
        grads = (None, None, None)
        if do is not None:
            grads = torch.autograd.grad(o, (q64, k64, v64), do.double())
    return o.detach(), torch.where(torch.isfinite(lse), lse, 0).detach(), *grads


def rand(*shape, requires_grad=False):
    t = check.random_tensor(*shape)
    return t.requires_grad_(requires_grad)


def close(out, ref, name, context=""):
    assert torch.isfinite(out).all(), f"{name} ({context}) has NaN or inf: an element left unwritten"
    check.assert_close(out, ref, dtype=torch.float32, name=name, context=context)


@pytest.fixture
def routed():
    """gpulab's implementations registered for the key of gpulab's device for one test (CPU here; CUDA when the
    suite runs on a GPU, where these tests' fp32 inputs would otherwise reach PyTorch's own kernels), then removed."""
    handle = sdpa.activate_kernels("CUDA" if runtime.on_gpu() else "CPU")
    yield handle
    handle.remove()


# ----------------------------------------------------------------------------------------------------------------
# registration


def _cuda_kernel_is_gpulab(op: str) -> bool:
    table = torch._C._dispatch_dump(f"aten::{op}")
    return any(line.startswith("CUDA:") and "gpulab" in line and "sdpa.py" in line for line in table.splitlines())


def test_registered_at_import_not_active():
    assert "gpulab" in tna.list_flash_attention_impls()
    assert sdpa_status() == {"name": "gpulab", "registered": True, "why": None, "active": False}
    assert tna.current_flash_attention_impl() != "gpulab"
    assert not _cuda_kernel_is_gpulab("_scaled_dot_product_flash_attention")


def test_activate_and_restore_round_trip():
    ops = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
           "_flash_attention_forward", "_flash_attention_backward")  # fmt: skip
    tna.activate_flash_attention_impl("gpulab")
    try:
        assert tna.current_flash_attention_impl() == "gpulab"
        assert sdpa_status()["active"] is True
        assert all(_cuda_kernel_is_gpulab(op) for op in ops)
        tna.activate_flash_attention_impl("gpulab")  # again: the registry restores first, one override at a time
        assert all(_cuda_kernel_is_gpulab(op) for op in ops)
    finally:
        tna.restore_flash_attention_impl()
    assert tna.current_flash_attention_impl() is None
    assert sdpa_status()["active"] is False
    assert not any(_cuda_kernel_is_gpulab(op) for op in ops)


def test_no_registry_no_registration_and_says_why(monkeypatch):
    monkeypatch.delattr(tna, "register_flash_attention_impl")
    try:
        assert sdpa.register() is False
        status = sdpa_status()
        assert status["registered"] is False and "register_flash_attention_impl" in status["why"]
    finally:
        monkeypatch.undo()
        assert sdpa.register() is True
    assert sdpa_status()["registered"] is True


def test_info_reports_the_registration(capsys):
    from gpulab import __main__ as cli

    assert cli.main(["info"]) == 0
    assert "SDPA flash implementation 'gpulab': registered, not active" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------------------------
# SDPA's operator, through the dispatcher (its backward through aten's derivative formula)

SDPA_CASES = [
    (1, 1, 1, 1, 1, False),
    (2, 3, 17, 17, 16, True),
    (1, 2, 17, 33, 8, False),
]


@pytest.mark.parametrize("b,h,nq,nk,d,causal", SDPA_CASES, ids=lambda x: str(x))
def test_sdpa_flash_op_matches_reference(routed, b, h, nq, nk, d, causal):
    _check_sdpa_op(b, h, nq, nk, d, causal)


@needs_windows
def test_sdpa_flash_op_causal_non_square_is_bottom_right(routed):
    # as the FlashAttention-2 kernel it replaces (SDPA itself never sends this problem to its flash backend)
    _check_sdpa_op(1, 2, 5, 19, 24, True)


def _check_sdpa_op(b, h, nq, nk, d, causal):
    q = rand(b, h, nq, d, requires_grad=True)
    k, v = rand(b, h, nk, d, requires_grad=True), rand(b, h, nk, d, requires_grad=True)
    do = rand(b, h, nq, d)
    res = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, scale=0.3)
    o, lse = res[0], res[1]
    o.backward(do)
    ref = reference(q, k, v, bottom_right(nq, nk, -1, 0) if causal else None, 0.3, do)
    ctx = f"B={b} H={h} Nq={nq} Nk={nk} D={d} causal={causal}"
    for name, out, r in zip(("O", "LSE", "dQ", "dK", "dV"), (o.detach(), lse, q.grad, k.grad, v.grad), ref):
        close(out, r, name, ctx)
    assert res[4:6] == (nq, nk)
    assert res[6].dtype == torch.uint64 and res[6].shape == (2,)


@needs_gqa
def test_sdpa_flash_op_grouped_heads(routed):
    q, do = rand(2, 6, 13, 16, requires_grad=True), rand(2, 6, 13, 16)
    k, v = rand(2, 2, 21, 16, requires_grad=True), rand(2, 2, 21, 16, requires_grad=True)
    o = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False)[0]
    o.backward(do)
    ref = reference(q, k, v, None, None, do)
    for name, out, r in zip(("O", "dQ", "dK", "dV"), (o.detach(), q.grad, k.grad, v.grad), ref[:1] + ref[2:]):
        close(out, r, name, "Hq=6 Hkv=2")


def test_sdpa_flash_op_output_keeps_query_layout(routed):
    # q, k, v as transposed views of [B, N, H, D] (how attention modules make them): O like q, gradients like each
    base = [rand(2, 11, 3, 8) for _ in range(3)]
    q, k, v = (t.transpose(1, 2).requires_grad_(True) for t in base)
    o = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0]
    assert o.stride() == torch.empty_like(q).stride()
    do = rand(2, 3, 11, 8)
    dq, dk, dv = aten._scaled_dot_product_flash_attention_backward(
        do, q, k, v, o, aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[1], None, None, 11, 11, 0.0,
        True, torch.zeros(2, dtype=torch.uint64), torch.zeros((), dtype=torch.uint64))  # fmt: skip
    for g, t in ((dq, q), (dk, k), (dv, v)):
        assert g.stride() == torch.empty_like(t).stride()
    ref = reference(q, k, v, top_left_causal(11, 11), None, do)
    close(o.detach(), ref[0], "O")
    for name, g, r in zip(("dQ", "dK", "dV"), (dq, dk, dv), ref[2:]):
        close(g, r, name)


# ----------------------------------------------------------------------------------------------------------------
# FlashAttention's operator, dense [B, N, H, D]: FlashAttention's bottom-right mask


def _bnhd(t):
    return t.transpose(1, 2).contiguous()


DENSE_CASES = [(2, 3, 17, 17, 16, True, None, None), (1, 2, 9, 23, 8, False, None, None)]
DENSE_WINDOWED = [(1, 2, 9, 23, 8, True, None, None), (1, 2, 19, 19, 16, False, 4, 0), (1, 1, 7, 12, 8, False, 3, 2)]


def _check_dense(b, h, nq, nk, d, causal, left, right):
    q, k, v, do = rand(b, h, nq, d), rand(b, h, nk, d), rand(b, h, nk, d), rand(b, h, nq, d)
    qb, kb, vb, dob = (_bnhd(t) for t in (q, k, v, do))
    window = {"window_size_left": left, "window_size_right": right}
    out, lse, rng, offset, debug = aten._flash_attention_forward(qb, kb, vb, None, None, nq, nk, 0.0, causal, False,
                                                                 **window)  # fmt: skip
    grads = aten._flash_attention_backward(dob, qb, kb, vb, out, lse, None, None, nq, nk, 0.0, causal, rng, offset,
                                           **window)  # fmt: skip
    w = (-1 if left is None else left, 0 if causal else (-1 if right is None else right))
    ref = reference(q, k, v, bottom_right(nq, nk, *w), None, do)
    ctx = f"B={b} H={h} Nq={nq} Nk={nk} causal={causal} window={w}"
    close(out.transpose(1, 2), ref[0], "O", ctx)
    close(lse, ref[1], "LSE", ctx)
    for name, g, r in zip(("dQ", "dK", "dV"), grads, ref[2:]):
        close(g.transpose(1, 2), r, name, ctx)
    assert debug.numel() == 0 and offset.dtype == torch.uint64


@pytest.mark.parametrize("case", DENSE_CASES, ids=lambda x: str(x))
def test_flash_forward_dense_matches_reference(routed, case):
    _check_dense(*case)


@needs_windows
@pytest.mark.parametrize("case", DENSE_WINDOWED, ids=lambda x: str(x))
def test_flash_forward_dense_windows_match_reference(routed, case):
    _check_dense(*case)


# ----------------------------------------------------------------------------------------------------------------
# packed batches: q [T, H, D], int32 offsets


LENGTHS = [(5, 5), (1, 1), (0, 0), (17, 17), (3, 3)]  # an empty sequence inside the batch, a single token


def _packed(lengths, h=2, h_kv=2, d=8):
    cu_q = torch.tensor([0] + [sum(n for n, _ in lengths[: i + 1]) for i in range(len(lengths))], dtype=torch.int32)
    cu_k = torch.tensor([0] + [sum(m for _, m in lengths[: i + 1]) for i in range(len(lengths))], dtype=torch.int32)
    t_q, t_k = int(cu_q[-1]), int(cu_k[-1])
    q, do = rand(t_q, h, d), rand(t_q, h, d)
    k, v = rand(t_k, h_kv, d), rand(t_k, h_kv, d)
    return q, k, v, do, cu_q.to(runtime.device), cu_k.to(runtime.device)


def _packed_reference(q, k, v, do, cu_q, cu_k, window):
    """Per sequence, the dense reference: (O, LSE [H, T], dQ, dK, dV) packed like the inputs."""
    o, dq, dk, dv = (torch.zeros_like(t, dtype=torch.float64) for t in (q, q, k, v))
    lse = torch.zeros(q.shape[1], q.shape[0], dtype=torch.float64, device=q.device)
    for a, b, c, e in zip(cu_q[:-1].tolist(), cu_q[1:].tolist(), cu_k[:-1].tolist(), cu_k[1:].tolist()):
        if b == a:
            continue
        parts = (t[lo:hi].transpose(0, 1)[None] for t, lo, hi in ((q, a, b), (k, c, e), (v, c, e), (do, a, b)))
        qs, ks, vs, dos = parts
        r = reference(qs, ks, vs, bottom_right(b - a, e - c, *window), None, dos)
        o[a:b], dq[a:b], dk[c:e], dv[c:e] = (x[0].transpose(0, 1) for x in (r[0], r[2], r[3], r[4]))
        lse[:, a:b] = r[1][0]
    return o, lse, dq, dk, dv


@pytest.mark.parametrize("causal", [False, True])
def test_packed_backward_from_saved_lse(routed, causal):
    # the backward alone (the forward's O and LSE from the reference): one dense backward per sequence
    q, k, v, do, cu_q, cu_k = _packed(LENGTHS)
    window = (-1, 0) if causal else (-1, -1)
    o, lse, dq_ref, dk_ref, dv_ref = _packed_reference(q, k, v, do, cu_q, cu_k, window)
    rng, offset = torch.zeros(2, dtype=torch.uint64), torch.zeros((), dtype=torch.uint64)
    grads = aten._flash_attention_backward(do, q, k, v, o.float(), lse.float(), cu_q, cu_k, 17, 17, 0.0, causal, rng,
                                           offset)  # fmt: skip
    for name, g, r in zip(("dQ", "dK", "dV"), grads, (dq_ref, dk_ref, dv_ref)):
        close(g, r, name, f"lengths={LENGTHS} causal={causal}")


@needs_varlen
@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (3, 0)], ids=str)
def test_torch_varlen_attn_runs_on_gpulab(routed, window):
    # torch's own varlen_attn, whose operators now dispatch to gpulab on CPU tensors: forward and backward
    from torch.nn.attention.varlen import varlen_attn

    lengths = [(5, 9), (1, 1), (0, 4), (17, 17)] if window != (-1, -1) else LENGTHS
    q, k, v, do, cu_q, cu_k = _packed(lengths, h=4, h_kv=4)
    qg, kg, vg = (t.clone().requires_grad_(True) for t in (q, k, v))
    max_q, max_k = max(n for n, _ in lengths), max(m for _, m in lengths)
    o = varlen_attn(qg, kg, vg, cu_q, cu_k, max_q, max_k, window_size=window)
    o.backward(do)
    ref = _packed_reference(q, k, v, do, cu_q, cu_k, window)
    for name, out, r in zip(("O", "dQ", "dK", "dV"), (o.detach(), qg.grad, kg.grad, vg.grad), ref[:1] + ref[2:]):
        close(out, r, name, f"lengths={lengths} window={window}")


# ----------------------------------------------------------------------------------------------------------------
# layouts against the meta functions (what FakeTensor and torch.compile see)


def _same_layout(real, fake, what):
    for i, (r, f) in enumerate(zip(real, fake)):
        if isinstance(f, torch.Tensor):
            assert (r.shape, r.dtype, r.stride()) == (f.shape, f.dtype, f.stride()), f"{what} output {i}"
        else:
            assert r == f, f"{what} output {i}: {r!r} vs {f!r}"


def _check_against_meta(call, tensors, what):
    from torch._subclasses.fake_tensor import FakeTensorMode

    real = call(*tensors)
    meta = call(*(t.to("meta") for t in tensors))
    with FakeTensorMode() as mode:
        fake = call(*(mode.from_tensor(t) for t in tensors))
    _same_layout(real, meta, f"{what} (meta)")
    _same_layout(real, fake, f"{what} (FakeTensor)")
    return real


def test_outputs_match_meta_and_fake_tensors(routed):
    q = rand(2, 9, 3, 8).transpose(1, 2)  # SDPA's layout as a view of [B, N, H, D]
    k, v = rand(2, 3, 14, 8), rand(2, 3, 14, 8)
    u2 = torch.zeros(2, dtype=torch.uint64, device=q.device)  # no dropout: no seed (on q's device, as the op's own)
    u0 = torch.zeros((), dtype=torch.uint64, device=q.device)

    def sdpa_fwd(q, k, v):
        return aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False)

    def flash_fwd(q, k, v):
        return aten._flash_attention_forward(q, k, v, None, None, 9, 14, 0.0, False, False)

    o, lse = _check_against_meta(sdpa_fwd, (q, k, v), "_scaled_dot_product_flash_attention")[:2]
    assert lse.dtype == torch.float32 and lse.shape == (2, 3, 9)
    do = rand(2, 9, 3, 8).transpose(1, 2)

    def sdpa_bwd(do, q, k, v, o, lse, u2, u0):
        return aten._scaled_dot_product_flash_attention_backward(do, q, k, v, o, lse, None, None, 9, 14, 0.0, False,
                                                                 u2, u0)  # fmt: skip

    def flash_bwd(do, q, k, v, o, lse, u2, u0):
        return aten._flash_attention_backward(do, q, k, v, o, lse, None, None, 9, 14, 0.0, False, u2, u0)

    _check_against_meta(sdpa_bwd, (do, q, k, v, o, lse, u2, u0), "_scaled_dot_product_flash_attention_backward")
    qb, kb, vb, dob = (t.transpose(1, 2) for t in (q, k, v, do))
    ob, lse = _check_against_meta(flash_fwd, (qb, kb, vb), "_flash_attention_forward")[:2]
    _check_against_meta(flash_bwd, (dob, qb, kb, vb, ob, lse, u2, u0), "_flash_attention_backward")


@needs_varlen
def test_packed_outputs_match_meta(routed):
    q, k, v, _, cu_q, cu_k = _packed([(3, 7), (0, 2), (5, 5)], h=4, h_kv=2)

    def varlen_fwd(q, k, v, cu_q, cu_k):
        return aten._flash_attention_forward(q, k, v, cu_q, cu_k, 5, 7, 0.0, False, False)

    lse = _check_against_meta(varlen_fwd, (q, k, v, cu_q, cu_k), "_flash_attention_forward (packed)")[1]
    assert lse.shape == (4, 8) and lse.dtype == torch.float32


def test_under_torch_compile(routed):
    q, k, v = (rand(1, 2, 13, 8, requires_grad=True) for _ in range(3))

    def f(q, k, v):
        return aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0].sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    loss = compiled(q, k, v)
    grads = torch.autograd.grad(loss, (q, k, v))
    ref = reference(q, k, v, top_left_causal(13, 13), None, torch.ones(1, 2, 13, 8, device=q.device))
    close(loss.detach().reshape(1), ref[0].sum().reshape(1), "sum O")
    for name, g, r in zip(("dQ", "dK", "dV"), grads, ref[2:]):
        close(g, r, name)


# ----------------------------------------------------------------------------------------------------------------
# on the GPU: a model that only calls SDPA


class _Attention(torch.nn.Module):
    def __init__(self, d_model=256, heads=4):
        super().__init__()
        self.heads, self.qkv, self.out = heads, torch.nn.Linear(d_model, 3 * d_model), torch.nn.Linear(d_model, d_model)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(o.transpose(1, 2).reshape(b, n, -1))


def _profiled_kernels(fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.key for e in prof.key_averages()]


def _gpulab_kernels(names):
    """gpulab's attention kernels are Triton (and Gluon) functions named attention_*_kernel."""
    return [n for n in names if "attention_" in n and "kernel" in n and "flash" not in n.lower()]


def _torch_flash_kernels(names):
    """PyTorch's FlashAttention-2 kernels: pytorch_flash::flash_fwd_kernel<...>, flash_bwd_*_kernel<...>."""
    return [n for n in names if "flash" in n.lower() and "kernel" in n.lower()]


def _restore_if_active():
    if tna.current_flash_attention_impl() is not None:
        tna.restore_flash_attention_impl()


@pytest.mark.gpu
def test_model_calling_only_sdpa_runs_on_gpulab_after_activation():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    model = _Attention().cuda().to(torch.bfloat16)
    x = torch.randn(2, 1024, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def step():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            y = model(x)
            y.float().square().mean().backward()
        return y.detach(), x.grad.clone()

    _restore_if_active()
    y_torch, g_torch = step()
    x.grad = None
    tna.activate_flash_attention_impl("gpulab")
    try:
        y_gpulab, g_gpulab = step()
        x.grad = None
        names = _profiled_kernels(step)
        assert _gpulab_kernels(names), f"no gpulab kernel in the profile: {names}"
        assert not _torch_flash_kernels(names), f"PyTorch's flash kernel ran: {_torch_flash_kernels(names)}"
    finally:
        tna.restore_flash_attention_impl()
    x.grad = None
    names = _profiled_kernels(step)
    assert _torch_flash_kernels(names) and not _gpulab_kernels(names), names
    check.assert_close(y_gpulab, y_torch.double(), dtype=torch.bfloat16, name="model output")
    check.assert_close(g_gpulab, g_torch.double(), dtype=torch.bfloat16, name="input gradient")


@pytest.mark.gpu
@needs_gqa
def test_sdpa_grouped_heads_run_on_gpulab_after_activation():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(2, 8, 1024, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(2, 2, 1024, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    do = torch.randn_like(q)

    def call():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return o.detach(), torch.autograd.grad(o, (q, k, v), do)

    _restore_if_active()
    try:
        o_torch, g_torch = call()
    except RuntimeError as err:  # PyTorch's flash backend may refuse grouped heads: then so does its dispatch
        pytest.skip(f"PyTorch's flash backend takes no grouped heads here: {err}")
    tna.activate_flash_attention_impl("gpulab")
    try:
        o_gpulab, g_gpulab = call()
        names = _profiled_kernels(call)
        assert _gpulab_kernels(names) and not _torch_flash_kernels(names), names
    finally:
        tna.restore_flash_attention_impl()
    # both against float64 (SDPA's math on upcast inputs): gpulab's error at most twice PyTorch's flash kernel's, by
    # relative norm (an elementwise bf16 bound fails both on the few entries whose terms cancel)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        o64 = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=True, enable_gqa=True)
    g64 = torch.autograd.grad(o64, (q64, k64, v64), do.double())
    for name, ours, theirs, ref in zip(("O", "dQ", "dK", "dV"), (o_gpulab, *g_gpulab), (o_torch, *g_torch),
                                       (o64, *g64)):  # fmt: skip
        err_ours, err_torch = (float((t.double() - ref).norm() / ref.norm()) for t in (ours, theirs))
        assert err_ours == err_ours and err_ours <= max(2 * err_torch, 1e-3), (name, err_ours, err_torch)


@pytest.mark.gpu
@needs_varlen
def test_torch_varlen_attn_runs_on_gpulab_after_activation():
    from torch.nn.attention.varlen import varlen_attn

    lengths = [700, 1, 333, 1024]
    cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(sum(lengths), 8, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))  # fmt: skip
    do = torch.randn_like(q)

    def call():
        o = varlen_attn(q, k, v, cu, cu, max(lengths), max(lengths))
        grads = torch.autograd.grad(o, (q, k, v), do)
        return o.detach(), grads

    _restore_if_active()
    o_torch, g_torch = call()
    tna.activate_flash_attention_impl("gpulab")
    try:
        o_gpulab, g_gpulab = call()
        names = _profiled_kernels(call)
        assert _gpulab_kernels(names) and not _torch_flash_kernels(names), names
    finally:
        tna.restore_flash_attention_impl()
    names = _profiled_kernels(call)
    assert _torch_flash_kernels(names) and not _gpulab_kernels(names), names
    check.assert_close(o_gpulab, o_torch.double(), dtype=torch.bfloat16, name="varlen O")
    for name, a, b in zip(("dQ", "dK", "dV"), g_gpulab, g_torch):
        check.assert_close(a, b.double(), dtype=torch.bfloat16, name=f"varlen {name}")
