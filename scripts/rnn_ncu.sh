#!/bin/bash
# ncu stall sampling of the fused RNN kernels (see rnn_ncu.py): per-instruction CSVs under $OUT.
export PYTHONPATH=.
OUT=${OUT:-/tmp/ncu}
mkdir -p "$OUT"
for spec in "forward 4" "train 8" "backward 4"; do
  set -- $spec
  ncu --clock-control none --kernel-name regex:fused_ --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section SourceCounters -o /tmp/$1 -f python3 scripts/rnn_ncu.py $1 $2 > /tmp/$1.log 2>&1 || tail -5 /tmp/$1.log
  ncu -i /tmp/$1.ncu-rep --page source --csv --print-source sass > "$OUT/$1_w$2.sass.csv"
done
ls -la "$OUT"
