#!/usr/bin/env bash
# v3-bwd7's device call for records bwd run k (H100): the backward's pair with LSE and D read at a scalar row offset
# plus immediate offsets, dS^T computed before dV's product is issued, and dK/dV stored from a block base (fewer
# spills inside the d=128 block loops: v3.compile_check's loop_local). "check": the default at full size against
# float64 (--quick shapes), "race": dK and dV bit for bit over 50 runs, "time": the 24-problem grid (head dim 128
# first) with the default beside the same default before the change (a copy of the modules in oldv3/, --ab-module),
# the two-kernel backward and cuDNN.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S=scripts/gpu_v3_backward.py
log=$OUT/log-k.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  timeout 50 python3 $S $OUT --parts check --quick --no-plan --configs 'default'
  timeout 30 python3 $S $OUT --parts race --configs 'default' --runs 50
  timeout 165 python3 $S $OUT --parts time --configs 'default' --head-dims 128,64 --ab-module oldv3.backward \
    --skip 'gpulab plan,SDPA FlashAttention-2'
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done"
} 2>&1 | grep -v '^{"kind": "fwd+bwd"' | tee "$log"
