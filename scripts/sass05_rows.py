"""Lesson 5, issue 40: what the compiler makes of the one-SM kernels' step at 16, 8 and 4 batch rows per program, and
of the backward's product per gate, for sm_90 without a GPU (Triton's own ptxas and cuobjdump; no timing).

    python scripts/sass05_rows.py OUT.jsonl

One JSON line per (kernel, head dim, warps, rows, product): per time step and warp, the loop's instructions,
special-function instructions (MUFU), tensor-core instructions (HMMA), CTA barriers; the longest chain of HMMAs
that accumulate into one another (each waits for the previous one's result); registers per thread.
"""

import json
import re
import sys

import torch

torch.cuda.is_available = lambda: True  # compile for sm_90 here; nothing is launched (see gpulab.rnn.fused.sass)

import triton  # noqa: E402

from gpulab.rnn.fused import sass  # noqa: E402


def chain(body):
    """The longest run of HMMAs whose accumulator input is the previous HMMA's output, following registers."""
    depth = {}
    best = 0
    for text in body:
        m = re.match(r"HMMA\.\S+ (R\d+), (R\d+)(?:\.reuse)?, (R\d+)(?:\.reuse)?, (R\d+|RZ)", text)
        if not m:
            continue
        d, acc = m.group(1), m.group(4)
        depth[d] = depth.get(acc, 0) + 1 if acc != "RZ" else 1
        best = max(best, depth[d])
    return best


def row(kind, kernel, dh, warps, rows, steps, **extra):
    body, ops, regs = sass.loop_stats(kernel, f"{kind.split()[0]}_dh{dh}_w{warps}_b{rows}")

    def count(prefix):
        return sum(c for o, c in ops.items() if o.startswith(prefix)) / steps

    return {"kernel": kind, "dh": dh, "warps": warps, "rows": rows, **extra, "instructions": len(body) / steps,
            "mufu": count("MUFU"), "hmma": count("HMMA"), "barriers": count("BAR"), "hmma_chain": chain(body),
            "registers": regs, "triton": triton.__version__, "target": "sm_90"}  # fmt: skip


def main(path):
    out = []
    for dh, warps in ((64, 4), (128, 8)):
        for rows in (16, 8, 4):
            fwd = sass.forward(dh, warps, True, "bf16", BLOCK_B=rows)
            out.append(row("forward saving gates", fwd, dh, warps, rows, 2))
            for per_gate in (False, True):
                bwd = sass.backward(dh, warps, "bf16", BLOCK_B=rows, PER_GATE=per_gate)
                out.append(row("backward", bwd, dh, warps, rows, 1, product="per gate" if per_gate else "all gates"))
            print(json.dumps(out[-3:]), flush=True)
    with open(path, "w") as f:
        for r in out:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
