#!/usr/bin/env bash
# One device call: environment facts, the GPU self-test, and every lesson benchmark. Results land under $OUT:
# one log (session.log) and, per lesson, NN_name/<gpu>-<date>.jsonl and .png (the device returns at most 8 files,
# so keep the logs in one file).
# Usage (device tool): bash scripts/gpu_session.sh [LESSON[:PART]...]   (default: every lesson with a benchmark;
# LESSON:PART, e.g. 04:hopper or 05:split, runs that named part: records under NN_name/<folder>/<gpu>-<date>-PART.jsonl)
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-out}
mkdir -p "$OUT"
log="$OUT/session.log"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)"
  python3 -m gpulab info
  python3 -m pytest -m gpu tests/ -q -p no:cacheprovider -o addopts="" --continue-on-collection-errors
} 2>&1 | tee "$log"
lessons=("$@")
if [ ${#lessons[@]} -eq 0 ]; then
  mapfile -t lessons < <(python3 -c "from gpulab import lessons; print('\n'.join(l.id for l in lessons.LESSONS if lessons.benchmark(l.id)))")
fi
for l in "${lessons[@]}"; do
  python3 -m gpulab bench ${l//:/ } --out "$OUT" 2>&1 | grep -v $'\r' | tee -a "$log"
done
