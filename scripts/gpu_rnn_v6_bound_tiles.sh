#!/usr/bin/env bash
# Issue 40, run q (H100, one call): the plan binds version 6's tiles once per problem (no tile choice per call):
# the GPU tests of version 6 and b4 through flashrnn, then scripts/bench05_v6_rows8.py (TAG q: one head of 768 as
# called).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-bound-tiles.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## GPU tests $(date +%T)"
  GPULAB_POISON=1 timeout 200 python3 -m pytest -m gpu -q -rf -p no:cacheprovider -o addopts='' -n 8 \
    tests/rnn/fused/test_b4_gluon_split_backward.py tests/rnn/fused/test_v6_gluon_split.py tests/rnn/test_rnn_host_path.py \
    2>&1 | grep -v -i "warn" | tail -6
  echo "## bench05_v6_rows8 $(date +%T)"
  TAG=q timeout 150 python3 scripts/bench05_v6_rows8.py $OUT
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
