#!/usr/bin/env bash
# v3-bwd6's device call for records bwd run i (H100): step 10 (kv_regs: each consumer's K and/or V slice in registers,
# S^T and dP^T as register-A wgmmas) and step 9 (fused_prep) never timed before. "check": full-size gradients against
# float64 (steps 5+k, 5+v, 5+kv, 7+kv; --quick shapes: N = 1000, Nq != Nk 300/517, 129/64), then "time": the
# 24-problem grid, each problem's default beside default+kv, default+9 and (head dim 128 only) default+k and
# default+v, the two-kernel backward, cuDNN and FA-2; then "race": default+kv/+k/+v, dK and dV bit for bit over 50 runs.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
S=scripts/gpu_v3_backward.py
log=$OUT/log-i.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  timeout 85 python3 $S $OUT --parts check --quick --no-plan --configs 'step 5+kv,step 7+kv,step 5+k,step 5+v'
  timeout 235 python3 $S $OUT --parts time --configs 'default,default+kv,default+k,default+v,default+9' \
    --d128-only 'default+k,default+v' --skip 'gpulab plan'
  timeout 40 python3 $S $OUT --parts race --configs 'default+kv,default+k,default+v' --runs 50
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done"
} 2>&1 | grep -v '^{"kind": "fwd+bwd"' | tee "$log"
