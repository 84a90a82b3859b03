#!/usr/bin/env bash
# Lead, bwd run m (H100), issue 39: step 11 (V3BackwardConfig.stats_smem: the producer brings each query block's LSE
# and D into its ring slot, loaded a block ahead; at head dim 128 ptxas then spills nothing inside the block loop).
# Check (full shapes) and race of the defaults with step 11; then the 24-problem grid and the CS336 problem: the
# defaults with and without it called directly, flash_attention with it ("gpulab plan, v3 bwd default+11") and as
# shipped ("gpulab plan"), the two kernels, cuDNN, FA-2, and step 5 + K in registers + 11 at head dim 128; then the
# backward GPU tests of step 11.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-bwd-m.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $log
timeout ${CHECK_S:-150} python3 scripts/gpu_v3_backward.py $OUT --parts check,race --configs 'default+11' --runs 50 \
  --plan-configs 'default+11' 2>&1 | grep -v '^{"kind"' | tail -20 >> $log
timeout ${TIME_S:-270} python3 scripts/gpu_v3_backward.py $OUT --parts time,cs336 \
  --configs 'default,default+11,step 5+k+11' --d128-only 'step 5+k+11' --plan-configs 'default+11' 2>&1 \
  | grep -v '^{"kind"' | tail -20 >> $log
GPULAB_POISON=1 timeout ${TEST_S:-150} python3 -m pytest -m gpu tests/attention/v3/test_v3_backward_gpu.py -v -rf \
  -p no:cacheprovider -o addopts='' -n 8 -k "11 or stats" > $OUT/gpu-tests-bwd-m.txt 2>&1
tail -3 $OUT/gpu-tests-bwd-m.txt >> $log
echo "## done" >> $log
