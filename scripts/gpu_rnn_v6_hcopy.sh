#!/usr/bin/env bash
# Issue 40, run o (H100, one call): parameter_grads builds h_{t-1} with two copies instead of torch.cat: the step's
# profile again (scripts/diag05_v6_host.py), scripts/bench05_v6_rows8.py (TAG o: one head of 768 as called), and the
# GPU tests of the parameter products and the backends that use them.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-hcopy.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## diag05_v6_host $(date +%T)"
  timeout 100 python3 scripts/diag05_v6_host.py 2>&1 | grep -v Warning | head -40
  echo "## bench05_v6_rows8 $(date +%T)"
  TAG=o timeout 150 python3 scripts/bench05_v6_rows8.py $OUT
  echo "## GPU tests $(date +%T)"
  GPULAB_POISON=1 timeout 200 python3 -m pytest -m gpu -q -rf -p no:cacheprovider -o addopts='' -n 8 \
    tests/rnn/backends tests/rnn/fused/test_b4_gluon_split_backward.py tests/rnn/fused/test_rnn_split.py \
    tests/rnn/test_rnn_flashrnn.py 2>&1 | grep -v -i "warn" | tail -8
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
