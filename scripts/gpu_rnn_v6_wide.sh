#!/usr/bin/env bash
# Issue 40, version 6 run h (H100, one call): 32 rows per program for B > 16 (the capstone's batches) and the
# swizzled partials. The GPU tests of v6/b4 (32-row tiles included), scripts/bench05_v6_wide.py, then
# `bench 06 throughput` (the capstone's one head of 768 now on version 6).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-wide.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## GPU tests (version 6) $(date +%T)"
  GPULAB_POISON=1 timeout 150 python3 -m pytest -m gpu tests/rnn/fused/test_v6_gluon_split.py \
    tests/rnn/fused/test_b4_gluon_split_backward.py -q -rf -p no:cacheprovider -o addopts='' 2>&1 \
    | grep -E "^E  |passed|failed|FAILED" | tail -20
  echo "## bench05_v6_wide $(date +%T)"
  timeout 120 python3 scripts/bench05_v6_wide.py $OUT
  echo "## bench 06 throughput $(date +%T)"
  timeout 100 python3 -m gpulab bench 06 throughput --out $OUT 2>&1 | grep -v "it/s\]" | tail -12
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
