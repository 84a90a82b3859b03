"""Lesson 6 / issue 40: the attention's heads split and rotated (RoPE) by one Triton kernel against PyTorch's
operations, at the capstone's size (B 32, N 1024, d 768, 12 heads of 64, bf16), forward and forward+backward, both
clocks; each checked against float64 first.

On the GPU machine::

    TAG=a python scripts/bench06_rope.py $OUT

Writes ``$OUT/<gpu>-<date>-<TAG>-rope.jsonl`` (lesson 06 records, ``params['kind'] = 'rope'``).
"""

from __future__ import annotations

import functools
import os
import sys

import torch

from gpulab import bench, check, hardware
from gpulab.attention import rope as R

B, N, H, D = 32, 1024, 12, 64


def _forward_backward(heads, qkv, grads):
    out = heads(qkv, H)
    torch.autograd.backward(out, grads)


def main(out_dir):
    rows = []
    qkv = check.random_tensor(B, N, 3 * H * D, dtype=torch.bfloat16, device="cuda").requires_grad_()
    grads = [check.random_tensor(B, H, N, D, dtype=torch.bfloat16, device="cuda") for _ in range(3)]
    ref = R.qkv_heads_reference(qkv.detach().double().requires_grad_(), H)
    moved = 2 * qkv.numel() * qkv.element_size()  # read once, written once (each way)
    for name, heads in (("kernel", R.qkv_heads), ("pytorch ops", R.qkv_heads_reference)):
        got = heads(qkv, H)
        err = max(check.relative_error(g, r) for g, r in zip(got, ref))
        assert err < 1e-2, f"{name}: {err}"
        common = dict(lesson="06", dtype=torch.bfloat16, shape=[B, N, H, D], kind="rope", impl=name, rel_err=err)
        with torch.no_grad():
            rows.append(bench.measure(functools.partial(heads, qkv, H), case=f"qkv heads + RoPE forward ({name})",
                                      bytes=moved, **common))  # fmt: skip
        rows.append(bench.measure(functools.partial(_forward_backward, heads, qkv, grads),
                                  case=f"qkv heads + RoPE forward+backward ({name})", bytes=2 * moved,
                                  **common))  # fmt: skip
        qkv.grad = None
        r = rows[-2:]
        print(f"{name:12s} forward {r[0].ms:.3f} / {r[0].wall_ms:.3f} ms, fwd+bwd {r[1].ms:.3f} / {r[1].wall_ms:.3f}"
              f" ms (device / wall), rel err {err:.1e}", flush=True)  # fmt: skip
    path = os.path.join(out_dir, f"{hardware.gpu_slug(rows[0].device)}-{rows[0].date}-{os.environ.get('TAG', 'a')}"
                                 "-rope.jsonl")  # fmt: skip
    bench.save(rows, "06", path=path)
    print(path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
