"""Summarise an Nsight Compute per-instruction CSV (``ncu -i R --page source --csv --print-source sass``): stall
reasons over the kernel's hot loop and the instructions with the most samples.

Usage: python scripts/ncu_stalls.py forward.sass.csv [top]
"""

import collections
import csv
import sys


def main(path, top=20, hot=2000):
    rows = list(csv.reader(open(path)))
    header, data = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(header)}
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    loop = [r for r in data if int(r[col["Instructions Executed"]] or 0) > hot]  # executed in every step: the loop
    totals = collections.Counter()
    for r in loop:
        for h in stalls:
            totals[h] += int(r[col[h]] or 0)
    n = sum(totals.values()) or 1
    print(f"{len(loop)} hot instructions of {len(data)}; {n} stall samples among them")
    for h, v in totals.most_common(10):
        print(f"  {h[6:]:20s} {v:7d} {100 * v / n:5.1f}%")
    samples = col["Warp Stall Sampling (All Samples)"]
    for r in sorted(loop, key=lambda r: -int(r[samples] or 0))[:top]:
        reasons = sorted(((int(r[col[h]] or 0), h[6:]) for h in stalls), reverse=True)[:2]
        print(f"{int(r[samples]):6d}  {r[col['Source']][:58]:58s} {reasons}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)
