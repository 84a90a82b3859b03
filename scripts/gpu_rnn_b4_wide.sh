#!/usr/bin/env bash
# Issue 40, run b of the wide-b4 probe (H100, one call): the plan's pair for one head of 768 past 16 rows is now the
# forward in 16-row tiles beside b4 in 8-row tiles of 32 units and 16 warps. The GPU tests of version 6 and b4 (the
# plan's B32 case runs the new pair), scripts/probe05_b4_wide.py (TAG b: "b4 plan B32" is the new tile), then the
# capstone's training throughput (`bench 06 throughput`: its one-head LSTM runs at B32).
set -uo pipefail
export PYTHONPATH=$PWD:$PWD/scripts PYTHONUNBUFFERED=1
log=$OUT/log-b4-wide.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## GPU tests $(date +%T)"
  GPULAB_POISON=1 timeout 200 python3 -m pytest -m gpu tests/rnn/fused/test_v6_gluon_split.py \
    tests/rnn/fused/test_b4_gluon_split_backward.py -q -rf -p no:cacheprovider -o addopts='' -n 8 2>&1 \
    | grep -v -i "warn" | tail -8
  echo "## probe05_b4_wide $(date +%T)"
  TAG=b timeout 120 python3 scripts/probe05_b4_wide.py $OUT 2>&1 | grep -v -i warn
  echo "## bench 06 throughput $(date +%T)"
  timeout 200 python3 -m gpulab bench 06 throughput --out $OUT 2>&1 | grep -v "it/s\]" | tail -14
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
