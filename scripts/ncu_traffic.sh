#!/usr/bin/env bash
# DRAM bytes of the course's kernels under Nsight Compute; see scripts/ncu_traffic.py. Writes $OUT/ncu_traffic.jsonl.
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-out}
raw=$(mktemp -d)
NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)}
for c in $(python3 scripts/ncu_traffic.py list); do
  timeout "${NCU_CASE_TIMEOUT:-120}" "$NCU" --profile-from-start off --csv --clock-control none \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum python3 scripts/ncu_traffic.py run "$c" \
    > "$raw/$c.csv" 2> "$raw/$c.err" || { echo "ncu failed for $c"; tail -5 "$raw/$c.err"; }
done
python3 scripts/ncu_traffic.py records "$raw" "$OUT/ncu_traffic.jsonl"
