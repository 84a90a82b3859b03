#!/usr/bin/env bash
# Issue 40, run zz (H100, one call; run under the name gpu_rnn_v6_final.sh, which an earlier script has, since
# restored): the tree as it ships after run z: `bench 05 called` (the main and tiny problems as called),
# scripts/bench05_v6_rows8.py again (TAG zz: a second sample of one head of 768), then every GPU test of tests/rnn.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-final.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## bench 05 called $(date +%T)"
  timeout 170 python3 -m gpulab bench 05 called --out $OUT 2>&1 | grep -v Warning
  echo "## bench05_v6_rows8 $(date +%T)"
  TAG=zz timeout 100 python3 scripts/bench05_v6_rows8.py $OUT
  echo "## GPU tests $(date +%T)"
  GPULAB_POISON=1 timeout 260 python3 -m pytest -m gpu tests/rnn -q -rf -p no:cacheprovider -o addopts='' -n 8 \
    2>&1 | grep -v -i "warn" | tail -15
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
