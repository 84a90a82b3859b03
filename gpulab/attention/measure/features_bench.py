"""Lesson 4's benchmark of the features a model uses: ``python -m gpulab bench 05 features`` (:func:`features`).

Three comparisons, each provider checked against a reference before anything is timed, on both clocks; FLOPs count
the visible score entries only (:func:`gpulab.bench.visible_attention_flops`, as FlashAttention's and
cudnn-frontend's benchmarks count them):

1. ``kind='gqa'``: cudnn-frontend's H200 table problem, B 1, 64 query and 8 KV heads, N 16k, d 128, bf16, causal and
   not, forward and forward+backward: gpulab's ``flash_attention(enable_gqa=True)`` against SDPA with
   ``enable_gqa=True`` (its default choice and cuDNN).
2. ``kind='varlen'``: a packed batch of mixed lengths (16k tokens) with ``varlen_attn``, the same sequences padded to
   the longest as one ``flash_attention`` call (``layout='padded'``: its FLOPs are the padded problem's), and
   torch's own ``varlen_attn`` on the packed batch. gpulab's results record the forward's version
   (``forward_version``: the packed forward's from its plan, the padded call's from ``forward_plan``).
3. ``kind='d256'``: head dim 256 at N 4k and 16k (16k tokens), against SDPA's cuDNN and FlashAttention-2 backends;
   ``gpulab v3`` (Hopper only) is the same call with version 3's forward asked for (``version=3``: ``version=None``
   takes version 1 at d=256 until :data:`gpulab.attention.plan.V3_HEAD_DIMS` lists it), the backward the plan's.

On CPU each runs a tiny version in the interpreter (float16). :func:`varlen_grids` times version 3's packed forward
on part 2's batch on its two grids (persistent, one tile per program) beside the padded call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpulab import bench, runtime
from gpulab.attention.function import FlashAttentionFunction, flash_attention
from gpulab.attention.measure.benchmark import check_output, math_reference, one_direction
from gpulab.attention.plan import forward_plan, run_forward
from gpulab.attention.reference import attention_reference, varlen_attention_reference
from gpulab.attention.varlen import varlen_attn, varlen_plan

__all__ = ["features", "mixed_lengths", "varlen_grids"]


def _dtype():
    return runtime.pick(cpu=torch.float16, gpu=torch.bfloat16)


def _sdpa(backend, gqa=False):
    def run(q, k, v, causal):
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    return run


def _direction(fn):
    """``fn(q, k, v, causal)`` in one direction: the output, or the output and dq, dk, dv (inputs requiring grad)."""
    return one_direction(fn)


def _skip_off_gpu(provider, **x):
    gpu_only = ("SDPA cuDNN", "SDPA FlashAttention-2", "torch varlen_attn", "gpulab v3")
    if provider in gpu_only and not runtime.on_gpu():
        return f"{provider} needs a GPU"
    if provider == "gpulab v3" and torch.cuda.get_device_capability()[0] != 9:
        return "gpulab v3 (Gluon, sm_90) needs a Hopper GPU"
    return None


def _v3(q, k, v, causal):
    """:func:`flash_attention` with version 3's forward asked for; its backward the plan's (version 1's at d=256)."""
    plan = forward_plan(q, k, v, causal, None, False, None, 3)
    if torch.is_grad_enabled() and q.requires_grad:
        return FlashAttentionFunction.apply(q, k, v, causal, None, False, False, plan)
    return run_forward(plan, q, k, v)[0]


def _label(**x):
    extra = f" {x['layout']}" if "layout" in x else f" Hkv{x['kv_heads']}" if "kv_heads" in x else ""
    return f"d{x['head_dim']} N{x['seq']}{' causal' if x['causal'] else ''}{extra} {x['direction']}"


# ------------------------------------------------------------------------------------------------- 1. GQA
def _gqa_inputs(dtype, batch, heads, kv_heads, seq, head_dim, causal, direction, check=False):
    if check:  # the reference is N x N in float64: two query heads, one KV head
        heads, kv_heads = 2, 1
    gen = torch.Generator(device=runtime.device).manual_seed(0)
    shapes = [(batch, heads), (batch, kv_heads), (batch, kv_heads), (batch, heads)]
    q, k, v, do = (torch.randn(*s, seq, head_dim, device=runtime.device, dtype=dtype, generator=gen) for s in shapes)
    grad = direction == "forward+backward"
    return q.requires_grad_(grad), k.requires_grad_(grad), v.requires_grad_(grad), causal, do


def _gqa_reference(q, k, v, causal, do):
    if not q.requires_grad:
        return attention_reference(q, k, v, is_causal=causal, enable_gqa=True).float()
    return tuple(t.float() for t in attention_reference(q, k, v, is_causal=causal, do=do, enable_gqa=True))


def _gqa_flops(batch, heads, seq, head_dim, causal, direction, **_):
    return bench.visible_attention_flops(seq, seq, head_dim, heads, batch, is_causal=causal,
                                         backward=direction != "forward")  # fmt: skip


def _gqa() -> bench.Benchmark:
    base = runtime.pick(cpu=dict(batch=1, heads=4, kv_heads=2, seq=33, head_dim=16),
                        gpu=dict(batch=1, heads=64, kv_heads=8, seq=16384, head_dim=128))  # fmt: skip
    cases = [dict(dtype=_dtype(), **base, causal=c, direction=d) for c in (False, True)
             for d in ("forward", "forward+backward")]  # fmt: skip
    providers = {
        "gpulab": _direction(lambda q, k, v, c: flash_attention(q, k, v, is_causal=c, enable_gqa=True)),
        "SDPA default": _direction(_sdpa(None, gqa=True)),
        "SDPA cuDNN": _direction(_sdpa(SDPBackend.CUDNN_ATTENTION, gqa=True)),
    }
    return bench.Benchmark(
        lesson="05", name="features gqa", cases=cases, inputs=_gqa_inputs,
        check_inputs=lambda **x: _gqa_inputs(**x, check=True), providers=providers, reference=_gqa_reference,
        check=check_output, on_mismatch="record", skip=_skip_off_gpu, flops=_gqa_flops, label=_label,
        provider_params={n: {"kind": "gqa", "impl": n} for n in providers},
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------- 2. varlen
def mixed_lengths(tokens: int, shortest: int, longest: int, seed: int = 0) -> list[int]:
    """Sequence lengths drawn uniformly from [shortest, longest] (fixed seed) until they hold ``tokens`` tokens, the
    last one cut to fit."""
    tokens, shortest, longest = (runtime.positive_int(n, x) for n, x in (("tokens", tokens), ("shortest", shortest),
                                                                          ("longest", longest)))  # fmt: skip
    if shortest > longest:
        raise ValueError(f"shortest={shortest} is above longest={longest}; pass shortest <= longest.")
    gen = torch.Generator().manual_seed(seed)
    lengths: list[int] = []
    while sum(lengths) < tokens:
        lengths.append(min(int(torch.randint(shortest, longest + 1, (1,), generator=gen)), tokens - sum(lengths)))
    return lengths


def _varlen_inputs(dtype, heads, seq, head_dim, causal, direction, layout, lengths, check=False):
    """Packed: (q, k, v, cu, max, causal, do) with q, k, v [T, H, D]; padded: [S, H, max, D] of the same sequences."""
    if check:
        heads = min(heads, 2)
    gen = torch.Generator(device=runtime.device).manual_seed(0)
    grad = direction == "forward+backward"
    if layout == "padded":
        shape = (len(lengths), heads, max(lengths), head_dim)
        q, k, v, do = (torch.randn(*shape, device=runtime.device, dtype=dtype, generator=gen) for _ in "qkvd")
        return q.requires_grad_(grad), k.requires_grad_(grad), v.requires_grad_(grad), causal, do
    total = sum(lengths)
    q, k, v, do = (torch.randn(total, heads, head_dim, device=runtime.device, dtype=dtype, generator=gen)
                   for _ in "qkvd")  # fmt: skip
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=runtime.device)
    return q.requires_grad_(grad), k.requires_grad_(grad), v.requires_grad_(grad), cu, max(lengths), causal, do


def _packed(fn):
    """``fn(q, k, v, cu, max_len, window)`` in one direction, on packed inputs."""

    def run(q, k, v, cu, longest, causal, do):
        window = (-1, 0) if causal else (-1, -1)
        if not q.requires_grad:
            with torch.no_grad():
                return fn(q, k, v, cu, longest, window)
        out = fn(q, k, v, cu, longest, window)
        return (out, *torch.autograd.grad(out, (q, k, v), do))

    return run


def _torch_varlen(q, k, v, cu, longest, window):
    from torch.nn.attention.varlen import varlen_attn as torch_varlen_attn  # noqa: PLC0415 - GPU only

    return torch_varlen_attn(q, k, v, cu, cu, longest, longest, window_size=window)


def _either(packed, padded):
    """One provider over both layouts: the packed function on 7 inputs, the padded one on 5."""

    def run(*args):
        return packed(*args) if len(args) == 7 else padded(*args)

    return run


def _varlen_reference(*args):
    if len(args) == 5:
        return math_reference(*args)
    q, k, v, cu, _, causal, do = args
    window = (-1, 0) if causal else (-1, -1)
    refs = varlen_attention_reference(q, k, v, cu, cu, window_size=window, do=do if q.requires_grad else None)
    out = (refs[0], *refs[2:]) if q.requires_grad else refs[0]
    return tuple(t.float() for t in out) if q.requires_grad else out.float()


def _varlen_flops(heads, head_dim, causal, direction, layout, lengths, **_):
    lens = [max(lengths)] * len(lengths) if layout == "padded" else lengths
    window = (-1, 0) if causal else (-1, -1)  # bottom-right causal: with Nq = Nk the same as SDPA's top-left
    return bench.visible_attention_flops(lens, lens, head_dim, heads, window_size=window,
                                         backward=direction != "forward")  # fmt: skip


def _varlen(versions: dict) -> bench.Benchmark:
    lengths = runtime.pick(cpu=mixed_lengths(80, 1, 33), gpu=mixed_lengths(16384, 256, 4096))
    heads, d = runtime.pick(cpu=(2, 16), gpu=(16, 128))
    grid = [
        (c, dr, lay) for c in (False, True) for dr in ("forward", "forward+backward") for lay in ("packed", "padded")
    ]
    cases = [dict(dtype=_dtype(), heads=heads, seq=max(lengths), head_dim=d, causal=c, direction=dr, layout=lay,
                  lengths=lengths) for c, dr, lay in grid]  # fmt: skip

    def packed(q, k, v, cu, m, w):  # records the version its forward ran (``versions``, keyed by layout and causal)
        out = varlen_attn(q, k, v, cu, cu, m, m, window_size=w)
        if ("packed", w != (-1, -1)) not in versions:
            versions["packed", w != (-1, -1)] = varlen_plan(q, k, v, cu, cu, m, m, None, w, False).forward_version
        return out

    def padded_call(q, k, v, c):
        if ("padded", c) not in versions:
            versions["padded", c] = forward_plan(q, k, v, is_causal=c).version
        return flash_attention(q, k, v, is_causal=c)

    padded = one_direction(padded_call)
    providers = {
        "gpulab": _either(_packed(packed), padded),
        "torch varlen_attn": _packed(_torch_varlen),
    }

    def skip(provider, layout, **x):
        if provider == "torch varlen_attn" and layout == "padded":
            return "packed batches only"
        return _skip_off_gpu(provider)

    return bench.Benchmark(
        lesson="05", name="features varlen", cases=cases, inputs=_varlen_inputs,
        check_inputs=lambda **x: _varlen_inputs(**x, check=True), providers=providers, reference=_varlen_reference,
        check=check_output, on_mismatch="record", skip=skip, flops=_varlen_flops, label=_label,
        provider_params={n: {"kind": "varlen", "impl": n} for n in providers},
    )  # fmt: skip


def varlen_grids(progress=None) -> list[bench.Result]:
    """Version 3's packed forward on :func:`_varlen`'s batch (16k tokens, lengths 256..4096, 16 heads, d 128) on
    both grids of :func:`gpulab.attention.v3.varlen_forward.varlen_config` (persistent with two Q buffers, the
    default, and one tile per program with one), beside the padded call, causal and not, forward only: checked, then
    timed on both clocks (Hopper only; on the CPU every provider is skipped)."""
    from gpulab.attention.v3 import varlen_forward  # noqa: PLC0415 - Gluon, imported where it runs

    lengths = runtime.pick(cpu=mixed_lengths(80, 1, 33), gpu=mixed_lengths(16384, 256, 4096))
    heads, d = runtime.pick(cpu=(2, 16), gpu=(16, 128))
    cases = [dict(dtype=_dtype(), heads=heads, seq=max(lengths), head_dim=d, causal=c, direction="forward",
                  layout=lay, lengths=lengths) for c in (False, True) for lay in ("packed", "padded")]  # fmt: skip

    def v3(persistent):
        def run(q, k, v, cu, m, w):
            cfg = varlen_forward.varlen_config(q.shape[2], w, m, persistent)
            return varlen_forward.attention_forward_varlen(q, k, v, cu, cu, m, q.shape[2] ** -0.5, w, cfg)[0]

        return _packed(run)

    providers = {
        "v3 packed persistent": v3(True),
        "v3 packed one tile per program": v3(False),
        "padded call": one_direction(lambda q, k, v, c: flash_attention(q, k, v, is_causal=c)),
    }

    def skip(provider, layout, **x):
        if not runtime.on_gpu() or torch.cuda.get_device_capability()[0] != 9:
            return "version 3 needs a Hopper GPU"
        if (provider == "padded call") != (layout == "padded"):
            return "the padded call takes the padded batch, the others the packed one"
        return None

    results = bench.run(bench.Benchmark(
        lesson="05", name="features varlen grids", cases=cases, inputs=_varlen_inputs,
        check_inputs=lambda **x: _varlen_inputs(**x, check=True), providers=providers, reference=_varlen_reference,
        check=check_output, on_mismatch="record", skip=skip, flops=_varlen_flops, label=_label,
        provider_params={n: {"kind": "varlen-grids", "impl": n} for n in providers},
    ), progress)  # fmt: skip
    for r in results:
        lengths = r.params.pop("lengths", None)
        if lengths is not None:
            r.params.update(sequences=len(lengths), tokens=sum(lengths), shortest=min(lengths), longest=max(lengths))
    return results


# ------------------------------------------------------------------------------------------------- 3. d256
def _d256_inputs(dtype, batch, heads, seq, head_dim, causal, direction, check=False):
    b, h = (1, min(2, heads)) if check else (batch, heads)
    gen = torch.Generator(device=runtime.device).manual_seed(0)
    q, k, v, do = (torch.randn(b, h, seq, head_dim, device=runtime.device, dtype=dtype, generator=gen) for _ in "qkvd")
    grad = direction == "forward+backward"
    return q.requires_grad_(grad), k.requires_grad_(grad), v.requires_grad_(grad), causal, do


def _d256() -> bench.Benchmark:
    tokens, heads, seqs = runtime.pick(cpu=(34, 2, (17,)), gpu=(16384, 16, (4096, 16384)))
    grid = [(n, c, dr) for n in seqs for c in (False, True) for dr in ("forward", "forward+backward")]
    cases = [dict(dtype=_dtype(), batch=max(1, tokens // n), heads=heads, seq=n, head_dim=256, causal=c,
                  direction=dr) for n, c, dr in grid]  # fmt: skip
    providers = {
        "gpulab": one_direction(lambda q, k, v, c: flash_attention(q, k, v, is_causal=c)),
        "gpulab v3": one_direction(_v3),
        "SDPA cuDNN": one_direction(_sdpa(SDPBackend.CUDNN_ATTENTION)),
        "SDPA FlashAttention-2": one_direction(_sdpa(SDPBackend.FLASH_ATTENTION)),
        "SDPA default": one_direction(_sdpa(None)),
    }
    return bench.Benchmark(
        lesson="05", name="features d256", cases=cases, inputs=_d256_inputs,
        check_inputs=lambda **x: _d256_inputs(**x, check=True), providers=providers, reference=math_reference,
        check=check_output, on_mismatch="record", skip=_skip_off_gpu, flops=_gqa_flops, label=_label,
        provider_params={n: {"kind": "d256", "impl": n} for n in providers},
    )  # fmt: skip


def features(progress=None) -> list[bench.Result]:
    """``python -m gpulab bench 05 features``: the three comparisons of the module docstring, checked, then timed."""
    results, versions = [], {}
    for make in (_gqa, lambda: _varlen(versions), _d256):
        results += bench.run(make(), progress)
    for r in results:  # the lengths are in the case; the record keeps their count and spread, not the list
        if r.params.get("kind") == "varlen" and r.params.get("impl") == "gpulab":
            r.params["forward_version"] = versions.get((r.params.get("layout"), bool(r.params.get("causal"))))
        lengths = r.params.pop("lengths", None)
        if lengths is not None:
            r.params.update(sequences=len(lengths), tokens=sum(lengths), shortest=min(lengths), longest=max(lengths))
    return results
