#!/usr/bin/env bash
# Lead, bwd run l (H100), issue 39: flash_attention itself ("gpulab plan") on the 24-problem grid and the CS336
# problem with bwd run k's kernel (spills cut) and plan.V3_BACKWARD_MIN_SEQ re-derived from run k, beside the
# defaults called directly, the two-kernel backward, cuDNN and FA-2; then version 3's backward GPU tests (every step
# shares the changed block body).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-bwd-l.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $log
timeout ${BWD_S:-150} python3 scripts/gpu_v3_backward.py $OUT --parts time,cs336 --configs default 2>&1 \
  | grep -v '^{"kind": "fwd+bwd"' >> $log
GPULAB_POISON=1 timeout ${TEST_S:-210} python3 -m pytest -m gpu tests/attention/v3/test_v3_backward_gpu.py -v -rf \
  -p no:cacheprovider -o addopts='' -n 8 > $OUT/gpu-tests-bwd-l.txt 2>&1
tail -3 $OUT/gpu-tests-bwd-l.txt >> $log
echo "## done" >> $log
