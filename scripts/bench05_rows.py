"""Lesson 5, issue 40: the one-SM kernels with 8 batch rows per program instead of 16 (one call on the GPU).

    python scripts/bench05_rows.py OUT_DIR

Why: at B = 16 the forward of 12 heads of 64 runs 12 programs, one per SM; each step's activations are 5
special-function instructions per unit, and an SM issues 16 of them per clock, so a [16, 4 x 64] step spends at
least 16 * 64 * 5 / 16 = 320 clocks in them. With 8 rows per program the same problem runs 24 programs (24 SMs),
each with half the activations (the product is padded to 16 rows by the tensor cores, at no extra latency).

For each problem and block_b in (16, 8): the forward checked against float64 (outputs poisoned: NaN fails), the
gradients of 8 rows against those of 16 (relative error), then timed on both clocks: the forward kernel (without and
with saved gates), the backward (fused_rnn_gradients) and forward+backward as a loop calls it (out.sum().backward()),
beside cuDNN's fp16 nn.LSTM (dense, hidden NH * DH) in the same run. Records: OUT_DIR/<gpu>-<date>-rows.jsonl.
"""

import dataclasses
import functools
import itertools
import math
import os
import sys
import time

import torch

from gpulab import bench, check, hardware
from gpulab.rnn.backends.autograd import TritonRNN
from gpulab.rnn.fused import backward, tiling
from gpulab.rnn.fused.backward import fused_rnn_gradients
from gpulab.rnn.fused.benchmark import dense_run, problem_inputs, states_reference
from gpulab.rnn.fused.forward import fused_forward_kernel, fused_rnn_forward

PROBLEMS = [(16, 1024, 12, 64), (32, 1024, 12, 64), (16, 1024, 6, 128)]
ROWS = [int(x) for x in os.environ.get("ROWS", "16,8").split(",")]
WARPS = [int(x) for x in os.environ.get("WARPS", "0").split(",")]  # 0: the chooser's warps
PRODUCTS = os.environ.get("PRODUCTS", backward.PRODUCT).split(",")  # the backward's product (backward.PRODUCTS)


def tiles(B, NH, DH, direction, rows, warps):
    t = tiling.fused_tiling(B, NH, DH, "lstm", torch.bfloat16, gpu="H100", direction=direction)
    w = warps or t.num_warps
    return dataclasses.replace(t, block_b=rows, num_warps=w, programs=NH * math.ceil(B / rows))


def main(out_dir):
    rows_out, t0 = [], time.time()
    for B, T, NH, DH in PROBLEMS:
        x = problem_inputs(B, T, NH, DH, torch.bfloat16)
        ref = states_reference(*x)
        torch.manual_seed(1)
        grads_16 = None
        for rows, warps, product in itertools.product(ROWS, WARPS, PRODUCTS):
            backward.PRODUCT = product
            tf, tb = tiles(B, NH, DH, "forward", rows, warps), tiles(B, NH, DH, "backward", rows, warps)
            tag = f"B{B} {NH}x{DH} rows{rows} w{tf.num_warps}/{tb.num_warps}"
            if len(PRODUCTS) > 1:
                tag += f" {product}"
            common = dict(lesson="05", dtype=torch.bfloat16, kind="rows", B=B, T=T, NH=NH, DH=DH, block_b=rows,
                          warps_forward=tf.num_warps, warps_backward=tb.num_warps, product=product)  # fmt: skip
            try:
                out = fused_rnn_forward(*x, "lstm", save_gates=False, tiling=tf)[0]
                err = check.assert_close_drifting(out, ref, name="states")
                run_f = functools.partial(fused_rnn_forward, tiling=tf)
                run_b = functools.partial(fused_rnn_gradients, tiling=tb)
                leaves = [t.detach().clone().requires_grad_(True) for t in x]

                def step(leaves=leaves, run_f=run_f, run_b=run_b):
                    for p in leaves:
                        p.grad = None
                    o, _ = TritonRNN.apply(*leaves, "lstm", run_f, run_b)
                    o.sum().backward()

                step()
                grads = [p.grad.float().clone() for p in leaves[:3]]
                assert all(torch.isfinite(g).all() for g in grads), "non-finite gradient"
                gerr = None
                if grads_16 is None:
                    grads_16 = grads
                else:
                    gerr = max(((a - b).norm() / b.norm()).item() for a, b in zip(grads, grads_16))
                    assert gerr < 2e-2, f"gradients differ from the first configuration: {gerr}"
                out_t, _, gates = fused_rnn_forward(*x, "lstm", save_gates=True, tiling=tf)
                d_out = torch.ones_like(out_t)
                bwd_args = (d_out, gates, out_t, x[3], x[1], "lstm")
                cases = {
                    "forward": functools.partial(fused_rnn_forward, *x, "lstm", save_gates=False, tiling=tf),
                    "forward saving gates": functools.partial(fused_rnn_forward, *x, "lstm", True, tiling=tf),
                    "backward": functools.partial(fused_rnn_gradients, *bwd_args, tiling=tb),
                    "fwd+bwd as called": step,
                }
                if product != PRODUCTS[0]:  # the forward does not change with the backward's product
                    cases = {k: v for k, v in cases.items() if not k.startswith("forward")}
                for what, fn in cases.items():
                    r = bench.measure(fn, case=f"{what} {tag}", kernel=fused_forward_kernel, rel_err=err,
                                      grad_rel_to_first=gerr, part=what, **common)  # fmt: skip
                    rows_out.append(r)
                    took = time.time() - t0
                    print(f"{r.case:60s} {r.ms:8.3f} ms  wall {r.wall_ms:8.3f}  {took:.0f}s", flush=True)
            except Exception as exc:  # noqa: BLE001 - recorded; the next candidate still runs
                r = bench.record(lesson="05", case=f"error {tag}", kind="rows", B=B, NH=NH, DH=DH, block_b=rows)
                r.status = f"error: {type(exc).__name__}: {str(exc)[:300]}"
                rows_out.append(r)
                print(r.case, r.status, flush=True)
        backward.PRODUCT = PRODUCTS[0]
        m = torch.nn.LSTM(NH * DH, NH * DH).to(x[0].device, torch.float16)
        xi = torch.randn(T, B, NH * DH, device=x[0].device, dtype=torch.float16)
        for training in (False, True):
            r = bench.measure(lambda m=m, xi=xi, tr=training: dense_run(xi, m, tr), lesson="05",
                              case=f"cuDNN fp16 {'fwd+bwd' if training else 'forward'} B{B} dense {NH * DH}",
                              dtype=torch.float16, kind="rows", B=B, T=T, NH=NH, DH=DH, training=training)  # fmt: skip
            rows_out.append(r)
            print(f"{r.case:60s} {r.ms:8.3f} ms  wall {r.wall_ms:8.3f}", flush=True)
    tag = os.environ.get("TAG", "rows")
    path = os.path.join(out_dir, f"{hardware.gpu_slug(rows_out[0].device)}-{rows_out[0].date}-{tag}.jsonl")
    bench.save(rows_out, "05", path=path)
    print(path)


def split_rows(out_dir):
    """The split kernels at one head of 768 (B16) with 8 rows per program (two batch tiles, twice the programs) beside
    16, barrier exchange, and the chosen (hinted) forward: forward and backward kernels, checked, timed."""
    from gpulab.rnn.fused import plan

    rows_out = []
    B, T, DH = 16, 1024, 768
    x = problem_inputs(B, T, 1, DH, torch.bfloat16)
    ref = states_reference(*x)
    chosen = plan.choose(B, 1, DH, training=True)
    for direction, base in (("forward", chosen.tiling), ("backward", chosen.backward)):
        for rows, exch in ((16, base.exchange), (16, "barrier"), (8, "barrier")):
            cfg = dataclasses.replace(base, block_b=rows, programs=base.programs * (B // rows))
            tag = f"split {direction} 1x{DH} rows{rows} {exch} bu{cfg.block_u} w{cfg.num_warps} P{cfg.programs}"
            try:
                fwd = (cfg, exch) if direction == "forward" else (chosen.tiling, None)
                out, _, gates = plan.split_forward_at(*x, fwd[0], save_gates=True, exchange=fwd[1])
                err = check.assert_close_drifting(out, ref, name="states")
                if direction == "forward":

                    def fn(cfg=cfg, exch=exch):
                        return plan.split_forward_at(*x, cfg, save_gates=True, exchange=exch)
                else:
                    d_out = torch.ones_like(out)
                    want = plan.split_backward_at(d_out, gates, out, x[3], x[1], chosen.backward, exchange="barrier")
                    got = plan.split_backward_at(d_out, gates, out, x[3], x[1], cfg, exchange=exch)
                    err = ((got[0].float() - want[0].float()).norm() / want[0].float().norm()).item()
                    assert err < 1e-2, f"dG differs from 16 rows: {err}"

                    def fn(cfg=cfg, exch=exch, d_out=d_out, gates=gates, out=out):
                        return plan.split_backward_at(d_out, gates, out, x[3], x[1], cfg, exchange=exch)

                r = bench.measure(fn, lesson="05", case=tag, dtype=torch.bfloat16, kind="rows split", rel_err=err,
                                  block_b=rows, exchange=exch, direction=direction, programs=cfg.programs)  # fmt: skip
            except Exception as exc:  # noqa: BLE001
                r = bench.record(lesson="05", case=f"error {tag}", kind="rows split")
                r.status = f"error: {type(exc).__name__}: {str(exc)[:300]}"
            rows_out.append(r)
            print(f"{r.case:60s} {r.ms or math.nan:8.3f} ms  wall {r.wall_ms or math.nan:8.3f} {r.status}", flush=True)
    path = os.path.join(out_dir, f"{hardware.gpu_slug(rows_out[0].device)}-{rows_out[0].date}-rows-split.jsonl")
    bench.save(rows_out, "05", path=path)
    print(path)


if __name__ == "__main__":
    if os.environ.get("PARTS", "one-sm") != "split":
        main(sys.argv[1])
    if os.environ.get("PARTS", "one-sm") in ("split", "both"):
        split_rows(sys.argv[1])
