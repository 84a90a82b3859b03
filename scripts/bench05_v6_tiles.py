"""Lesson 5, issue 40: version 6 for the capstone's 32 batch rows in two tiles of 16 rows (one call, about a minute).

    python scripts/bench05_v6_tiles.py OUT_DIR

One head of 768, B32, T1024, bf16. Two batch tiles of 16 rows: the default forward tile (8 units, 4 warps) would make
192 programs, more than the H100's 132 SMs, so ``plan.v6_tiles`` gives the forward b4's tile of 16 units in 8 warps
(96 programs). Version 6's forward in that tile, checked against float64 (outputs poisoned), launched again for the
same bits, timed with its gates saved beside version 5 as the package ran it; b4 in two tiles against b3 on the same
saved gates (dG compared), both timed; flashrnn as a training loop calls it with the plan on version 5 and on version
6; cuDNN's fp16 nn.LSTM (dense 768) forward and forward+backward in the same run. Records:
OUT_DIR/<gpu>-<date>-<TAG>-tiles.jsonl (``TAG``: the run's letter).
"""

import functools
import os
import sys
import time

import torch
from v6_runs import b3_reference, called_per_version, cudnn_rows, guard

from gpulab import bench, check, hardware, runtime
from gpulab.rnn.fused import plan
from gpulab.rnn.fused.benchmark import problem_inputs, states_reference
from gpulab.rnn.fused.versions import b4_gluon_split_backward as b4
from gpulab.rnn.fused.versions import v6_gluon_split as v6

B, T, DH = 32, 1024, 768


def main(out_dir):
    rows, t0 = [], time.time()
    x = problem_inputs(B, T, 1, DH, torch.bfloat16)
    ref = states_reference(*x)
    common = dict(lesson="05", dtype=torch.bfloat16, kind="v6 tiles", B=B, T=T, NH=1, DH=DH)
    fwd_cfg, bwd_cfg = plan.v6_tiles(B, DH, 1)
    print(f"v6 tiles at B{B}: forward {fwd_cfg}, backward {bwd_cfg}; v6 applies: {plan.v6_applies(B, 1, DH)}")

    def v6_forward():
        with runtime.poisoning(True):
            out, _, _ = v6.split_forward_v6(*x, cfg=fwd_cfg, save_gates=True)
        err = check.assert_close_drifting(out, ref, name="states")
        assert torch.equal(v6.split_forward_v6(*x, cfg=fwd_cfg, save_gates=True)[0], out), "a second launch differs"
        fn = functools.partial(v6.split_forward_v6, *x, cfg=fwd_cfg, save_gates=True)
        return bench.measure(fn, case=f"v6 gluon bu{fwd_cfg.block_u} w{fwd_cfg.warps} 2 tiles B{B} 1x{DH} saving gates",
                             rel_err=err, version="v6", block_u=fwd_cfg.block_u, block_b=fwd_cfg.block_b,
                             warps=fwd_cfg.warps, save_gates=True, **common)  # fmt: skip

    guard(rows, t0, "v6", common, v6_forward)
    chosen = plan.choose(B, 1, DH, training=True)

    def v5_forward():
        fn = functools.partial(plan.split_forward_at, *x, chosen.tiling, save_gates=True)
        tl_ = chosen.tiling
        return bench.measure(fn, case=f"v5 split {tl_.exchange} bu{tl_.block_u} w{tl_.num_warps} B{B} 1x{DH} saving "
                             "gates", version="v5", save_gates=True, **common)  # fmt: skip

    guard(rows, t0, "v5", common, v5_forward)
    bargs, dG3, ds03 = b3_reference(rows, t0, x, chosen, common)

    def b4_tiles():
        with runtime.poisoning(True):
            dG, ds0 = b4.split_backward_b4(*bargs, cfg=bwd_cfg)
        err = check.relative_error(dG, dG3)
        assert err < 1e-2 and check.relative_error(ds0, ds03) < 1e-2, f"b4 differs from b3: dG {err}"
        assert torch.equal(b4.split_backward_b4(*bargs, cfg=bwd_cfg)[0], dG), "a second launch differs"
        fn = functools.partial(b4.split_backward_b4, *bargs, cfg=bwd_cfg)
        return bench.measure(fn, case=f"b4 gluon backward bu{bwd_cfg.block_u} w{bwd_cfg.warps} 2 tiles B{B} 1x{DH}",
                             rel_err=err, version="b4", **common)  # fmt: skip

    guard(rows, t0, "b4", common, b4_tiles)
    called_per_version(rows, t0, x, common)
    cudnn_rows(rows, t0, B, T, DH, x[0].device, "v6 tiles")
    tag = os.environ.get("TAG", "j")
    path = os.path.join(out_dir, f"{hardware.gpu_slug(rows[0].device)}-{rows[0].date}-{tag}-tiles.jsonl")
    bench.save(rows, "05", path=path)
    print(path)


if __name__ == "__main__":
    main(sys.argv[1])
