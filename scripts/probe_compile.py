"""Eager, compiled and CUDA-graphed calls of gpulab's kernels beside their peers: device time and eager wall time.

    python scripts/probe_compile.py        (a GPU; prints one table, writes $OUT/probe_compile.jsonl when OUT is set)

Wall time per call: N calls back to back, one synchronize at the end, median of 5 such loops (what a training loop
pays). Device time: triton.testing.do_bench's median (what graphs or compile can reach).
"""

from __future__ import annotations

import json
import os

import torch
import triton

import gpulab  # noqa: F401
from gpulab import attention as A
from gpulab import bench, rnn
from gpulab.rnn import functions


def wall_ms(fn):
    """Eager wall time per call (gpulab.bench.wall_time: calls back to back, one synchronize, median of 5 loops)."""
    return bench.wall_time(fn).median_ms


def attention_case(B, H, N, D, causal, backward):
    q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=backward) for _ in range(3))
    do = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16)

    def make(f):
        def call():
            o = f(q, k, v, is_causal=causal)
            if backward:
                torch.autograd.grad(o, (q, k, v), do)

        return call

    sdpa = torch.nn.functional.scaled_dot_product_attention
    cases = {"gpulab eager": make(A.flash_attention), "sdpa eager": make(sdpa)}
    cases["gpulab compiled"] = make(torch.compile(A.flash_attention, fullgraph=True))
    cases["gpulab reduce-overhead"] = make(torch.compile(A.flash_attention, fullgraph=True, mode="reduce-overhead"))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        fa2 = make(sdpa)
        fa2()
    cases["sdpa FA2 eager"] = fa2
    return cases


def rnn_case(B, T, NH, DH, backward):
    fn = functions.get_function("lstm")
    Wx = torch.randn(B, T, fn.gates_w, NH, DH, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
    R = (torch.randn(fn.gates_r, NH, DH, DH, device="cuda") / DH**0.5).bfloat16().requires_grad_(backward)
    b = torch.zeros(fn.gates_b, NH, DH, device="cuda", dtype=torch.bfloat16, requires_grad=backward)

    def make(f):
        def call():
            out, _ = f(Wx, R, b, function="lstm", backend="fused")
            if backward:
                torch.autograd.grad(out[0].sum(), (Wx, R, b))

        return call

    return {
        "gpulab fused eager": make(rnn.flashrnn),
        "gpulab fused compiled": make(torch.compile(rnn.flashrnn, fullgraph=True)),
        "gpulab fused reduce-overhead": make(torch.compile(rnn.flashrnn, fullgraph=True, mode="reduce-overhead")),
    }


PROBLEMS = [
    ("attention tiny fwd", lambda: attention_case(1, 1, 128, 64, False, False)),
    ("attention tiny fwd+bwd", lambda: attention_case(1, 1, 128, 64, False, True)),
    ("attention N1024 d128 causal fwd+bwd", lambda: attention_case(16, 8, 1024, 128, True, True)),
    ("attention N1024 d64 causal fwd+bwd", lambda: attention_case(16, 16, 1024, 64, True, True)),
    ("lstm tiny B1 T4 2x64 fwd+bwd", lambda: rnn_case(1, 4, 2, 64, True)),
    ("lstm B16 T1024 12x64 fwd", lambda: rnn_case(16, 1024, 12, 64, False)),
    ("lstm B16 T1024 12x64 fwd+bwd", lambda: rnn_case(16, 1024, 12, 64, True)),
]


def main():
    records = []
    print(f"{'problem':38s} {'implementation':30s} {'wall ms':>9s} {'device ms':>10s}")
    for name, build in PROBLEMS:
        try:
            cases = build()
        except Exception as exc:  # noqa: BLE001
            print(f"{name:38s} build failed: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        for impl, call in cases.items():
            try:
                for _ in range(3):
                    call()  # compile, capture, warm up
                w = wall_ms(call)
                d = triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median")
                print(f"{name:38s} {impl:30s} {w:9.4f} {d:10.4f}")
                r = bench.record(lesson="16", case=f"{name} | {impl}", ms=d)
                r.params.update(wall_ms=w)
                records.append(r)
            except Exception as exc:  # noqa: BLE001
                print(f"{name:38s} {impl:30s} failed: {type(exc).__name__}: {str(exc)[:150]}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "probe_compile.jsonl"), "w") as f:
            for r in records:
                f.write(json.dumps(r.to_dict()) + "\n")


if __name__ == "__main__":
    main()
