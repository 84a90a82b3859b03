#!/usr/bin/env bash
# Issue 40, run z (H100, one call): the tree with b4's inputs loaded a step ahead, a barrier per head and batch tile,
# and the forward's two pieces of h loaded before either changes layout: scripts/bench05_v6_rows8.py (TAG z),
# `bench 06 throughput` (the capstone), then the GPU tests of v6 and b4.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-prefetched.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## bench05_v6_rows8 $(date +%T)"
  TAG=z timeout 150 python3 scripts/bench05_v6_rows8.py $OUT
  echo "## bench 06 throughput $(date +%T)"
  timeout 130 python3 -m gpulab bench 06 throughput --out $OUT 2>&1 | grep -v "it/s\]" | tail -12
  echo "## GPU tests v6/b4 $(date +%T)"
  GPULAB_POISON=1 timeout 200 python3 -m pytest -m gpu -q -rf -p no:cacheprovider -o addopts='' -n 8 \
    tests/rnn/fused/test_v6_gluon_split.py tests/rnn/fused/test_b4_gluon_split_backward.py 2>&1 | grep -v -i "warn" | tail -12
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
