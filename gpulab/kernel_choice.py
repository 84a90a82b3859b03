"""Which kernel versions this machine runs, and why not the others (what ``python -m gpulab info`` prints).

Each line names a version of attention (lessons 4 and 5) or of the fused RNN (lessons 6 and 7) and says whether the
plans take it here, and if not, why (the Triton found, the GPU, the interpreter) and the fix. Nothing is launched:
the answers come from the same checks the plans make (:func:`gpulab.attention.v3.configs.supported`,
:func:`gpulab.gluon_compat.untested`, :data:`gpulab.attention.v2.forward.WS_BROKEN_ON_SM90`).
"""

from __future__ import annotations

import torch
import triton

from gpulab import gluon_compat, runtime

__all__ = ["attention_versions", "rnn_versions", "report"]


def _hopper() -> str | None:
    """None on a CUDA GPU of compute capability 9 (Hopper), else what this machine has instead."""
    if not runtime.on_gpu():
        return "no CUDA GPU here (kernels run in Triton's CPU interpreter)"
    major, minor = torch.cuda.get_device_capability()
    return None if major == 9 else f"this GPU is sm_{major}{minor}, not Hopper (sm_90)"


def attention_versions() -> list[tuple[str, bool, str]]:
    """``(version, runs here, why)`` for attention's versions, in the order the plan prefers them (3, 2, 1)."""
    from gpulab.attention import plan  # noqa: PLC0415 - deferred: only `info` needs the attention plan

    v2, v3 = plan.v2_forward, plan.v3_forward  # the versions as the plan (the one chooser) imports them

    device = torch.device("cuda") if runtime.on_gpu() else torch.device("cpu")
    q = torch.empty(1, 1, 1, 64, dtype=torch.bfloat16, device=device)
    ok, why = v3.supported(q, q, q, False)
    rows = [("3 forward (Gluon, FA3 design)", ok, why or f"head dims {', '.join(map(str, plan.V3_HEAD_DIMS))}")]
    mins = sorted(plan.V3_BACKWARD_MIN_SEQ.items())
    lengths = ", ".join(f"d{d}{' causal' if c else ''} N>={n}" for (d, c), n in mins)
    rows.append(("3 backward (Gluon)", ok, why or f"from {lengths}"))
    hopper = _hopper()
    rows.append(("2 (Triton, TMA and wgmma)", hopper is None, hopper or "fp16/bf16, head dims multiple of 8"))
    if hopper is None:
        ws = not v2.WS_BROKEN_ON_SM90
        refused = f"refused on Triton {triton.__version__}: raced on 3.6; WS_RACE_FREE_TRITON lists none measured"
        rows.append(("2 warp-specialized (asked for only)", ws, "" if ws else refused))
    rows.append(("1 (portable FlashAttention-2)", True, "everywhere else"))
    return rows


def rnn_versions() -> list[tuple[str, bool, str]]:
    """``(version, runs here, why)`` for the fused RNN's kernels (the ``fused`` backend)."""
    why6 = gluon_compat.problem() or gluon_compat.untested("the fused RNN's version 6 (Gluon)")
    if runtime.INTERPRET:
        why6 = "Gluon has no interpreter: needs a CUDA GPU"
    return [
        ("6 (Gluon, split heads)", why6 is None, why6 or "LSTM, fp16/bf16, heads that need several SMs"),
        ("5 (Triton, split heads)", True, "every other split head (GRU, float32, the interpreter)"),
        ("4 (Triton, one SM per head)", True, "heads that fit one SM"),
    ]


def report() -> str:
    """The lines ``python -m gpulab info`` prints: Triton, the tested list, and each family's versions."""
    lines = [f"kernel versions here (Triton {triton.__version__}; measured on the GPU: "
             f"{', '.join(gluon_compat.TESTED_TRITON)})"]  # fmt: skip
    for family, rows in (("attention", attention_versions()), ("fused RNN", rnn_versions())):
        lines.append(f"  {family}")
        for name, ok, why in rows:
            lines.append(f"    {'yes' if ok else 'no ':3s}  version {name}: {why}")
    return "\n".join(lines)
