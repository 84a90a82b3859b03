"""Bad input to every public callable of lessons 3 and 5 that takes user input: a clear error of the right type whose
message names the argument (table-driven; nothing here launches a kernel)."""

import pytest
import torch

from gpulab import bench, launch, rnn
from gpulab.course import grading_ladder, grading_rnn
from gpulab.rnn import cells, functions, ladder, weights
from gpulab.rnn.backends import vanilla
from gpulab.rnn.fused import backward as fused_backward
from gpulab.rnn.fused import (
    experiments,
    gluon_ops,
    gluon_tiles,
    plan,
    split_gluon_backward_tiles,
    split_gluon_tiles,
    split_tiling,
    stepwise,
    tiles,
    tiling,
    versions,
)
from gpulab.rnn.fused import split_gluon as v6
from gpulab.rnn.fused import split_gluon_backward as b4
from gpulab.rnn.fused.config import BackwardConfig, FusedConfig, GluonConfig
from gpulab.rnn.fused.measure import benchmark as rnn_benchmark
from gpulab.rnn.fused.measure import called_bench, rows_report, sass, split_report, versions_report
from gpulab.rnn.ladder import plot as ladder_plot

M = torch.nn.LSTM(3, 4, num_layers=2)
W = rnn.from_torch_lstm(M)
X = torch.randn(2, 1, 3)


def _flashrnn(**change):
    args = {
        "Wx": torch.zeros(2, 3, 4, 1, 4),
        "R": torch.zeros(4, 1, 4, 4),
        "b": torch.zeros(4, 1, 4),
        "states": None,
        "function": "lstm",
        "backend": "vanilla",
    }
    return lambda: rnn.flashrnn(**(args | change))


def _module(**change):
    args = {"input_size": 3, "hidden_size": 8} | change
    return lambda: rnn.LSTM(**args)


def _forward(x=None, hx=None, backend="vanilla", dtype=torch.float32):
    m = rnn.LSTM(3, 8, num_layers=2, backend=backend, dtype=dtype)
    return lambda: m(torch.randn(4, 2, 3, dtype=dtype) if x is None else x, hx)


def _reference(**change):
    """cells.lstm_pointwise_reference on N=2 rows of NH=1, DH=4, with ``change`` (e.g. a bad bias)."""
    args = {"gates": torch.zeros(2, 4, 1, 4), "c": torch.zeros(2, 1, 4)} | change
    return lambda: cells.lstm_pointwise_reference(**args)


def _pointwise(**change):
    """cells.lstm_pointwise on N=2 rows of NH=1, DH=4, with ``change`` (checked before anything launches)."""
    args = {"gates": torch.zeros(2, 4, 1, 4), "c": torch.zeros(2, 1, 4)} | change
    return lambda: cells.lstm_pointwise(**args)


H = torch.zeros(2, 2, 8)
R1 = bench.Result(lesson="05", case="c", ms=1.0)
G = torch.zeros(3)
LSTM_IN = (torch.zeros(1, 2, 4, 1, 16), torch.zeros(4, 1, 16, 16), torch.zeros(4, 1, 16), torch.zeros(2, 1, 1, 1, 16))
LSTM_GRAD_IN = (torch.zeros(2, 1, 2, 1, 16), torch.zeros(1, 2, 4, 1, 16), torch.zeros(2, 1, 2, 1, 16),
                torch.zeros(2, 1, 1, 1, 16), torch.zeros(4, 1, 16, 16))  # d_out, gates, out, states, R  # fmt: skip

B4_IN = (torch.zeros(2, 3, 2, 1, 64), torch.zeros(3, 2, 4, 1, 64), torch.zeros(2, 3, 2, 1, 64),
         torch.zeros(2, 3, 1, 1, 64), torch.zeros(4, 1, 64, 64))  # fmt: skip
"""d_out, gates, out, states, R of a backward: B 3, T 2, one head of 64 (float32)."""

SASS_ROWS = [{"shared_bytes": {}}]
V6_TILE = gluon_tiles.V6Config()
B4_IN = (torch.zeros(2, 1, 2, 1, 64), torch.zeros(1, 2, 4, 1, 64), torch.zeros(2, 1, 2, 1, 64),
         torch.zeros(2, 1, 1, 1, 64), torch.zeros(4, 1, 64, 64))  # fmt: skip
WX3, WX0, R8 = torch.zeros(1, 2, 3, 1, 16), torch.zeros(0, 2, 4, 1, 16), torch.zeros(4, 1, 16, 8)


def _launch(i, t):
    """grading_rnn.launch_lstm_kernel with its i-th tensor (Wx, R, b, states) replaced by t."""
    args = list(LSTM_IN)
    args[i] = t
    return lambda: grading_rnn.launch_lstm_kernel(cells.lstm_pointwise_kernel, *args)


CASES = [
    # lesson 5: flashrnn
    ("flashrnn-Wx-type", _flashrnn(Wx=[1.0]), TypeError, "Wx must be a torch.Tensor"),
    ("flashrnn-Wx-rank", _flashrnn(Wx=torch.zeros(2, 3, 16)), ValueError, "Wx must be [B, T, G_w, NH, DH]"),
    ("flashrnn-Wx-int", _flashrnn(Wx=torch.zeros(2, 3, 4, 1, 4, dtype=torch.int64)), ValueError, "Wx has dtype"),
    ("flashrnn-Wx-empty", _flashrnn(Wx=torch.zeros(0, 3, 4, 1, 4)), ValueError, "Wx (0, 3, 4, 1, 4) is empty"),
    ("flashrnn-Wx-gates", _flashrnn(Wx=torch.zeros(2, 3, 3, 1, 4)), ValueError, "Wx has 3 gates"),
    ("flashrnn-R-shape", _flashrnn(R=torch.zeros(4, 1, 4, 5)), ValueError, "R must be [G_r, NH, DH, DH]"),
    ("flashrnn-R-type", _flashrnn(R=None), TypeError, "R must be a torch.Tensor"),
    ("flashrnn-b-shape", _flashrnn(b=torch.zeros(4, 4)), ValueError, "b must be [G_b, NH, DH]"),
    ("flashrnn-states-shape", _flashrnn(states=torch.zeros(2, 2, 3, 1, 4)), ValueError, "states must be"),
    ("flashrnn-states-type", _flashrnn(states=[0.0]), TypeError, "states must be a torch.Tensor"),
    ("flashrnn-function", _flashrnn(function="slstm"), ValueError, "function='slstm'"),
    ("flashrnn-function-none", _flashrnn(function=None), ValueError, "function=None"),
    ("flashrnn-backend", _flashrnn(backend="cuda"), ValueError, "backend='cuda'"),
    ("flashrnn-dtype-name", _flashrnn(dtype="float8"), ValueError, "dtype='float8'"),
    ("flashrnn-dtype-int", _flashrnn(dtype=torch.int32), ValueError, "dtype=torch.int32"),
    ("get_function", lambda: functions.get_function(3), ValueError, "function=3"),
    # lesson 5: the LSTM module
    ("LSTM-input_size", _module(input_size=0), ValueError, "input_size"),
    ("LSTM-hidden_size-float", _module(hidden_size=8.0), TypeError, "hidden_size"),
    ("LSTM-num_heads", _module(num_heads=3), ValueError, "num_heads=3"),
    ("LSTM-num_layers", _module(num_layers=0), ValueError, "num_layers"),
    ("LSTM-batch_first", _module(batch_first="yes"), TypeError, "batch_first"),
    ("LSTM-bias", _module(bias=1), TypeError, "bias"),
    ("LSTM-backend", _module(backend="cudnn"), ValueError, "backend='cudnn'"),
    ("LSTM-dtype", _module(dtype="float8"), ValueError, "dtype='float8'"),
    ("LSTM-dtype-int", _module(dtype=torch.int32), ValueError, "dtype=torch.int32 is not supported"),
    ("LSTM-device", _module(device="nonsense"), ValueError, "device='nonsense' is not a device"),
    ("LSTM-dropout", _module(dropout=1.5), ValueError, "dropout=1.5 is not allowed"),
    ("LSTM-dropout-negative", _module(dropout=-0.1), ValueError, "a number in [0, 1]"),
    ("LSTM-dropout-str", _module(dropout="0"), TypeError, "dropout must be a number in [0, 1]"),
    ("LSTM-bidirectional-int", _module(bidirectional=0), TypeError, "bidirectional must be True or False"),
    ("LSTM-proj_size", _module(proj_size=8), ValueError, "proj_size=8 is not allowed"),
    ("LSTM-proj_size-negative", _module(proj_size=-1), ValueError, "must be in [0, 8)"),
    ("LSTM-proj_size-float", _module(proj_size=2.0), TypeError, "proj_size must be an int"),
    ("LSTM-proj_size-heads", _module(proj_size=2, num_heads=2), ValueError, "use num_heads=1 with proj_size"),
    ("LSTM.forward-x-type", _forward(x=[1.0]), TypeError, "x must be a torch.Tensor"),
    ("LSTM.forward-x-rank", _forward(x=torch.zeros(4)), ValueError, "x must be [T, B, I]"),
    ("LSTM.forward-x-rank-4", _forward(x=torch.zeros(4, 2, 1, 3)), ValueError, "or unbatched [T, I]"),
    ("LSTM.forward-x-features", _forward(x=torch.zeros(4, 2, 5)), ValueError, "input_size=3"),
    ("LSTM.forward-x-dtype", _forward(x=torch.zeros(4, 2, 3, dtype=torch.float64)), ValueError, "x has dtype"),
    ("LSTM.forward-x-int", _forward(x=torch.ones(4, 2, 3, dtype=torch.long)), ValueError, "x.to(torch.float32)."),
    ("LSTM.forward-x-T0", _forward(x=torch.zeros(0, 2, 3)), ValueError, "0 time steps (T is dimension 0 of [T, B"),
    ("LSTM.forward-hx-3", _forward(hx=(H, H, H)), ValueError, "hx must be a pair"),
    ("LSTM.forward-hx-tensor", _forward(hx=H), ValueError, "got one Tensor of shape (2, 2, 8)."),
    ("LSTM.forward-h0-shape", _forward(hx=(H[:1], H)), ValueError, "hx's h0 has shape (1, 2, 8), expected (2, 2, 8)"),
    ("LSTM.forward-h0-unbatched", _forward(x=torch.zeros(4, 3), hx=(H, H)), ValueError, "expected (2, 8)"),
    ("LSTM.forward-c0-type", _forward(hx=(H, 0.0)), TypeError, "hx's c0 must be a torch.Tensor"),
    ("LSTM.forward-c0-dtype", _forward(hx=(H, H.double())), ValueError, "hx's c0 has dtype"),
    ("LSTM.from_torch-gru", lambda: rnn.LSTM.from_torch(torch.nn.GRU(3, 4)), TypeError, "module must be"),
    ("LSTM.from_torch-backend", lambda: rnn.LSTM.from_torch(M, backend="x"), ValueError, "backend='x'"),
    ("LSTM.from_torch-dtype-int", lambda: rnn.LSTM.from_torch(M, dtype=torch.int32), ValueError, "dtype=torch.int32"),
    ("LSTM.from_torch-device", lambda: rnn.LSTM.from_torch(M, device="nonsense"), ValueError, "device='nonsense'"),
    # lesson 5: tiling and the benchmark's inputs
    ("fused_tiling-batch", lambda: tiling.fused_tiling(16.0, 1, 64), TypeError, "batch"),
    ("fused_tiling-head_dim", lambda: tiling.fused_tiling(16, 1, 0), ValueError, "head_dim"),
    ("fused_tiling-num_heads", lambda: tiling.fused_tiling(16, -1, 64), ValueError, "num_heads"),
    ("fused_tiling-dtype", lambda: tiling.fused_tiling(16, 1, 64, dtype="x"), ValueError, "dtype='x'"),
    ("fused_tiling-direction", lambda: tiling.fused_tiling(16, 1, 64, direction="up"), ValueError, "direction='up'"),
    ("fused_tiling-gpu", lambda: tiling.fused_tiling(16, 1, 64, gpu="nope"), ValueError, "gpu='nope'"),
    ("fused_tiling-function", lambda: tiling.fused_tiling(16, 1, 64, function="rnn"), ValueError, "function='rnn'"),
    ("fits-direction", lambda: tiling.fits(16, 1, 64, direction="x"), ValueError, "direction='x'"),
    ("specials-direction", lambda: tiling.specials("lstm", "up"), ValueError, "direction='up'"),
    ("rows_report-load-kind", lambda: rows_report.load("tiles"), ValueError, "kind='tiles'"),
    ("rows_report-path-kind", lambda: rows_report.path("tiles"), ValueError, "kind='tiles'"),
    ("smem_rows-sass", lambda: split_report.smem_rows([{"x": 1}], []), TypeError, "sass must be"),
    ("smem_table-empty", lambda: split_report.smem_table([]), ValueError, "rows must be"),
    ("load_sass-root", lambda: split_report.load_sass(root=5), TypeError, "root"),
    ("rows_report-load-gpu", lambda: rows_report.load("rows", gpu="t4"), FileNotFoundError, "bench05_rows.py"),
    ("rows_table-str", lambda: rows_report.rows_table("rows"), TypeError, "results must be a list"),
    ("product_table-empty", lambda: rows_report.product_table([]), ValueError, "results is empty"),
    ("split_table-item", lambda: rows_report.split_table([1]), TypeError, "results[0]"),
    ("sass_table-empty", lambda: rows_report.sass_table([]), ValueError, "rows is empty"),
    ("rows_report-pick", lambda: rows_report.pick("x", "forward", 16, 12, 64, 8), TypeError, "results must be"),
    ("specials-function", lambda: tiling.specials("rnn", "forward"), ValueError, "function='rnn'"),
    ("explain-head_dim", lambda: tiling.explain(16, 1, 0), ValueError, "head_dim"),
    ("split_tiling-batch", lambda: split_tiling.split_tiling(0, 1, 768), ValueError, "batch"),
    ("split_tiling-gpu", lambda: split_tiling.split_tiling(16, 1, 768, gpu="nope"), ValueError, "gpu='nope'"),
    ("split_candidates-head_dim", lambda: split_tiling.split_candidates(16, 1, 7.5), TypeError, "head_dim"),
    ("split_candidates-function", lambda: split_tiling.split_candidates(16, 1, 768, "rnn"), ValueError, "function="),
    ("choose-dtype", lambda: plan.choose(16, 1, 768, dtype="x"), ValueError, "dtype='x'"),
    ("choose-training", lambda: plan.choose(16, 1, 768, training="yes"), TypeError, "training"),
    ("explain-num_heads", lambda: plan.explain(16, 0, 768), ValueError, "num_heads"),
    ("explain_split-head_dim", lambda: split_tiling.explain_split(16, 1, 0), ValueError, "head_dim"),
    ("kernel-training", lambda: plan.kernel(16, 12, 64, training=1), TypeError, "training"),
    ("kernel-batch", lambda: plan.kernel(0, 12, 64), ValueError, "batch"),
    ("batch_rows-batch", lambda: plan.batch_rows(0, 1, 768), ValueError, "batch"),
    ("batch_rows-head_dim", lambda: plan.batch_rows(16, 1, -3), ValueError, "head_dim"),
    ("batch_rows-training", lambda: plan.batch_rows(16, 1, 768, training="yes"), TypeError, "training"),
    ("b4_rows-batch", lambda: plan.b4_rows(0, 1, 768, 132), ValueError, "batch"),
    ("b4_rows-sm_count", lambda: plan.b4_rows(16, 1, 768, 0), ValueError, "sm_count"),
    ("plan_kind-num_heads", lambda: plan.plan_kind(16, 0, 768), ValueError, "num_heads"),
    ("plan_kind-batch", lambda: plan.plan_kind(2.5, 1, 768), (TypeError, ValueError), "batch"),
    ("chunking-head_dim", lambda: split_tiling.chunking(0), ValueError, "head_dim"),
    ("load_split-gpu", lambda: split_report.load_split(100), TypeError, "gpu must be"),
    ("loop_over_graph-gpu", lambda: split_report.loop_over_graph(""), TypeError, "gpu must be"),
    ("loop_over_graph-root", lambda: split_report.loop_over_graph(root=5), TypeError, "root"),
    ("split_path-record", lambda: split_report.split_path("h100", record="splits"), ValueError, "record must be"),
    ("split_table-rows", lambda: split_report.split_table("rows"), TypeError, "rows must be"),
    ("crossover_table-rows", lambda: split_report.crossover_table(7), TypeError, "rows must be"),
    ("warps_table-rows", lambda: split_report.warps_table([{"device": "x"}]), TypeError, "rows must be"),
    ("backward_table-rows", lambda: split_report.backward_table("rows"), TypeError, "rows must be"),
    ("training_rows-rows", lambda: split_report.training_rows(None), TypeError, "rows must be"),
    (
        "run_version-version",
        lambda: versions.run_version("v0", None, None, None, None),
        ValueError,
        "version='v0' is not supported",
    ),
    (
        "run_training-version",
        lambda: versions.run_training("v4", None, None, None, None),
        ValueError,
        "version='v4' is not supported",
    ),
    (
        "run_training-shapes",
        lambda: versions.run_training(
            "b1",
            torch.zeros(2, 3, 4, 1, 16),
            torch.zeros(4, 1, 8, 8),
            torch.zeros(4, 1, 16),
            torch.zeros(2, 2, 1, 1, 16),
        ),  # fmt: skip
        ValueError,
        "R",
    ),
    # lesson 5: version 6 (Gluon)
    ("V6Config-block_u", lambda: gluon_tiles.V6Config(block_u=3), ValueError, "block_u=3"),
    ("V6Config-warps-float", lambda: gluon_tiles.V6Config(warps=4.0), TypeError, "warps"),
    ("register_budget-0", lambda: gluon_tiles.register_budget(0), ValueError, "warps"),
    ("register_budget-str", lambda: gluon_tiles.register_budget("8"), TypeError, "warps"),
    ("V6Config.programs-batch", lambda: gluon_tiles.V6Config().programs(0, 1, 768), ValueError, "batch"),
    ("v6_config-head_dim", lambda: v6.v6_config(100), ValueError, "head_dim=100"),
    ("v6_config-pieces", lambda: v6.v6_config(448, warps=1), ValueError, "head_dim / warps = 448"),
    ("tile_for-cfg", lambda: gluon_tiles.tile_for(768, {"warps": 4}, v6.v6_config), TypeError, "v6_config(head_dim"),
    ("k_pieces-kc", lambda: gluon_tiles.k_pieces(0), ValueError, "kc"),
    ("register_estimate-cfg", lambda: v6.register_estimate(768, {"warps": 4}), TypeError, "cfg must be"),
    ("register_estimate-itemsize", lambda: v6.register_estimate(768, V6_TILE, 3), ValueError, "itemsize"),
    ("schedule_reference-Wx", lambda: v6.schedule_reference([1.0], *LSTM_IN[1:]), TypeError, "Wx must be"),
    ("schedule_reference-gates", lambda: v6.schedule_reference(WX3, *LSTM_IN[1:]), ValueError, "LSTM's gates"),
    ("schedule_reference-R", lambda: v6.schedule_reference(LSTM_IN[0], R8, *LSTM_IN[2:]), ValueError, "R must have"),
    ("schedule_reference-cfg", lambda: v6.schedule_reference(*LSTM_IN, cfg=8), TypeError, "cfg must be"),
    ("schedule_reference-empty", lambda: v6.schedule_reference(WX0, *LSTM_IN[1:]), ValueError, "is empty"),
    ("split_forward_tiles-cfg", lambda: split_gluon_tiles.split_forward_tiles(*LSTM_IN, cfg=None), TypeError, "cfg"),
    (
        "split_forward_tiles-dtype",
        lambda: split_gluon_tiles.split_forward_tiles(
            *(t.double() for t in LSTM_IN), cfg=v6.v6_config(16, 8, 8, 1, tiles=2)
        ),
        TypeError,
        "16-bit",
    ),
    ("b4_tiles_config-tiles", lambda: split_gluon_backward_tiles.b4_tiles_config(768, tiles=17), ValueError, "tiles"),
    ("b4_tiles_config-head_dim", lambda: split_gluon_backward_tiles.b4_tiles_config(100), ValueError, "head_dim"),
    (
        "b4_tiles_config-registers",
        lambda: split_gluon_backward_tiles.b4_tiles_config(1024, 32, 16, 8),
        ValueError,
        "registers",
    ),
    (
        "split_backward_tiles-cfg",
        lambda: split_gluon_backward_tiles.split_backward_tiles(*B4_IN, cfg=None),
        TypeError,
        "cfg must be",
    ),
    (
        "split_backward_tiles-dtype",
        lambda: split_gluon_backward_tiles.split_backward_tiles(
            *B4_IN, cfg=split_gluon_backward_tiles.b4_tiles_config(64, 16, 8, 4, 2)
        ),
        TypeError,
        "16-bit",
    ),
    (
        "split_backward_tiles-shape",
        lambda: split_gluon_backward_tiles.split_backward_tiles(B4_IN[0][:, :, :1], *B4_IN[1:], cfg=V6_TILE),
        ValueError,
        "d_out must have shape",
    ),
    (
        "compile_sm90-tiles-sum_db",
        lambda: split_gluon_backward_tiles.compile_sm90(
            64, split_gluon_backward_tiles.b4_tiles_config(64, 16, 8, 4), sum_db=1
        ),  # fmt: skip
        TypeError,
        "sum_db",
    ),
    ("steps_apply-batch", lambda: plan.steps_apply(0, 1, 768), ValueError, "batch"),
    ("steps_apply-training", lambda: plan.steps_apply(256, 1, 768, training="yes"), TypeError, "training"),
    ("steps_on_cublas-head_dim", lambda: plan.steps_on_cublas(256, 1, 0), ValueError, "head_dim"),
    ("StepTiles-block_m", lambda: stepwise.StepTiles(48, 16, 16), ValueError, "block_m=48"),
    ("StepTiles-block_u", lambda: stepwise.StepTiles(64, 8, 16), ValueError, "block_u=8"),
    ("StepTiles-warps", lambda: stepwise.StepTiles(64, 16, 16, warps=3), ValueError, "warps=3"),
    ("StepTiles-stages", lambda: stepwise.StepTiles(64, 16, 16, stages=0), ValueError, "stages"),
    ("step_tiles-sm_count", lambda: stepwise.step_tiles(64, 768, 1, 0), ValueError, "sm_count"),
    ("step_rnn_forward-function", lambda: stepwise.step_rnn_forward(*LSTM_IN, function="gru"), ValueError, "'gru'"),
    ("step_rnn_forward-tiles", lambda: stepwise.step_rnn_forward(*LSTM_IN, tiles=(64, 16, 16)), TypeError, "tiles"),
    (
        "step_rnn_backward-function",
        lambda: stepwise.step_rnn_backward(*LSTM_GRAD_IN, function="elman"),
        ValueError,
        "'elman'",
    ),
    ("step_rnn_gradients-tiles", lambda: stepwise.step_rnn_gradients(*LSTM_GRAD_IN, tiles="64"), TypeError, "tiles"),
    (
        "multi_tile_pair-head_dim",
        lambda: gluon_tiles.multi_tile_pair(16, 1, 0, 132, v6.v6_config, v6.v6_config),
        ValueError,
        "head_dim",
    ),
    ("tiles_pair-sm_count", lambda: plan.tiles_pair(16, 1, 768, 0), ValueError, "sm_count"),
    ("tiles_pair-batch", lambda: plan.tiles_pair(0, 1, 768, 132), ValueError, "batch"),
    ("split_forward_v6-states", lambda: v6.split_forward_v6(*LSTM_IN[:3], None), TypeError, "states must be"),
    ("split_forward_v6-dtype", lambda: v6.split_forward_v6(*(t.double() for t in LSTM_IN)), TypeError, "16-bit"),
    ("split_forward_v6-save_gates", lambda: v6.split_forward_v6(*LSTM_IN, save_gates=1), TypeError, "save_gates"),
    ("v6 compile_sm90-dtype", lambda: v6.compile_sm90(768, dtype="fp32"), ValueError, "dtype='fp32'"),
    ("split_forward_v6-exchange", lambda: v6.split_forward_v6(*LSTM_IN, exchange="flags"), ValueError, "exchange"),
    ("v6 compile_sm90-exchange", lambda: v6.compile_sm90(768, exchange="flags"), ValueError, "exchange='flags'"),
    ("barrier_groups-heads", lambda: gluon_ops.barrier_groups(0, 2), ValueError, "heads"),
    ("barrier_groups-tiles", lambda: gluon_ops.barrier_groups(1, 1.5), TypeError, "tiles"),
    ("launch_counter-heads", lambda: gluon_ops.launch_counter(torch.device("cpu"), 96, 0, 2), ValueError, "heads"),
    ("barrier_counter-groups", lambda: tiles.barrier_counter(torch.device("cpu"), 4, 0), ValueError, "groups"),
    ("v6_stats-dh", lambda: sass.v6_stats(dh=100), ValueError, "head_dim=100"),
    ("v6_applies-batch", lambda: plan.v6_applies(0, 1, 768), ValueError, "batch"),
    ("v6_applies-function", lambda: plan.v6_applies(16, 1, 768, "rnn"), ValueError, "function='rnn'"),
    ("v6_tiles-batch", lambda: plan.v6_tiles(0, 768), ValueError, "batch"),
    ("v6_tiles-head_dim", lambda: plan.v6_tiles(32, 100), ValueError, "head_dim=100"),
    ("split_version_as-name", lambda: experiments.split_version_as("v7").__enter__(), ValueError, "name='v7'"),
    ("exchange_as-name", lambda: experiments.exchange_as("ll").__enter__(), ValueError, "name='ll'"),
    ("gluon_as-field", lambda: experiments.gluon_as(barier="grid").__enter__(), TypeError, "barier"),
    ("gluon_as-value", lambda: experiments.gluon_as(barrier="cta").__enter__(), ValueError, "barrier='cta'"),
    ("trying-name", lambda: experiments.trying("split v7").__enter__(), ValueError, "experiment='split v7'"),
    ("config_as-config", lambda: plan.config_as("v5").__enter__(), TypeError, "FusedConfig"),
    ("FusedConfig-split_version", lambda: FusedConfig(split_version="v7"), ValueError, "split_version='v7'"),
    ("FusedConfig-split_exchange", lambda: FusedConfig(split_exchange="ll"), ValueError, "split_exchange='ll'"),
    ("FusedConfig-small_rows", lambda: FusedConfig(small_rows=0), ValueError, "small_rows"),
    ("FusedConfig-backward", lambda: FusedConfig(backward={"cuts": ()}), TypeError, "BackwardConfig"),
    ("FusedConfig-gluon", lambda: FusedConfig(gluon=None), TypeError, "GluonConfig"),
    ("BackwardConfig-product", lambda: BackwardConfig(product="each gate"), ValueError, "product='each gate'"),
    ("BackwardConfig-dg_layout", lambda: BackwardConfig(dg_layout="tm"), ValueError, "dg_layout='tm'"),
    ("BackwardConfig-cuts", lambda: BackwardConfig(cuts=(0.5, 0.2)), ValueError, "cuts must be"),
    ("BackwardConfig-cuts-1", lambda: BackwardConfig(cuts=(1.0,)), ValueError, "cuts must be"),
    ("BackwardConfig-min_piece_steps", lambda: BackwardConfig(min_piece_steps=0), ValueError, "min_piece_steps"),
    ("GluonConfig-barrier", lambda: GluonConfig(barrier="cta"), ValueError, "barrier='cta'"),
    ("GluonConfig-poll", lambda: GluonConfig(poll="spin"), ValueError, "poll='spin'"),
    ("GluonConfig-exchange", lambda: GluonConfig(exchange="flags"), ValueError, "exchange='flags'"),
    ("GluonConfig-tag_store", lambda: GluonConfig(tag_store=3), ValueError, "tag_store=3"),
    ("GluonConfig-sum_db", lambda: GluonConfig(sum_db=1), TypeError, "sum_db"),
    ("GluonConfig-late_inputs", lambda: GluonConfig(late_inputs="auto"), TypeError, "late_inputs"),
    ("barrier_constexprs-barrier", lambda: gluon_ops.barrier_constexprs("cta"), ValueError, "barrier='cta'"),
    ("barrier_constexprs-poll", lambda: gluon_ops.barrier_constexprs("group", "spin"), ValueError, "poll='spin'"),
    ("v6_tiles-wide", lambda: plan.v6_tiles(32, 768, wide=1), TypeError, "wide"),
    ("split_forward_v6-config", lambda: v6.split_forward_v6(*LSTM_IN, config={}), TypeError, "GluonConfig"),
    ("b4 compile_sm90-config", lambda: b4.compile_sm90(768, config="grid"), TypeError, "GluonConfig"),
    ("pieces-config", lambda: fused_backward.pieces(8, config="one piece"), TypeError, "BackwardConfig"),
    ("b4_stats-dh", lambda: sass.b4_stats(dh=100), ValueError, "head_dim=100"),
    ("shared_bytes-op", lambda: sass.shared_bytes("HMMA"), ValueError, "op must be"),
    ("b4_config-head_dim", lambda: b4.b4_config(112, block_u=16), ValueError, "head_dim=112"),
    ("b4_config-warps", lambda: b4.b4_config(768, warps=3), ValueError, "warps=3"),
    (
        "b4 schedule_reference-out",
        lambda: b4.schedule_reference(*B4_IN[:2], torch.zeros(3, 4), *B4_IN[3:]),
        ValueError,
        "out must be",
    ),  # fmt: skip
    (
        "b4 schedule_reference-R",
        lambda: b4.schedule_reference(*B4_IN[:4], torch.zeros(4, 1, 16, 8)),
        ValueError,
        "R must have shape",
    ),  # fmt: skip
    (
        "b4 schedule_reference-d_last",
        lambda: b4.schedule_reference(*B4_IN, d_last=[0.0]),
        TypeError,
        "d_last must be",
    ),  # fmt: skip
    ("b4 schedule_reference-cfg", lambda: b4.schedule_reference(*B4_IN, cfg="x"), TypeError, "cfg must be"),
    ("split_backward_b4-gates", lambda: b4.split_backward_b4(B4_IN[0], None, *B4_IN[2:]), TypeError, "gates must"),
    ("split_backward_b4-dtype", lambda: b4.split_backward_b4(*B4_IN), TypeError, "16-bit"),
    ("b4 compile_sm90-has_last", lambda: b4.compile_sm90(768, has_last=1), TypeError, "has_last"),
    ("load_versions-gpu", lambda: versions_report.load_versions(7), TypeError, "gpu must be"),
    ("v6_record_name-which", lambda: versions_report.v6_record_name("h100", "../x"), ValueError, "which='../x'"),
    ("v6_record_name-run", lambda: versions_report.v6_record_name("h100", "rows8", run="z9"), ValueError, "run must"),
    ("v6_record_name-gpu", lambda: versions_report.v6_record_name(None), TypeError, "gpu must be"),
    ("load_v6_switch-part", lambda: versions_report.load_v6_switch("h100", "nope"), ValueError, "part='nope'"),
    ("load_v6-which", lambda: versions_report.load_v6("h100", "nope"), ValueError, "which='nope'"),
    ("load_v6_rows8-run", lambda: versions_report.load_v6_rows8("h100", run=5), ValueError, "run must be"),
    ("versions_table-results", lambda: versions_report.versions_table("x"), TypeError, "results"),
    ("plot_versions-results", lambda: versions_report.plot_versions(None), TypeError, "results"),
    ("load_sass-dh", lambda: versions_report.load_sass(0), ValueError, "dh"),
    ("load_v6_sass-root", lambda: versions_report.load_v6_sass(root=5), TypeError, "root"),
    ("plot_compiled_split-rows", lambda: versions_report.plot_compiled_split("rows"), TypeError, "rows must be"),
    ("v6_records-gpu", lambda: versions_report.v6_records(""), TypeError, "gpu must be"),
    ("load_v6_run-gpu", lambda: versions_report.load_v6_run(""), TypeError, "gpu must be"),
    ("load_v6_run-missing", lambda: versions_report.load_v6_run("l4"), FileNotFoundError, "bench05_v6"),
    ("load_v6_parts-gpu", lambda: versions_report.load_v6_parts(None), TypeError, "gpu must be"),
    ("load_v6_wide-gpu", lambda: versions_report.load_v6_wide(3), TypeError, "gpu must be"),
    ("load_v6_wide-missing", lambda: versions_report.load_v6_wide("a100"), FileNotFoundError, "gpu_rnn_v6_wide"),
    ("load_v6_tiles-gpu", lambda: versions_report.load_v6_tiles(3), TypeError, "gpu must be"),
    ("load_v6_tiles-missing", lambda: versions_report.load_v6_tiles("a100"), FileNotFoundError, "gpu_rnn_v6_tiles"),
    ("load_v6_rows8-gpu", lambda: versions_report.load_v6_rows8(3), TypeError, "gpu must be"),
    ("load_v6_rows8-missing", lambda: versions_report.load_v6_rows8("a100"), FileNotFoundError, "gpu_rnn_v6_rows8"),
    ("load_v6_rows8-head_dim", lambda: versions_report.load_v6_rows8("h100", head_dim=0), ValueError, "head_dim"),
    (
        "load_v6_rows8-dims-missing",
        lambda: versions_report.load_v6_rows8("h100", head_dim=96),
        FileNotFoundError,
        "gpu_rnn_v6_rows8_dims",
    ),
    ("v6_run_table-results", lambda: versions_report.v6_run_table("x"), TypeError, "results"),
    (
        "v6_run_table-no-cudnn",
        lambda: versions_report.v6_run_table([bench.record(lesson="05", case="v6", ms=1.0)]),
        ValueError,
        "cuDNN",
    ),  # fmt: skip
    ("v6_parts_table-results", lambda: versions_report.v6_parts_table([]), ValueError, "results"),
    (
        "v6_parts_table-no-parts",
        lambda: versions_report.v6_parts_table([bench.record(lesson="05", case="v6", ms=1.0)]),
        ValueError,
        "clock-stamped",
    ),  # fmt: skip
    ("plot_v6_parts-results", lambda: versions_report.plot_v6_parts({"parts": 1}), TypeError, "results"),
    ("split_forward_v6-h_loads", lambda: v6.split_forward_v6(*LSTM_IN, h_loads="fast"), ValueError, "h_loads='fast'"),
    ("split_forward_v6-clocks", lambda: v6.split_forward_v6(*LSTM_IN, clocks="x"), TypeError, "clocks must be"),
    (
        "split_backward_b4-share_stores",
        lambda: b4.split_backward_b4(*B4_IN, share_stores="rows"),
        ValueError,
        "share_stores='rows'",
    ),  # fmt: skip
    ("v6 compile_sm90-h_loads", lambda: v6.compile_sm90(768, h_loads=1), ValueError, "h_loads=1"),
    ("v6 compile_sm90-timing", lambda: v6.compile_sm90(768, timing="yes"), TypeError, "timing must be"),
    ("b4 compile_sm90-share_stores", lambda: b4.compile_sm90(768, share_stores=None), ValueError, "share_stores"),
    ("split_backward_b4-sum_db", lambda: b4.split_backward_b4(*B4_IN, sum_db="yes"), TypeError, "sum_db"),
    ("b4 compile_sm90-sum_db", lambda: b4.compile_sm90(768, sum_db=1), TypeError, "sum_db"),
    ("compiled_split_table-v6", lambda: versions_report.compiled_split_table(SASS_ROWS, "x"), TypeError, "v6_rows"),
    ("load_profile-gpu", lambda: versions_report.load_profile(""), TypeError, "gpu"),
    ("profile_table-not-dict", lambda: versions_report.profile_table([]), TypeError, "profile"),
    ("sass_table-rows", lambda: versions_report.sass_table("x"), TypeError, "rows must be"),
    ("sass.version-v", lambda: sass.version("v9"), ValueError, "v='v9' is not supported"),
    ("sass.version_stats-dh", lambda: sass.version_stats(0), ValueError, "dh"),
    ("step_budget-head_dim", lambda: split_report.step_budget([{"kind": "env"}], 0), ValueError, "head_dim"),
    ("plot_split-rows", lambda: split_report.plot_split([]), TypeError, "rows must be"),
    ("time_row-case", lambda: split_report.time_row([{"kind": "env"}], 3, 768), TypeError, "case must be"),
    ("problem_inputs-B", lambda: rnn_benchmark.problem_inputs(0, 2, 1, 4), ValueError, "B must be"),
    ("problem_inputs-DH", lambda: rnn_benchmark.problem_inputs(1, 2, 1, 4.0), TypeError, "DH must be"),
    (
        "problem_inputs-function",
        lambda: rnn_benchmark.problem_inputs(1, 2, 1, 4, function="x"),
        ValueError,
        "function='x'",
    ),  # fmt: skip
    ("benchmark-quick_ms", lambda: rnn_benchmark.benchmark(quick_ms=-1), ValueError, "quick_ms"),
    # lesson 3: the cell kernel (lesson 5 reuses it)
    ("lstm_pointwise-gates-type", lambda: cells.lstm_pointwise([1], torch.zeros(1)), TypeError, "gates must be"),
    (
        "lstm_pointwise-gates-shape",
        lambda: cells.lstm_pointwise(torch.zeros(2, 3, 1, 4), torch.zeros(2, 1, 4)),
        ValueError,
        "gates must be [N, 4, NH, DH]",
    ),  # fmt: skip
    (
        "lstm_pointwise-c-shape",
        lambda: cells.lstm_pointwise(torch.zeros(2, 4, 1, 4), torch.zeros(3, 1, 4)),
        ValueError,
        "c must be [N, NH, DH]",
    ),  # fmt: skip
    (
        "lstm_pointwise-bias",
        lambda: cells.lstm_pointwise(torch.zeros(2, 4, 1, 4), torch.zeros(2, 1, 4), bias=torch.zeros(3, 1, 4)),
        ValueError,
        "bias must be",
    ),  # fmt: skip
    ("lstm_pointwise-bias-int", _pointwise(bias=torch.zeros(4, 1, 4, dtype=torch.long)), ValueError, "bias has dtype"),
    ("lstm_pointwise-bias-L0", _pointwise(bias=torch.zeros(0, 4, 1, 4)), ValueError, "bias must be"),
    ("lstm_pointwise-h_out-int", _pointwise(h_out=torch.zeros(2, 1, 4).long()), ValueError, "h_out has dtype"),
    ("lstm_pointwise_reference-bias-broadcast", _reference(bias=torch.zeros(4, 1, 1)), ValueError, "bias must be"),
    ("lstm_pointwise_reference-bias-2d", _reference(bias=torch.zeros(2, 4)), ValueError, "bias must be [4, NH, DH]"),
    ("lstm_pointwise_reference-bias-L", _reference(bias=torch.zeros(3, 4, 1, 4)), ValueError, "N=2 divisible by L"),
    ("lstm_pointwise_reference-bias-list", _reference(bias=[0.0]), TypeError, "bias must be a torch.Tensor"),
    ("lstm_pointwise_reference-bias-int", _reference(bias=torch.zeros(4, 1, 4).int()), ValueError, "torch.int32"),
    (
        "lstm_pointwise-h_out",
        lambda: cells.lstm_pointwise(torch.zeros(2, 4, 1, 4), torch.zeros(2, 1, 4), h_out=torch.zeros(3, 1, 4)),
        ValueError,
        "h_out must be",
    ),  # fmt: skip
    # lesson 3: weights and the ladder
    ("from_torch_lstm-module", lambda: rnn.from_torch_lstm(torch.nn.GRU(3, 4)), ValueError, "module must be"),
    (
        "from_torch_lstm-bidirectional",
        lambda: rnn.from_torch_lstm(torch.nn.LSTM(3, 4, bidirectional=True)),
        ValueError,
        "bidirectional",
    ),  # fmt: skip
    (
        "from_torch_lstm-proj_size",
        lambda: rnn.from_torch_lstm(torch.nn.LSTM(3, 4, proj_size=2)),
        ValueError,
        "proj_size=2",
    ),  # fmt: skip
    ("from_torch_lstm-dtype", lambda: rnn.from_torch_lstm(M, dtype="x"), ValueError, "dtype='x'"),
    ("from_torch_lstm-device", lambda: rnn.from_torch_lstm(M, device="nope"), ValueError, "device='nope'"),
    ("LSTMWeights.to-dtype", lambda: W.to(dtype="x"), ValueError, "dtype='x'"),
    ("LSTMWeights.to-dtype-int", lambda: W.to(dtype=torch.int64), ValueError, "dtype=torch.int64 is not supported"),
    ("from_torch_lstm-dtype-int", lambda: rnn.from_torch_lstm(M, dtype=torch.int32), ValueError, "dtype=torch.int32"),
    ("float_dtype-int", lambda: weights.float_dtype(torch.int8, "w"), ValueError, "w=torch.int8 is not supported"),
    ("float_dtype-name", lambda: weights.float_dtype("int8"), ValueError, "dtype='int8'"),
    ("run_step-n", lambda: ladder.run_step("1", X, W), ValueError, "n='1'"),
    ("run_step-state", lambda: ladder.run_step(1, X, W, (1, 2, 3)), ValueError, "state must be a pair"),
    ("step0-weights", lambda: ladder.step0_baseline(X, M), ValueError, "weights must be gpulab.rnn.LSTMWeights"),
    ("step1-x-type", lambda: ladder.step1_combined_gemm([1.0], W), ValueError, "x must be a torch.Tensor"),
    ("step3-x-features", lambda: ladder.step3_fused_pointwise(torch.zeros(2, 1, 4), W), ValueError, "x has input"),
    ("step6-x-dtype", lambda: ladder.step6_wavefront(X.half(), W), ValueError, "x is torch.float16"),
    (
        "step8-h0",
        lambda: ladder.step8_wavefront_two_streams(X, W, (torch.zeros(1, 1, 4), torch.zeros(2, 1, 4))),
        ValueError,
        "h0 must be",
    ),  # fmt: skip
    ("lstm_reference-weights", lambda: ladder.lstm_reference(X, M), ValueError, "weights must be"),
    ("lstm_reference-x", lambda: ladder.lstm_reference([1.0], W), TypeError, "x must be a torch.Tensor"),
    ("make_problem-layers", lambda: ladder.make_problem(layers=0), ValueError, "layers must be"),
    ("make_problem-seq", lambda: ladder.make_problem(seq=2.0), TypeError, "seq must be"),
    ("make_problem-dtype", lambda: ladder.make_problem(dtype="x"), ValueError, "dtype='x'"),
    ("ladder.benchmark-steps", lambda: ladder.benchmark(steps=[42]), ValueError, "steps' item=42"),
    ("ladder.benchmark-dtypes", lambda: ladder.benchmark(dtypes=["x"]), ValueError, "dtypes' item='x'"),
    # the vanilla backend's recurrent matrix
    ("recurrent_matrix-type", lambda: vanilla.recurrent_matrix([1.0]), TypeError, "R must be a torch.Tensor"),
    ("recurrent_matrix-rank", lambda: vanilla.recurrent_matrix(torch.zeros(4, 4, 4)), ValueError, "R must be 4-dim"),
    ("recurrent_matrix-square", lambda: vanilla.recurrent_matrix(torch.zeros(4, 1, 4, 3)), ValueError, "DH, DH"),
    # lesson 3 and 5 graders: a string (or anything) where the learner's function belongs
    ("grade_gru_cell-str", lambda: grading_rnn.grade_gru_cell("gru_cell"), TypeError, "gru_cell is a str"),
    ("grade_gru_cell-cases", lambda: grading_rnn.grade_gru_cell(cells.lstm_cell, cases=0), ValueError, "cases"),
    ("grade_lstm_loop-str", lambda: grading_rnn.grade_lstm_loop("kernel"), TypeError, "kernel is a str"),
    ("grade_lstm_loop-fn", lambda: grading_rnn.grade_lstm_loop(print), TypeError, "not a @triton.jit function"),
    ("grade_lstm_backward_step-str", lambda: grading_rnn.grade_lstm_backward_step("step"), TypeError, "step must"),
    (
        "grade_lstm_backward_step-cases",
        lambda: grading_rnn.grade_lstm_backward_step(print, cases=0),
        ValueError,
        "cases",
    ),
    ("grade_shared_bytes-str", lambda: grading_rnn.grade_shared_bytes("f"), TypeError, "shared_bytes must be"),
    ("grade_all_gates-str", lambda: grading_rnn.grade_all_gates("f"), TypeError, "all_gates is a str"),
    ("grade_r_bytes-str", lambda: grading_rnn.grade_r_bytes("f"), TypeError, "r_bytes must be"),
    ("grade_combined_gemm-str", lambda: grading_ladder.grade_combined_gemm("step1"), TypeError, "step1 must be"),
    ("grade_combined_gemm-cases", lambda: grading_ladder.grade_combined_gemm(print, cases=-1), ValueError, "cases"),
    ("grade_pointwise_kernel-str", lambda: grading_ladder.grade_pointwise_kernel("k"), TypeError, "kernel is a str"),
    ("gru_reference-variant", lambda: grading_rnn.gru_reference(G, G, G, G, G, variant="x"), ValueError, "variant='x'"),
    ("gru_reference-shape", lambda: grading_rnn.gru_reference(G, G, G, G, torch.zeros(1)), ValueError, "h has shape"),
    ("gru_reference-type", lambda: grading_rnn.gru_reference(G, 0.5, G, G, G), TypeError, "r must be a torch.Tensor"),
    ("launch_lstm_kernel-kernel", lambda: grading_rnn.launch_lstm_kernel("k", *LSTM_IN), TypeError, "kernel is a str"),
    ("launch_lstm_kernel-Wx", _launch(0, torch.zeros(1, 2, 3, 1, 16)), ValueError, "Wx must have shape"),
    ("launch_lstm_kernel-Wx-B", _launch(0, torch.zeros(17, 2, 4, 1, 16)), ValueError, "B <= 16"),
    ("launch_lstm_kernel-R", _launch(1, torch.zeros(4, 1, 16, 8)), ValueError, "R must have shape [4, 1, 16, 16]"),
    ("launch_lstm_kernel-b", _launch(2, torch.zeros(4, 1, 16).double()), ValueError, "b has dtype"),
    ("launch_lstm_kernel-states", _launch(3, torch.zeros(2, 1, 2, 1, 16)), ValueError, "states must have shape"),
    # lesson 5: the SASS probe's entry points (checked before anything compiles)
    ("sass.forward-dh", lambda: sass.forward(0, 4, False), ValueError, "dh must be a positive integer"),
    ("sass.forward-warps", lambda: sass.forward(64, 3, False), ValueError, "warps=3"),
    ("sass.forward-save_gates", lambda: sass.forward(64, 4, 1), TypeError, "save_gates"),
    ("sass.forward-dtype", lambda: sass.forward(64, 4, False, "bfloat16"), ValueError, "dtype='bfloat16'"),
    ("sass.backward-warps", lambda: sass.backward(64, 0), ValueError, "warps must be"),
    ("sass.backward-dtype", lambda: sass.backward(64, 4, dtype="fp8"), ValueError, "dtype='fp8'"),
    ("compile_kernel-fn", lambda: sass.compile_kernel(print, {}, {}, 4), TypeError, "fn must be a @triton.jit"),
    (
        "compile_kernel-signature",
        lambda: sass.compile_kernel(cells.lstm_pointwise_kernel, [], {}, 4),
        TypeError,
        "signature must be a dict",
    ),
    (
        "compile_kernel-num_warps",
        lambda: sass.compile_kernel(cells.lstm_pointwise_kernel, {}, {}, 6),
        ValueError,
        "num_warps=6",
    ),
    (
        "compile_kernel-unaligned",
        lambda: sass.compile_kernel(cells.lstm_pointwise_kernel, {}, {}, 4, "NH"),
        TypeError,
        "unaligned must be",
    ),
    ("loop_stats-kernel", lambda: sass.loop_stats("kernel", "x"), TypeError, "kernel must be a compiled kernel"),
    ("keyed_launch-key", lambda: launch.keyed_launch(("not a kernel", 1), dict), TypeError, "key must be a tuple"),
    ("keyed_launch-list", lambda: launch.keyed_launch([cells.lstm_pointwise_kernel], dict), TypeError, "key must"),
    ("backward_as-layout", lambda: experiments.backward_as("tm").__enter__(), ValueError, "layout='tm'"),
    ("backward_as-cuts", lambda: experiments.backward_as(cuts=(0.5, 0.2)).__enter__(), ValueError, "cuts must be"),
    ("backward_as-cuts-1", lambda: experiments.backward_as(cuts=(1.0,)).__enter__(), ValueError, "cuts must be"),
    ("host_parts-x", lambda: called_bench.host_parts(torch.zeros(3)), TypeError, "x must be the four leaves"),
    (
        "host_parts-profile",
        lambda: called_bench.host_parts([torch.zeros(1)] * 4, profile="yes"),
        TypeError,
        "profile must be True or False",
    ),
    ("host_parts_table-rows", lambda: called_bench.host_parts_table("rows"), TypeError, "rows must be a list"),
    ("host_parts_table-none", lambda: called_bench.host_parts_table([{"kind": "env"}]), ValueError, "no 'host parts'"),
    ("report-kernel", lambda: sass.report(None, "x"), TypeError, "kernel must be a compiled kernel"),
    ("run_offline-argv", lambda: sass.run_offline("forward --dh 64"), TypeError, "argv must be a list"),
    ("run_offline-timeout", lambda: sass.run_offline(["forward"], timeout=0), ValueError, "timeout must be > 0"),
    ("run_offline-cwd", lambda: sass.run_offline(["forward"], cwd=3), TypeError, "cwd must be"),
    ("kwidths-ttgir", lambda: sass.kwidths(None), TypeError, "ttgir must be the TTGIR text"),
    # lesson 5's benchmark tables and lesson 3's ladder read a non-empty list of records
    ("rnn summary_table-int", lambda: rnn_benchmark.summary_table(5), TypeError, "results must be a list"),
    ("rnn summary_table-empty", lambda: rnn_benchmark.summary_table([]), ValueError, "results is empty"),
    ("rnn targets-empty", lambda: rnn_benchmark.targets([]), ValueError, "results is empty"),
    ("rnn plot_results-empty", lambda: rnn_benchmark.plot_results([]), ValueError, "results is empty"),
    ("rnn plot_roofline-items", lambda: rnn_benchmark.plot_roofline([None]), TypeError, "results[0] is a NoneType"),
    ("ladder_table-empty", lambda: ladder.ladder_table([]), ValueError, "results is empty"),
    ("ladder_table-one", lambda: ladder.ladder_table(R1), TypeError, "got one Result; use [results]"),
    ("same_mode-str", lambda: ladder.same_mode("results"), TypeError, "results must be a list"),
    ("slower_graphed-items", lambda: ladder.slower_graphed([{}]), TypeError, "results[0] is a dict"),
    ("ladder targets-empty", lambda: ladder.targets([]), ValueError, "results is empty"),
    ("plot_ladder-empty", lambda: ladder.plot_ladder([]), ValueError, "results is empty"),
    ("plot_ladder-metric", lambda: ladder.plot_ladder([R1], metric="flops"), ValueError, "metric='flops'"),
    ("ladder plot_roofline-mode", lambda: ladder.plot_roofline([R1], mode="fast"), ValueError, "mode='fast'"),
    ("ladder plot_roofline-dtype", lambda: ladder.plot_roofline([R1], dtype="int8"), ValueError, "dtype='int8'"),
    ("result_dtypes-dict", lambda: ladder_plot.result_dtypes({}), TypeError, "results must be a list"),
]


@pytest.mark.parametrize("call, error, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_naming_the_argument(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value), f"the message should name the argument ({message!r}): {info.value}"
