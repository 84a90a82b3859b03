import sys, torch
import torch.nn.functional as F
from gpulab.attention import attention_forward
from gpulab import check
shapes = []
for d in (8, 16, 24, 32, 40, 64, 80, 96, 104, 128):
    for (nq, nk) in ((1, 1), (17, 1000), (1000, 17), (1000, 1000), (64, 64), (4096, 4096)):
        for causal in (False, True):
            shapes.append((d, nq, nk, causal))
i0 = int(sys.argv[1]) if len(sys.argv) > 1 else 0
for i, (d, nq, nk, causal) in enumerate(shapes[i0:], i0):
    q = torch.randn(2, 3, nq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 3, nk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, 3, nk, d, device="cuda", dtype=torch.bfloat16)
    try:
        o, lse = attention_forward(q, k, v, is_causal=causal, version=2)
        torch.cuda.synchronize()
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        err = check.relative_error(o, ref)
        print(i, d, nq, nk, causal, f"{err:.2e}", "" if err < 2e-2 else "WRONG", flush=True)
    except Exception as e:
        print(i, d, nq, nk, causal, "ERROR", type(e).__name__, str(e)[:200], flush=True)
        sys.exit(3)
