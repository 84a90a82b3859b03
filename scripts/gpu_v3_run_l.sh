#!/usr/bin/env bash
# Lead, run l (H100), issue 38: the tune part with Q-in-registers twins (v3-tune), the headline A/B of the measured
# forward against its q_regs twin (scripts/gpu_v3_qregs_ab.py), and the GPU tests of the D preprocess kernels
# (attention.shared._delta_rows, changed after the last GPU run) and of version 3's backward.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/log-l.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active \
  --format=csv -lms 250 > $OUT/smi-l.csv &
SMI=$!
timeout ${TUNE_S:-260} python3 -m gpulab bench 04 v3-tune --out $OUT/t >> $OUT/log-l.txt 2>&1
for f in $(find $OUT/t -name '*.jsonl'); do cp $f $OUT/; done
timeout ${AB_S:-120} python3 scripts/gpu_v3_qregs_ab.py $OUT 9 >> $OUT/log-l.txt 2>&1
kill $SMI
GPULAB_POISON=1 timeout ${TEST_S:-150} python3 -m pytest -m gpu tests/attention/test_attention_backward_fused.py \
  tests/attention/v3/test_v3_backward_gpu.py -v -rf -p no:cacheprovider -o addopts='' -n 8 > $OUT/gpu-tests-l.txt 2>&1
tail -3 $OUT/gpu-tests-l.txt >> $OUT/log-l.txt
echo "## done" >> $OUT/log-l.txt
