"""Lesson 5, issue 40 (A/B): the parameter products after b4, three ways, at one head of 768 as a training loop calls
``flashrnn`` (forward and backward, B16 and B32), cuDNN's fp16 nn.LSTM in the same run.

- ``copies``: h_{t-1} built by two copies into a buffer, one product, db one reduction over all of dG (until
  2026-11-27);
- ``shifted``: no copy, the outputs' rows read one row back and the t = 0 rows fixed by a product of B rows
  (:func:`gpulab.rnn.backends.parameter_grads.parameter_grads`), db still a reduction;
- ``shifted + db in b4``: also db summed inside b4 (``b4.SUM_DB``, the package's default).

Each way's gradients are checked against the first way's. ``python scripts/diag05_b4_db.py OUT_DIR``; records
``OUT_DIR/<gpu>-<date>-<TAG>-b4db.jsonl``.
"""

import sys

import torch
from v6_runs import batches_saved, cudnn_rows, guard, loop_step

from gpulab import bench, check
from gpulab.rnn.backends import parameter_grads as pg
from gpulab.rnn.fused import plan
from gpulab.rnn.fused.benchmark import problem_inputs
from gpulab.rnn.fused.versions import b4_gluon_split_backward as b4

T, DH = 1024, 768


def _copies(dG, out, states, function, time_major=False, db=None):
    """The products as they were: h_{t-1} copied into one buffer, then one product; db one reduction."""
    fn = pg.get_function(function)
    B, T_, NH, D = out.shape[1], out.shape[2], dG.shape[3], dG.shape[4]
    h = out.new_empty((B, T_, NH, D))
    h[:, 0] = states[0, :, 0]
    h[:, 1:] = out[0, :, : T_ - 1]
    rows = dG.reshape(B * T_, dG.shape[2], NH, D)
    dR = torch.einsum("kgnj,knm->gnjm", rows[:, fn.r_gates], h.reshape(B * T_, NH, D)).contiguous()
    return pg.input_gate_grads(dG, fn, False), dR, rows.sum(0, dtype=torch.float32).to(dG.dtype)


WAYS = {
    "copies": (_copies, False),
    "shifted": (pg.parameter_grads, False),
    "shifted + db in b4": (pg.parameter_grads, True),
}


def _set(way):
    products, sum_db = WAYS[way]
    pg.parameter_grads = products  # (what gate_gradients_to_parameters calls past the one-launch rows)
    b4.SUM_DB = sum_db
    plan.clear_cache()


def _one_batch(rows, t0, B):
    x = problem_inputs(B, T, 1, DH, torch.bfloat16)
    step, leaves = loop_step(x)
    common = dict(lesson="05", dtype=torch.bfloat16, kind="b4 db", B=B, T=T, NH=1, DH=DH)
    first = None
    for way in WAYS:

        def called(way=way):
            _set(way)
            step()
            grads = [p.grad.clone() for p in leaves]
            assert all(torch.isfinite(g).all() for g in grads), "non-finite gradient"
            err = max(check.relative_error(g, f) for g, f in zip(grads, first or grads))
            assert err < 1e-2, f"{way}: gradients differ from the first way's by {err}"
            r = bench.measure(step, case=f"flashrnn fused v6 {way} fwd+bwd as called B{B} 1x{DH}", version="v6",
                              way=way, rel_err=err, direction="forward+backward as called", **common)  # fmt: skip
            return r, grads

        def run(called=called):
            nonlocal first
            r, grads = called()
            first = first or grads
            return r

        guard(rows, t0, f"{way} B{B}", common, run)
    _set("shifted + db in b4")
    cudnn_rows(rows, t0, B, T, DH, x[0].device, "b4 db")


def main(out_dir):
    batches_saved(out_dir, "b4db", _one_batch)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
