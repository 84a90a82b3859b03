#!/usr/bin/env bash
# Issue 40, run m (H100, one call): the version-6 run scripts after they began sharing scripts/v6_runs.py, run again
# as a repeat of runs j and l: scripts/bench05_v6_rows8.py and scripts/bench05_v6_tiles.py (TAG m).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-check-scripts.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## bench05_v6_rows8 $(date +%T)"
  TAG=m timeout 150 python3 scripts/bench05_v6_rows8.py $OUT
  echo "## bench05_v6_tiles $(date +%T)"
  TAG=m timeout 150 python3 scripts/bench05_v6_tiles.py $OUT
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
