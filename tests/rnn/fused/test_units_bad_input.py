"""The two-piece split kernels' tiles and wrappers refuse bad input with an error naming the argument and the fix."""

import pytest
import torch

from gpulab import runtime
from gpulab.rnn.fused import gluon_tiles
from gpulab.rnn.fused import split_gluon_backward_units as ub
from gpulab.rnn.fused import split_gluon_units as uf
from gpulab.rnn.fused.gluon_tiles import UnitsConfig
from gpulab.rnn.fused.measure import lstm_grid, sass, units_bench


@pytest.mark.parametrize(
    "call,err,match",
    [
        (lambda: UnitsConfig(16), ValueError, "block_u=16 is not two powers of two"),
        (lambda: UnitsConfig(12, block_b=12), ValueError, "block_b=12"),
        (lambda: UnitsConfig(12, warps=3), ValueError, "warps=3"),
        (lambda: gluon_tiles.unit_pieces(0), ValueError, "block_u"),
        (lambda: gluon_tiles.unit_pieces("12"), TypeError, "block_u"),
        (lambda: gluon_tiles.units_config(1000), ValueError, "multiple of block_u=12"),
        (lambda: gluon_tiles.units_config(1536, warps=4), ValueError, "registers per thread"),
        (lambda: gluon_tiles.units_backward_config(1000), ValueError, "multiple of block_u=12"),
        (lambda: gluon_tiles.units_backward_config(1536, warps=4), ValueError, "registers per thread"),
        (lambda: gluon_tiles.units_tiles(0, 1, 1536, 132), ValueError, "batch"),
        (lambda: gluon_tiles.units_tiles(16, 1, 1536, 0), ValueError, "sm_count"),
        (lambda: sass.units_stats("sideways"), ValueError, "which"),
        (lambda: lstm_grid.lstm_large(budget_s=0), ValueError, "budget_s"),
        (lambda: units_bench.units_bench(T=0), ValueError, "T"),
        (lambda: lstm_grid.lstm_grid(budget_s=1e-9, points=[(0, 16, 1)]), ValueError, "hidden"),
    ],
)
def test_tiles_refuse(call, err, match):
    with pytest.raises(err, match=match):
        call()


def test_units_tiles_answers_none_where_no_launch_fits():
    assert gluon_tiles.units_tiles(17, 1, 1536, 132) is None  # 256 programs
    assert gluon_tiles.units_tiles(16, 1, 1000, 132) is None  # no tile of the head


def _lstm(B=2, T=3, DH=96, dtype=torch.float16):
    return (torch.zeros(B, T, 4, 1, DH, dtype=dtype), torch.zeros(4, 1, DH, DH, dtype=dtype),
            torch.zeros(4, 1, DH, dtype=dtype), torch.zeros(2, B, 1, 1, DH, dtype=dtype))  # fmt: skip


def test_forward_refuses_bad_input():
    Wx, R, b, s0 = _lstm()
    with pytest.raises(TypeError, match="Wx must be a torch.Tensor"):
        uf.split_forward_units(None, R, b, s0)
    with pytest.raises(ValueError, match=r"R must have shape \[4, 1, 96, 96\]"):
        uf.split_forward_units(Wx, R[:, :, :48], b, s0)
    with pytest.raises(TypeError, match="save_gates"):
        uf.split_forward_units(Wx, R, b, s0, save_gates=1)
    with pytest.raises(TypeError, match="one 16-bit dtype"):
        uf.split_forward_units(*_lstm(dtype=torch.float32))
    with pytest.raises(TypeError, match="cfg must be a UnitsConfig"):
        uf.schedule_reference(Wx, R, b, s0, cfg=(12, 16, 8))
    if runtime.INTERPRET:
        with pytest.raises(RuntimeError, match="schedule_reference"):
            uf.split_forward_units(Wx, R, b, s0, cfg=gluon_tiles.units_config(96, warps=2))


def test_backward_refuses_bad_input():
    Wx, R, b, s0 = _lstm()
    out = torch.zeros(2, 2, 3, 1, 96, dtype=torch.float16)
    gates = Wx
    with pytest.raises(TypeError, match="d_out must be a torch.Tensor"):
        ub.split_backward_units([], gates, out, s0, R)
    with pytest.raises(ValueError, match="out must be the LSTM's states"):
        ub.split_backward_units(out, gates, out[0], s0, R)
    with pytest.raises(ValueError, match=r"gates must have shape"):
        ub.split_backward_units(out, gates[:, :2], out, s0, R)
    with pytest.raises(TypeError, match="one 16-bit dtype"):
        ub.split_backward_units(out.float(), gates, out, s0, R)
    with pytest.raises(TypeError, match="cfg must be a UnitsConfig"):
        ub.schedule_reference(out, gates, out, s0, R, cfg="12")
    if runtime.INTERPRET:
        with pytest.raises(RuntimeError, match="schedule_reference"):
            ub.split_backward_units(out, gates, out, s0, R, cfg=gluon_tiles.units_backward_config(96, warps=2))


def test_units_bench_refuses_the_cpu():
    if runtime.on_gpu():
        pytest.skip("the CPU refusal")
    with pytest.raises(RuntimeError, match="CUDA GPU only"):
        units_bench.units_bench()
