#!/usr/bin/env bash
# Lead, issue 40 rows run e (H100): the backward's product per gate (backward.PRODUCT 'per gate', the default in this
# tree) against all gates at once, same process (bench05_rows.py, 8 rows); the fused GPU tests with it; then
# `bench 05 called` and `bench 06 throughput` as this tree ships.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-rows-e.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## product A/B $(date +%T)"
  PRODUCTS="all gates,per gate" ROWS=8 TAG=rows-product timeout 80 python3 scripts/bench05_rows.py $OUT
  echo "## GPU tests (fused backward) $(date +%T)"
  GPULAB_POISON=1 timeout 110 python3 -m pytest -m gpu tests/rnn/fused/test_rnn_fused_kernels.py \
    tests/rnn/backends tests/rnn/test_rnn_host_path.py -k "fused or grads or graphed or host" -q -rf \
    -p no:cacheprovider -o addopts='' -n 8 2>&1 | grep -v -i "warn" | tail -8
  echo "## bench 05 called $(date +%T)"
  timeout 110 python3 -m gpulab bench 05 called --out $OUT 2>&1 | grep -v -i warn | grep "main\|tiny\|wrote"
  echo "## bench 06 throughput $(date +%T)"
  timeout 75 python3 -m gpulab bench 06 throughput --out $OUT 2>&1 | grep -v "it/s\]" | tail -12
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
