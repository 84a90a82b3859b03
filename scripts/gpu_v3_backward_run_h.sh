#!/usr/bin/env bash
# v3-bwd5 device calls for records bwd run h (H100): step 8 (dQ scaled and cast by the last program to add into each
# query block; no zeroing or cast launch), on steps 5 and 7. "check": full-size gradients against float64 (steps 5+8
# and 7+8, and flash_attention with the default+8 through the plan, compiled and deterministic), the race test (200
# runs, the default+8 per problem: step 7+8 at d64, 5+8 at d128 for N = 2000). "time": the 24-problem grid, the
# default and the default with step 8 beside the two-kernel backward, cuDNN and FA-2.
# "check9" and "time9": the same for step 9 (fused_prep); not run as such: run i (gpu_v3_backward_run_i.sh) timed
# step 9 on the grid ("default+9") without its check.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S=scripts/gpu_v3_backward.py
log=$OUT/log-$1.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  if [ "$1" = check9 ]; then
    timeout 95 python3 $S $OUT --parts check --configs 'step 5+9,step 7+9' --plan-configs 'default+9'
    timeout 30 python3 $S $OUT --parts race --configs 'default+9' --runs 200
  elif [ "$1" = time9 ]; then
    timeout 160 python3 $S $OUT --parts time --configs 'default,default+9' --skip 'gpulab plan'
  elif [ "$1" = check ]; then
    timeout 95 python3 $S $OUT --parts check --configs 'step 5+8,step 7+8' --plan-configs 'default+8'
    timeout 30 python3 $S $OUT --parts race --configs 'default+8' --runs 200
  else
    timeout 160 python3 $S $OUT --parts time --configs 'default,default+8' --skip 'gpulab plan'
  fi
  echo "## done"
} 2>&1 | grep -v '^{"kind": "fwd+bwd"' | tee "$log"
