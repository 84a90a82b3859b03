#!/usr/bin/env bash
# Lead, bwd run s (H100), issue 39: flash_attention itself with plan.V3_BACKWARD_MIN_SEQ as re-derived from run r
# (1024 at head dim 64 without the mask, 4096 elsewhere) on the 24 problems, three alternating rounds, beside the
# default called directly, the two kernels, cuDNN and FA-2; the CS336 problem.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-bwd-s.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  timeout 200 python3 scripts/gpu_v3_backward.py $OUT --parts time,cs336 --configs 'default' --rounds 3
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done"
} 2>&1 | grep -v '^{"kind"' | tee "$log"
