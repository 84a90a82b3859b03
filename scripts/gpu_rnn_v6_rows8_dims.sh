#!/usr/bin/env bash
# Issue 40, run p (H100, one call): the 8-row tiles against the 16-row ones at the other head dims version 6 runs
# (one head of 512 and of 256, B16): scripts/bench05_v6_rows8.py with DH set (TAG p), to see whether the plan's
# first choice holds beyond 768.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-rows8-dims.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  for dh in 512 256; do
    echo "## bench05_v6_rows8 DH=$dh $(date +%T)"
    DH=$dh TAG=p timeout 150 python3 scripts/bench05_v6_rows8.py $OUT
  done
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
