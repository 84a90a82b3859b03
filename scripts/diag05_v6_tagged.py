"""Lesson 5, issue 40 (diagnosis): version 6's tagged exchange with its words stored three ways (TAG_STORE 0: plain,
1: relaxed at the GPU's scope, 2: plain and a fence), at one head of 768 (B16 in 8-row tiles, B32 in 16-row tiles),
beside the counter. Records: OUT_DIR/<gpu>-<date>-<TAG>-tagdiag.jsonl."""

import functools
import sys

import torch
from v6_runs import batches_saved, checked_and_stamped, guard

from gpulab import bench
from gpulab.rnn.fused.benchmark import problem_inputs, states_reference
from gpulab.rnn.fused.versions import v6_gluon_split as v6

T, DH = 1024, 768
CASES = {16: v6.v6_config(DH, block_u=16, block_b=8, warps=8), 32: v6.v6_config(DH, block_u=16, block_b=16, warps=8)}


def main(out_dir):
    batches_saved(out_dir, "tagdiag", _one_batch, batches=tuple(CASES.items()), tag="v")


def _one_batch(rows, t0, B, cfg):
    """The counter, then the tagged exchange stored each way, at batch ``B`` in tile ``cfg``, into ``rows``."""
    x = problem_inputs(B, T, 1, DH, torch.bfloat16)
    ref = states_reference(*x)
    common = dict(lesson="05", dtype=torch.bfloat16, kind="v6 tagged diag", B=B, T=T, NH=1, DH=DH)
    for exchange, how in (("counter", 0), ("tagged", 0), ("tagged", 1), ("tagged", 2)):

        def forward(exchange=exchange, how=how):
            v6.TAG_STORE = how
            try:
                fn = functools.partial(v6.split_forward_v6, *x, cfg=cfg, save_gates=True, exchange=exchange)
                err, parts = checked_and_stamped(fn, ref, cfg.programs(B, 1, DH), poison=True)
                return bench.measure(fn, case=f"v6 gluon {exchange} store{how} B{B} 1x{DH} saving gates",
                                     rel_err=err, version="v6", exchange=exchange, tag_store=how, parts=parts,
                                     block_u=cfg.block_u, block_b=cfg.block_b, warps=cfg.warps, **common)  # fmt: skip
            finally:
                v6.TAG_STORE = 0

        guard(rows, t0, f"v6 {exchange} {how} B{B}", common, forward)


if __name__ == "__main__":
    main(sys.argv[1])
