# ruff: noqa: B023 (each closure runs inside its own loop turn)
"""Probe (not a lesson benchmark): version 3's backward configs at head dim 128 on short sequences, on the H200.

Per problem (bf16, d128, 16k tokens: N 1024 B16 H8 and N 4096 B4 H8, causal or not): cuDNN's forward+backward and
forward alone (SDPA), gpulab's forward, then each candidate V3BackwardConfig's backward alone on the same (o, lse, do),
checked against cuDNN's gradients norm-wise. Device ms (triton.testing.do_bench). Writes $OUT/probe-v3-backward.jsonl.
"""

import time

import torch
import torch.nn.functional as F
import triton
from probe_log import emitter
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpulab import attention as A
from gpulab.attention.v3 import backward as v3b
from gpulab.attention.v3.backward_configs import V3BackwardConfig as C

CANDIDATES = {
    "s5 stats (shipped)": C(step=5, stats_smem=True),
    "s5 stats st3": C(step=5, stats_smem=True, stages=3),
    "s5 stats fused_prep": C(step=5, stats_smem=True, fused_prep=True),
    "s5 stats dq_cast": C(step=5, stats_smem=True, dq_cast=True, writer_regs=32),
    "s7 stats": C(step=7, stats_smem=True),
    "s7 stats dq_cast": C(step=7, stats_smem=True, dq_cast=True, writer_regs=32),
    "s6": C(step=6),
    "s3 stats": C(step=3, stats_smem=True),
}
emit = emitter("probe-v3-backward")
t0 = time.perf_counter()


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


for n, b in ((1024, 16), (4096, 4)):
    for causal in (True, False):
        torch.manual_seed(0)
        q, k, v, do = (torch.randn(b, 8, n, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):

            def cud_fb():
                for t in (qs, ks, vs):
                    t.grad = None
                F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal).backward(do)

            cud_fb()
            ref = [t.grad.clone() for t in (qs, ks, vs)]
            fb = triton.testing.do_bench(cud_fb, warmup=25, rep=200)
            fw = triton.testing.do_bench(
                lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), warmup=25, rep=200
            )
        o, lse = A.attention_forward(q, k, v, causal)
        gfw = triton.testing.do_bench(lambda: A.attention_forward(q, k, v, causal), warmup=25, rep=200)
        emit(n=n, b=b, causal=causal, cudnn_fwdbwd=fb, cudnn_fwd=fw, cudnn_bwd=fb - fw, gpulab_fwd=gfw)
        for name, cfg in CANDIDATES.items():
            if time.perf_counter() - t0 > 420:
                emit(n=n, causal=causal, cfg=name, status="skipped: budget")
                continue
            try:
                grads = v3b.attention_backward(do, q, k, v, o, lse, causal, None, cfg)
                errs = [rel(g, r) for g, r in zip(grads, ref)]
                ms = triton.testing.do_bench(
                    lambda: v3b.attention_backward(do, q, k, v, o, lse, causal, None, cfg), warmup=25, rep=200
                )
                emit(
                    n=n,
                    causal=causal,
                    cfg=name,
                    bwd_ms=ms,
                    vs_cudnn_bwd=(fb - fw) / ms,
                    vs_cudnn_fwdbwd=fb / (gfw + ms),
                    rel_err=errs,
                )
            except Exception as exc:  # noqa: BLE001
                emit(n=n, causal=causal, cfg=name, status=f"{type(exc).__name__}: {exc}"[:300])
emit(
    device=torch.cuda.get_device_name(),
    torch=torch.__version__,
    triton=triton.__version__,
    total_s=time.perf_counter() - t0,
)
