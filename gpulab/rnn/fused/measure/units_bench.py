"""The two-piece split kernels timed on a GPU at kernel level: forward + gate gradients (no parameter products).

``units_bench()`` (fp16, one head, T :data:`T_UNITS`; device ``ms`` and eager ``wall_ms``):

- ``H1536 B{1, 8, 16} units``: :mod:`gpulab.rnn.fused.split_gluon_units` and
  :mod:`gpulab.rnn.fused.split_gluon_backward_units` in their plan tiles (12 = 8 + 4 units, 128 programs), one
  launch each way (before them this head ran the ``alternating`` backend; ``bench 06 lstm-large`` times the module);
- ``H768 B64 units24``: the same kernels in 24 = 16 + 8 units (32 programs per 16-row tile, 128 in all), one launch
  each way, against ``H768 B64 v6 x4``: version 6 and b4 in launches of 16 rows (:func:`gpulab.rnn.fused.plan.v6_tiles`
  of 16 rows), as the plan runs a batch past their SMs (B256 at 768: 16 such launches each way).

Every path is first checked against its float64 schedule (``schedule_reference``) on :data:`T_CHECK` steps; a path
whose check fails is recorded with its ``status`` and not timed. GPU only (Gluon has no interpreter).
"""

from __future__ import annotations

import torch

from gpulab import bench, check, runtime
from gpulab.rnn.fused import gluon_tiles, plan, split_gluon, split_gluon_backward
from gpulab.rnn.fused import split_gluon_backward_units as ub
from gpulab.rnn.fused import split_gluon_units as uf

__all__ = ["units_bench", "T_UNITS", "T_CHECK"]

T_UNITS = 256
T_CHECK = 8


def _inputs(B, T, H, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    f16 = dict(dtype=torch.float16)
    Wx = torch.randn(B, T, 4, 1, H, generator=g).to(runtime.device, **f16)
    R = (torch.randn(4, 1, H, H, generator=g) * 0.5 / H**0.5).to(runtime.device, **f16)
    b = (torch.randn(4, 1, H, generator=g) * 0.1).to(runtime.device, **f16)
    s0 = (torch.randn(2, B, 1, 1, H, generator=g) * 0.5).to(runtime.device, **f16)
    return Wx, R, b, s0


def _units_step(cfg, bcfg):
    def run(Wx, R, b, s0):
        out, _, gates = uf.split_forward_units(Wx, R, b, s0, cfg=cfg)
        return out, gates, ub.split_backward_units(out, gates, out, s0, R, cfg=bcfg)[0]

    return run


def _v6_step(rows, fcfg, bcfg):
    def run(Wx, R, b, s0):
        parts = []
        for i in range(0, Wx.shape[0], rows):
            sub = Wx[i : i + rows], R, b, s0[:, i : i + rows]
            out, _, gates = split_gluon.split_forward_v6(*sub, cfg=fcfg)
            parts.append((out, gates, split_gluon_backward.split_backward_b4(out, gates, out, sub[3], R, cfg=bcfg)[0]))
        return tuple(torch.cat([p[k] for p in parts], dim=0 if k else 1) for k in range(3))

    return run


def _checked(run, B, H, schedules) -> str:
    """'ok' where ``run``'s states and gate gradients on T_CHECK steps match the float64 schedules (``d_out`` = out)."""
    x = _inputs(B, T_CHECK, H, seed=B + H)
    out, gates, dG = run(*x)
    fwd, bwd = schedules
    ref_out, _, ref_gates = fwd(*x)
    ref_dG, _ = bwd(out, gates, out, x[3], x[1])
    errs = (check.relative_error(out, ref_out), check.relative_error(dG, ref_dG))
    return "ok" if max(errs) <= check.tolerance(torch.float16) else f"failed: relative errors {errs}"


def units_bench(progress=None, T: int = T_UNITS) -> list:
    """The records of the module docstring (a GPU only: elsewhere a RuntimeError)."""
    T = runtime.positive_int("T", T)
    if not runtime.on_gpu():
        raise RuntimeError("units_bench times Gluon kernels: it runs on a CUDA GPU only.")
    progress = progress or (lambda it: it)
    sms = torch.cuda.get_device_properties(runtime.device).multi_processor_count
    cases = [(f"H1536 B{B} units", B, 1536, gluon_tiles.units_tiles(B, 1, 1536, sms)) for B in (1, 8, 16)]
    cases.append(("H768 B64 units24", 64, 768, (gluon_tiles.units_config(768, 24),
                                                 gluon_tiles.units_backward_config(768, 24))))  # fmt: skip
    cases.append(("H768 B64 v6 x4", 64, 768, plan.v6_tiles(16, 768)))
    out = []
    for case, B, H, (cfg, bcfg) in progress(cases):
        v6 = case.endswith("x4")
        run = _v6_step(16, cfg, bcfg) if v6 else _units_step(cfg, bcfg)
        fwd, bwd = (split_gluon, split_gluon_backward) if v6 else (uf, ub)
        refs = (lambda *x, m=fwd, c=cfg: m.schedule_reference(*x, cfg=c),
                lambda *x, m=bwd, c=bcfg: m.schedule_reference(*x, cfg=c))  # fmt: skip
        try:
            status = _checked(run, B, H, refs)
        except Exception as exc:  # noqa: BLE001 - recorded as the case's status
            status = f"failed: {type(exc).__name__}: {exc}"[:300]
        if status != "ok":
            r = bench.record(lesson="07", case=case, kind="units", error=status)
            r.status = status[:60]
            out.append(r)
            continue
        x = _inputs(B, T, H)
        out.append(bench.measure(lambda run=run, x=x: run(*x), lesson="07", case=case, dtype=torch.float16,
                                 shape=[B, T, H], kind="units", check=status))  # fmt: skip
    return out
