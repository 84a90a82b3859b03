"""gpulab.rnn.fused.tiling: the fused kernels' tile chooser, for every GPU in the spec table (CPU only)."""

import pytest
import torch

from gpulab import hardware
from gpulab.rnn.fused import tiling


@pytest.mark.parametrize("gpu", sorted(hardware.SPECS))
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_every_gpu_gets_a_valid_choice_or_a_clear_error(gpu, direction):
    spec = hardware.SPECS[gpu]
    dtype = torch.bfloat16 if spec.has_bf16 else torch.float16
    for dh in (16, 32, 64, 128, 256):
        try:
            c = tiling.fused_tiling(16, 768 // dh, dh, "lstm", dtype, gpu=spec, direction=direction)
        except ValueError as exc:
            assert dh >= 128 and "use backend='alternating'" in str(exc) and "MB of on-chip memory" in str(exc)
            continue
        assert c.fits and c.block_b in tiling.BLOCK_B and c.num_warps in tiling.NUM_WARPS
        assert c.registers_per_thread <= spec.max_registers_per_thread
        assert c.registers_per_thread * 32 * c.num_warps <= spec.registers_per_sm
        assert c.shared_bytes <= spec.smem_per_block
        assert c.launch() == {"num_warps": c.num_warps, "num_stages": 1}
    assert tiling.fits(16, 48, 16, "lstm", dtype, gpu=spec)


def test_h100_choices():
    fwd = tiling.fused_tiling(16, 12, 64, "lstm", torch.bfloat16, gpu="H100")
    assert (fwd.block_b, fwd.num_warps, fwd.r_on_chip) == (8, 4, True)  # measured: 4 warps beat 8 at DH 64
    for direction in ("forward", "backward"):  # at DH 128 four warps would need more than 255 registers
        assert tiling.fused_tiling(16, 6, 128, "lstm", torch.bfloat16, gpu="H100", direction=direction).num_warps == 8
    assert tiling.fits(16, 6, 128, "lstm", torch.bfloat16, gpu="H100")  # at least up to head dim 128
    assert not tiling.fits(16, 3, 256, "lstm", torch.bfloat16, gpu="H100")
    big = tiling.fused_tiling(256, 12, 64, "lstm", torch.bfloat16, gpu="H100")
    assert big.programs <= 132 * big.programs_per_sm  # one round: every program resident at once


def test_error_names_the_size_and_the_alternatives():
    with pytest.raises(
        ValueError, match=r"head dim 768 needs 4.7 MB of on-chip memory per head.*backend='alternating'"
    ):
        tiling.fused_tiling(16, 1, 768, "lstm", torch.bfloat16, gpu="H100")
    with pytest.raises(ValueError, match="float16/bfloat16"):
        tiling.fused_tiling(16, 6, 128, "lstm", torch.float32, gpu="H100", direction="backward")
    with pytest.raises(ValueError, match="function="):
        tiling.fused_tiling(16, 1, 64, "slstm")
    with pytest.raises(ValueError, match="direction="):
        tiling.candidates(16, 1, 64, direction="sideways")
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        tiling.fused_tiling(0, 1, 64)


def test_explain_lists_candidates_and_the_choice():
    text = tiling.explain(16, 12, 64, "gru", torch.bfloat16, gpu="A100")
    assert "block_b" in text and "chosen:" in text and "A100" in text
    assert "none fits" in tiling.explain(16, 1, 512, "lstm", torch.bfloat16, gpu="T4".lower())


def test_eight_rows_while_sms_are_free_then_sixteen():
    """8 rows halve each program's activations and double the programs: the chooser takes them while the programs
    of 8 rows still run in one round with as few per SM as those of 16; at B = 256 (12 heads) 16 rows win."""
    for direction in ("forward", "backward"):
        for batch in (1, 16, 32, 64):
            assert (
                tiling.fused_tiling(batch, 12, 64, "lstm", torch.bfloat16, gpu="H100", direction=direction).block_b == 8
            )
        assert tiling.fused_tiling(256, 12, 64, "lstm", torch.bfloat16, gpu="H100", direction=direction).block_b == 16
    c8, c16 = (
        next(
            c
            for c in tiling.candidates(16, 12, 64, gpu="H100")
            if (c.block_b, c.num_warps, c.r_on_chip) == (bb, 4, True)
        )
        for bb in (8, 16)
    )
    assert c8.registers_per_thread == c16.registers_per_thread  # padded to the tensor cores' 16 rows
    assert c8.programs == 2 * c16.programs and c8.score < c16.score


def test_specials_per_unit():
    assert [tiling.specials(f, "forward") for f in ("lstm", "gru", "elman")] == [5, 3, 1]
    assert [tiling.specials(f, "backward") for f in ("lstm", "gru", "elman")] == [1, 3, 1]
