"""Version 2 of the attention forward over many shapes on a GPU, against SDPA in fp32; stops at the first error.

    python scripts/scan_hopper.py [FIRST_INDEX]

Head dims 8 to 128 (multiples of 8, powers of two and not), one query, ragged and unequal lengths, causal and not,
bf16. Prints one line per shape (relative error, WRONG past 2e-2) and exits 3 on an exception, after printing the
shape, so a rerun can start past it.
"""

import sys

import torch
import torch.nn.functional as F

from gpulab import check
from gpulab.attention import attention_forward

shapes = []
for d in (8, 16, 24, 32, 40, 64, 80, 96, 104, 128):
    for nq, nk in ((1, 1), (17, 1000), (1000, 17), (1000, 1000), (64, 64), (4096, 4096)):
        for causal in (False, True):
            shapes.append((d, nq, nk, causal))
first = int(sys.argv[1]) if len(sys.argv) > 1 else 0
for i, (d, nq, nk, causal) in enumerate(shapes[first:], first):
    q = torch.randn(2, 3, nq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 3, nk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, 3, nk, d, device="cuda", dtype=torch.bfloat16)
    try:
        o, lse = attention_forward(q, k, v, is_causal=causal, version=2)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - report the shape, then stop
        print(i, d, nq, nk, causal, "ERROR", type(exc).__name__, str(exc)[:200], flush=True)
        sys.exit(3)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    err = check.relative_error(o, ref)
    print(i, d, nq, nk, causal, f"{err:.2e}", "" if err < 2e-2 else "WRONG", flush=True)
