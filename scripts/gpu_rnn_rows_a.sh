#!/usr/bin/env bash
# Lead, issue 40 rows run a (H100): the one-SM forward and backward with 8 batch rows per program beside 16
# (scripts/bench05_rows.py), cuDNN fp16 in the same run.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-rows-a.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  timeout 240 python3 scripts/bench05_rows.py $OUT
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done"
} 2>&1 | tee "$log"
