#!/usr/bin/env bash
# Issue 40 / lesson 6 (H100, one call): the capstone throughput with the two floors (each stack without its
# sequence mixing, tasks.FloorModel) in the same run as the models (`bench 06 throughput`, run l); lesson 5's
# "called" part again (`bench 05 called`, run f: the loop against the CUDA graph on this host); the GPU tests of
# the capstone models.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-capstone-floor.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## bench 06 throughput $(date +%T)"
  timeout 260 python3 -m gpulab bench 06 throughput --out $OUT 2>&1 | grep -v "it/s\]" | tail -18
  echo "## bench 05 called $(date +%T)"
  timeout 150 python3 -m gpulab bench 05 called --out $OUT 2>&1 | grep -v "it/s\]" | tail -40
  echo "## GPU tests $(date +%T)"
  GPULAB_POISON=1 timeout 150 python3 -m pytest -m gpu tests/tasks -v -p no:cacheprovider -o addopts='' -n 8 2>&1 \
    | grep -E "PASSED|FAILED|ERROR|passed|failed" | tail -40
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
