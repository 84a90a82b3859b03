#!/usr/bin/env bash
# Issue 40, version 6 run g (H100, one call): v6 and b4 arrive at each step's barrier right after the stores the
# other programs read (h; the shares of dh) and store the rest while they wait. Their GPU tests, the clock-stamped
# A/B against arriving after every store (scripts/diag05_v6.py), then scripts/bench05_v6.py (run 'g').
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-arrive.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## GPU tests (version 6) $(date +%T)"
  GPULAB_POISON=1 timeout 150 python3 -m pytest -m gpu tests/rnn/fused/test_v6_gluon_split.py \
    tests/rnn/fused/test_b4_gluon_split_backward.py -q -rf -p no:cacheprovider -o addopts='' 2>&1 \
    | grep -E "^E  |passed|failed|FAILED" | tail -20
  echo "## diag05_v6 $(date +%T)"
  DIAG_BACKWARD=0 timeout 150 python3 scripts/diag05_v6.py $OUT 2>&1 | grep -v "^#\|^ \|^%\|^}" | tail -12
  echo "## bench05_v6 $(date +%T)"
  TAG=g timeout 120 python3 scripts/bench05_v6.py $OUT
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
