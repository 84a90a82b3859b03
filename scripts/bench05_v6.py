"""Lesson 5, issue 40: version 6 of the split kernels (Gluon, R in registers) beside version 5 and cuDNN (one call).

    python scripts/bench05_v6.py OUT_DIR

One head of 768, B16, T1024, bf16 (the issue's problem). For each version-6 tile (8 units x 4 warps, 16 units x 8
warps): the forward checked against float64 (outputs poisoned: NaN fails), launched twice more for identical bits,
then timed on both clocks without and with saved gates; version 5 as the package runs it (the chooser's hinted
split forward). The backward: b4 (both tiles) against b3 on the same saved gates (dG compared), timed alone; then
forward and backward with the parameter products (v6 + b4, v5 + b3 as the package runs them), and flashrnn as a
training loop calls it with the plan's split kernels on version 5 and on version 6. cuDNN's fp16
nn.LSTM (dense 768) forward and forward+backward in the same run. Records: OUT_DIR/<gpu>-<date>[-<TAG>]-v6.jsonl
(``TAG``: the run's letter).
"""

import functools
import itertools
import math
import os
import sys
import time

import torch

from gpulab import bench, check, hardware, rnn
from gpulab.rnn.backends.parameter_grads import gate_gradients_to_parameters
from gpulab.rnn.fused import plan, split_backward
from gpulab.rnn.fused.benchmark import dense_run, problem_inputs, states_reference
from gpulab.rnn.fused.versions import b4_gluon_split_backward as b4
from gpulab.rnn.fused.versions import v6_gluon_split as v6

B, T, DH = 16, 1024, 768
TILES = [dict(block_u=8, warps=4), dict(block_u=16, warps=8)]
B4_TILES = [dict(block_u=16, warps=8), dict(block_u=8, warps=4)]


def _line(r, t0):
    print(f"{r.case:55s} {r.ms or math.nan:8.3f} ms  wall {r.wall_ms or math.nan:8.3f}  {r.status} "
          f"{time.time() - t0:.0f}s", flush=True)  # fmt: skip


def _error(case, exc, common):
    r = bench.record(case=f"error {case}", **{k: v for k, v in common.items() if k != "dtype"})
    r.status = f"error: {type(exc).__name__}: {str(exc)[:400]}"
    return r


def backward_rows(x, common, t0):
    """b4 against b3 on version 5's saved gates, then forward+backward with the parameter products."""
    rows = []
    chosen = plan.choose(B, 1, DH, training=True)
    out, _, gates = plan.split_forward_at(*x, chosen.tiling, save_gates=True)
    torch.manual_seed(2)
    d_out = torch.randn_like(out)
    bargs = (d_out, gates, out, x[3], x[1])
    dG3, ds03 = split_backward.split_rnn_backward(*bargs, "lstm", tiling=chosen.backward)
    fn = functools.partial(split_backward.split_rnn_backward, *bargs, "lstm", tiling=chosen.backward)
    rows.append(bench.measure(fn, case=f"b3 split backward bu{chosen.backward.block_u} w{chosen.backward.num_warps}"
                              f" 1x{DH}", version="b3", direction="backward", **common))  # fmt: skip
    _line(rows[-1], t0)
    for kw, stores in itertools.product(B4_TILES, b4.SHARE_STORES):
        cfg = b4.b4_config(DH, **kw)
        tag = f"b4 gluon backward {stores} bu{cfg.block_u} w{cfg.warps} 1x{DH}"
        try:
            dG, ds0 = b4.split_backward_b4(*bargs, cfg=cfg, share_stores=stores)
            err = check.relative_error(dG, dG3)
            assert err < 1e-2 and check.relative_error(ds0, ds03) < 1e-2, f"b4 differs from b3: dG {err}"
            assert torch.equal(b4.split_backward_b4(*bargs, cfg=cfg, share_stores=stores)[0], dG), "launches differ"
            fn = functools.partial(b4.split_backward_b4, *bargs, cfg=cfg, share_stores=stores)
            r = bench.measure(fn, case=tag, rel_err=err, version="b4", direction="backward", block_u=cfg.block_u,
                              warps=cfg.warps, share_stores=stores, **common)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - recorded; the next tile still runs
            r = _error(tag, exc, common)
        rows.append(r)
        _line(r, t0)

    def v5_step():
        o, _, g = plan.split_forward_at(*x, chosen.tiling, save_gates=True)
        return split_backward.split_rnn_gradients(d_out, g, o, x[3], x[1], "lstm", tiling=chosen.backward)

    def v6_step():  # the default tiles: forward 8 units x 4 warps, backward 16 units x 8 warps
        o, _, g = v6.split_forward_v6(*x)
        dG, ds0 = b4.split_backward_b4(d_out, g, o, x[3], x[1])
        return (*gate_gradients_to_parameters(dG, o, x[3], "lstm"), ds0)

    def v6_b3_step():
        o, _, g = v6.split_forward_v6(*x)
        return split_backward.split_rnn_gradients(d_out, g, o, x[3], x[1], "lstm", tiling=chosen.backward)

    for name, fn in (("v5 + b3", v5_step), ("v6 + b4", v6_step), ("v6 + b3", v6_b3_step)):
        try:
            got = fn()
            assert all(torch.isfinite(g).all() for g in got), "non-finite gradient"
            r = bench.measure(fn, case=f"{name} fwd+bwd 1x{DH}", version=name, direction="forward+backward",
                              **common)  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            r = _error(f"{name} fwd+bwd", exc, common)
        rows.append(r)
        _line(r, t0)
    return rows


def called_rows(x, common, t0):
    """flashrnn's fused backend as a training loop calls it (``out.sum().backward()``), with the plan's split kernels
    set to version 5 and to version 6: the wall clock a user gets."""
    rows = []
    leaves = [t.detach().clone().requires_grad_(True) for t in x]

    def step():
        for p in leaves:
            p.grad = None
        out, _ = rnn.flashrnn(*leaves, function="lstm", backend="fused")
        out.sum().backward()

    for version in plan.SPLIT_VERSIONS:
        with plan.split_version_as(version):
            try:
                step()
                assert all(torch.isfinite(p.grad).all() for p in leaves), "non-finite gradient"
                r = bench.measure(step, case=f"flashrnn fused {version} fwd+bwd as called 1x{DH}", version=version,
                                  direction="forward+backward as called", **common)  # fmt: skip
            except Exception as exc:  # noqa: BLE001
                r = _error(f"flashrnn fused {version} as called", exc, common)
        rows.append(r)
        _line(r, t0)
    return rows


def main(out_dir):
    rows, t0 = [], time.time()
    x = problem_inputs(B, T, 1, DH, torch.bfloat16)
    ref = states_reference(*x)
    common = dict(lesson="05", dtype=torch.bfloat16, kind="v6", B=B, T=T, NH=1, DH=DH)
    for kw in TILES:
        cfg = v6.v6_config(DH, **kw)
        tag = f"v6 gluon bu{cfg.block_u} w{cfg.warps} 1x{DH}"
        try:
            out, _, gates = v6.split_forward_v6(*x, cfg=cfg)
            err = check.assert_close_drifting(out, ref, name="states")
            for _ in range(2):
                assert torch.equal(v6.split_forward_v6(*x, cfg=cfg)[0], out), "a second launch differs"
            for saving in (False, True):
                fn = functools.partial(v6.split_forward_v6, *x, save_gates=saving, cfg=cfg)
                r = bench.measure(fn, case=f"{tag}{' saving gates' if saving else ''}", rel_err=err,
                                  block_u=cfg.block_u, warps=cfg.warps, save_gates=saving, version="v6",
                                  programs=cfg.programs(B, 1, DH), **common)  # fmt: skip
                rows.append(r)
        except Exception as exc:  # noqa: BLE001 - recorded; the next tile still runs
            r = _error(tag, exc, common)
            rows.append(r)
        _line(r, t0)
    chosen = plan.choose(B, 1, DH, training=True).tiling
    out, _, _ = plan.split_forward_at(*x, chosen, save_gates=False)
    err = check.assert_close_drifting(out, ref, name="states")
    for saving in (False, True):
        fn = functools.partial(plan.split_forward_at, *x, chosen, save_gates=saving)
        r = bench.measure(fn, case=f"v5 split {chosen.exchange} bu{chosen.block_u} w{chosen.num_warps} 1x{DH}"
                          f"{' saving gates' if saving else ''}", rel_err=err, version="v5", save_gates=saving,
                          block_u=chosen.block_u, warps=chosen.num_warps, exchange=chosen.exchange,
                          **common)  # fmt: skip
        rows.append(r)
        _line(r, t0)
    rows += backward_rows(x, common, t0)
    rows += called_rows(x, common, t0)
    m = torch.nn.LSTM(DH, DH).to(x[0].device, torch.float16)
    xi = torch.randn(T, B, DH, device=x[0].device, dtype=torch.float16)
    for training in (False, True):
        r = bench.measure(lambda tr=training: dense_run(xi, m, tr), lesson="05", dtype=torch.float16, kind="v6",
                          case=f"cuDNN fp16 {'fwd+bwd' if training else 'forward'} B{B} dense {DH}", B=B, T=T,
                          NH=1, DH=DH, training=training)  # fmt: skip
        rows.append(r)
        _line(r, t0)
    tag = f"-{os.environ['TAG']}" if os.environ.get("TAG") else ""  # a second run of a day: its letter
    path = os.path.join(out_dir, f"{hardware.gpu_slug(rows[0].device)}-{rows[0].date}{tag}-v6.jsonl")
    bench.save(rows, "05", path=path)
    print(path)


if __name__ == "__main__":
    main(sys.argv[1])
