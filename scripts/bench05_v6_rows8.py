"""Lesson 5, issue 40: version 6 and b4 at one head of 768, B16, in two batch tiles of 8 rows (16 units, 8 warps
each: 96 programs, as many as the default's one tile of 16 rows with 8 units) beside the defaults (one call).

    python scripts/bench05_v6_rows8.py OUT_DIR

Why: every program of the forward reads all of h_{t-1} (B x 768) at every step, and in run h's stamped steps h's
arrival took about as long with 96 programs as with 48, so the bytes each SM takes in set it; 8 rows per program
halve them, and halve the product and the cell per program. Each tile: the forward checked against float64 (outputs
poisoned), launched again for the same bits, clock-stamped, timed with its gates saved; b4 checked against b3 on the
same saved gates and timed; flashrnn as a training loop calls it with the plan's tiles set to each pair; flashrnn as
the package now calls it (the plan's own tiles); cuDNN's fp16 nn.LSTM in the same run. Records:
OUT_DIR/<gpu>-<date>-<TAG>-rows8.jsonl (``TAG``: the run's letter); with ``DH`` set to another head dim, the same at
that head dim into OUT_DIR/<gpu>-<date>-<TAG>-rows8dh<DH>.jsonl.
"""

import functools
import os
import sys
import time

import torch
from v6_runs import checked_and_stamped, cudnn_rows, guard, loop_step

from gpulab import bench, check, hardware, runtime
from gpulab.rnn.fused import plan, split_backward
from gpulab.rnn.fused.benchmark import problem_inputs, states_reference
from gpulab.rnn.fused.versions import b4_gluon_split_backward as b4
from gpulab.rnn.fused.versions import v6_gluon_split as v6

B, T, DH = 16, 1024, int(os.environ.get("DH", "768"))  # DH: another head dim (one head), its own record part
PAIRS = {"rows16": (v6.v6_config(DH), b4.b4_config(DH)),
         "rows8": (v6.v6_config(DH, block_u=16, block_b=8, warps=8), b4.b4_config(DH, block_b=8))}  # fmt: skip


def _name(cfg):
    return f"bu{cfg.block_u} w{cfg.warps} rows{cfg.block_b}"


def main(out_dir):
    rows, t0 = [], time.time()
    x = problem_inputs(B, T, 1, DH, torch.bfloat16)
    ref = states_reference(*x)
    common = dict(lesson="05", dtype=torch.bfloat16, kind="v6 rows8", B=B, T=T, NH=1, DH=DH)

    def forward(cfg):
        fn = functools.partial(v6.split_forward_v6, *x, cfg=cfg, save_gates=True)
        err, parts = checked_and_stamped(fn, ref, cfg.programs(B, 1, DH), poison=True)
        return bench.measure(fn, case=f"v6 gluon {_name(cfg)} B{B} 1x{DH} saving gates", rel_err=err, version="v6",
                             block_u=cfg.block_u, block_b=cfg.block_b, warps=cfg.warps, parts=parts, save_gates=True,
                             **common)  # fmt: skip

    for fwd, _ in PAIRS.values():
        guard(rows, t0, f"v6 {_name(fwd)}", common, lambda fwd=fwd: forward(fwd))
    out, _, gates = v6.split_forward_v6(*x, save_gates=True)
    torch.manual_seed(2)
    d_out = torch.randn_like(out)
    bargs = (d_out, gates, out, x[3], x[1])
    chosen = plan.choose(B, 1, DH, training=True)
    dG3, ds03 = split_backward.split_rnn_backward(*bargs, "lstm", tiling=chosen.backward)

    def backward(cfg):
        with runtime.poisoning(True):
            dG, ds0 = b4.split_backward_b4(*bargs, cfg=cfg)
        err = check.relative_error(dG, dG3)
        assert err < 1e-2 and check.relative_error(ds0, ds03) < 1e-2, f"b4 differs from b3: dG {err}"
        assert torch.equal(b4.split_backward_b4(*bargs, cfg=cfg)[0], dG), "a second launch differs"
        fn = functools.partial(b4.split_backward_b4, *bargs, cfg=cfg)
        return bench.measure(fn, case=f"b4 gluon backward {_name(cfg)} B{B} 1x{DH}", rel_err=err, version="b4",
                             block_u=cfg.block_u, block_b=cfg.block_b, warps=cfg.warps, **common)  # fmt: skip

    for _, bwd in PAIRS.values():
        guard(rows, t0, f"b4 {_name(bwd)}", common, lambda bwd=bwd: backward(bwd))
    step, leaves = loop_step(x)
    real_tiles = plan.v6_tiles
    for label, pair in PAIRS.items():

        def called(label=label, pair=pair):
            plan.v6_tiles = lambda *a, **k: pair  # the plan's tiles for this run only
            plan.clear_cache()
            try:
                step()
                assert all(torch.isfinite(p.grad).all() for p in leaves), "non-finite gradient"
                return bench.measure(step, case=f"flashrnn fused v6 {label} fwd+bwd as called B{B} 1x{DH}",
                                     version="v6", tiles=label, direction="forward+backward as called",
                                     **common)  # fmt: skip
            finally:
                plan.v6_tiles = real_tiles
                plan.clear_cache()

        guard(rows, t0, f"called {label}", common, called)

    def called_as_shipped():
        plan.clear_cache()
        step()
        fwd, bwd = plan.v6_tiles(B, DH, 1)
        return bench.measure(step, case=f"flashrnn fused v6 plan's tiles fwd+bwd as called B{B} 1x{DH}", version="v6",
                             tiles=f"{_name(fwd)} / {_name(bwd)}", direction="forward+backward as called",
                             **common)  # fmt: skip

    guard(rows, t0, "called as shipped", common, called_as_shipped)
    cudnn_rows(rows, t0, B, T, DH, x[0].device, "v6 rows8")
    tag = os.environ.get("TAG", "k")
    part = "rows8" if DH == 768 else f"rows8dh{DH}"
    path = os.path.join(out_dir, f"{hardware.gpu_slug(rows[0].device)}-{rows[0].date}-{tag}-{part}.jsonl")
    bench.save(rows, "05", path=path)
    print(path)


if __name__ == "__main__":
    main(sys.argv[1])
