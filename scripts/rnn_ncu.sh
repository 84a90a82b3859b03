#!/bin/bash
# Nsight Compute stall sampling of the fused RNN kernels (rnn_ncu.py): per-instruction CSVs under $OUT, one per kernel.
# Read them for the instructions with the most samples and their stall reasons (long_sb: waiting for global memory,
# short_sb: shared memory or special functions, barrier, wait, selected = issuing).
export PYTHONPATH=.
OUT=${OUT:-/tmp/ncu}
mkdir -p "$OUT"
for which in forward train backward; do
  ncu --clock-control none --kernel-name regex:fused_ --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section SourceCounters -o "/tmp/$which" -f python3 scripts/rnn_ncu.py "$which" \
    > "/tmp/$which.log" 2>&1 || tail -5 "/tmp/$which.log"
  ncu -i "/tmp/$which.ncu-rep" --page source --csv --print-source sass > "$OUT/$which.sass.csv"
done
ls -la "$OUT"
