#!/usr/bin/env bash
# Lead, bwd run o (H100), issue 39: the backward GPU tests with run n's defaults (step 11 on everywhere, the dQ
# swizzle fix): every test of tests/attention/v3/test_v3_backward_gpu.py, poisoned outputs.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu-tests-bwd-o.txt
GPULAB_POISON=1 timeout ${TEST_S:-540} python3 -m pytest -m gpu tests/attention/v3/test_v3_backward_gpu.py -v -rf \
  -p no:cacheprovider -o addopts='' -n 8 >> $OUT/gpu-tests-bwd-o.txt 2>&1
tail -3 $OUT/gpu-tests-bwd-o.txt
