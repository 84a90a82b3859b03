"""The multi-tile kernels refuse a cooperative grid past the GPU's SMs before launching (check_resident)."""

import types

import pytest
import torch

from gpulab.rnn.fused import gluon_tiles
from gpulab.rnn.fused.split_gluon import v6_config


def test_check_resident_refuses_more_programs_than_sms(monkeypatch):
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(multi_processor_count=132)
    )
    cfg = v6_config(768, block_u=16, block_b=8, warps=8, tiles=2)
    with pytest.raises(ValueError, match=r"144 programs .* holds 132 at once; pass a cfg with more tiles"):
        gluon_tiles.check_resident((48, 1, 3), cfg, "cuda")
    gluon_tiles.check_resident((48, 1, 2), cfg, "cuda")  # 96 programs fit: no error
