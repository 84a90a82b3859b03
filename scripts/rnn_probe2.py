# ruff: noqa: B023
"""Lesson 5 probe 2 (one device call): kernel variants (register-layout I/O, masks, prefetch, split backward
product, warps) of the fused forward and backward, checked against the previous kernels and timed side by side."""

import sys

import torch
import triton

from gpulab import bench, check
from gpulab.rnn import api, fused_backward, fused_forward, tiling
from gpulab.rnn.benchmark import problem_inputs
from gpulab.rnn.functions import get_function

sys.path.insert(0, "scripts/probe_old")
import old_backward  # noqa: E402
import old_forward  # noqa: E402

ROWS = []


def timed(name, fn, T, note=""):
    try:
        fn()
        torch.cuda.synchronize()
        t = bench.time_callable(fn, warmup_ms=20, rep_ms=60)
        ROWS.append((name, t.median_ms, t.median_ms * 1e6 / T, note))
        print(f"{name:56s} {t.median_ms:8.3f} ms {t.median_ms * 1e6 / T:7.0f} ns/step {note}", flush=True)
    except Exception as exc:  # noqa: BLE001
        ROWS.append((name, float("nan"), float("nan"), f"FAILED {type(exc).__name__}: {str(exc)[:300]}"))
        print(f"{name}: FAILED {type(exc).__name__}: {str(exc)[:1500]}", flush=True)


def fwd(Wx, R, b, s0, function, save_gates, warps, **var):
    fn = get_function(function)
    B, T, _, NH, DH = Wx.shape
    cfg = tiling.fused_tiling(B, NH, DH, fn.name, Wx.dtype, direction="forward")
    out = api.new_output(fn.states, B, T, NH, DH, dtype=Wx.dtype, device=Wx.device)
    last = api.new_output(fn.states, B, 1, NH, DH, dtype=Wx.dtype, device=Wx.device)
    gates = api.new_output(B, T, fn.gates_b, NH, DH, dtype=Wx.dtype, device=Wx.device) if save_gates else out
    fused_forward.fused_forward_kernel[(NH, triton.cdiv(B, cfg.block_b))](
        Wx, R, b, s0, out, last, gates, B, T, NH, B * T * NH * DH,
        FUNCTION=fn.code, G_W=fn.gates_w, G_R=fn.gates_r, G_B=fn.gates_b, DH=DH,
        BLOCK_B=cfg.block_b, BLOCK_D=cfg.block_d, SAVE_GATES=save_gates, R_ON_CHIP=cfg.r_on_chip,
        FAST=fused_forward.fast_activations(Wx.dtype), IS_FP32=Wx.dtype == torch.float32, PRECISION="ieee",
        num_warps=warps or cfg.num_warps, num_stages=1, **var)  # fmt: skip
    return out, last, (gates if save_gates else None)


def bwd(d_out, gates, out, s0, R, function, d_last, warps, **var):
    fn = get_function(function)
    S, B, T, NH, DH = out.shape
    cfg = tiling.fused_tiling(B, NH, DH, fn.name, out.dtype, direction="backward")
    dG = api.new_output(B, T, fn.gates_b, NH, DH, dtype=out.dtype, device=out.device)
    ds0 = api.new_output(S, B, 1, NH, DH, dtype=out.dtype, device=out.device)
    fused_backward.fused_backward_kernel[(NH, triton.cdiv(B, cfg.block_b))](
        gates, out, s0, R, d_out, d_last, dG, ds0, B, T, NH, B * T * NH * DH,
        FUNCTION=fn.code, G_R=fn.gates_r, G_B=fn.gates_b, DH=DH,
        BLOCK_B=cfg.block_b, BLOCK_D=cfg.block_d, R_ON_CHIP=cfg.r_on_chip, HAS_DLAST=True,
        FAST=fused_forward.fast_activations(out.dtype), IS_FP32=out.dtype == torch.float32, PRECISION="ieee",
        num_warps=warps or cfg.num_warps, num_stages=1, **var)  # fmt: skip
    return dG, ds0


FWD = {"F final": {}}
BWD = {"B final": {}}


def main():
    api.POISON = False
    function = "lstm"
    for B, T, NH, DH in ((16, 1024, 12, 64), (16, 1024, 6, 128), (16, 1024, 24, 32), (5, 64, 3, 48)):
        dt = torch.bfloat16
        Wx, R, b, s0 = problem_inputs(B, T, NH, DH, dt)
        print(f"=== B={B} T={T} NH={NH} DH={DH}", flush=True)
        ref_out, ref_last, ref_gates = old_forward.fused_rnn_forward(Wx, R, b, s0, function, save_gates=True)
        d_out = torch.randn_like(ref_out)
        d_last = torch.randn_like(s0)
        ref_dG, ref_ds0 = old_backward.fused_rnn_backward(d_out, ref_gates, ref_out, s0, R, function, d_last=d_last)
        main_size = T == 1024
        timed(f"OLD fwd infer B{B} DH{DH}", lambda: old_forward.fused_rnn_forward(Wx, R, b, s0, function, False), T)
        timed(f"OLD fwd train B{B} DH{DH}", lambda: old_forward.fused_rnn_forward(Wx, R, b, s0, function, True), T)
        timed(
            f"OLD bwd B{B} DH{DH}",
            lambda: old_backward.fused_rnn_backward(d_out, ref_gates, ref_out, s0, R, function, d_last=d_last),
            T,
        )
        for name, var in FWD.items():
            for w in (0, 8) if main_size else (0,):
                try:
                    o, last, g = fwd(Wx, R, b, s0, function, True, w, **var)
                    new_gates = g
                    note = (f"out {check.relative_error(o, ref_out):.1e} "
                            f"last {check.relative_error(last, ref_last):.1e}"
                            f" gates {check.relative_error(g, ref_gates):.1e}")  # fmt: skip
                except Exception as exc:  # noqa: BLE001
                    print(f"{name} w{w}: FAILED {type(exc).__name__}: {str(exc)[:1500]}", flush=True)
                    continue
                timed(f"{name} w{w} infer B{B} DH{DH}", lambda: fwd(Wx, R, b, s0, function, False, w, **var), T, note)
                timed(f"{name} w{w} train B{B} DH{DH}", lambda: fwd(Wx, R, b, s0, function, True, w, **var), T)
        for name, var in BWD.items():
            for w in (0, 8) if main_size else (0,):
                try:
                    dG, ds0 = bwd(d_out, new_gates, ref_out, s0, R, function, d_last, w, **var)
                    note = f"dG {check.relative_error(dG, ref_dG):.1e} ds0 {check.relative_error(ds0, ref_ds0):.1e}"
                except Exception as exc:  # noqa: BLE001
                    print(f"{name} w{w}: FAILED {type(exc).__name__}: {str(exc)[:1500]}", flush=True)
                    continue
                timed(
                    f"{name} w{w} B{B} DH{DH}",
                    lambda: bwd(d_out, new_gates, ref_out, s0, R, function, d_last, w, **var),
                    T,
                    note,
                )
        if (B, NH) == (16, 12):
            new_pg = fused_backward.parameter_grads(ref_dG, ref_out, s0, function)
            old_pg = old_backward.parameter_grads(ref_dG, ref_out, s0, function)
            note = " ".join(f"{check.relative_error(a, b):.1e}" for a, b in zip(new_pg, old_pg))
            timed("parameter_grads new", lambda: fused_backward.parameter_grads(ref_dG, ref_out, s0, function), T, note)
            timed("parameter_grads old", lambda: old_backward.parameter_grads(ref_dG, ref_out, s0, function), T)
            from gpulab.rnn import flashrnn

            leaves = [t.detach().clone().requires_grad_() for t in (Wx, R, b, s0)]

            def fwd_bwd():
                o, la = flashrnn(*leaves, function="lstm", backend="fused")
                return torch.autograd.grad((o, la), leaves, (torch.ones_like(o), torch.ones_like(la)))

            timed("fwd+bwd autograd (defaults)", fwd_bwd, T)
            with torch.no_grad():
                timed("fwd flashrnn() (defaults)", lambda: flashrnn(Wx, R, b, s0, function="lstm", backend="fused"), T)
    print("\nSUMMARY")
    for name, ms, ns, note in ROWS:
        print(f"{name:56s} {ms:8.3f} {ns:7.0f}  {note}")


if __name__ == "__main__":
    main()
