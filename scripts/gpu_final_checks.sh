#!/usr/bin/env bash
# Session of 2026-11-27 (H100, one call): after the drop-in and bad-input fixes (LSTM in torch.nn.LSTM's argument
# order, bias=False a buffer, unbatched and empty batches; attention's and RoPE's checks; once_differentiable), the
# GPU tests of the files they touch, then lesson 5's 'called' part (the 12x64 problem as a loop calls it beside its
# CUDA graph, and the tiny problem's breakdown) on that tree: the module's forward does more Python than before.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-final-checks.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## GPU tests $(date +%T)"
  GPULAB_POISON=1 timeout 260 python3 -m pytest -m gpu tests/rnn/test_rnn_module.py tests/rnn/test_rnn_bad_input.py \
    tests/rnn/test_rnn_host_path.py tests/rnn/backends tests/tasks tests/test_gpu.py tests/attention/test_rope.py \
    tests/attention/test_attention_bad_inputs.py tests/attention/test_attention_reference.py \
    tests/attention/test_flash_attention.py -rf -p no:cacheprovider -o addopts='' -n 8 -v 2>&1 \
    | tee $OUT/gpu-tests.txt | grep -E "FAILED|ERROR| passed| failed" | tail -12
  echo "## bench 05 called $(date +%T)"
  timeout 240 python3 -m gpulab bench 05 called --out $OUT 2>&1 | grep -v $'\r' | tail -30
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
