#!/usr/bin/env bash
# Issue 40, version 6 as the package's default split kernels (H100, one call): every GPU test of tests/rnn (the
# fused backend now runs v6 + b4 for the heads it splits), scripts/bench05_v6.py (records for lesson 5 Appendix I),
# then `bench 06 throughput` (the capstone: its one head of 768 runs v6 + b4).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-final.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## GPU tests tests/rnn $(date +%T)"
  GPULAB_POISON=1 timeout 230 python3 -m pytest -m gpu tests/rnn -q -rf -p no:cacheprovider -o addopts='' -n 8 \
    2>&1 | grep -v -i "warn" | tail -12
  echo "## bench05_v6 $(date +%T)"
  TAG=f timeout 120 python3 scripts/bench05_v6.py $OUT
  echo "## bench 06 throughput $(date +%T)"
  timeout 100 python3 -m gpulab bench 06 throughput --out $OUT 2>&1 | grep -v "it/s\]" | tail -12
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
