"""Bad input to version 2 of the attention forward (gpulab.attention.v2.forward), its choice (plan.check_version) and
its report (gpulab.attention.measure.report): each raises a ValueError or TypeError naming the argument."""

import pytest
import torch

from gpulab import attention as A
from gpulab import check
from gpulab.attention import configs, plan
from gpulab.attention.configs import HopperConfig
from gpulab.attention.experiments import v1_backward_fused
from gpulab.attention.experiments import v2_backward as hopper_backward
from gpulab.attention.measure import report as hopper_report
from gpulab.attention.plan import check_version
from gpulab.attention.v2 import forward as hopper


def _qkv(d=16, dtype=torch.float16, n=5):
    return [check.random_tensor(1, 1, n, d, dtype=dtype) for _ in range(3)]


def _backward_inputs():
    q, k, v = _qkv()
    o, lse = A.attention_forward(q, k, v)
    return q, q, k, v, o, lse  # do like q


CASES = [
    ("V2BackwardConfig-dkdv", lambda: hopper_backward.V2BackwardConfig(dkdv=(64, 64)), TypeError, "dkdv"),
    ("v2 attention_backward-config", lambda: hopper_backward.attention_backward(*_backward_inputs(), config="fast"),
     TypeError, "V2BackwardConfig"),  # fmt: skip
    ("FusedBackwardConfig-min_work", lambda: v1_backward_fused.FusedBackwardConfig(min_work=1.5), TypeError,
     "min_work"),  # fmt: skip
    ("FusedBackwardConfig-tiles", lambda: v1_backward_fused.FusedBackwardConfig(tiles={64: None}), TypeError, "tiles"),
    ("FusedBackwardConfig-any_device", lambda: v1_backward_fused.FusedBackwardConfig(any_device=1), TypeError,
     "any_device"),  # fmt: skip
    ("fused attention_backward-config", lambda: v1_backward_fused.attention_backward(*_backward_inputs(), config={}),
     TypeError, "FusedBackwardConfig"),  # fmt: skip
    ("two_kernel_backward-auto", lambda: plan.two_kernel_backward(plan.forward_plan(*_qkv(), config="auto")),
     ValueError, "auto"),  # fmt: skip
    ("config-block-m-48", lambda: HopperConfig(block_m=48), ValueError, "block_m"),
    ("config-block-n-8", lambda: HopperConfig(block_n=8), ValueError, "block_n"),
    ("config-warps-3", lambda: HopperConfig(num_warps=3), ValueError, "num_warps"),
    ("config-stages-0", lambda: HopperConfig(num_stages=0), ValueError, "num_stages"),
    ("config-block-float", lambda: HopperConfig(block_m=64.0), TypeError, "block_m"),
    ("config-ws-str", lambda: HopperConfig(warp_specialize="yes"), TypeError, "warp_specialize"),
    ("config-persistent-int", lambda: HopperConfig(persistent=1), TypeError, "persistent"),
    ("config-overlap-and-ws", lambda: HopperConfig(overlap=True, warp_specialize=True), ValueError, "pick one"),
    ("config-overlap-str", lambda: HopperConfig(overlap="on"), TypeError, "overlap"),
    ("hopper_config-0", lambda: configs.hopper_config(0), ValueError, "head_dim"),
    ("hopper_config-200", lambda: configs.hopper_config(200), ValueError, "head_dim"),
    ("hopper_config-causal-int", lambda: configs.hopper_config(64, 1), TypeError, "is_causal"),
    ("supports-str-dtype", lambda: hopper.supports("bf16", 64), TypeError, "dtype"),
    ("supports-head-dim-0", lambda: hopper.supports(torch.float16, 0), ValueError, "head_dim"),
    ("auto_version-device-str", lambda: plan.auto_version(torch.float16, 64, "cuda"), TypeError, "device"),
    ("sm90_compile-dtype", lambda: hopper.sm90_compile(64, False, HopperConfig(), "fp32"), ValueError, "dtype"),
    ("sm90_ttgir-cfg", lambda: hopper.sm90_ttgir(64, False, cfg="fast"), TypeError, "cfg"),
    ("version-3", lambda: A.attention_forward(*_qkv(), version=3), ValueError, "version"),
    ("version-bool", lambda: A.attention_forward(*_qkv(), version=True), ValueError, "version"),
    ("version-str", lambda: A.attention_forward(*_qkv(), version="2"), ValueError, "version"),
    ("version-2-fp32", lambda: A.attention_forward(*_qkv(dtype=torch.float32), version=2), ValueError, "float32"),
    ("version-2-d20", lambda: A.attention_forward(*_qkv(d=20), version=2), ValueError, "multiples of 8"),
    ("version-1-hopper-config", lambda: A.attention_forward(*_qkv(), config=HopperConfig(), version=1), ValueError,
     "version"),
    ("version-2-v1-config", lambda: A.attention_forward(*_qkv(), config=A.AttentionConfig(16, 16, 16, 4, 1),
                                                        version=2), ValueError, "version 1"),
    ("check_version-4", lambda: check_version(4, None, torch.float16, 16, torch.device("cpu")), ValueError, "version"),
    ("grid_table-not-records", lambda: hopper_report.grid_table("records"), TypeError, "records"),
    ("grid_table-direction", lambda: hopper_report.grid_table([], "backward"), ValueError, "direction"),
    ("summary-not-records", lambda: hopper_report.summary(3), TypeError, "records"),
    ("sweep_summary-not-records", lambda: hopper_report.sweep_summary(None), TypeError, "records"),
    ("plot_grid-direction", lambda: hopper_report.plot_grid([], "sideways"), ValueError, "direction"),
    ("plot_timeline-steps-0", lambda: hopper_report.plot_timeline(steps=0), ValueError, "steps"),
    ("cs336_lines-not-records", lambda: hopper_report.cs336_lines("cs336"), TypeError, "records"),
    ("fused_summary-not-records", lambda: hopper_report.fused_summary("fused"), TypeError, "records"),
    ("sm90_backward_ttgir-kind", lambda: hopper_backward.sm90_backward_ttgir("dv"), ValueError, "kind"),
    ("sm90_backward_ttgir-head_dim", lambda: hopper_backward.sm90_backward_ttgir("dq", 0), ValueError, "head_dim"),
    ("sm90_backward_ttgir-cfg", lambda: hopper_backward.sm90_backward_ttgir("dq", 64, True, "tiles"), TypeError, "cfg"),
    ("problems-direction", lambda: hopper_report.problems([], "up"), ValueError, "direction"),
]  # fmt: skip


@pytest.mark.parametrize("name, call, exc, match", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_clearly(name, call, exc, match):
    with pytest.raises(exc, match=match):
        call()
