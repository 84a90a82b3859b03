"""Lesson 5, issue 40: version 6 with 32 rows per program (16 units, 8 warps) for the capstone's 32-row batches, and
the partial sums' buffer swizzled (one call, about a minute).

    python scripts/bench05_v6_wide.py OUT_DIR

One head of 768, T1024, bf16. B32: version 6's forward and b4 at 32 rows per program, checked against float64 (the
forward) and b3 (the backward, same saved gates), stamped (clock parts) and timed on both clocks beside version 5 as
the package runs it; flashrnn as a training loop calls it with the plan on version 5 and on version 6 (32-row tiles);
cuDNN's fp16 nn.LSTM in the same run. B16: the 16-unit, 8-warp tile (whose cell read its partials with 16-way bank
conflicts before the swizzle) beside the default, stamped. Records: OUT_DIR/<gpu>-<date>-h-wide.jsonl.
"""

import functools
import os
import sys
import time

import torch
from v6_runs import b3_reference, called_per_version, checked_and_stamped, cudnn_rows, guard

from gpulab import bench, check, hardware
from gpulab.rnn.fused import clocks, plan
from gpulab.rnn.fused.benchmark import problem_inputs, states_reference
from gpulab.rnn.fused.versions import b4_gluon_split_backward as b4
from gpulab.rnn.fused.versions import v6_gluon_split as v6

T, DH = 1024, 768


def _stamped_v6(x, cfg, ref, case, common):
    err, parts = checked_and_stamped(functools.partial(v6.split_forward_v6, *x, cfg=cfg), ref,
                                     cfg.programs(x[0].shape[0], 1, DH))  # fmt: skip
    return bench.measure(functools.partial(v6.split_forward_v6, *x, cfg=cfg), case=case, rel_err=err, version="v6",
                         block_u=cfg.block_u, block_b=cfg.block_b, warps=cfg.warps, parts=parts, h_loads="coalesced",
                         early_arrive=True, **common)  # fmt: skip


def main(out_dir):
    rows, t0 = [], time.time()
    B = 32
    x = problem_inputs(B, T, 1, DH, torch.bfloat16)
    ref = states_reference(*x)
    common = dict(lesson="05", dtype=torch.bfloat16, kind="v6 wide", B=B, T=T, NH=1, DH=DH)
    wide = plan.v6_tiles(B, DH)
    guard(rows, t0, "v6 wide", common, lambda: _stamped_v6(x, wide[0], ref, f"v6 gluon bu16 w8 rows32 B{B} 1x{DH}",
                                                            common))  # fmt: skip
    chosen = plan.choose(B, 1, DH, training=True)

    def v5_fwd():
        stamps = clocks.clock_buffer(chosen.tiling.programs, T, x[0].device)
        plan.split_forward_at(*x, chosen.tiling, save_gates=True, clocks=stamps)
        torch.cuda.synchronize()
        parts = {k: round(v, 1) for k, v in clocks.step_parts(stamps).items()}
        fn = functools.partial(plan.split_forward_at, *x, chosen.tiling, save_gates=True)
        tl_ = chosen.tiling
        case = f"v5 split {tl_.exchange} bu{tl_.block_u} w{tl_.num_warps} B{B} 1x{DH}"
        return bench.measure(fn, case=case, version="v5", parts=parts, **common)

    guard(rows, t0, "v5", common, v5_fwd)
    bargs, dG3, ds03 = b3_reference(rows, t0, x, chosen, common)

    def b4_wide():
        dG, ds0 = b4.split_backward_b4(*bargs, cfg=wide[1])
        err = check.relative_error(dG, dG3)
        assert err < 1e-2 and check.relative_error(ds0, ds03) < 1e-2, f"b4 differs from b3: dG {err}"
        assert torch.equal(b4.split_backward_b4(*bargs, cfg=wide[1])[0], dG), "a second launch differs"
        fn = functools.partial(b4.split_backward_b4, *bargs, cfg=wide[1])
        return bench.measure(fn, case=f"b4 gluon backward bu16 w8 rows32 B{B} 1x{DH}", rel_err=err, version="b4",
                             **common)  # fmt: skip

    guard(rows, t0, "b4 wide", common, b4_wide)
    called_per_version(rows, t0, x, common)
    cudnn_rows(rows, t0, B, T, DH, x[0].device, "v6 wide")
    x16 = problem_inputs(16, T, 1, DH, torch.bfloat16)
    ref16 = states_reference(*x16)
    common16 = {**common, "B": 16}
    for kw in (dict(block_u=8, warps=4), dict(block_u=16, warps=8)):
        cfg = v6.v6_config(DH, **kw)
        guard(
            rows,
            t0,
            "v6 B16",
            common16,
            lambda cfg=cfg: _stamped_v6(
                x16,
                cfg,
                ref16,
                f"v6 gluon bu{cfg.block_u} w{cfg.warps} rows16 B16 1x{DH} (swizzled partials)",
                common16,
            ),
        )
    path = os.path.join(out_dir, f"{hardware.gpu_slug(rows[0].device)}-{rows[0].date}-h-wide.jsonl")
    bench.save(rows, "05", path=path)
    print(path)


if __name__ == "__main__":
    main(sys.argv[1])
