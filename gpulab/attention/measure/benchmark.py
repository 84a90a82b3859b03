"""Lesson 4, measured: the Triton FlashAttention against PyTorch's SDPA backends, and memory against sequence length.

``python -m gpulab bench 04`` runs :func:`benchmark` on a GPU. Three kinds of records (``params['kind']``):

- ``throughput``: every implementation on lesson 4's grid (bf16 and fp16; head dim 64 with 16 heads and 128 with
  8 heads; sequence 1k, 4k, 16k with batch * seq = 16k; causal and not; forward and forward+backward), in one run
  so that the peers share the GPU's clocks and state:

  * ``gpulab``: :func:`gpulab.attention.flash_attention` with the fixed per-GPU tiles of
    :func:`gpulab.attention.attention_config` (on a compute-capability-9 GPU its forward is version 2,
    :mod:`gpulab.attention.v2.forward`, with :func:`gpulab.attention.configs.hopper_config`'s tiles);
  * ``gpulab (autotuned)``: the same with ``autotune=True`` (a few candidate tiles timed per problem, the fastest
    kept; ``params['configs']`` records the tiles each gpulab record ran with);
  * ``SDPA FlashAttention-2``: ``scaled_dot_product_attention`` restricted to ``SDPBackend.FLASH_ATTENTION``;
  * ``SDPA default``: the backend PyTorch picks (on torch 2.11 and an H100, cuDNN attention);
  * ``naive (PyTorch)``: :func:`gpulab.attention.naive_attention` (three kernels, N x N in memory), forward only at
    1k and 4k (and as far as memory allows), for the roofline.

  The grid is one :class:`gpulab.bench.Benchmark` (:func:`throughput_benchmark`; the direction is part of each
  case): before anything is timed, each output (and, for forward+backward, each gradient) is compared with SDPA's
  math backend in fp32 on one batch element and two heads: ``params['rel_err']``; a failing check is recorded in
  ``params['check']``, never hidden. Where an implementation does not run (FlashAttention-2 without a GPU, the naive
  one's backward or a problem whose N x N matrices would not fit), its record says why in ``status``.
  FLOPs follow the course convention (:func:`gpulab.bench.attention_flops`: 4 B H N^2 D, halved if causal, x3.5
  with the backward), the same for every implementation, so TFLOP/s compare like with like. Bytes are the tiled
  minimum (:func:`gpulab.roofline.attention_tiled`), or the naive count for the naive implementation.

- ``memory``: peak memory *beyond the inputs* of one forward+backward at batch 1, 16 heads, head dim 64, bf16, over
  sequence lengths: naive (N x N scores and probabilities, kept for the backward) against gpulab's kernel (O(N)).

Records carry ``provider`` and ``impl`` (the same name), ``direction`` ('forward' or 'forward+backward'),
``causal``, ``head_dim``, ``seq``, ``batch``, ``heads``, and for gpulab the ratios ``vs_fa2`` and ``vs_default``
(their ms / gpulab's ms: above 1 means gpulab is faster).
"""

from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpulab import bench, check, roofline, runtime
from gpulab.attention import plan
from gpulab.attention.configs import attention_config, hopper_config, tuned, tuning_key
from gpulab.attention.function import flash_attention
from gpulab.attention.measure import report
from gpulab.attention.reference import naive_attention
from gpulab.attention.v3.forward import v3_config
from gpulab.dtypes import as_dtype, short

__all__ = [
    "IMPLEMENTATIONS",
    "grid",
    "benchmark",
    "add_ratios",
]

IMPLEMENTATIONS = report.IMPLEMENTATIONS
TOKENS = 16384  # batch * seq in the throughput grid


def grid(dtypes=None, head_dims=(64, 128), seqs=(1024, 4096, 16384), causal=(False, True)):
    """The throughput problems as dicts (dtype, batch, heads, seq, head_dim, causal): batch * seq = 16k tokens,
    16 heads at head dim 64 and 8 at 128 (1024 model width either way)."""
    dtypes = tuple(as_dtype(d, "dtypes") for d in (dtypes or (torch.bfloat16, torch.float16)))
    head_dims = [runtime.integer("head_dims", d, minimum=1, maximum=1024) for d in head_dims]
    if any(1024 % d for d in head_dims):
        raise ValueError(f"head_dims={head_dims}: each must divide the model width 1024 (e.g. 64 or 128).")
    seqs = [runtime.positive_int("seqs", n) for n in seqs]
    causal = [runtime.strict_bool("causal", c) for c in causal]
    out = []
    for dtype in dtypes:
        for d in head_dims:
            for n in seqs:
                for c in causal:
                    out.append(
                        dict(dtype=dtype, batch=max(1, TOKENS // n), heads=1024 // d, seq=n, head_dim=d, causal=c)
                    )
    return out


def sdpa(backend):
    """SDPA restricted to ``backend`` (a ``torch.nn.attention.SDPBackend`` or None for PyTorch's own choice)."""

    def run(q, k, v, is_causal):
        if backend is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)

    return run


def _implementations():
    return {
        "gpulab": lambda q, k, v, c: flash_attention(q, k, v, is_causal=c),
        "gpulab (autotuned)": lambda q, k, v, c: flash_attention(q, k, v, is_causal=c, autotune=True),
        "SDPA FlashAttention-2": sdpa(SDPBackend.FLASH_ATTENTION),
        "SDPA default": sdpa(None),
        "naive (PyTorch)": lambda q, k, v, c: naive_attention(q, k, v, is_causal=c),
    }


DIRECTIONS = ("forward", "forward+backward")


def problem_inputs(dtype, batch, heads, seq, head_dim, causal, direction, check=False):
    """(q, k, v, causal, do) of one problem; q, k, v require grad for forward+backward. For the check: batch
    element 0 and heads 0-1 only (the math backend materializes N x N matrices in fp32)."""
    b, h = (1, min(2, heads)) if check else (batch, heads)
    gen = torch.Generator(device=runtime.device).manual_seed(0)
    q, k, v, do = (torch.randn(b, h, seq, head_dim, device=runtime.device, dtype=dtype, generator=gen) for _ in "qkvd")
    backward = direction == "forward+backward"
    return q.requires_grad_(backward), k.requires_grad_(backward), v.requires_grad_(backward), causal, do


def one_direction(attention):
    """One direction of ``attention(q, k, v, causal)``: its output (forward, without autograd), or its output and
    dq, dk, dv (forward+backward, the inputs require grad)."""

    def run(q, k, v, causal, do):
        if not q.requires_grad:
            with torch.no_grad():
                return attention(q, k, v, causal)
        out = attention(q, k, v, causal)
        return (out, *torch.autograd.grad(out, (q, k, v), do))

    return run


def math_reference(q, k, v, causal, do):
    """SDPA's math backend in fp32 on the same inputs."""
    ins = [t.detach().float().requires_grad_(t.requires_grad) for t in (q, k, v)]
    return one_direction(sdpa(SDPBackend.MATH))(*ins, causal, do.float())


def check_output(out, ref) -> dict:
    """The largest relative error of the output (and gradients) against the reference, at the dtype's tolerance."""
    outs, refs = (out, ref) if isinstance(out, tuple) else ((out,), (ref,))
    err = max(float(check.relative_error(a, b)) for a, b in zip(outs, refs))
    tol = check.tolerance(outs[0].dtype)
    if not (math.isfinite(err) and err <= tol):
        raise AssertionError(f"rel_err {err:.3g} (tolerance {tol:.3g})")
    return {"rel_err": err}


def _skip(provider, dtype, batch, heads, seq, head_dim, causal, direction):
    if provider == "SDPA FlashAttention-2" and not runtime.on_gpu():
        return "SDPA's FlashAttention backend needs a GPU"
    if provider == "naive (PyTorch)" and direction != "forward":
        return "the naive forward is enough for the roofline; its memory is measured separately"
    if provider == "naive (PyTorch)" and batch * heads * seq * seq * 4 * 2 > 24e9:
        return "its N x N scores and probabilities (fp32 softmax) would not fit"
    return None


def throughput_benchmark(problems) -> bench.Benchmark:
    """Every implementation on ``problems`` (dicts like :func:`grid`'s), forward and forward+backward, checked against
    SDPA's math backend in fp32 (``params['rel_err']``; a mismatch is recorded in ``params['check']``, never
    hidden), as a :class:`gpulab.bench.Benchmark`."""
    cases = [{**p, "direction": d} for p in problems for d in DIRECTIONS]
    return bench.Benchmark(
        lesson="04",
        name="attention",
        cases=cases,
        inputs=problem_inputs,
        check_inputs=lambda **x: problem_inputs(**x, check=True),
        providers={name: one_direction(fn) for name, fn in _implementations().items()},
        provider_params={name: {"kind": "throughput", "impl": name} for name in IMPLEMENTATIONS},
        reference=math_reference,
        check=check_output,
        on_mismatch="record",
        skip=_skip,
        flops=lambda dtype, batch, heads, seq, head_dim, causal, direction: bench.attention_flops(
            batch, heads, seq, seq, head_dim, causal=causal, backward=direction == "forward+backward"
        ),
        bytes=lambda dtype, batch, heads, seq, head_dim, causal, direction: _bytes(
            roofline.attention_tiled, batch, heads, seq, head_dim, dtype, causal, direction
        ),
        label=lambda dtype, batch, heads, seq, head_dim, causal, direction: (
            f"{short(dtype)} d{head_dim} N{seq}{' causal' if causal else ''} {direction}"
        ),
    )


def _bytes(cost, batch, heads, seq, head_dim, dtype, causal, direction) -> float:
    """The bytes an implementation must move: ``cost`` (tiled or naive) of the forward, x3.5 with the backward (rough:
    the backward reads and writes about 2.5x more)."""
    moved = cost(batch, heads, seq, seq, head_dim, dtype, causal).bytes
    return moved * (3.5 if direction == "forward+backward" else 1.0)


def _annotate(results):
    """What the records say beyond the harness's: the naive implementation's bytes (its own count), the tiles each
    gpulab record ran with (``params['configs']``), and gpulab's ratios to the SDPA backends (:func:`add_ratios`)."""
    for r in results:
        p = r.params
        if r.provider == "naive (PyTorch)":
            r.bytes = _bytes(roofline.attention_naive, p["batch"], p["heads"], p["seq"], p["head_dim"],
                             as_dtype(p["dtype"]), p["causal"], p["direction"])  # fmt: skip
        if r.provider.startswith("gpulab") and r.status == "ok":
            backward = p["direction"] == "forward+backward"
            dtype = as_dtype(p["dtype"])
            version = _forward_version(p["batch"], p["heads"], p["seq"], p["head_dim"], dtype, p["causal"])
            p["version"] = version
            p["kernels"] = f"forward v{version}" + (", backward v1" if backward else "")  # v2's: an experiment
            p["configs"] = _configs_used(r.provider, p["head_dim"], dtype, p["causal"], p["seq"], backward, version)
    return add_ratios(results)


def _forward_version(batch, heads, seq, head_dim, dtype, causal) -> int:
    """The forward kernel version ``flash_attention`` runs for this problem here: the plan's own choice
    (:func:`gpulab.attention.plan.forward_plan` on an empty tensor of the problem's shape)."""
    q = torch.empty(batch, heads, seq, head_dim, dtype=dtype, device=runtime.device)
    return plan.forward_plan(q, q, q, is_causal=causal).version


def _configs_used(name, d, dtype, causal, n, backward, version=1) -> dict:
    """The tile configs gpulab ran with: version 1's (block_m, block_n, warps, stages), fixed per GPU or what the
    autotuner chose for this problem; version 2's (the same four); version 3's (step, block_n, stages, consumers)."""
    out = {}
    if version == 2:
        h = hopper_config(d, causal)
        out["forward v2"] = [h.block_m, h.block_n, h.num_warps, h.num_stages]
    elif version == 3:
        c3 = v3_config(d, causal, seq=n)
        out["forward v3"] = [c3.step, c3.block_n, c3.stages, c3.consumers]
    for kind in ("forward", "dkdv", "dq") if backward else ("forward",):
        if kind == "forward" and version != 1:
            continue
        c = attention_config(kind, d, dtype, n, n)
        if name.endswith("(autotuned)"):
            c = tuned().get(tuning_key(kind, d, dtype, causal, n, n), {}).get("config", c)
        out[kind] = [c.block_m, c.block_n, c.num_warps, c.num_stages]
    return out


def _problem_key(r):
    p = r.params
    return (r.dtype, p.get("head_dim"), p.get("seq"), p.get("causal"), p.get("direction"))


def add_ratios(results):
    """Set ``vs_fa2`` and ``vs_default`` on gpulab's throughput records (peer ms / gpulab ms)."""
    results = bench.result_list("results", results)
    by = {}
    for r in report.throughput_records(results):
        by[(_problem_key(r), r.params["impl"])] = r
    for (key, impl), r in by.items():
        if not impl.startswith("gpulab"):
            continue
        for peer, field in (("SDPA FlashAttention-2", "vs_fa2"), ("SDPA default", "vs_default")):
            other = by.get((key, peer))
            r.params[field] = other.ms / r.ms if other else None
    return results


def _memory_records(seqs, bench, progress=None):
    """Peak memory beyond the inputs of one forward+backward, naive against gpulab, at B=1, H=16, D=64, bf16."""
    dtype = runtime.pick(cpu=torch.float32, gpu=torch.bfloat16)
    heads, d = 16, 64
    out = []
    impls = {"gpulab": flash_attention, "naive (PyTorch)": naive_attention}
    jobs = [(n, name) for n in seqs for name in impls]
    for n, name in progress(jobs) if progress else jobs:
        fn = impls[name]
        q, k, v, do = (torch.randn(1, heads, n, d, device=runtime.device, dtype=dtype) for _ in range(4))
        q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
        if runtime.on_gpu():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        peak, status = None, "ok"
        try:
            fn(q, k, v, is_causal=False).backward(do)
            if runtime.on_gpu():
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated() - base
        except torch.OutOfMemoryError:
            status = "out of memory"
        inputs = 4 * q.numel() * q.element_size()
        extra = None
        if peak is not None:  # the gradients dq, dk, dv are outputs, like the inputs: not counted as extra
            extra = max(0, peak - 3 * q.numel() * q.element_size())
        out.append(
            bench.record(
                lesson="04",
                case=name,
                dtype=dtype,
                shape=[1, heads, n, d],
                kind="memory",
                impl=name,
                seq=n,
                heads=heads,
                head_dim=d,
                batch=1,
                peak_extra_bytes=extra,
                input_bytes=inputs,
                check=status,
            )
        )
        del q, k, v, do
        if runtime.on_gpu():
            torch.cuda.empty_cache()
    return out


def benchmark(progress=None, problems=None, memory_seqs=None):
    """`python -m gpulab bench 04`: throughput against SDPA, and memory against sequence length.

    On CPU (interpreter) it runs a tiny version of both (for the tests), not the grid. Returns (results, figure).
    ``problems``: dicts like :func:`grid`'s; ``memory_seqs``: sequence lengths for the memory records.
    """
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable (e.g. tqdm) or None, got {type(progress).__name__}.")
    if problems is not None and not isinstance(problems, (list, tuple)):
        raise TypeError(f"problems must be a list of dicts like grid()'s, got {type(problems).__name__}.")
    if memory_seqs is not None:
        memory_seqs = [runtime.positive_int("memory_seqs", n) for n in memory_seqs]
    import matplotlib  # heavy and optional: only when the benchmark runs

    if "ipykernel" not in sys.modules:
        matplotlib.use("Agg")
    if problems is None:
        problems = runtime.pick(
            cpu=[dict(dtype=torch.float32, batch=1, heads=2, seq=33, head_dim=16, causal=c) for c in (False, True)],
            gpu=grid(),
        )
    if memory_seqs is None:
        memory_seqs = runtime.pick(cpu=(16, 32), gpu=(1024, 2048, 4096, 8192, 16384, 32768))
    results = _annotate(bench.run(throughput_benchmark(problems), progress)) if problems else []
    results += _memory_records(memory_seqs, bench, progress)
    if runtime.on_gpu():
        print(report.summary_table(results))
        print(report.memory_table(results))
        for line in report.targets(results):
            print(line)
    else:  # interpreter timings say nothing about a GPU: one line, no tables of zeros
        print(bench.interpreter_summary([r for r in results if r.params.get("kind") == "throughput"],
                                        "SDPA's fp32 math backend"))  # fmt: skip
    return results, report.plot(results)
