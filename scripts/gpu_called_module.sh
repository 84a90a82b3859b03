#!/usr/bin/env bash
# Issue 40 / lesson 5 (H100, one call): `bench 05 called` (run g) with the main problem through gpulab.rnn.LSTM
# too (module loop, module graph), and the GPU tests of the called bench and the host path.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-called-module.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## bench 05 called $(date +%T)"
  timeout 200 python3 -m gpulab bench 05 called --out $OUT 2>&1 | grep -v "it/s\]\|UserWarning\|run_backward\|_warn_once" | tail -45
  echo "## GPU tests $(date +%T)"
  GPULAB_POISON=1 timeout 200 python3 -m pytest -m gpu tests/rnn/fused/test_called_bench.py tests/rnn/test_rnn_host_path.py \
    tests/rnn/test_rnn_module.py -v -p no:cacheprovider -o addopts='' -n 8 2>&1 | grep -E "PASSED|FAILED|ERROR|passed|failed" | tail -40
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
