#!/usr/bin/env bash
# v3-bwd4 device call for records bwd run f (H100): step 7 (persistent grid) checked (plan and compile too), raced
# 200 runs, timed beside step 5, cuDNN, FA-2 and the shipped backward on the 24-problem grid and the CS336 problem;
# then per-kernel device time of N = 1024 (torch.profiler) and one Nsight Compute report of step 7's kernel.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S=scripts/gpu_v3_backward.py
log=$OUT/log.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  timeout 100 python3 $S $OUT --parts check --configs 'step 7' --plan-configs 'step 7'
  timeout 40 python3 $S $OUT --parts race --configs 'step 7' --runs 200
  timeout 30 python3 $S $OUT --parts cs336 --configs 'step 5,step 7' --skip 'SDPA FlashAttention-2'
  timeout 150 python3 $S $OUT --parts time --configs 'step 5,step 7'
  timeout 25 python3 scripts/profile_v3_backward.py $OUT/profile.txt --steps 5,7
  timeout 25 python3 scripts/profile_v3_backward.py $OUT/profile-causal-d128.txt --steps 5,7 --causal --head-dim 128
  timeout 60 ncu --set full -k regex:attention_backward_v3 --profile-from-start off -c 1 \
    python3 scripts/profile_v3_backward.py /dev/null --steps 7 --ncu-once > $OUT/ncu-step7-d64-n1024.txt 2>&1
  tail -5 $OUT/ncu-step7-d64-n1024.txt
  echo "## done"
} 2>&1 | grep -v '^{"kind": "fwd+bwd"' | tee "$log"
