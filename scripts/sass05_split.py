"""Lesson 5, issue 40: the split forward's step (one head of 768) as the compiler makes it for sm_90, without a GPU:
the shared-memory traffic per step that its product and layout conversions move (no timing).

    python scripts/sass05_split.py OUT.jsonl [OUT_V6.jsonl]

One JSON line per tiling (exchange, block_u, warps): per time step and warp, the loop's instructions, tensor-core
instructions (HMMA) and their longest dependent chain, CTA barriers, and the bytes each kind of shared-memory
instruction moves (``LDSM.16.M88.n``: n 8x8 matrices of 16-bit values, 128 B each per warp; ``LDS``/``STS``: 4 B per
thread, ``.64`` 8 B, ``.128`` 16 B), registers per thread and local-memory (spill) instructions. With a second
path, the same for version 6 (:mod:`gpulab.rnn.fused.versions.v6_gluon_split`, Gluon: R in registers, h read once
per program) per tile, and the backward's: version 5's (b3) beside b4
(:mod:`gpulab.rnn.fused.versions.b4_gluon_split_backward`).
"""

import json
import sys

import torch

torch.cuda.is_available = lambda: True  # compile for sm_90 here; nothing is launched (see gpulab.rnn.fused.sass)

import triton  # noqa: E402

from gpulab.rnn.fused import sass  # noqa: E402
from gpulab.rnn.fused.plan import KERNELS  # noqa: E402

TILINGS = [("hinted", 8, 4), ("barrier", 8, 2), ("barrier", 8, 4)]
V6_TILES = [(8, 4), (16, 8)]  # (block_u, warps)
B3_TILES = [(16, 8)]  # the chooser's split backward at 768 (split_tiling, direction='backward')
B4_TILES = [(16, 8), (8, 4)]


def compiled(exchange, block_u, warps):
    sig = {n: "*bf16" for n in ("wx_ptr", "r_ptr", "b_ptr", "s0_ptr", "init_ptr", "out_ptr", "last_ptr", "gates_ptr")}
    sig.update({"bar_ptr": "*i64", "xch_ptr": "*i32" if exchange == "hinted" else "*i64", "seq_ptr": "*i64",
                "clk_ptr": "*i64"})  # fmt: skip
    sig.update({n: "i32" for n in ("B", "T", "NH", "state_stride", "t_start", "t_stop", "n_programs")})
    const = dict(FUNCTION=0, G_W=4, G_R=4, G_B=4, DH=768, BLOCK_B=16, BLOCK_U=block_u, BLOCK_K=256, CHUNKS=3,
                 SAVE_GATES=True, FAST=True, IS_FP32=False, PRECISION="ieee", BARRIER=True, APART=True, TAGGED=False,
                 SPIN=1 << 20, TIMING=False, FLAGS=False, P_PAD=128, HINTED=exchange == "hinted")  # fmt: skip
    sig.update({k: "constexpr" for k in const})
    return sass.compile_kernel(KERNELS["split"], sig, const, warps, unaligned=("NH", "t_start", "t_stop", "n_programs"))


def compiled_backward(block_u, warps):
    """Version 5's backward (b3, barrier) at one head of 768, as :mod:`gpulab.rnn.fused.split_backward` launches it."""
    names = ("gates_ptr", "out_ptr", "s0_ptr", "r_ptr", "dout_ptr", "init_ptr", "dg_ptr", "part_ptr", "carry_ptr")
    sig = {n: "*bf16" for n in names}
    sig.update({n: "*i64" for n in ("bar_ptr", "clk_ptr", "flag_ptr", "seq_ptr")})
    sig.update({n: "i32" for n in ("B", "T", "NH", "state_stride", "t_lo", "t_hi", "n_programs")})
    const = dict(FUNCTION=0, G_R=4, G_B=4, DH=768, SPLIT=768 // block_u, BLOCK_B=16, BLOCK_U=block_u, BLOCK_K=256,
                 CHUNKS=3, HAS_INIT=True, FINAL=True, IS_FP32=False, PRECISION="ieee", BARRIER=True, OPAQUE=True,
                 TIMING=False, FLAGS=False, P_PAD=64, SPIN=1 << 20, FENCE=True, HINTED=False)  # fmt: skip
    sig.update({k: "constexpr" for k in const})
    return sass.compile_kernel(KERNELS["split_backward"], sig, const, warps,
                               unaligned=("NH", "t_lo", "t_hi", "n_programs"))  # fmt: skip


def row(kernel, name, exchange, block_u, warps):
    """One compiled step's counts per step and warp (see the module docstring)."""
    body, ops, regs = sass.loop_stats(kernel, name)
    shared = {}
    for op, n in ops.items():
        if op.startswith(("LDSM", "LDS", "STS")):
            kind = "ldsm" if op.startswith("LDSM") else op[:3].lower()
            shared[kind] = shared.get(kind, 0) + n * sass.shared_bytes(op)
    hmma = [t for t in body if t.startswith("HMMA")]
    return {
        "kernel": "split forward", "dh": 768, "exchange": exchange, "block_u": block_u, "warps": warps,
        "rows": 16, "instructions": len(body), "hmma": len(hmma), "barriers": sum(c for o, c in ops.items()
        if o.startswith("BAR")), "shared_bytes": shared, "registers": regs, "triton": triton.__version__,
        "target": "sm_90", "spills": sum(c for o, c in ops.items() if o.startswith(("STL", "LDL"))),
    }  # fmt: skip


def write(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def main(path, path_v6=None):
    out = []
    for exchange, block_u, warps in TILINGS:
        out.append(row(compiled(exchange, block_u, warps), f"split_{exchange}_u{block_u}_w{warps}", exchange,
                       block_u, warps))  # fmt: skip
        print(json.dumps(out[-1]), flush=True)
    write(path, out)
    if path_v6:
        from gpulab.rnn.fused.versions import v6_gluon_split as v6

        out = []
        from gpulab.rnn.fused.versions import b4_gluon_split_backward as b4

        out = []
        for block_u, warps in V6_TILES:
            kernel = v6.compile_sm90(768, v6.v6_config(768, block_u=block_u, warps=warps), "bf16", save_gates=True)
            out.append({**row(kernel, f"v6_u{block_u}_w{warps}", "barrier", block_u, warps), "version": "v6"})
        for block_u, warps in B3_TILES:
            r = row(compiled_backward(block_u, warps), f"b3_u{block_u}_w{warps}", "barrier", block_u, warps)
            out.append({**r, "kernel": "split backward", "version": "b3"})
        for block_u, warps in B4_TILES:
            kernel = b4.compile_sm90(768, b4.b4_config(768, block_u=block_u, warps=warps), "bf16")
            r = row(kernel, f"b4_u{block_u}_w{warps}", "barrier", block_u, warps)
            out.append({**r, "kernel": "split backward", "version": "b4"})
        for r in out:
            print(json.dumps(r), flush=True)
        write(path_v6, out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
