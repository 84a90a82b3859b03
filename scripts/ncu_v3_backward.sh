#!/usr/bin/env bash
# Issue 39, bwd run m: Nsight Compute (full set, per-instruction stall sampling) on version 3's backward kernel at
# head dim 128 (step 5, the default) and 64 (step 5 + K, V in registers), bf16, N = 4096, not causal: why d = 128
# runs at 0.80-0.87x cuDNN where d = 64 runs at 0.89-0.96x. Writes $OUT/<case>.{details.csv,stalls.txt,log}.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)}
# CASES: "head_dim step kv_regs [--stats-smem]" per case (default: run m1's two)
CASES=${CASES:-"128 5 none;64 5 kv"}
IFS=';' read -ra specs <<< "$CASES"
for spec in "${specs[@]}"; do
  set -- $spec
  name=ncu-d$1-step$2-$3${4:+-11}
  timeout ${NCU_CASE_S:-150} "$NCU" --set full --import-source yes --clock-control none -k regex:attention_backward_v3 \
    --profile-from-start off -c 1 -o /tmp/$name -f python3 scripts/profile_v3_backward.py /dev/null --seq 4096 \
    --head-dim $1 --steps $2 --kv-regs $3 ${4:-} --ncu-once > $OUT/$name.log 2>&1
  "$NCU" -i /tmp/$name.ncu-rep --page details --csv > $OUT/$name.details.csv 2>> $OUT/$name.log
  "$NCU" -i /tmp/$name.ncu-rep --page source --csv --print-source sass > /tmp/$name.sass.csv 2>> $OUT/$name.log
  python3 scripts/ncu_stalls.py /tmp/$name.sass.csv 45 > $OUT/$name.stalls.txt 2>&1
  [ -n "${KEEP_SASS:-}" ] && gzip -c /tmp/$name.sass.csv > $OUT/$name.sass.csv.gz
done
