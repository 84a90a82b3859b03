#!/usr/bin/env bash
# Issue 40, version 6 (H100, one call of about 5 minutes): the Gluon split forward's and backward's (b4) GPU tests
# (float64, repeated launches, against version 5 and b3), then scripts/bench05_v6.py (every tile beside version 5,
# b3 and cuDNN, both clocks).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## GPU tests (version 6) $(date +%T)"
  GPULAB_POISON=1 timeout 150 python3 -m pytest -m gpu tests/rnn/fused/test_v6_gluon_split.py \
    tests/rnn/fused/test_b4_gluon_split_backward.py -q -rf \
    -p no:cacheprovider -o addopts='' 2>&1 | tail -25
  echo "## bench05_v6 $(date +%T)"
  timeout 240 python3 scripts/bench05_v6.py $OUT
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
