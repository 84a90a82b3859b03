#!/usr/bin/env bash
# Lead, run l third call (H100): the 24-problem grid with run l's defaults (bench 04 v3; the second call's limit cut
# it), then the attention GPU tests outside version 3 (the plan's backward gate changed with bwd run i).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/log-l3.txt
timeout ${GRID_S:-260} python3 -m gpulab bench 04 v3 --out $OUT/g >> $OUT/log-l3.txt 2>&1
for f in $(find $OUT/g -name '*.jsonl'); do cp $f $OUT/; done
GPULAB_POISON=1 timeout ${TEST_S:-200} python3 -m pytest -m gpu tests/attention --ignore=tests/attention/v3 -v -rf \
  -p no:cacheprovider -o addopts='' -n 8 > $OUT/gpu-tests-l3.txt 2>&1
tail -3 $OUT/gpu-tests-l3.txt >> $OUT/log-l3.txt
echo "## done" >> $OUT/log-l3.txt
