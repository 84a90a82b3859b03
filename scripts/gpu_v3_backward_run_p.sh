#!/usr/bin/env bash
# Lead, bwd run p (H100), issue 39: the dQ writer adds a whole query block without a mask (one branch per block
# instead of one per 8-row chunk: the next chunks' shared-memory loads run ahead of the additions; run m's second
# profile had the consumers waiting on the writer more than on anything else). Check (full shapes: odd lengths take
# the masked last block) and race of the defaults; then the 24 problems, three alternating rounds (N = 1024 swung by
# up to 40% between the two rounds of runs m and n), the default beside the same default with the old writer (a copy
# of the modules in oldv3/, --ab-module), flash_attention itself, the two kernels, cuDNN, FA-2; and the CS336 problem.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S=scripts/gpu_v3_backward.py
log=$OUT/log-bwd-p.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  timeout 130 python3 $S $OUT --parts check,race --configs 'default' --runs 50
  timeout 330 python3 $S $OUT --parts time,cs336 --configs 'default' --rounds 3 --ab-module oldv3.backward
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done"
} 2>&1 | grep -v '^{"kind"' | tee "$log"
