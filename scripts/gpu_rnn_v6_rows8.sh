#!/usr/bin/env bash
# Issue 40, run k (H100, one call): version 6 and b4 at one head of 768, B16, in two batch tiles of 8 rows (16 units,
# 8 warps) beside the defaults: the GPU tests of v6 and b4 (8-row tiles included), then scripts/bench05_v6_rows8.py
# (TAG k).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-rows8.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## GPU tests v6/b4 $(date +%T)"
  GPULAB_POISON=1 timeout 200 python3 -m pytest -m gpu -q -rf -p no:cacheprovider -o addopts='' -n 8 \
    tests/rnn/fused/test_v6_gluon_split.py tests/rnn/fused/test_b4_gluon_split_backward.py 2>&1 | grep -v -i "warn" | tail -12
  echo "## bench05_v6_rows8 $(date +%T)"
  TAG=k timeout 200 python3 scripts/bench05_v6_rows8.py $OUT
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
