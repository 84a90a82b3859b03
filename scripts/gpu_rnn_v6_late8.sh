#!/usr/bin/env bash
# Issue 40, runs zzc and zzd (H100, one call): version 6 issuing its next inputs after the arrival in 8-row tiles
# (v6.LATE_INPUTS None, the default from run zzb): scripts/bench05_v6_rows8.py twice (TAG zzc, zzd: two samples of
# one head of 768 beside cuDNN), the GPU tests of version 6 and b4, and the RoPE kernel's.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-v6-late8.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  for tag in zzc zzd; do
    echo "## bench05_v6_rows8 $tag $(date +%T)"
    TAG=$tag timeout 100 python3 scripts/bench05_v6_rows8.py $OUT
  done
  echo "## GPU tests $(date +%T)"
  GPULAB_POISON=1 timeout 200 python3 -m pytest -m gpu tests/rnn/fused/test_v6_gluon_split.py \
    tests/rnn/fused/test_b4_gluon_split_backward.py tests/attention/test_rope.py -q -rf -p no:cacheprovider \
    -o addopts='' -n 8 2>&1 | grep -v -i "warn" | tail -8
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
