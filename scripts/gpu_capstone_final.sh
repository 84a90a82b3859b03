#!/usr/bin/env bash
# Issue 40 / lesson 6 (H100, one call): the final tree's capstone throughput (`bench 06 throughput`, run k: the
# parameter products copy h_{t-1} again for several heads, the fix of run j's 4-head regression), the GPU tests of
# the fused RNN, the RoPE kernel and the capstone models, and the kernel table of one training step of the one-head
# LSTM and the SDPA Transformer (scripts/profile06_capstone.py).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-capstone-final.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## bench 06 throughput $(date +%T)"
  timeout 200 python3 -m gpulab bench 06 throughput --out $OUT 2>&1 | grep -v "it/s\]" | tail -16
  echo "## profile $(date +%T)"
  CASES="lstm1 sdpa" timeout 120 python3 scripts/profile06_capstone.py $OUT | grep -A12 "kernels' device time"
  echo "## GPU tests $(date +%T)"
  GPULAB_POISON=1 timeout 240 python3 -m pytest -m gpu tests/rnn tests/attention/test_rope.py \
    tests/tasks/test_tasks_models.py -q -rf -p no:cacheprovider -o addopts='' -n 8 2>&1 \
    | grep -E "passed|failed|FAILED|Error" | tail -10
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
