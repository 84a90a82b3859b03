#!/usr/bin/env bash
# Issue 40 / lesson 6 (H100, one call): the capstone throughput again (`bench 06 throughput`, run m) with the
# one-head stack on torch.nn.LSTM (cuDNN) beside the fused LSTM and the two floors; the GPU tests of the capstone
# models.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
log=$OUT/log-capstone-peer.txt
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  echo "## bench 06 throughput $(date +%T)"
  timeout 300 python3 -m gpulab bench 06 throughput --out $OUT 2>&1 | grep -v "it/s\]" | tail -20
  python3 - <<'PY'
import json, glob
for f in glob.glob("/root/out/06_state_tracking/throughput/*.jsonl") + glob.glob(__import__("os").environ["OUT"] + "/06_state_tracking/throughput/*.jsonl"):
    for line in open(f):
        r = json.loads(line)
        p = r.get("params", {})
        if "error" in p or str(p.get("check", "ok")) != "ok":
            print("NOTE", r.get("case"), p.get("error"), p.get("check"))
PY
  echo "## GPU tests $(date +%T)"
  GPULAB_POISON=1 timeout 150 python3 -m pytest -m gpu tests/tasks -v -p no:cacheprovider -o addopts='' -n 8 2>&1 \
    | grep -E "PASSED|FAILED|ERROR|passed|failed" | tail -20
  nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv
  echo "## done $(date +%T)"
} 2>&1 | tee "$log"
