#!/usr/bin/env bash
# Lesson 7 on a machine with 2 GPUs (nvidia-h200-x2): 1-GPU baseline and 2-GPU run of gpulab.distributed.benchmark.
# NVLink multicast stays off (KINDS.md of the device machines: it can take the host's GPUs out of service).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
OUT=${OUT:-out}
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nvidia-smi topo -m
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'gpus', torch.cuda.device_count())"
  for n in 1 2; do
    timeout 280 torchrun --nproc-per-node "$n" -m gpulab.distributed.benchmark --out "$OUT/w$n.jsonl" 2>&1 \
      | grep -v -i "warn" || echo "world $n failed"
  done
} 2>&1 | tee "$OUT/lesson7.log"
