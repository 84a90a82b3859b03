#!/usr/bin/env bash
# Issue 40 / lesson 6 (H100, one call): the RoPE kernel's GPU tests, its benchmark against PyTorch's operations
# (scripts/bench06_rope.py), the capstone's training throughput (`bench 06 throughput`: the Transformers now split
# and rotate their heads with the kernel; the SDPA peer once more with PyTorch's operations), and the kernel table of
# one training step of each model (scripts/profile06_capstone.py).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-capstone-rope.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## GPU tests $(date +%T)"
  GPULAB_POISON=1 timeout 200 python3 -m pytest -m gpu tests/attention/test_rope.py tests/tasks/test_tasks_models.py \
    -q -rf -p no:cacheprovider -o addopts='' 2>&1 | grep -v -i "warn" | tail -6
  echo "## bench06_rope $(date +%T)"
  TAG=${TAG:-a} timeout 120 python3 scripts/bench06_rope.py $OUT
  echo "## bench 06 throughput $(date +%T)"
  timeout 200 python3 -m gpulab bench 06 throughput --out $OUT 2>&1 | grep -v "it/s\]" | tail -16
  echo "## profile $(date +%T)"
  CASES="sdpa" timeout 100 python3 scripts/profile06_capstone.py $OUT | head -30
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
