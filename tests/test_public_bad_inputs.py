"""Bad input to public functions outside the kernels' packages (hardware, lessons, traffic, distributed, tasks
results, rnn cells and ladder steps): each refused with a ValueError or TypeError that names the argument."""

import sys

import pytest
import torch

import gpulab.distributed.benchmark  # noqa: F401 - modules by their full names (the function train shadows train)
from gpulab import hardware, lessons, runtime, traffic
from gpulab.attention import schedule
from gpulab.bench import report as timing_report
from gpulab.bench import timing
from gpulab.distributed import ranks, world
from gpulab.rnn import cells, from_torch_lstm, weights
from gpulab.rnn.ladder import steps
from gpulab.tasks import results

train = sys.modules["gpulab.distributed.train"]
data = sys.modules["gpulab.distributed.data"]
checkpoint = sys.modules["gpulab.distributed.checkpoint"]
dbench = sys.modules["gpulab.distributed.benchmark"]

_LSTM = torch.nn.LSTM(4, 4)
_W = from_torch_lstm(_LSTM)
_X = torch.randn(3, 2, 4)
_Z = torch.zeros(2, 3)


def _cell(gw=4, gr=4, gb=4, s=2, **change):
    """Valid (wx, ry, b, states) of cell_step_torch at B=2, NH=1, DH=4, with one of them changed."""
    args = {"wx": torch.zeros(2, gw, 1, 4), "ry": torch.zeros(2, gr, 1, 4), "b": torch.zeros(gb, 1, 4)}
    args["states"] = torch.zeros(s, 2, 1, 4)
    return tuple((args | change).values())


CASES = [
    ("spec-type", lambda: hardware.spec(5), TypeError, "gpu"),
    ("spec-name", lambda: hardware.spec("nope"), ValueError, "gpu='nope'"),
    ("gpu_slug", lambda: hardware.gpu_slug(5), TypeError, "name"),
    ("cache_level-negative", lambda: hardware.cache_level(-1), ValueError, "working_set_bytes"),
    ("cache_level-str", lambda: hardware.cache_level("x"), TypeError, "working_set_bytes"),
    ("spec_table-int", lambda: hardware.spec_table(5), TypeError, "specs"),
    ("spec_table-str", lambda: hardware.spec_table(["x"]), TypeError, r"specs\[0\]"),
    ("spec_table-empty", lambda: hardware.spec_table([]), ValueError, "specs is empty"),
    ("spec_table-one", lambda: hardware.spec_table(hardware.spec("H100")), TypeError, r"use \[specs\]"),
    ("spec_table-dict", lambda: hardware.spec_table({}), TypeError, "specs must be a list"),
    ("live_properties", lambda: hardware.live_properties(-1), ValueError, "index"),
    ("init_world-backend", lambda: world.init_world(backend="mpi"), ValueError, "backend"),
    ("init_world-device", lambda: world.init_world(device="tpu"), ValueError, "device"),
    ("capture-fn", lambda: timing.capture(5), TypeError, "fn"),
    ("capture-warmup", lambda: timing.capture(lambda: None, warmup=-1), ValueError, "warmup"),
    ("plot_block_schedule-n", lambda: schedule.plot_block_schedule(0, 4, 2, 2), ValueError, "n_q"),
    ("plot_block_schedule-block", lambda: schedule.plot_block_schedule(4, 4, 2.5, 2), TypeError, "block_m"),
    (
        "plot_block_schedule-causal",
        lambda: schedule.plot_block_schedule(4, 4, 2, 2, is_causal="no"),
        TypeError,
        "is_causal",
    ),
    ("interpreter_summary-against", lambda: timing_report.interpreter_summary([], 5), TypeError, "against"),
    ("interpreter_summary-results", lambda: timing_report.interpreter_summary(5), TypeError, "results"),
    ("lessons.find", lambda: lessons.find([1]), TypeError, "lesson"),
    ("parse_ncu_csv", lambda: traffic.parse_ncu_csv(5), TypeError, "text"),
    ("rows_touched", lambda: traffic.rows_touched(None, "x", [0]), TypeError, "traffic"),
    ("plot_dram-int", lambda: traffic.plot_dram(5), TypeError, "records"),
    ("plot_dram-empty", lambda: traffic.plot_dram([]), ValueError, "records is empty"),
    ("plot_dram-items", lambda: traffic.plot_dram([{}]), TypeError, r"records\[0\] is a dict"),
    ("run_on_ranks-fn", lambda: ranks.run_on_ranks(5, 2), TypeError, "fn"),
    ("run_on_ranks-0", lambda: ranks.run_on_ranks(lambda r, w: r, 0), ValueError, "world_size"),
    ("local_batch-rank", lambda: data.local_batch("parity", 0, 4, 8, 2, 2), ValueError, "rank"),
    ("local_batch-split", lambda: data.local_batch("parity", 0, 3, 8, 0, 2), ValueError, "world_size"),
    ("local_batch-step", lambda: data.local_batch("parity", -1, 4, 8, 0, 2), ValueError, "step"),
    ("save_checkpoint-path", lambda: checkpoint.save_checkpoint(None, _LSTM, None, 0), TypeError, "path"),
    ("save_checkpoint-model", lambda: checkpoint.save_checkpoint("/tmp/x", None, None, 0), TypeError, "model"),
    ("save_checkpoint-step", lambda: checkpoint.save_checkpoint("/tmp/x", _LSTM, None, -1), ValueError, "step"),
    ("build_model", lambda: train.build_model(None, "cpu"), TypeError, "config"),
    ("step_time-step", lambda: dbench.step_time(5, None, 1), TypeError, "step"),
    ("step_time-world", lambda: dbench.step_time(lambda: None, None, 1), TypeError, "world"),
    ("kernel_split-world", lambda: dbench.kernel_split(lambda: None, "w"), TypeError, "world"),
    ("step-x-size", lambda: steps.step2_streams(_X[..., :3], _W), ValueError, "x"),
    ("step-x-type", lambda: steps.step2_streams("x", _W), ValueError, "x"),
    ("step-weights", lambda: steps.step4_pretransposed(_X, "w"), ValueError, "weights"),
    ("step-state", lambda: steps.step7_wavefront_concat(_X, _W, state=(torch.zeros(1, 2, 4),)), ValueError, "state"),
    ("step-rank", lambda: steps.step5_combined_input_gemm(_X[0], _W), ValueError, "x"),
    ("lstm_cell_torch", lambda: cells.lstm_cell_torch(_Z, _Z, _Z, _Z, torch.zeros(3, 2)), ValueError, "c"),
    ("lstm_pointwise_reference", lambda: cells.lstm_pointwise_reference(_Z, None, _Z), ValueError, "gates"),
    (
        "lstm_pointwise_reference-c",
        lambda: cells.lstm_pointwise_reference(torch.zeros(2, 4, 1, 3), _Z),
        ValueError,
        "c must",
    ),
    ("cell_step_torch", lambda: cells.cell_step_torch("nope", None, None, None, None), ValueError, "function"),
    ("cell_step_torch-wx", lambda: cells.cell_step_torch("lstm", *_cell(wx=torch.zeros(2, 3, 1, 4))), ValueError, "wx"),
    ("cell_step_torch-ry", lambda: cells.cell_step_torch("lstm", *_cell(ry=torch.zeros(2, 4, 1, 1))), ValueError, "ry"),
    ("cell_step_torch-b", lambda: cells.cell_step_torch("lstm", *_cell(b=torch.zeros(4, 4))), ValueError, "b must"),
    (
        "cell_step_torch-B",
        lambda: cells.cell_step_torch("lstm", *_cell(states=torch.zeros(2, 1, 1, 4))),
        ValueError,
        r"states must have shape \[2, 2, 1, 4\]",
    ),
    ("cell_step_torch-S", lambda: cells.cell_step_torch("gru", *_cell(3, 3, 4, 2)), ValueError, r"states must"),
    ("cell_step_torch-type", lambda: cells.cell_step_torch("elman", *_cell(1, 1, 1, 1, ry=[0.0])), TypeError, "ry"),
    ("as_device int here", lambda: runtime.as_device(5), ValueError, "device=5"),
    ("check_lstm_module", lambda: weights.check_lstm_module(5), ValueError, "module"),
    ("throughput_table", lambda: results.throughput_table(5), TypeError, "results"),
    ("stored_throughput", lambda: results.stored_throughput(5), TypeError, "gpu must be"),
    ("throughput_summary", lambda: results.throughput_summary([], reference_heads=0), ValueError, "reference_heads"),
]


@pytest.mark.parametrize("label,call,error,names", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_naming_the_argument(label, call, error, names):
    with pytest.raises(error, match=names):
        call()


def test_a_missing_checkpoint_says_how_to_make_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint_dir"):
        checkpoint.load_checkpoint(tmp_path / "none", _LSTM, None)


def test_graders_given_no_kernel_say_so():
    from gpulab.course import grading_rnn

    for grade, name in ((grading_rnn.grade_gru_cell, "gru_cell"), (grading_rnn.grade_lstm_loop, "kernel")):
        for given in (5, "kernel"):  # a string has [] too: it must not get as far as a launch
            with pytest.raises(TypeError, match=f"{name} is a {type(given).__name__} .*not a @triton.jit function"):
                grade(given)
