#!/usr/bin/env bash
# One device call, several phases, each under its own time limit; everything lands in $OUT (at most 8 files come back).
# Usage: bash scripts/gpu_round.sh PHASE...   with PHASE one of
#   facts | selftest | selftest:PATHS (comma-separated test paths) | ncu | bench:NN | bench:NN:PART
#   (a named part of lesson NN's benchmark, e.g. bench:05:hopper, bench:07:split)
#   | pack (tar every folder under $OUT into $OUT/results.tgz: at most 8 files come back)
# A phase may end in @SECONDS, its time limit (default: the one written below), e.g. bench:00@150.
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-out}
mkdir -p "$OUT"
log="$OUT/round.log"
for phase in "$@"; do
  limit=""
  if [[ $phase == *@* ]]; then limit=${phase##*@}; phase=${phase%@*}; fi
  echo "=== $phase ($(date -u +%H:%M:%S))" | tee -a "$log"
  case "$phase" in
    facts)
      { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
        python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } 2>&1 | tee -a "$log" ;;
    selftest)
      GPULAB_POISON=1 timeout ${limit:-420} python3 -m pytest -m gpu tests/ -q -p no:cacheprovider -o addopts="" -n 8 \
        2>&1 | tail -40 | tee -a "$log" "$OUT/selftest.txt" ;;
    selftest:*)
      paths=${phase#selftest:}
      n=$(ls "$OUT"/selftest-*.txt 2>/dev/null | wc -l)  # every test's outcome as it ends (-v), tracebacks at the end
      GPULAB_POISON=1 timeout ${limit:-420} python3 -m pytest -m gpu ${paths//,/ } -v --tb=short -rf -p no:cacheprovider \
        -o addopts="" -n 4 > "$OUT/selftest-$n.txt" 2>&1
      grep -E "FAILED|ERROR|passed|failed" "$OUT/selftest-$n.txt" | tail -40 | tee -a "$log" ;;
    ncu)
      timeout ${limit:-400} bash scripts/ncu_traffic.sh 2>&1 | tail -30 | tee -a "$log" ;;
    bench:*)
      what=${phase#bench:}
      timeout ${limit:-540} python3 -m gpulab bench ${what//:/ } --out "$OUT" 2>&1 | grep -v $'\r' | tail -60 | tee -a "$log" ;;
    pack)
      (cd "$OUT" && dirs=$(find . -mindepth 1 -maxdepth 1 -type d) && [ -n "$dirs" ] && tar czf results.tgz $dirs && rm -rf $dirs) ;;
  esac
done
