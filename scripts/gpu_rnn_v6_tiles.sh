#!/usr/bin/env bash
# Issue 40, run j (H100, one call): version 6 for B > 16 in 16-row batch tiles, the forward in b4's tile of 16 units
# in 8 warps where its 8-unit default would not fit the SMs (plan.v6_tiles): the GPU tests of v6 and b4 (two tiles
# included), scripts/bench05_v6_tiles.py (one head of 768 at B32, TAG j), then `bench 06 throughput` (the capstone,
# whose one-head LSTM trains on 32 rows).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-tiles.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## GPU tests v6/b4 $(date +%T)"
  GPULAB_POISON=1 timeout 200 python3 -m pytest -m gpu -q -rf -p no:cacheprovider -o addopts='' -n 8 \
    tests/rnn/fused/test_v6_gluon_split.py tests/rnn/fused/test_b4_gluon_split_backward.py 2>&1 | grep -v -i "warn" | tail -12
  echo "## bench05_v6_tiles $(date +%T)"
  TAG=j timeout 150 python3 scripts/bench05_v6_tiles.py $OUT
  echo "## bench 06 throughput $(date +%T)"
  timeout 110 python3 -m gpulab bench 06 throughput --out $OUT 2>&1 | grep -v "it/s\]" | tail -12
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
