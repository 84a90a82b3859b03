"""Lesson 5, issue 40 (probe): b4 and version 6 in tiles of 32 units and 16 warps at one head of 768, so that 8-row
tiles fit the capstone's batch of 32 (4 tiles x 24 programs = 96, where 16-unit programs would need 192, more
than the H100's 132 SMs). Offline (sm_90, no GPU) such a tile compiles to 128 registers a thread, the most 16 warps
can have, with spills (b4 14, the forward 52); this times what they cost. Run a timed the forward's wide tile; since
then ``v6_config`` refuses it (its operands alone need more than the 128 registers: ``gluon_tiles.register_budget``),
and the probe records the refusal as that case's error.

    TAG=a python scripts/probe05_b4_wide.py OUT_DIR

At B = 32 and 16: b3 (the reference b4 is checked against), b4 in the plan's tile and in each candidate, the
forward in the plan's tile and in the candidate; records ``OUT_DIR/<gpu>-<date>-<TAG>-b4wide.jsonl``.
"""

import functools
import sys

import torch
from v6_runs import b3_reference, batches_saved, checked_and_stamped, guard

from gpulab import bench, check
from gpulab.rnn.fused import plan
from gpulab.rnn.fused.benchmark import problem_inputs, states_reference
from gpulab.rnn.fused.versions import b4_gluon_split_backward as b4
from gpulab.rnn.fused.versions import gluon_tiles
from gpulab.rnn.fused.versions import v6_gluon_split as v6

T, DH = 1024, 768
B4_TILES = ((32, 8, 16), (32, 16, 16))  # (units, rows, warps)
V6_TILES = ((32, 8, 16),)


def _backward(bargs, dG3, ds03, cfg, name, common):
    dG, ds0 = b4.split_backward_b4(*bargs, cfg=cfg)
    err = check.relative_error(dG, dG3)
    assert err < 1e-2 and check.relative_error(ds0, ds03) < 1e-2, f"b4 differs from b3: dG {err}"
    fn = functools.partial(b4.split_backward_b4, *bargs, cfg=cfg)
    return bench.measure(fn, case=f"b4 {name} B{common['B']} 1x{DH}", rel_err=err, version="b4",
                         block_u=cfg.block_u, block_b=cfg.block_b, warps=cfg.warps, **common)  # fmt: skip


def _forward(x, ref, tile, name, common):
    cfg = tile if isinstance(tile, v6.V6Config) else v6.v6_config(DH, *tile)  # refused (ValueError) past the budget
    fn = functools.partial(v6.split_forward_v6, *x, cfg=cfg, save_gates=True)
    err, parts = checked_and_stamped(fn, ref, cfg.programs(common["B"], 1, DH), poison=True)
    return bench.measure(fn, case=f"v6 {name} B{common['B']} 1x{DH} saving gates", rel_err=err, version="v6",
                         parts=parts, block_u=cfg.block_u, block_b=cfg.block_b, warps=cfg.warps,
                         **common)  # fmt: skip


def _one_batch(rows, t0, B):
    x = problem_inputs(B, T, 1, DH, torch.bfloat16)
    ref = states_reference(*x)
    common = dict(lesson="05", dtype=torch.bfloat16, kind="b4 wide probe", B=B, T=T, NH=1, DH=DH)
    fwd, bwd = plan.v6_tiles(B, DH, 1)
    bargs, dG3, ds03 = b3_reference(rows, t0, x, plan.choose(B, 1, DH, training=True), common)
    for name, cfg in [("plan", bwd)] + [(f"u{u} rows{r} w{w}", b4.b4_config(DH, u, r, w)) for u, r, w in B4_TILES]:
        guard(rows, t0, f"b4 {name} B{B}", common, functools.partial(_backward, bargs, dG3, ds03, cfg, name, common))
    for name, tile in [("plan", fwd)] + [(f"u{u} rows{r} w{w}", (u, r, w)) for u, r, w in V6_TILES]:
        guard(rows, t0, f"v6 {name} B{B}", common, functools.partial(_forward, x, ref, tile, name, common))


def main(out_dir):
    gluon_tiles._SIZES["warps"] = (1, 2, 4, 8, 16)  # the probe's tiles (not a shipped size)
    batches_saved(out_dir, "b4wide", _one_batch)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
