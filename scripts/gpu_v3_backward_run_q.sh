#!/usr/bin/env bash
# Lead, bwd run q (H100), issue 39: flash_attention itself with run p's writer and plan.V3_BACKWARD_MIN_SEQ re-derived
# from run p (1024 everywhere): the 24 problems in three alternating rounds and the CS336 problem beside the default
# called directly, the two kernels, cuDNN and FA-2; then every test of test_v3_backward_gpu.py (poisoned outputs).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S=scripts/gpu_v3_backward.py
log=$OUT/log-bwd-q.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  timeout 190 python3 $S $OUT --parts time,cs336 --configs 'default' --rounds 3
  echo "## done timing"
} 2>&1 | grep -v '^{"kind"' | tee "$log"
GPULAB_POISON=1 timeout ${TEST_S:-370} python3 -m pytest -m gpu tests/attention/v3/test_v3_backward_gpu.py -v -rf \
  -p no:cacheprovider -o addopts='' -n 8 > $OUT/gpu-tests-bwd-q.txt 2>&1
tail -3 $OUT/gpu-tests-bwd-q.txt | tee -a "$log"
