"""Lesson 5, issue 40 (diagnosis): one switch of version 6 and b4 set each way, at one head of 768 in the plan's
tiles (B16 and B32): the forward checked against float64 and clock-stamped, b4 checked against b3, and the training
loop's step as flashrnn is called, each way; cuDNN's fp16 nn.LSTM in the same run.

    python scripts/diag05_v6_switches.py OUT_DIR SWITCH

SWITCH ``poll`` (run w): the grid barrier polls its counter with acquire loads instead of atomic adds of 0
(``gluon_ops.POLL``); 96 programs poll one counter, and an atomic is a read-modify-write that the L2 serialises at its
address, a load only reads it. SWITCH ``prefetch`` (run x): the forward issues the next step's input projections
after its arrival instead of before the cell (``v6.LATE_INPUTS``: a release waits for the loads in flight before
it), and b4 loads each step's inputs during the previous step's wait instead of after it (``b4.PREFETCH``).
SWITCH ``late`` (run y): the forward's late inputs alone, b4 prefetching both ways. SWITCH ``barrier`` (run y): each
head and batch tile waits at its own counter, for its own programs only (``gluon_ops.BARRIER``), instead of every
program of the launch at one counter. Records: OUT_DIR/<gpu>-<date>-<TAG>-<SWITCH>.jsonl.
"""

import functools
import sys

import torch
from v6_runs import b3_reference, batches_saved, checked_and_stamped, cudnn_rows, guard, loop_step

from gpulab import bench, check
from gpulab.rnn.fused import plan
from gpulab.rnn.fused.benchmark import problem_inputs, states_reference
from gpulab.rnn.fused.versions import b4_gluon_split_backward as b4
from gpulab.rnn.fused.versions import gluon_ops
from gpulab.rnn.fused.versions import v6_gluon_split as v6

T, DH = 1024, 768


def _set_poll(way):
    gluon_ops.POLL = way


def _set_prefetch(way):
    v6.LATE_INPUTS = b4.PREFETCH = way == "on"


def _set_late(way):
    v6.LATE_INPUTS = way == "on"


def _set_barrier(way):
    gluon_ops.BARRIER = way


SWITCHES = {"poll": (gluon_ops.POLLS, _set_poll), "prefetch": (("off", "on"), _set_prefetch),
            "late": (("off", "on"), _set_late), "barrier": (gluon_ops.BARRIERS, _set_barrier)}  # fmt: skip


def _with(switch, way, fn):
    ways, set_way = SWITCHES[switch]
    set_way(way)
    try:
        return fn()
    finally:
        set_way(ways[0])


def main(out_dir, switch):
    batches_saved(out_dir, switch, _one_batch, batches=((16, switch), (32, switch)), tag="w")


def _one_batch(rows, t0, B, switch):
    """The forward, b4 and the loop's step at batch ``B``, each way of ``switch``, then cuDNN, into ``rows``."""
    x = problem_inputs(B, T, 1, DH, torch.bfloat16)
    ref = states_reference(*x)
    common = dict(lesson="05", dtype=torch.bfloat16, kind=f"v6 {switch}", B=B, T=T, NH=1, DH=DH)
    fwd, bwd = plan.v6_tiles(B, DH, 1)
    bargs, dG3, ds03 = b3_reference(rows, t0, x, plan.choose(B, 1, DH, training=True), common)
    step, leaves = loop_step(x)
    for way in SWITCHES[switch][0]:

        def forward(way=way):
            fn = functools.partial(v6.split_forward_v6, *x, cfg=fwd, save_gates=True)
            err, parts = checked_and_stamped(fn, ref, fwd.programs(B, 1, DH), poison=True)
            return bench.measure(fn, case=f"v6 gluon {switch} {way} B{B} 1x{DH} saving gates", rel_err=err,
                                 version="v6", **{switch: way}, parts=parts, block_u=fwd.block_u,
                                 block_b=fwd.block_b, warps=fwd.warps, **common)  # fmt: skip

        def backward(way=way):
            dG, ds0 = b4.split_backward_b4(*bargs, cfg=bwd)
            err = check.relative_error(dG, dG3)
            assert err < 1e-2 and check.relative_error(ds0, ds03) < 1e-2, f"b4 differs from b3: dG {err}"
            fn = functools.partial(b4.split_backward_b4, *bargs, cfg=bwd)
            return bench.measure(fn, case=f"b4 gluon {switch} {way} B{B} 1x{DH}", rel_err=err, version="b4",
                                 **{switch: way}, block_u=bwd.block_u, block_b=bwd.block_b, warps=bwd.warps,
                                 **common)  # fmt: skip

        def called(way=way):
            plan.clear_cache()
            step()
            assert all(torch.isfinite(p.grad).all() for p in leaves), "non-finite gradient"
            return bench.measure(step, case=f"flashrnn fused v6 {switch} {way} fwd+bwd as called B{B} 1x{DH}",
                                 version="v6", **{switch: way}, direction="forward+backward as called",
                                 **common)  # fmt: skip

        for name, fn in (("forward", forward), ("b4", backward), ("called", called)):
            guard(rows, t0, f"{name} {way} B{B}", common, lambda fn=fn, way=way: _with(switch, way, fn))
    cudnn_rows(rows, t0, B, T, DH, x[0].device, f"v6 {switch}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in SWITCHES:
        raise SystemExit(f"usage: python scripts/diag05_v6_switches.py OUT_DIR {{{','.join(SWITCHES)}}}")
    main(sys.argv[1], sys.argv[2])
