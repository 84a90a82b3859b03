"""Version 3's public callables refuse bad input with a clear error naming the argument (no GPU needed)."""

import pytest
import torch

from gpulab.attention.measure import v3_compile_check as compile_check
from gpulab.attention.measure import v3_schedule_model as schedule_model
from gpulab.attention.v3 import configs, forward, tiles

Z = torch.zeros(1, 1, 8, 64, dtype=torch.float64)

CASES = [
    ("short_n head_dim", lambda: forward.short_n(96, True), ValueError),
    ("short_n is_causal", lambda: forward.short_n(64, 1), TypeError),
    ("paired cfg", lambda: forward.paired(True, {"pairs": True}), TypeError),
    ("paired is_causal", lambda: forward.paired("yes", forward.V3Config()), TypeError),
    ("paired tiles 0", lambda: forward.paired(True, forward.V3Config(), tiles=0, sms=132), ValueError),
    ("register_budget not 8", lambda: configs.register_budget("writer_regs", 36), ValueError),
    ("register_budget low", lambda: configs.register_budget("writer_regs", 16), ValueError),
    ("register_budget str", lambda: configs.register_budget("writer_regs", "240"), TypeError),
    ("V3Config regs", lambda: forward.V3Config(consumer_regs=244), ValueError),
    ("V3Config step", lambda: forward.V3Config(step=0), ValueError),
    ("V3Config persistent", lambda: forward.V3Config(persistent=1), TypeError),
    ("V3Config q_buffers", lambda: forward.V3Config(q_buffers=3), ValueError),
    ("V3Config pairs", lambda: forward.V3Config(pairs=1, persistent=True), TypeError),
    ("V3Config q_regs", lambda: forward.V3Config(q_regs=1), TypeError),
    ("V3Config q_regs step 1", lambda: forward.V3Config(step=1, q_regs=True), ValueError),
    ("V3Config pairs not persistent", lambda: forward.V3Config(pairs=True), ValueError),
    ("v3_config head_dim", lambda: forward.v3_config(80), ValueError),
    ("v3_config step", lambda: forward.v3_config(64, False, step=5), ValueError),
    ("v3_config is_causal", lambda: forward.v3_config(64, "yes"), TypeError),
    ("attention_forward unsupported", lambda: forward.attention_forward(Z, Z, Z), ValueError),
    ("supported causal", lambda: forward.supported(Z, Z, Z, causal=None), TypeError),
    ("compile_sm90 dtype", lambda: compile_check.compile_sm90(128, False, 3, dtype="fp8"), ValueError),
    ("compile_sm90 cfg", lambda: compile_check.compile_sm90(128, False, 3, cfg={"step": 3}), TypeError),
    ("structure", lambda: compile_check.structure("not a kernel"), TypeError),
    ("ptxas_report", lambda: compile_check.ptxas_report(b"\x00"), ValueError),
    ("structure_in_fresh_process", lambda: compile_check.structure_in_fresh_process(96), ValueError),
    ("structures_in_fresh_process", lambda: compile_check.structures_in_fresh_process([]), ValueError),
    ("structures_in_fresh_process dtype",
     lambda: compile_check.structures_in_fresh_process([dict(d=64, causal=False, dtype="fp32")]), ValueError),
    ("model_forward step", lambda: schedule_model.model_forward(Z, Z, Z, step=4), ValueError),
    ("model_forward q", lambda: schedule_model.model_forward(Z[0], Z, Z), ValueError),
    ("model_forward k", lambda: schedule_model.model_forward(Z, Z[:, :, :, :32], Z), ValueError),
    ("model_forward tensor", lambda: schedule_model.model_forward([1.0], Z, Z), TypeError),
    ("MBarrier count", lambda: schedule_model.MBarrier(0), ValueError),
    ("simulate n_blocks", lambda: schedule_model.simulate(0), ValueError),
    ("simulate tiles", lambda: schedule_model.simulate([]), ValueError),
    ("simulate q_buffers", lambda: schedule_model.simulate(2, q_buffers=3), ValueError),
    ("programs consumers", lambda: schedule_model.programs(8, 8, False, consumers=1), ValueError),
    ("persistent_tiles n_programs", lambda: schedule_model.persistent_tiles(8, 8, 0), ValueError),
    ("persistent_tiles pairs", lambda: schedule_model.persistent_tiles(8, 8, 4, pairs="yes"), TypeError),
    ("tile_bounds n_k", lambda: schedule_model.tile_bounds(0, 8, 0), ValueError),
    ("tile_bounds window", lambda: schedule_model.tile_bounds(0, 8, 8, window_size=(-2, 0)), ValueError),
    ("tile_bounds causal window", lambda: schedule_model.tile_bounds(0, 8, 8, causal=True, window_size=(4, 0)),
     ValueError),
    ("model_forward heads", lambda: schedule_model.model_forward(Z.expand(1, 3, 8, 64), Z.expand(1, 2, 8, 64),
                                                                 Z.expand(1, 2, 8, 64)), ValueError),
    ("model_forward window", lambda: schedule_model.model_forward(Z, Z, Z, window_size=(1, 2, 3)), TypeError),
    ("model_forward causal window", lambda: schedule_model.model_forward(Z, Z, Z, True, window_size=(4, 0)),
     ValueError),
    ("window_config window", lambda: configs.window_config(128, False, (-3, 0)), ValueError),
    ("window_config causal", lambda: configs.window_config(128, True, (8, 0)), ValueError),
    ("window_config head_dim", lambda: configs.window_config(96, False, (8, 0)), ValueError),
    ("causal_like window", lambda: configs.causal_like(False, "full"), TypeError),
    ("causal_like is_causal", lambda: configs.causal_like(1, (-1, -1)), TypeError),
    ("constexprs gqa", lambda: configs.constexprs(128, False, forward.V3Config(), gqa=2), TypeError),
    ("constexprs window", lambda: configs.constexprs(128, False, forward.V3Config(), window_size=(0.5, 0)),
     TypeError),
    ("supported enable_gqa", lambda: forward.supported(Z, Z, Z, enable_gqa=1), TypeError),
    ("supported window", lambda: forward.supported(Z, Z, Z, window_size=(-2, -1)), ValueError),
    ("supported causal window", lambda: forward.supported(Z, Z, Z, True, window_size=(3, 0)), ValueError),
    ("attention_forward window", lambda: forward.attention_forward(Z, Z, Z, window_size=(3,)), TypeError),
    ("tile_table n_q", lambda: tiles.tile_table(0, 8, 1), ValueError),
    ("tile_table pairs without programs", lambda: tiles.tile_table(8, 8, 1, pairs=True), ValueError),
    ("tile_table programs", lambda: tiles.tile_table(8, 8, 1, programs=0), ValueError),
    ("tile_table window", lambda: tiles.tile_table(8, 8, 1, window_size=(0, -5)), ValueError),
    ("compile_sm90 window", lambda: compile_check.structures_in_fresh_process([dict(d=64, causal=True,
                                                                                   window=(3, 0))]), ValueError),
]  # fmt: skip


@pytest.mark.parametrize("call, err", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(call, err):
    with pytest.raises(err):
        call()
