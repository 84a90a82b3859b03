#!/usr/bin/env bash
# Lead, run l second call (H100), issue 38: the 24-problem grid (bench 04 v3) and the headline part (bench 04
# v3-headline, 9 alternating rounds, nvidia-smi every 250 ms) with the defaults run l's tune chose, and version 3's
# forward GPU tests (check + 200-run race of every variant, q_regs twins included); the backward's plan timing and
# CS336 problem (bwd run j) and its step-10 GPU tests.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/log-l2.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active \
  --format=csv -lms 250 > $OUT/smi-l2.csv &
SMI=$!
timeout ${HEAD_S:-120} python3 -m gpulab bench 04 v3-headline --out $OUT/h >> $OUT/log-l2.txt 2>&1
kill $SMI
timeout ${GRID_S:-200} python3 -m gpulab bench 04 v3 --out $OUT/g >> $OUT/log-l2.txt 2>&1
for f in $(find $OUT/h $OUT/g -name '*.jsonl'); do cp $f $OUT/; done
# issue 39: the backward's new defaults (step 10 at d=64) through flash_attention's plan, and the CS336 problem
timeout ${BWD_S:-170} python3 scripts/gpu_v3_backward.py $OUT --parts time,cs336 --configs default >> $OUT/log-l2.txt 2>&1
GPULAB_POISON=1 timeout ${TEST_S:-110} python3 -m pytest -m gpu tests/attention/v3/test_v3_gpu.py \
  tests/attention/v3/test_v3_backward_gpu.py -k "not backward_gpu or kv" -v -rf \
  -p no:cacheprovider -o addopts='' -n 8 > $OUT/gpu-tests-l2.txt 2>&1
tail -3 $OUT/gpu-tests-l2.txt >> $OUT/log-l2.txt
echo "## done" >> $OUT/log-l2.txt
