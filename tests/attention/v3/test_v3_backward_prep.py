"""Version 3's step 9 on the CPU (Triton's interpreter): D = rowsum(dO * O) and the fp32 dQ accumulator's zeroing in
one launch (:func:`gpulab.attention.shared.attention_preprocess_zero_kernel`), at odd sizes, outputs poisoned."""

import pytest
import torch

from gpulab import check, runtime
from gpulab.attention.shared import attention_preprocess_zero_kernel
from gpulab.attention.v3 import backward_configs


@pytest.mark.parametrize("b, h, nq, d, block_m", [(1, 2, 19, 24, 16), (2, 1, 77, 64, 64), (1, 3, 5, 128, 16)])
def test_preprocess_zero_writes_delta_and_zeroes_every_dq_row(b, h, nq, d, block_m):
    gen = torch.Generator(device=runtime.device).manual_seed(nq + d)
    o, do = (torch.randn(b, h, nq, d, device=runtime.device, generator=gen).to(torch.float16) for _ in "od")
    delta = check.new_output(b, h, nq, dtype=torch.float32)
    dq_acc = torch.full((b, h, nq, d), float("nan"), device=runtime.device)  # poisoned: every row must be zeroed
    block_d = max(16, 1 << (d - 1).bit_length())
    attention_preprocess_zero_kernel[(-(-nq // block_m), b * h)](o, do, delta, dq_acc, nq, HEAD_DIM=d,
                                                                  BLOCK_M=block_m, BLOCK_D=block_d)  # fmt: skip
    check.assert_close(delta, (o.double() * do.double()).sum(-1), name="delta")
    assert torch.equal(dq_acc, torch.zeros_like(dq_acc)), "a dQ row was left unzeroed"


def test_fused_prep_config():
    cfg = backward_configs.V3BackwardConfig(step=5, fused_prep=True)
    assert cfg.fused_prep and backward_configs.constexprs(64, False, cfg)["DQ_CAST"] is False
    with pytest.raises(ValueError, match="choose one"):
        backward_configs.V3BackwardConfig(step=5, fused_prep=True, dq_cast=True)
