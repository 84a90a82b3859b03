#!/usr/bin/env bash
# gluon-bwd3 device calls for records bwd run d (H100). Call 1: steps 5-6 checked, raced, timed beside step 3 and the
# peers. Call 2 (CALL=2): the default (MEASURED, cached launch) checked (two calls per input), raced, timed.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S=scripts/gpu_v3_backward.py
log=$OUT/log.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  if [ "${CALL:-1}" = 1 ]; then
    timeout 170 python3 $S $OUT --parts check --configs 'step 5,step 6' --plan-configs 'step 6'
    timeout 60 python3 $S $OUT --parts race --configs 'step 5,step 6' --runs 200
    timeout 60 python3 $S $OUT --parts cs336 --configs 'step 3,step 5,step 6' --plan-configs 'step 6'
    timeout 200 python3 $S $OUT --parts time --configs 'step 3,step 5,step 6' --plan-configs 'step 6'
  else
    timeout 90 python3 $S $OUT --parts check --configs default --no-plan
    timeout 35 python3 $S $OUT --parts race --configs default --runs 200
    timeout 25 python3 $S $OUT --parts cs336 --configs 'step 5,default' --plan-configs default
    timeout 140 python3 $S $OUT --parts time --configs 'step 5,default' --plan-configs default
  fi
  echo "## done"
} 2>&1 | grep -v '^{"kind": "fwd+bwd"' | tee "$log"
