#!/usr/bin/env bash
# Issue 40, run y (H100, one call): the GPU tests of version 6 and b4 (b4 now loading each step's inputs a step
# ahead), then scripts/diag05_v6_switches.py for the switches named in SWITCHES (TAG y).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-switches.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## GPU tests v6/b4 $(date +%T)"
  GPULAB_POISON=1 timeout 200 python3 -m pytest -m gpu -q -rf -p no:cacheprovider -o addopts='' -n 8 \
    tests/rnn/fused/test_v6_gluon_split.py tests/rnn/fused/test_b4_gluon_split_backward.py 2>&1 | grep -v -i "warn" | tail -12
  for s in ${SWITCHES:-barrier late}; do
    echo "## diag05_v6_switches $s $(date +%T)"
    TAG=${TAG:-y} timeout 200 python3 scripts/diag05_v6_switches.py $OUT $s
  done
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
