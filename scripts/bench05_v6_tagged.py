"""Lesson 5, issue 40: version 6's forward with h exchanged in tagged words (``exchange='tagged'``) beside the
counter barrier (``'counter'``), at one head of 768 in the plan's tiles (B16: two tiles of 8 rows, and the 16-row
tile; B32: two tiles of 16 rows), then flashrnn as a training loop calls it with each exchange (one call).

    python scripts/bench05_v6_tagged.py OUT_DIR

Why: the stamped 8-row step (run q) spends about half its time between storing h_t and having h_t from the others:
the release (stores, fence, an atomic add), the poll of the counter, then a load of h from L2. With each h word
stored beside its step's tag in 32 bits, the readers poll h itself: one trip through L2, no fence. Each case: the
forward checked against float64 (outputs poisoned), launched again for the same bits, clock-stamped, timed with its
gates saved; the training loop's step as flashrnn is called (the plan's tiles) with each exchange; cuDNN's fp16
nn.LSTM in the same run. Records: OUT_DIR/<gpu>-<date>-<TAG>-tagged.jsonl (``TAG``: the run's letter).
"""

import functools
import sys

import torch
from v6_runs import batches_saved, checked_and_stamped, cudnn_rows, guard, loop_step

from gpulab import bench
from gpulab.rnn.fused import plan
from gpulab.rnn.fused.benchmark import problem_inputs, states_reference
from gpulab.rnn.fused.versions import v6_gluon_split as v6

T, DH = 1024, 768
CASES = {16: {"rows8": v6.v6_config(DH, block_u=16, block_b=8, warps=8), "rows16": v6.v6_config(DH)},
         32: {"rows16": v6.v6_config(DH, block_u=16, block_b=16, warps=8)}}  # fmt: skip


def main(out_dir):
    batches_saved(out_dir, "tagged", _one_batch, batches=tuple(CASES.items()), tag="t")


def _one_batch(rows, t0, B, tiles):
    """Each tile's forward with each exchange, the loop's step with each, then cuDNN, at batch ``B``, into ``rows``."""
    x = problem_inputs(B, T, 1, DH, torch.bfloat16)
    ref = states_reference(*x)
    common = dict(lesson="05", dtype=torch.bfloat16, kind="v6 tagged", B=B, T=T, NH=1, DH=DH)
    for label, cfg in tiles.items():
        for exchange in v6.EXCHANGES:

            def forward(cfg=cfg, exchange=exchange, label=label):
                fn = functools.partial(v6.split_forward_v6, *x, cfg=cfg, save_gates=True, exchange=exchange)
                err, parts = checked_and_stamped(fn, ref, cfg.programs(B, 1, DH), poison=True)
                return bench.measure(fn, case=f"v6 gluon {exchange} {label} B{B} 1x{DH} saving gates", rel_err=err,
                                     version="v6", exchange=exchange, tiles=label, parts=parts, block_u=cfg.block_u,
                                     block_b=cfg.block_b, warps=cfg.warps, save_gates=True, **common)  # fmt: skip

            guard(rows, t0, f"v6 {exchange} {label} B{B}", common, forward)
    step, leaves = loop_step(x)
    for exchange in v6.EXCHANGES:

        def called(exchange=exchange):
            v6.EXCHANGE = exchange
            try:
                plan.clear_cache()
                step()
                assert all(torch.isfinite(p.grad).all() for p in leaves), "non-finite gradient"
                return bench.measure(step, case=f"flashrnn fused v6 {exchange} fwd+bwd as called B{B} 1x{DH}",
                                     version="v6", exchange=exchange, direction="forward+backward as called",
                                     **common)  # fmt: skip
            finally:
                v6.EXCHANGE = "counter"
                plan.clear_cache()

        guard(rows, t0, f"called {exchange} B{B}", common, called)
    cudnn_rows(rows, t0, B, T, DH, x[0].device, "v6 tagged")


if __name__ == "__main__":
    main(sys.argv[1])
