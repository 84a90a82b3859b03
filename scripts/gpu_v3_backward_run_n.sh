#!/usr/bin/env bash
# Lead, bwd run n (H100), issue 39: run m2's grid again after the dQ buffer's swizzle fix (phase
# = row mod D/16; the writer reads 8-row chunks): at D = 128 the consumers' fp32 dQ stores took twice their ideal
# shared-memory wavefronts (Nsight, ncu-d128-step5-none-11). Check (full shapes) and race of the defaults with and
# without step 11, the 24 problems and CS336 with run m2's providers, then every backward GPU test (the writer
# changed for steps 5-7) until the call's limit.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-bwd-n.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $log
timeout ${CHECK_S:-170} python3 scripts/gpu_v3_backward.py $OUT --parts check,race --configs 'default+11,default' \
  --runs 50 --plan-configs 'default+11' 2>&1 | grep -v '^{"kind"' | tail -20 >> $log
timeout ${TIME_S:-200} python3 scripts/gpu_v3_backward.py $OUT --parts time,cs336 \
  --configs 'default,default+11,step 5+k+11' --d128-only 'step 5+k+11' --plan-configs 'default+11' 2>&1 \
  | grep -v '^{"kind"' | tail -20 >> $log
GPULAB_POISON=1 timeout ${TEST_S:-180} python3 -m pytest -m gpu tests/attention/v3/test_v3_backward_gpu.py -v -rf \
  -p no:cacheprovider -o addopts='' -n 8 > $OUT/gpu-tests-bwd-n.txt 2>&1
tail -3 $OUT/gpu-tests-bwd-n.txt >> $log
echo "## done" >> $log
