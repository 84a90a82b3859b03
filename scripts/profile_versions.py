"""Lesson 5's forward versions under Nsight Compute: where each version's warps wait (stall sampling).

On the GPU machine (Nsight Compute's ``ncu`` on the PATH)::

    OUT=/some/folder python scripts/profile_versions.py

For each of v1-v4 on the lesson's problem (LSTM, B 16, T 1024, 12 heads of 64, bf16) it runs
``ncu --section WarpStateStats --section SourceCounters`` on one launch of the version's kernel (after a warm-up
launch), exports the per-instruction samples, and keeps a summary: the stall reasons over the kernel's time loop (the
instructions executed every step) and its five instructions with the most samples. Writes
``$OUT/<gpu>-<date>.json`` (one object per version), read by
:func:`gpulab.rnn.fused.measure.versions_report.load_profile`.

``python scripts/profile_versions.py target v3`` is the program ncu runs.
"""

from __future__ import annotations

import collections
import csv
import datetime
import io
import json
import os
import subprocess
import sys

KERNEL = {"v1": "v1_kernel", "v2": "v2_kernel", "v3": "v3_kernel", "v4": "fused_forward_kernel"}
B, T, NH, DH = 16, 1024, 12, 64


def target(version: str) -> None:
    import torch

    from gpulab.rnn.fused import plan

    g = torch.Generator(device="cuda").manual_seed(0)
    r = lambda *s, sc=1.0: (torch.randn(*s, device="cuda", generator=g) * sc).to(torch.bfloat16)  # noqa: E731
    x = (r(B, T, 4, NH, DH), r(4, NH, DH, DH, sc=0.5 / DH**0.5), r(4, NH, DH), r(2, B, 1, NH, DH))
    for _ in range(2):  # the first launch compiles and warms up; ncu skips it
        plan.run_version(version, *x)
    torch.cuda.synchronize()


def summarize(text: str, top: int = 5) -> dict:
    """Stall reasons over the hot loop (instructions executed at least once per step) and the top instructions."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next(i for i, r in enumerate(rows) if "Source" in r)
    header, data = rows[start], [r for r in rows[start + 1 :] if len(r) == len(rows[start])]
    col = {h: i for i, h in enumerate(header)}
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def num(r, h):
        try:
            return float(str(r[col[h]]).replace(",", "") or 0)
        except ValueError:
            return 0.0

    executed = "Instructions Executed"
    loop = [r for r in data if num(r, executed) >= T]  # executed in every step by some warp: the time loop
    totals = collections.Counter()
    for r in loop:
        for h in stalls:
            totals[h[6:]] += num(r, h)
    n = sum(totals.values()) or 1.0
    samples = "Warp Stall Sampling (All Samples)"
    hot = sorted(loop, key=lambda r: -num(r, samples))[:top]
    return {
        "loop_instructions": len(loop),
        "samples": n,
        "stalls": {k: v / n for k, v in totals.most_common(8)},
        "top": [{"sass": r[col["Source"]].strip()[:60], "share": num(r, samples) / n,
                 "reasons": [h[6:] for _, h in sorted(((num(r, h), h) for h in stalls), reverse=True)[:2]]}
                for r in hot],
    }  # fmt: skip


def main() -> None:
    import torch
    import triton

    out = os.environ.get("OUT", "/tmp/profile")
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "date": datetime.date.today().isoformat(), "problem": {"B": B, "T": T, "NH": NH, "DH": DH,
                                                                     "dtype": "bfloat16"}, "versions": {}}  # fmt: skip
    for v, kernel in KERNEL.items():
        rep = f"/tmp/{v}"
        cmd = ["ncu", "--clock-control", "none", "--kernel-name", kernel, "--launch-skip", "1", "--launch-count", "1",
               "--section", "WarpStateStats", "--section", "SourceCounters", "-o", rep, "-f",
               sys.executable, __file__, "target", v]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0 or not os.path.exists(rep + ".ncu-rep"):
            print(f"{v}: ncu failed:\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}", flush=True)
            continue
        csv_text = subprocess.run(["ncu", "-i", rep + ".ncu-rep", "--page", "source", "--csv", "--print-source",
                                   "sass"], capture_output=True, text=True).stdout  # fmt: skip
        try:
            result["versions"][v] = summarize(csv_text)
        except (StopIteration, KeyError) as exc:
            print(f"{v}: could not read the CSV ({type(exc).__name__}: {exc}); first lines:\n{csv_text[:800]}")
            continue
        s = result["versions"][v]
        print(f"{v}: {s['loop_instructions']} loop instructions, stalls: "
              + ", ".join(f"{k} {x:.0%}" for k, x in list(s["stalls"].items())[:5]), flush=True)  # fmt: skip
    slug = result["device"].lower().replace(" ", "-")
    path = os.path.join(out, f"{slug}-{result['date']}.json")
    with open(path, "w") as fh:
        json.dump(result, fh, indent=1, sort_keys=True)
    print("wrote", path)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "target":
        target(sys.argv[2])
    else:
        main()
