#!/usr/bin/env bash
# Lead, issue 40 rows run c (H100): `bench 05 called` with the one-piece backward among the variants (the host path
# of the main loop: run b found its host time above the GPU's), then every GPU test of tests/rnn (8 rows chosen).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-rows-c.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## bench 05 called $(date +%T)"
  timeout 170 python3 -m gpulab bench 05 called --out $OUT 2>&1 | grep -v Warning
  echo "## GPU tests tests/rnn $(date +%T)"
  GPULAB_POISON=1 timeout 260 python3 -m pytest -m gpu tests/rnn -q -rf -p no:cacheprovider -o addopts='' -n 8 2>&1 | grep -v -i "warn" | tail -25
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
