#!/usr/bin/env bash
# Issue 40, run i (H100, one call): dG stored in Wx's layout by every backward (fused, b3, b4) and the fused
# backward's piece products as one Triton launch per piece (parameter_grads.step_products) reading dG in place:
# `bench 05 called` (main and tiny problems, the time-major layout as a variant), scripts/bench05_v6.py (one head of
# 768 as called, TAG i), `bench 06 throughput` (the capstone), then every GPU test of tests/rnn.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-dg-layout.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## bench 05 called $(date +%T)"
  timeout 170 python3 -m gpulab bench 05 called --out $OUT 2>&1 | grep -v Warning
  echo "## bench05_v6 $(date +%T)"
  TAG=i timeout 120 python3 scripts/bench05_v6.py $OUT
  echo "## bench 06 throughput $(date +%T)"
  timeout 110 python3 -m gpulab bench 06 throughput --out $OUT 2>&1 | grep -v "it/s\]" | tail -12
  echo "## GPU tests $(date +%T)"
  GPULAB_POISON=1 timeout 250 python3 -m pytest -m gpu tests/rnn -q -rf -p no:cacheprovider -o addopts='' -n 8 \
    2>&1 | grep -v -i "warn" | tail -15
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
