#!/usr/bin/env bash
# Issue 40, run t (H100, one call): version 6's forward with the tagged exchange of h: the GPU tests of v6 (both
# exchanges, the tags' wrap past 65535 steps), then scripts/bench05_v6_tagged.py (TAG t).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-tagged.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## GPU tests v6 $(date +%T)"
  GPULAB_POISON=1 timeout 200 python3 -m pytest -m gpu -q -rf -p no:cacheprovider -o addopts='' -n 8 \
    tests/rnn/fused/test_v6_gluon_split.py -k "${TESTS:-gpu}" 2>&1 | grep -v -i "warn" | tail -12
  echo "## bench05_v6_tagged $(date +%T)"
  TAG=${TAG:-t} timeout 250 python3 scripts/bench05_v6_tagged.py $OUT
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
