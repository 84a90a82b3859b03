#!/usr/bin/env bash
# Issue 40 (H100, one call): the parameter products after b4 without copies of h_{t-1} and with db summed in b4:
# the GPU tests of b4 (db against the reduction) and of the parameter products, scripts/diag05_b4_db.py (TAG a: the
# three ways as called at B16 and B32, cuDNN beside), then the rows8 script (TAG zze: Appendix I's tiles as shipped).
set -uo pipefail
export PYTHONPATH=$PWD:$PWD/scripts PYTHONUNBUFFERED=1
log=$OUT/log-b4-db.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## GPU tests $(date +%T)"
  GPULAB_POISON=1 timeout 150 python3 -m pytest -m gpu tests/rnn/fused/test_b4_gluon_split_backward.py \
    tests/rnn/backends/test_parameter_grads.py -q -rf -p no:cacheprovider -o addopts='' -n 8 2>&1 \
    | grep -E "passed|failed|FAILED|Error" | tail -8
  echo "## diag05_b4_db $(date +%T)"
  TAG=a timeout 120 python3 scripts/diag05_b4_db.py $OUT 2>&1 | grep -v -i warn
  echo "## bench05_v6_rows8 zze $(date +%T)"
  TAG=zze timeout 60 python3 scripts/bench05_v6_rows8.py $OUT
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
