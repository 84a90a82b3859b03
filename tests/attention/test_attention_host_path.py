"""Lesson 4's lean host path: checks and tiles once per input signature (gpulab.attention.plan), launches kept per
plan (gpulab.launch), D = rowsum(dO * O) computed by the dQ kernel. Outputs must not change; a bad input
must be refused whatever was called before it."""

import types

import pytest
import torch

from gpulab import attention as A
from gpulab import check, runtime
from gpulab import launch as L
from gpulab.attention import plan as P
from gpulab.attention.v1 import backward as B


@pytest.fixture
def fresh_plans():
    """An empty plan cache before and after the test."""
    P.clear_plan_cache()
    yield P
    P.clear_plan_cache()


@pytest.fixture
def count_checks(monkeypatch):
    """A list that grows by one each time the full input checks (plan.check_inputs) run."""
    calls = []
    real = P.check_inputs

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(P, "check_inputs", counted)
    return calls


def test_a_repeated_call_runs_the_checks_once(fresh_plans, count_checks, attention_inputs):
    q, k, v, do = attention_inputs(1, 2, 17, 9, 16)
    qg = q.clone().requires_grad_(True)
    outs = []
    for _ in range(3):
        o = A.flash_attention(qg, k, v, is_causal=True)
        o.backward(do)
        outs.append(o.detach())
    assert len(count_checks) == 1, "forward and backward of flash_attention share one plan, checked once"
    info = P.plan_cache_info()
    assert info["forward_misses"] == 1 and info["forward_size"] == 1 and info["backward_misses"] == 0
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    check.assert_close(outs[0], A.attention_reference(q, k, v, is_causal=True), name="O")

    o, lse = A.attention_forward(q, k, v, is_causal=True)
    for _ in range(2):
        A.attention_backward(do, q, k, v, o, lse, is_causal=True)
    info = P.plan_cache_info()
    assert info["backward_misses"] == 1 and info["backward_size"] == 1


@pytest.mark.parametrize(
    "change",
    [
        ("dtype", lambda q, k, v: (q.half(), k.half(), v.half()), {}),
        ("causal", lambda q, k, v: (q, k, v), {"is_causal": True}),
        ("scale", lambda q, k, v: (q, k, v), {"scale": 0.5}),
        ("strides", lambda q, k, v: tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)), {}),
        ("shape", lambda q, k, v: (q[:, :, :5], k, v), {}),
    ],
    ids=lambda c: c[0],
)
def test_the_cache_is_keyed_on_what_changes_the_launch(fresh_plans, attention_inputs, change):
    """Each change gets its own plan (a miss), and its output still matches the reference."""
    _, make, kwargs = change
    q, k, v, _ = attention_inputs(1, 2, 17, 9, 16)
    A.flash_attention(q, k, v)
    misses = P.plan_cache_info()["forward_misses"]
    q2, k2, v2 = make(q, k, v)
    o = A.flash_attention(q2, k2, v2, **kwargs)
    assert P.plan_cache_info()["forward_misses"] == misses + 1
    ref = A.attention_reference(q2.float(), k2.float(), v2.float(), **kwargs)
    check.assert_close(o.float(), ref, dtype=q2.dtype, name="O")


def test_non_contiguous_inputs_give_the_same_gradients(fresh_plans, attention_inputs):
    q, k, v, do = attention_inputs(2, 3, 17, 9, 16)
    # [B, N, H, D] storage viewed as [B, H, N, D], as a model's projections produce them
    qt, kt, vt = (t.transpose(1, 2).contiguous().transpose(1, 2).requires_grad_(True) for t in (q, k, v))
    assert not qt.is_contiguous()
    for _ in range(2):  # the second call runs from the cached plan
        for t in (qt, kt, vt):
            t.grad = None
        A.flash_attention(qt, kt, vt, is_causal=True).backward(do)
    o_ref, dq, dk, dv = A.attention_reference(q, k, v, is_causal=True, do=do)
    for name, g, ref in (("dQ", qt.grad, dq), ("dK", kt.grad, dk), ("dV", vt.grad, dv)):
        check.assert_close(g, ref, name=name)


BAD_AFTER_GOOD = [
    ("heads", lambda x: A.flash_attention(x.q, x.k[:, :1], x.v[:, :1]), ValueError, "enable_gqa=False"),
    ("float64", lambda x: A.flash_attention(x.q.double(), x.k.double(), x.v.double()), ValueError, "q"),
    ("causal-int", lambda x: A.flash_attention(x.q, x.k, x.v, is_causal=1), TypeError, "is_causal"),
    ("tf32-int", lambda x: A.flash_attention(x.q, x.k, x.v, allow_tf32=0), TypeError, "allow_tf32"),
    ("scale-nan", lambda x: A.flash_attention(x.q, x.k, x.v, scale=float("nan")), ValueError, "scale"),
    ("scale-inf", lambda x: A.flash_attention(x.q, x.k, x.v, scale=float("inf")), ValueError, "scale"),
    ("list", lambda x: A.flash_attention(x.q.tolist(), x.k, x.v), TypeError, "q"),
    ("forward-config", lambda x: A.attention_forward(x.q, x.k, x.v, config={"block_m": 16}), TypeError, "config"),
    (
        "backward-lse",
        lambda x: A.attention_backward(x.do, x.q, x.k, x.v, x.o, x.lse[:, :, :3]),
        ValueError,
        "lse",
    ),  # fmt: skip
    (
        "backward-lse-dtype",
        lambda x: A.attention_backward(x.do, x.q, x.k, x.v, x.o, x.lse.half()),
        ValueError,
        "lse",
    ),  # fmt: skip
    ("backward-causal-int", lambda x: A.attention_backward(x.do, x.q, x.k, x.v, x.o, x.lse, 1), TypeError, "causal"),
]


@pytest.mark.parametrize("call, error, word", [c[1:] for c in BAD_AFTER_GOOD], ids=[c[0] for c in BAD_AFTER_GOOD])
def test_bad_input_after_good_calls_is_still_refused(fresh_plans, attention_inputs, call, error, word):
    q, k, v, do = attention_inputs(1, 2, 5, 7, 16)
    for causal, scale, tf32 in ((False, None, False), (True, 1.0, False), (True, None, True)):
        A.flash_attention(q, k, v, is_causal=causal, scale=scale, allow_tf32=tf32)  # good calls first
    o, lse = A.attention_forward(q, k, v, is_causal=True)
    A.attention_backward(do, q, k, v, o, lse, True)
    x = types.SimpleNamespace(q=q, k=k, v=v, do=do, o=o, lse=lse)
    for _ in range(2):  # and the bad one is refused every time, never cached
        with pytest.raises(error, match=word):
            call(x)


def test_the_cache_stays_bounded(fresh_plans, attention_inputs):
    P.clear_plan_cache(max_plans=3)
    assert P.plan_cache_info()["max_plans"] == 3
    q, k, v, _ = attention_inputs(1, 1, 8, 8, 16)
    sizes = []
    for n in range(1, 8):
        A.attention_forward(q[:, :, :n], k, v)
        sizes.append(P.plan_cache_info()["forward_size"])
    assert max(sizes) == 3 and sizes[3] == 1, sizes  # the fourth signature started the cache over
    P.clear_plan_cache()
    assert P.plan_cache_info()["max_plans"] == P.MAX_PLANS
    with pytest.raises(ValueError, match="max_plans"):
        P.clear_plan_cache(max_plans=0)


def test_autograd_function_without_a_plan_makes_one(fresh_plans, attention_inputs):
    q, k, v, do = attention_inputs(1, 2, 9, 9, 16)
    qg = q.clone().requires_grad_(True)
    o = A.FlashAttentionFunction.apply(qg, k, v, True, None, False)
    o.backward(do)
    _, dq, _, _ = A.attention_reference(q, k, v, is_causal=True, do=do)
    check.assert_close(qg.grad, dq, name="dQ")
    with pytest.raises(TypeError, match="is_causal"):
        A.FlashAttentionFunction.apply(qg, k, v, 1, None, False)


def test_dq_kernel_writes_the_preprocess_delta(attention_inputs):
    """The dQ kernel's D = rowsum(dO * O) equals the stand-alone preprocess kernel's."""
    b, h, nq, nk, d = 1, 2, 19, 11, 24
    q, k, v, do = attention_inputs(b, h, nq, nk, d)
    o, lse = A.attention_forward(q, k, v)
    plan = P.forward_plan(q, k, v)
    cfg = A.attention_config("dq", d, q.dtype, nq, nk)
    dq_launch, _ = B.backward_launches(plan, A.attention_config("dkdv", d, q.dtype, nq, nk), cfg)
    delta = check.new_output(b, h, nq, dtype=torch.float32)
    dq = check.new_output(b, h, nq, d, dtype=q.dtype)
    dq_launch(None, q, k, v, o, do, lse, delta, dq, q, q, nq, nk, h, 1, plan.qk_scale, plan.scale, *plan.bounds)
    ref = check.new_output(b, h, nq, dtype=torch.float32)
    A.attention_preprocess_kernel[(-(-nq // 16), b * h)](o, do, ref, nq, HEAD_DIM=d, BLOCK_M=16, BLOCK_D=cfg.block_d)
    check.assert_close(delta, (o.double() * do.double()).sum(-1), name="delta")
    check.assert_close(ref, (o.double() * do.double()).sum(-1), name="preprocess delta")


# --- the launch cache, with a stand-in for Triton's JITFunction and CompiledKernel -------------------------------


class _Compiled:
    def __init__(self):
        self.calls, self.function, self.packed_metadata = [], "fn-handle", "meta"

    def run(self, *args):
        self.calls.append(args)


class _Kernel:
    arg_names = ["x_ptr", "n", "BLOCK", "FLAG"]

    def __init__(self, compiled):
        self.compiled, self.jit_calls = compiled, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.jit_calls.append((grid, args, kwargs))
            return self.compiled

        return launch


def test_launch_goes_direct_after_the_first_jit_launch():
    compiled = _Compiled()
    kernel = _Kernel(compiled)
    launch = L.Launch(kernel, (3, 2), dict(BLOCK=16, FLAG=True, num_warps=4, num_stages=2))
    launch("stream-0", "x", 7)
    assert len(kernel.jit_calls) == 1 and kernel.jit_calls[0] == ((3, 2, 1), ("x", 7), launch.kwargs)
    launch("stream-1", "y", 7)
    launch(None, "z", 7)  # no stream (e.g. a misaligned pointer): through the JIT again
    assert len(kernel.jit_calls) == 2
    # grid, stream, the compiled function and metadata, no hooks, then the args and constexprs in signature order
    assert compiled.calls == [(3, 2, 1, "stream-1", "fn-handle", "meta", None, None, None, "y", 7, 16, True)]


def test_launch_stays_on_the_jit_path_without_the_compiled_api():
    kernel = _Kernel(object())  # a Triton whose compiled kernel lacks run/function/packed_metadata
    launch = L.Launch(kernel, (1,), dict(BLOCK=16, FLAG=False))
    for _ in range(3):
        launch("stream", "x", 1)
    assert len(kernel.jit_calls) == 3 and launch.compiled is None
    kernel = _Kernel(_Compiled())
    partial = L.Launch(kernel, (1,), dict(BLOCK=16))  # FLAG left to a default: its value is unknown here
    partial("stream", "x", 1)
    partial("stream", "x", 1)
    assert len(kernel.jit_calls) == 2


@pytest.mark.skipif(not runtime.INTERPRET, reason="the interpreter has no compiled kernels to launch directly")
def test_the_interpreter_always_launches_through_triton():
    assert L.direct_stream(runtime.device) is None


def test_no_graph_is_recorded_when_no_gradient_is_needed(fresh_plans, attention_inputs):
    q, k, v, _ = attention_inputs(1, 2, 9, 9, 16)
    o = A.flash_attention(q, k, v)  # no input requires grad: the kernels without the autograd Function
    assert o.grad_fn is None
    qg = q.clone().requires_grad_(True)
    with torch.no_grad():
        assert A.flash_attention(qg, k, v).grad_fn is None
    og = A.flash_attention(qg, k, v)
    assert isinstance(og.grad_fn, A.FlashAttentionFunction._backward_cls)
    assert torch.equal(o, og.detach())


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_direct_launches_match_the_jit_path(fresh_plans, attention_inputs, causal):
    """Repeated calls launch the compiled kernels directly; results equal those of launches through Triton's
    JITFunction, bit for bit; a pointer that is not 16-byte aligned goes back through the JIT and is still right."""
    q, k, v, do = attention_inputs(2, 3, 200, 130, 64, torch.bfloat16)

    def fwd_bwd(q, k, v):
        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
        o = A.flash_attention(qg, kg, vg, is_causal=causal)
        return (o.detach(), *torch.autograd.grad(o, (qg, kg, vg), do))

    before = L.launch_counts()
    first = fwd_bwd(q, k, v)  # compiles; through the JIT
    second = fwd_bwd(q, k, v)  # direct
    after = L.launch_counts()
    assert after["direct"] - before["direct"] == 3, "forward, dQ and dK/dV launched directly on the second call"
    with L.through_jit():
        jit = fwd_bwd(q, k, v)
        assert L.direct_stream(q.device) is None
    assert L.direct_stream(q.device) is not None
    for a, b, c in zip(first, second, jit):
        assert torch.equal(a, b) and torch.equal(a, c)
    # a contiguous view whose data starts 2 bytes into its storage: not 16-byte aligned
    buf = torch.empty(q.numel() + 1, dtype=q.dtype, device=q.device)
    q_off = buf[1:].view(q.shape).copy_(q)
    assert q_off.data_ptr() % 16 and q_off.is_contiguous()
    before = L.launch_counts()
    for _ in range(2):
        off = fwd_bwd(q_off, k, v)
    # version 2 (Hopper) copies a misaligned input to an aligned buffer (TMA needs one) and launches directly
    v2_direct = 2 if P.forward_plan(q_off, k, v, causal).version == 2 else 0
    assert L.launch_counts()["direct"] - before["direct"] == v2_direct, "a misaligned pointer never goes direct"
    refs = A.attention_reference(q, k, v, is_causal=causal, do=do)
    for name, got, ref in zip(("O", "dQ", "dK", "dV"), off, refs):
        check.assert_close(got, ref, dtype=torch.bfloat16, rtol=8e-2, name=name)
