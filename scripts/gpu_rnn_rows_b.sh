#!/usr/bin/env bash
# Lead, issue 40 rows run b (H100): with 8 rows per program in the one-SM chooser (tiling.BLOCK_B, SFU term):
# the split kernels with 8 rows at one head of 768 (probe), lesson 5's `bench 05 called` (main problem as a loop
# calls it, the tiny step), lesson 6's `bench 06 throughput` (the capstone), then the GPU tests of tests/rnn.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-rows-b.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## split probe $(date +%T)"
  PARTS=split timeout 90 python3 scripts/bench05_rows.py $OUT
  echo "## bench 05 called $(date +%T)"
  timeout 170 python3 -m gpulab bench 05 called --out $OUT
  echo "## bench 06 throughput $(date +%T)"
  timeout 150 python3 -m gpulab bench 06 throughput --out $OUT
  echo "## GPU tests tests/rnn $(date +%T)"
  GPULAB_POISON=1 timeout 120 python3 -m pytest -m gpu tests/rnn -q -rf -p no:cacheprovider -o addopts='' -n 8 2>&1 | tail -25
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
