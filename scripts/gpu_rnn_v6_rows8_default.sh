#!/usr/bin/env bash
# Issue 40, run l (H100, one call): 8-row tiles as version 6's first choice (plan.V6_TILES):
# scripts/bench05_v6_rows8.py again (TAG l, with the plan's own tiles as called), `bench 06 throughput` (the
# capstone), then every GPU test of tests/rnn.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-rows8-default.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## bench05_v6_rows8 $(date +%T)"
  TAG=l timeout 150 python3 scripts/bench05_v6_rows8.py $OUT
  echo "## bench 06 throughput $(date +%T)"
  timeout 110 python3 -m gpulab bench 06 throughput --out $OUT 2>&1 | grep -v "it/s\]" | tail -12
  echo "## GPU tests tests/rnn $(date +%T)"
  GPULAB_POISON=1 timeout 250 python3 -m pytest -m gpu tests/rnn -q -rf -p no:cacheprovider -o addopts='' -n 8 \
    2>&1 | grep -v -i "warn" | tail -15
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
