#!/usr/bin/env bash
# Lead, issue 40 rows run d (H100): lesson 5's benchmark (`bench 05`) with 8 rows in the one-SM chooser, then the
# capstone's `bench 06 throughput` again (a second run of the same models).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-rows-d.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## bench 05 $(date +%T)"
  timeout 420 python3 -m gpulab bench 05 --out $OUT 2>&1 | grep -v -i "warn" | tail -40
  echo "## bench 06 throughput $(date +%T)"
  timeout 100 python3 -m gpulab bench 06 throughput --out $OUT 2>&1 | grep -v "it/s\]" | tail -14
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
