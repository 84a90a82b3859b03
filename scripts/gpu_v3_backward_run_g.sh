#!/usr/bin/env bash
# v3-bwd4 device call for records bwd run g (H100): the plan's new gate (V3_BACKWARD_MIN_SEQ, MEASURED step 7 at
# d64, step 5 at d128) checked through flash_attention at both sides of a threshold, then the 24-problem grid again:
# step 5, step 7, flash_attention as it is ("gpulab plan"), the two-kernel backward ("gpulab shipped"), cuDNN.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S=scripts/gpu_v3_backward.py
log=$OUT/log.txt
{
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  timeout 20 python3 - <<'PY' > $OUT/v3-bwd-gate.txt
import torch
from gpulab.attention import plan as P
from gpulab.attention.function import flash_attention
for d, causal, n in ((64, True, 4096), (64, True, 1024), (64, False, 4096), (64, False, 16384), (128, False, 4096)):
    b = max(1, 16384 // n) // 4
    q, k, v = (torch.randn(b, 1024 // d, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
    flash_attention(q, k, v, is_causal=causal).sum().backward()
    print(d, causal, n, P.backward_kind(P.forward_plan(q, k, v, is_causal=causal)),
          all(bool(torch.isfinite(t.grad).all()) for t in (q, k, v)), flush=True)
PY
  cat $OUT/v3-bwd-gate.txt
  timeout 95 python3 $S $OUT --parts time --configs 'step 5,step 7' --skip 'SDPA FlashAttention-2'
  echo "## done"
} 2>&1 | grep -v '^{"kind": "fwd+bwd"' | tee "$log"
